import type { AnyStateMachine } from 'xstate';
import { sessionMachine } from '../../machines/session.machine.ts';

/**
 * Draws a machine's definition as a mermaid `stateDiagram-v2`. Generated from the machine itself (its
 * state nodes and transitions), never drawn by hand, so the inspector and docs/architecture.md always show
 * the chart that actually runs. Node ids are the state paths with `_` for `.` (mermaid ids allow no dots).
 */

interface ChartNode {
  id: string;
  key: string;
  type: 'atomic' | 'compound' | 'parallel' | 'final' | 'history';
  states: Record<string, ChartNode>;
  initial?: { target: ReadonlyArray<{ id: string }> };
  transitions: Map<string, ReadonlyArray<ChartTransition>>;
  always?: ReadonlyArray<ChartTransition>;
  after: ReadonlyArray<ChartTransition & { delay?: number | string }>;
}

interface ChartTransition {
  eventType: string;
  target?: ReadonlyArray<{ id: string }>;
  guard?: unknown;
  delay?: number | string;
}

/** The mermaid id of a state node id (`session.running.idle` → `session_running_idle`). */
export function chartId(stateNodeId: string): string {
  return stateNodeId.replace(/[^A-Za-z0-9_]/gu, '_');
}

function guardName(guard: unknown): string | null {
  if (!guard) return null;
  if (typeof guard === 'string') return guard;
  if (typeof guard === 'object' && guard !== null && 'type' in guard) return String((guard as { type: unknown }).type);
  return 'guard';
}

function transitionLabel(transition: ChartTransition): string {
  let label = transition.eventType;
  if (transition.delay !== undefined) label = `after ${transition.delay} ms`;
  else if (label === '') label = 'always';
  const guard = guardName(transition.guard);
  // mermaid labels end at a colon-free line; keep them short and plain.
  return (guard ? `${label} [${guard}]` : label).replace(/[:;]/gu, ' ');
}

function* edgesOf(node: ChartNode): Generator<{ from: string; to: string; label: string }> {
  const outgoing: ChartTransition[] = [];
  for (const [eventType, list] of node.transitions) {
    // Delayed transitions also appear under their internal event name; `after` lists them with the delay.
    if (eventType.startsWith('xstate.after')) continue;
    outgoing.push(...list);
  }
  outgoing.push(...(node.always ?? []), ...node.after);
  const seen = new Set<string>();
  for (const transition of outgoing) {
    for (const target of transition.target ?? []) {
      const edge = { from: chartId(node.id), to: chartId(target.id), label: transitionLabel(transition) };
      const key = `${edge.from}>${edge.to}>${edge.label}`;
      if (seen.has(key)) continue;
      seen.add(key);
      yield edge;
    }
  }
}

function drawNode(node: ChartNode, lines: string[], edges: string[], indent: string): void {
  const children = Object.values(node.states);
  const id = chartId(node.id);
  if (children.length === 0) {
    lines.push(`${indent}state "${node.key}" as ${id}`);
    if (node.type === 'final') lines.push(`${indent}${id} --> [*]`);
  } else {
    lines.push(`${indent}state "${node.key}${node.type === 'parallel' ? ' (parallel)' : ''}" as ${id} {`);
    if (node.type === 'parallel') {
      children.forEach((child, index) => {
        if (index > 0) lines.push(`${indent}  --`);
        drawNode(child, lines, edges, `${indent}  `);
      });
    } else {
      const initial = node.initial?.target[0];
      if (initial) lines.push(`${indent}  [*] --> ${chartId(initial.id)}`);
      for (const child of children) drawNode(child, lines, edges, `${indent}  `);
    }
    lines.push(`${indent}}`);
  }
  for (const edge of edgesOf(node)) edges.push(`${edge.from} --> ${edge.to} : ${edge.label}`);
}

/** The whole machine as mermaid text; `active` (leaf states) and `activeParent` classes are ready for the inspector. */
export function machineToMermaid(machine: AnyStateMachine): string {
  const root = machine.root as unknown as ChartNode;
  const lines = [
    'stateDiagram-v2',
    '  classDef active fill:#ffd166,stroke:#b07d00,stroke-width:2px',
    '  classDef activeParent stroke:#b07d00,stroke-width:3px',
  ];
  const edges: string[] = [];
  const initial = root.initial?.target[0];
  if (initial) lines.push(`  [*] --> ${chartId(initial.id)}`);
  for (const child of Object.values(root.states)) drawNode(child, lines, edges, '  ');
  for (const edge of edgesOf(root)) {
    // Root-level transitions (TERMINATE, fatal errors) apply from every state: drawn once from the root.
    edges.push(`${chartId(root.id)}_any --> ${edge.to} : ${edge.label} (from any state)`);
  }
  if (edges.some((edge) => edge.startsWith(`${chartId(root.id)}_any`)))
    lines.push(`  state "any state" as ${chartId(root.id)}_any`);
  return [...lines, ...edges.map((edge) => `  ${edge}`)].join('\n');
}

/** Every active state node id of a snapshot value, as chart ids (for `class … active`). */
export function activeChartIds(machineId: string, value: unknown): string[] {
  const ids: string[] = [];
  const walk = (prefix: string, current: unknown) => {
    if (typeof current === 'string') {
      ids.push(chartId(`${prefix}.${current}`));
      return;
    }
    if (current && typeof current === 'object') {
      for (const [key, child] of Object.entries(current)) {
        ids.push(chartId(`${prefix}.${key}`));
        walk(`${prefix}.${key}`, child);
      }
    }
  };
  walk(machineId, value);
  return ids;
}

let sessionChart: { id: string; mermaid: string } | undefined;

/** The session machine's id and chart (drawn once): what the inspector serves. */
export function sessionStateChart(): { id: string; mermaid: string } {
  sessionChart ??= { id: sessionMachine.id, mermaid: machineToMermaid(sessionMachine) };
  return sessionChart;
}
