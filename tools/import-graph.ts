/**
 * The import graph between folders, read from the sources rather than from ESLint's rule: every relative `import`,
 * `import type`, `export … from` and `import()` of every .ts/.mjs file under actors/, src/ and machines/. Reports
 *
 * - circles between the folders (and top-level files) of actors/ and of src/ (strongly connected components);
 * - imports that do not point down the floors of `tools/layer-rules.js` (`ACTOR_FLOORS`, `SRC_FLOORS`): a folder
 *   importing one on its own floor or above;
 * - imports against the layers: actors/ or machines/ importing src/, machines/ importing values from actors/.
 *
 * Exits 1 when it finds any (docs/architecture.md, "Layers"): `npx tsx tools/import-graph.ts`. `test/layers.lint.test.ts`
 * runs it over the tree.
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { ACTOR_FLOORS, SRC_FLOORS } from './layer-rules.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const LAYERS = ['actors', 'machines', 'src'] as const;
type Layer = (typeof LAYERS)[number];

/** `from '…'` of static imports and re-exports (types included), and `import('…')`. */
const SPECIFIER =
  /(?:^|\n)\s*(import|export)\s+(type\s+)?[^'";]*?\sfrom\s+['"]([^'"]+)['"]|import\(\s*['"]([^'"]+)['"]\s*\)/g;

interface Edge {
  file: string;
  target: string;
  typeOnly: boolean;
}

function sourceFiles(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) return entry.name === 'node_modules' ? [] : sourceFiles(full);
    return /\.(ts|mjs)$/.test(entry.name) ? [full] : [];
  });
}

function importsOf(file: string): Edge[] {
  const text = fs.readFileSync(file, 'utf8');
  const edges: Edge[] = [];
  for (const match of text.matchAll(SPECIFIER)) {
    const specifier = match[3] ?? match[4];
    if (!specifier?.startsWith('.')) continue;
    edges.push({ file, target: path.resolve(path.dirname(file), specifier), typeOnly: Boolean(match[2]) });
  }
  return edges;
}

/** `actors/render/pool.ts` → ['actors', 'render']; `src/app.ts` → ['src', 'app.ts']; elsewhere null. */
function placeOf(root: string, file: string): [Layer, string] | null {
  // A top-level file stands for itself (`app.ts`), a file in a folder for the folder.
  const [layer, first] = path.relative(root, file).split(path.sep);
  if (!(LAYERS as readonly string[]).includes(layer) || !first) return null;
  return [layer as Layer, first];
}

function floorOf(floors: string[][], name: string): number {
  const index = floors.findIndex((floor) => floor.includes(name));
  return index < 0 ? Number.NaN : index;
}

/** Strongly connected components of more than one node (Tarjan). */
function circles(graph: Map<string, Set<string>>): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  let next = 0;
  const visit = (node: string): void => {
    index.set(node, next);
    low.set(node, next++);
    stack.push(node);
    onStack.add(node);
    for (const to of graph.get(node) ?? []) {
      if (!index.has(to)) {
        visit(to);
        low.set(node, Math.min(low.get(node)!, low.get(to)!));
      } else if (onStack.has(to)) low.set(node, Math.min(low.get(node)!, index.get(to)!));
    }
    if (low.get(node) !== index.get(node)) return;
    const component: string[] = [];
    let member: string;
    do {
      member = stack.pop()!;
      onStack.delete(member);
      component.push(member);
    } while (member !== node);
    if (component.length > 1) found.push(component.sort());
  };
  for (const node of graph.keys()) if (!index.has(node)) visit(node);
  return found;
}

/** What the graph of the tree at `root` breaks, and a line per layer of what it holds. */
export function importGraphProblems(root = ROOT): { problems: string[]; summary: string[] } {
  const problems: string[] = [];
  const summary: string[] = [];
  const graphs: Record<'actors' | 'src', Map<string, Set<string>>> = { actors: new Map(), src: new Map() };
  let files = 0;
  let imports = 0;
  for (const layer of LAYERS) {
    for (const file of sourceFiles(path.join(root, layer))) {
      files++;
      const from = placeOf(root, file)!;
      for (const edge of importsOf(file)) {
        imports++;
        const to = placeOf(root, edge.target);
        if (!to) continue;
        const where = `${path.relative(root, file)} → ${path.relative(root, edge.target)}`;
        if (from[0] !== 'src' && to[0] === 'src') problems.push(`${from[0]}/ imports src/: ${where}`);
        if (from[0] === 'machines' && to[0] === 'actors' && !edge.typeOnly)
          problems.push(`machines/ imports a value from actors/: ${where}`);
        if (from[0] !== to[0] || from[0] === 'machines' || from[1] === to[1]) continue;
        const inLayer = from[0];
        let targets = graphs[inLayer].get(from[1]);
        if (!targets) graphs[inLayer].set(from[1], (targets = new Set()));
        targets.add(to[1]);
        const floors = inLayer === 'actors' ? ACTOR_FLOORS : SRC_FLOORS;
        const [own, theirs] = [floorOf(floors, from[1]), floorOf(floors, to[1])];
        if (Number.isNaN(own) || Number.isNaN(theirs)) problems.push(`${inLayer}/ folder on no floor: ${where}`);
        else if (theirs >= own)
          problems.push(`${inLayer}/${from[1]} (floor ${own + 1}) imports floor ${theirs + 1}: ${where}`);
      }
    }
  }
  for (const layer of ['actors', 'src'] as const) {
    const found = circles(graphs[layer]);
    for (const circle of found) problems.push(`circle between ${layer}/ folders: ${circle.join(', ')}`);
    const edges = [...graphs[layer].values()].reduce((sum, targets) => sum + targets.size, 0);
    summary.push(
      `${layer}/: ${graphs[layer].size} folders and files importing, ${edges} folder imports, ${found.length} circles`,
    );
  }
  summary.push(`${files} files, ${imports} relative imports read; ${problems.length} problems`);
  return { problems, summary };
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const { problems, summary } = importGraphProblems();
  for (const line of summary) console.log(line);
  for (const problem of problems) console.log(`  ${problem}`);
  process.exitCode = problems.length > 0 ? 1 : 0;
}
