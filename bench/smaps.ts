/**
 * Where a process's resident memory lives, from `/proc/<pid>/smaps` (Linux): one entry per mapping with its
 * resident kilobytes, and a diff of two readings that says which kinds of mapping grew. Used by
 * the cycles bench (BENCH_CYCLE_SMAPS=1) to find RSS growth that neither V8's heap nor malloc's arenas account for.
 */
import { readFileSync } from 'node:fs';

export interface Mapping {
  start: number;
  end: number;
  perms: string;
  /** File path, `[heap]`, `[stack]`, or '' for an anonymous mapping. */
  name: string;
  rssKb: number;
}

/** The mappings of `pid`, or [] when the process is gone. */
export function readSmaps(pid: number): Mapping[] {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/smaps`, 'utf8');
  } catch {
    return [];
  }
  return parseSmaps(text);
}

export function parseSmaps(text: string): Mapping[] {
  const out: Mapping[] = [];
  let current: Mapping | null = null;
  for (const line of text.split('\n')) {
    const header = /^([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ \S+\s*(.*)$/.exec(line);
    if (header) {
      current = {
        start: parseInt(header[1], 16),
        end: parseInt(header[2], 16),
        perms: header[3],
        name: header[4].trim(),
        rssKb: 0,
      };
      out.push(current);
      continue;
    }
    const rss = /^Rss:\s+(\d+) kB/.exec(line);
    if (rss && current) current.rssKb = Number(rss[1]);
  }
  return out;
}

/**
 * A coarse kind for a mapping, so two readings compare even though anonymous mappings come and go:
 * files by base name, `[heap]` (malloc's main arena), and anonymous mappings by size class, since V8's heap
 * pages (256 KiB), thread stacks (8 MiB), malloc's secondary arenas (64 MiB reservations) and large single
 * allocations each have their own sizes.
 */
export function mappingKind(m: Mapping): string {
  if (m.name.startsWith('/')) return `file ${m.name.slice(m.name.lastIndexOf('/') + 1)}`;
  if (m.name) return m.name;
  const kb = (m.end - m.start) / 1024;
  const size =
    kb < 256
      ? '<256K'
      : kb === 256
        ? '256K'
        : kb < 1024
          ? '256K-1M'
          : kb < 8192
            ? '1M-8M'
            : kb <= 8200
              ? '8M'
              : kb < 65536
                ? '8M-64M'
                : '64M+';
  return `anon ${m.perms} ${size}`;
}

export interface KindTotals {
  mappings: number;
  rssKb: number;
}

export function totalsByKind(mappings: Mapping[]): Map<string, KindTotals> {
  const out = new Map<string, KindTotals>();
  for (const m of mappings) {
    const kind = mappingKind(m);
    const t = out.get(kind) ?? { mappings: 0, rssKb: 0 };
    t.mappings++;
    t.rssKb += m.rssKb;
    out.set(kind, t);
  }
  return out;
}

export interface KindChange {
  kind: string;
  mappings: [number, number];
  rss_kb: [number, number];
  rss_delta_kb: number;
}

/** Kinds whose resident memory changed by at least `minKb` between two readings, largest change first. */
export function smapsGrowth(before: Mapping[], after: Mapping[], minKb = 256): KindChange[] {
  const a = totalsByKind(before);
  const b = totalsByKind(after);
  const kinds = new Set([...a.keys(), ...b.keys()]);
  const out: KindChange[] = [];
  for (const kind of kinds) {
    const x = a.get(kind);
    const y = b.get(kind);
    const delta = (y?.rssKb ?? 0) - (x?.rssKb ?? 0);
    if (Math.abs(delta) < minKb) continue;
    out.push({
      kind,
      mappings: [x?.mappings ?? 0, y?.mappings ?? 0],
      rss_kb: [x?.rssKb ?? 0, y?.rssKb ?? 0],
      rss_delta_kb: delta,
    });
  }
  return out.sort((p, q) => Math.abs(q.rss_delta_kb) - Math.abs(p.rss_delta_kb));
}

export interface MappingChange {
  start: string;
  size_kb: number;
  kind: string;
  rss_kb: [number, number];
}

/**
 * Mappings present at the same address in both readings whose resident memory grew most: a growing malloc arena,
 * V8 space or thread stack shows up here even when the kind totals hide it among others that shrank.
 */
export function mappingsThatGrew(before: Mapping[], after: Mapping[], top = 10): MappingChange[] {
  const earlier = new Map(before.map((m) => [m.start, m]));
  const out: MappingChange[] = [];
  for (const m of after) {
    const old = earlier.get(m.start);
    if (!old || m.rssKb <= old.rssKb) continue;
    out.push({
      start: m.start.toString(16),
      size_kb: (m.end - m.start) / 1024,
      kind: mappingKind(m),
      rss_kb: [old.rssKb, m.rssKb],
    });
  }
  return out.sort((p, q) => q.rss_kb[1] - q.rss_kb[0] - (p.rss_kb[1] - p.rss_kb[0])).slice(0, top);
}
