/**
 * A strict parser of the Prometheus text exposition format 0.0.4, written from the format's description, so a
 * test can hold `GET /metrics` to what a Prometheus server accepts rather than grep for names. It rejects what a
 * scraper rejects or silently mangles: bad metric/label names, bad escapes, unparsable values, a `# TYPE` after
 * the family's samples or twice, a family's samples not together, duplicate series, and histograms whose buckets
 * are not cumulative or whose `+Inf` bucket differs from `_count`.
 */

export type MetricType = 'counter' | 'gauge' | 'histogram' | 'summary' | 'untyped';

export interface Sample {
  /** The sample's own name (`x_bucket`, `x_sum`, …). */
  name: string;
  labels: Record<string, string>;
  value: number;
  timestampMs?: number;
}

export interface MetricFamily {
  name: string;
  type: MetricType;
  help?: string;
  samples: Sample[];
}

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
const TYPES = new Set<MetricType>(['counter', 'gauge', 'histogram', 'summary', 'untyped']);

export class PrometheusParseError extends Error {
  constructor(lineNo: number, line: string, why: string) {
    super(`line ${lineNo}: ${why}: ${JSON.stringify(line.slice(0, 200))}`);
  }
}

/** Floats as Prometheus reads them (Go's ParseFloat): special values in any case (prom-client writes `Nan`). */
function parseValue(text: string): number | null {
  const special = /^([+-]?)(inf|infinity|nan)$/i.exec(text);
  if (special) return special[2].toLowerCase() === 'nan' ? NaN : special[1] === '-' ? -Infinity : Infinity;
  if (!/^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(text)) return null;
  return Number(text);
}

/** Which family a sample belongs to: histogram/summary suffixes name their family's base name. */
function familyOf(sampleName: string, types: Map<string, MetricType>): string {
  for (const suffix of ['_bucket', '_sum', '_count']) {
    if (!sampleName.endsWith(suffix)) continue;
    const base = sampleName.slice(0, -suffix.length);
    const type = types.get(base);
    if (type === 'histogram' || (type === 'summary' && suffix !== '_bucket')) return base;
  }
  return sampleName;
}

/** Parses label pairs `{a="x",b="y\"z"}` starting at `text[0] === '{'`; returns the labels and the rest of the line. */
function parseLabels(text: string, fail: (why: string) => never): { labels: Record<string, string>; rest: string } {
  const labels: Record<string, string> = {};
  let i = 1;
  for (;;) {
    while (text[i] === ' ') i++;
    if (text[i] === '}') return { labels, rest: text.slice(i + 1) };
    const nameMatch = /^[^=\s]+/.exec(text.slice(i));
    if (!nameMatch) fail('label name expected');
    const name = nameMatch[0];
    if (!LABEL_NAME.test(name)) fail(`bad label name ${name}`);
    if (name in labels) fail(`duplicate label ${name}`);
    i += name.length;
    if (text[i] !== '=' || text[i + 1] !== '"') fail('="value" expected after a label name');
    i += 2;
    let value = '';
    for (;;) {
      const c = text[i];
      if (c === undefined) fail('unterminated label value');
      if (c === '"') break;
      if (c === '\\') {
        const next = text[i + 1];
        if (next === '\\') value += '\\';
        else if (next === '"') value += '"';
        else if (next === 'n') value += '\n';
        else fail(`bad escape \\${next ?? ''}`);
        i += 2;
        continue;
      }
      value += c;
      i++;
    }
    labels[name] = value;
    i++;
    if (text[i] === ',') i++;
    else if (text[i] !== '}') fail('"," or "}" expected after a label value');
  }
}

export function parsePrometheusText(text: string): Map<string, MetricFamily> {
  const families = new Map<string, MetricFamily>();
  const types = new Map<string, MetricType>();
  const seenSeries = new Set<string>();
  const closed = new Set<string>();
  let current: string | null = null;
  if (text.length > 0 && !text.endsWith('\n'))
    throw new PrometheusParseError(0, text.slice(-40), 'the exposition must end with a newline');
  const lines = text.split('\n');
  lines.pop();

  const family = (name: string): MetricFamily => {
    let f = families.get(name);
    if (!f) families.set(name, (f = { name, type: types.get(name) ?? 'untyped', samples: [] }));
    return f;
  };

  lines.forEach((line, index) => {
    const lineNo = index + 1;
    const fail = (why: string): never => {
      throw new PrometheusParseError(lineNo, line, why);
    };
    if (line.trim() === '') return;
    if (line.startsWith('#')) {
      const match = /^#\s+(HELP|TYPE)\s+(\S+)(?:\s(.*))?$/.exec(line);
      if (!match) return; // a plain comment
      const [, keyword, name, rest = ''] = match;
      if (!METRIC_NAME.test(name)) fail(`bad metric name ${name}`);
      if (keyword === 'TYPE') {
        const type = rest.trim() as MetricType;
        if (!TYPES.has(type)) fail(`unknown type ${rest}`);
        if (types.has(name)) fail(`second TYPE for ${name}`);
        if (families.get(name)?.samples.length) fail(`TYPE for ${name} after its samples`);
        types.set(name, type);
        family(name).type = type;
      } else {
        const f = family(name);
        if (f.help !== undefined) fail(`second HELP for ${name}`);
        if (/\\[^\\n]/.test(rest.replace(/\\\\/g, ''))) fail('bad escape in HELP');
        f.help = rest.replace(/\\n/g, '\n').replace(/\\\\/g, '\\');
      }
      return;
    }
    const nameMatch = /^[^\s{]+/.exec(line);
    if (!nameMatch) fail('metric name expected');
    const name = nameMatch![0];
    if (!METRIC_NAME.test(name)) fail(`bad metric name ${name}`);
    let rest = line.slice(name.length);
    let labels: Record<string, string> = {};
    if (rest.startsWith('{')) ({ labels, rest } = parseLabels(rest, fail));
    const parts = rest.trim().split(/\s+/);
    if (!rest.startsWith(' ') || parts.length < 1 || parts.length > 2) fail('" value [timestamp]" expected');
    const value = parseValue(parts[0]);
    if (value === null) fail(`bad value ${parts[0]}`);
    let timestampMs: number | undefined;
    if (parts[1] !== undefined) {
      if (!/^-?\d+$/.test(parts[1])) fail(`bad timestamp ${parts[1]}`);
      timestampMs = Number(parts[1]);
    }
    const familyName = familyOf(name, types);
    if (familyName !== current) {
      if (closed.has(familyName)) fail(`samples of ${familyName} are not together`);
      if (current) closed.add(current);
      current = familyName;
    }
    const series = `${name}{${Object.entries(labels)
      .sort()
      .map(([k, v]) => `${k}=${JSON.stringify(v)}`)
      .join(',')}}`;
    if (seenSeries.has(series)) fail(`duplicate series ${series}`);
    seenSeries.add(series);
    const f = family(familyName);
    if (f.type === 'counter' && !(value! >= 0)) fail('a counter must be a non-negative number');
    f.samples.push({ name, labels, value: value!, timestampMs });
  });

  for (const f of families.values()) if (f.type === 'histogram') checkHistogram(f);
  return families;
}

/** Buckets cumulative in `le` order, a `+Inf` bucket equal to `_count`, and a `_sum`, for each label set. */
function checkHistogram(f: MetricFamily): void {
  const groups = new Map<string, { buckets: Array<[number, number]>; sum?: number; count?: number }>();
  for (const s of f.samples) {
    const { le, ...rest } = s.labels;
    const key = JSON.stringify(Object.entries(rest).sort());
    const group = groups.get(key) ?? { buckets: [] };
    groups.set(key, group);
    if (s.name === `${f.name}_bucket`) {
      if (le === undefined) throw new Error(`${f.name}: a bucket without le`);
      const bound = parseValue(le);
      if (bound === null || Number.isNaN(bound)) throw new Error(`${f.name}: bad le ${le}`);
      group.buckets.push([bound, s.value]);
    } else if (s.name === `${f.name}_sum`) group.sum = s.value;
    else if (s.name === `${f.name}_count`) group.count = s.value;
    else throw new Error(`${f.name}: unexpected sample ${s.name} in a histogram`);
  }
  for (const [key, group] of groups) {
    const sorted = [...group.buckets].sort((a, b) => a[0] - b[0]);
    for (let i = 1; i < sorted.length; i++) {
      if (sorted[i][1] < sorted[i - 1][1])
        throw new Error(`${f.name}${key}: bucket le=${sorted[i][0]} below the one before`);
    }
    const inf = sorted.at(-1);
    if (!inf || inf[0] !== Infinity) throw new Error(`${f.name}${key}: no +Inf bucket`);
    if (group.count === undefined || group.sum === undefined)
      throw new Error(`${f.name}${key}: _sum or _count missing`);
    if (inf[1] !== group.count) throw new Error(`${f.name}${key}: +Inf bucket ${inf[1]} ≠ _count ${group.count}`);
  }
}

/** The value of one series: `name` with exactly these labels (a histogram's `_count` etc. by its sample name). */
export function sampleValue(
  families: Map<string, MetricFamily>,
  name: string,
  labels: Record<string, string> = {},
): number | undefined {
  for (const f of families.values()) {
    for (const s of f.samples) {
      if (s.name !== name) continue;
      const keys = Object.keys(s.labels);
      if (keys.length === Object.keys(labels).length && keys.every((k) => s.labels[k] === labels[k])) return s.value;
    }
  }
  return undefined;
}
