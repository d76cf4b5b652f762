/**
 * Reads V8 `.cpuprofile` files (what `node --cpu-prof` writes, one per thread) and sums self time inside a
 * time window by function, by file and by category (render, YUV conversion, wrtc calls, media clock,
 * timers, events, HTTP/SSE, GC, …).
 *
 * Sample timestamps are CLOCK_MONOTONIC microseconds, the clock of `process.hrtime` in every process on the
 * machine, so a window recorded by the bench (`hrUs()`) selects the same span inside the service's profile.
 *
 * Profile time is wall time in a state (a sample that waits for a core still counts), so on busy cores
 * only the shares are meaningful; `/proc` thread CPU gives the absolute figures.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
}

interface ProfileNode {
  id: number;
  callFrame: CallFrame;
}

export interface CpuProfile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

export interface ProfileFileInfo {
  file: string;
  pid: number;
  /** 0 for the main thread, the worker's threadId otherwise */
  threadId: number;
}

/** `CPU.<date>.<time>.<pid>.<threadId>.<seq>.cpuprofile` */
export function parseProfileName(file: string): ProfileFileInfo | null {
  const match = /^CPU\.\d+\.\d+\.(\d+)\.(\d+)\.\d+\.cpuprofile$/.exec(path.basename(file));
  return match ? { file, pid: Number(match[1]), threadId: Number(match[2]) } : null;
}

const ROOTS = [
  path.resolve(import.meta.dirname, '..'),
  ...(process.env.BENCH_SERVICE_DIR ? [path.resolve(process.env.BENCH_SERVICE_DIR)] : []),
];

/** Repository-relative for the project's files, `<package>/…` for dependencies, `node:…` for node's own. */
export function shortUrl(url: string): string {
  if (!url) return '';
  let p = url.startsWith('file://') ? decodeURIComponent(new URL(url).pathname) : url;
  const nm = p.lastIndexOf('/node_modules/');
  if (nm >= 0) return p.slice(nm + '/node_modules/'.length);
  for (const root of ROOTS) if (p.startsWith(root + '/')) p = p.slice(root.length + 1);
  return p.replace(/\?.*$/, '');
}

/** Ordered rules: the first match names the category of a frame's self time. */
const CATEGORY_RULES: Array<[string, (fn: string, url: string) => boolean]> = [
  ['idle', (fn) => fn === '(idle)'],
  // A piscina worker with nothing to do blocks in Atomics.wait inside JS: asleep, not busy.
  ['idle', (fn, url) => fn === 'atomicsWaitLoop' && url.startsWith('piscina/')],
  ['GC', (fn) => fn === '(garbage collector)'],
  ['native / VM (program)', (fn) => fn === '(program)'],
  // The native calls of @roamhq/wrtc have no frame of their own: their time is the self time of the JS function
  // that calls them (WebRtcOutput.pushAudio → audioSource.onData; the delayed-video timer → videoSource.onFrame).
  [
    'wrtc audioSource.onData (10 ms PCM → audio track; native time inside)',
    (fn, url) => (fn === 'onData' && url === '') || (fn === 'pushAudio' && url.startsWith('actors/media/webrtc')),
  ],
  [
    'wrtc videoSource.onFrame (I420 → video track; native time inside)',
    (fn, url) => (fn === 'onFrame' && url === '') || url.startsWith('actors/media/webrtc'),
  ],
  ['wrtc other', (_fn, url) => url.startsWith('@roamhq/wrtc')],
  ['render: RGBA→I420 / YUV blending', (_fn, url) => /actors\/render\/(i420|yuva|patch|draw-i420)\.ts$/.test(url)],
  [
    'render: drawing',
    (_fn, url) => url.startsWith('actors/render/') && !/actors\/render\/(pool|worker)\.ts$/.test(url),
  ],
  [
    'render pool messaging (piscina, structured clone)',
    (fn, url) =>
      /actors\/render\/(pool|worker)\.ts$/.test(url) ||
      url.startsWith('piscina/') ||
      url.startsWith('node:internal/worker') ||
      /^(postMessage|structuredClone|deserialize|serialize|receiveMessageOnPort)/.test(fn),
  ],
  ['media clock (playout)', (_fn, url) => url.startsWith('actors/media/playout')],
  ['media (other)', (_fn, url) => url.startsWith('actors/media/') || url === 'src/sessions/media.ts'],
  ['audio / mouth / TTS client', (_fn, url) => /^actors\/(audio|mouth|tts|vad)\//.test(url)],
  [
    'session actors & machine',
    (_fn, url) => /^(actors\/session|src\/sessions|machines)\//.test(url) || url.startsWith('xstate/'),
  ],
  [
    'timers',
    (fn, url) =>
      url.startsWith('node:internal/timers') ||
      /^(listOnTimeout|processTimers|setTimeout|setInterval|clearTimeout|clearInterval)$/.test(fn),
  ],
  ['events (EventEmitter)', (_fn, url) => url === 'node:events' || url.startsWith('node:internal/event_target')],
  [
    'promises / microtasks',
    (fn, url) =>
      url.startsWith('node:internal/process/task_queues') ||
      fn === 'runMicrotasks' ||
      url.startsWith('node:internal/async_hooks'),
  ],
  [
    'logging',
    (_fn, url) => /^(pino|sonic-boom|thread-stream|pino-std-serializers)\//.test(url) || url === 'src/logger.ts',
  ],
  [
    'HTTP / SSE / routes',
    (_fn, url) =>
      /^(fastify|@fastify|find-my-way|avvio|light-my-request|fast-json-stringify|ajv|undici)/.test(url) ||
      /^src\/(routes|plugins|app|shutdown)/.test(url) ||
      /^node:(_http|http|net|internal\/http|internal\/stream_base|internal\/deps\/undici)/.test(url),
  ],
  ['streams / buffers', (_fn, url) => /^node:(internal\/streams|stream|buffer|internal\/buffer)/.test(url)],
  [
    'module loading / transpile',
    (_fn, url) => /^(tsx|esbuild|get-tsconfig)\//.test(url) || url.startsWith('node:internal/modules'),
  ],
];

export function categorise(functionName: string, url: string): string {
  for (const [name, test] of CATEGORY_RULES) if (test(functionName, url)) return name;
  if (url.startsWith('src/') || url.startsWith('actors/')) return 'other service code';
  if (url === '') return `native: ${functionName || '(anonymous)'}`;
  return 'other';
}

export interface ProfileSummary {
  pid: number;
  threadId: number;
  /** Sampled time inside the window, ms (wall time) */
  window_ms: number;
  /** Of which not idle, ms */
  busy_ms: number;
  by_category_ms: Record<string, number>;
  top_functions_ms: Array<{ function: string; ms: number; category: string }>;
  top_files_ms: Array<{ file: string; ms: number }>;
}

/** Self time per function, file and category for samples whose timestamp falls in [startUs, endUs). */
export function summariseProfile(
  profile: CpuProfile,
  info: { pid: number; threadId: number },
  startUs = -Infinity,
  endUs = Infinity,
  top = 25,
): ProfileSummary {
  const nodes = new Map(profile.nodes.map((n) => [n.id, n.callFrame]));
  const byFunction = new Map<string, { us: number; category: string }>();
  const byFile = new Map<string, number>();
  const byCategory = new Map<string, number>();
  let total = 0;
  let idle = 0;
  let ts = profile.startTime;
  const n = profile.samples.length;
  for (let i = 0; i < n; i++) {
    ts += profile.timeDeltas[i];
    // A sample stands for the time until the next one.
    const next = i + 1 < n ? ts + profile.timeDeltas[i + 1] : profile.endTime;
    if (ts < startUs || ts >= endUs) continue;
    const dt = Math.max(0, next - ts);
    const frame = nodes.get(profile.samples[i]);
    if (!frame) continue;
    const url = shortUrl(frame.url);
    const category = categorise(frame.functionName, url);
    total += dt;
    if (category === 'idle') {
      idle += dt;
      continue;
    }
    const fnKey = `${frame.functionName || '(anonymous)'} ${url ? `${url}:${frame.lineNumber + 1}` : '(native)'}`;
    const entry = byFunction.get(fnKey) ?? { us: 0, category };
    entry.us += dt;
    byFunction.set(fnKey, entry);
    const fileKey = url || `(native) ${frame.functionName}`;
    byFile.set(fileKey, (byFile.get(fileKey) ?? 0) + dt);
    byCategory.set(category, (byCategory.get(category) ?? 0) + dt);
  }
  const ms = (us: number) => Math.round(us / 100) / 10;
  return {
    pid: info.pid,
    threadId: info.threadId,
    window_ms: ms(total),
    busy_ms: ms(total - idle),
    by_category_ms: Object.fromEntries([...byCategory].sort((a, b) => b[1] - a[1]).map(([k, v]) => [k, ms(v)])),
    top_functions_ms: [...byFunction]
      .sort((a, b) => b[1].us - a[1].us)
      .slice(0, top)
      .map(([k, v]) => ({ function: k, ms: ms(v.us), category: v.category })),
    top_files_ms: [...byFile]
      .sort((a, b) => b[1] - a[1])
      .slice(0, top)
      .map(([k, v]) => ({ file: k, ms: ms(v) })),
  };
}

export function readProfile(file: string): CpuProfile {
  return JSON.parse(readFileSync(file, 'utf8')) as CpuProfile;
}
