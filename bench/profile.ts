/**
 * Where a session-second goes: the service runs with `--cpu-prof` (node writes one `.cpuprofile` per thread,
 * the render worker threads included, when it exits on SIGTERM) while N sessions speak and then while the same
 * sessions idle. Each window is summarised twice:
 *
 * - `/proc`: CPU per thread name of the service (main JS thread, node's unnamed threads — render workers,
 *   V8 GC/compiler helpers, libuv — and libwebrtc's named threads: `EncoderQueue` is VP8, `AudioEncoder`
 *   is Opus, `TaskQueuePacedS`/`rtp_send_contro`/`PeerConnectionF` the RTP send path) and per process
 *   (the TTS engine processes are not profiled, only measured);
 * - `.cpuprofile`: self time by category, file and function for each JS thread, clipped to the window.
 *
 * The raw profiles stay in `bench/results/profile-<timestamp>/` (open them in Chrome DevTools → Performance).
 * Sampling costs some CPU of its own, so the CPU figures of this step run a little above `session_cpu`'s.
 *
 *   npm run bench -- profile                       # rt speaking, rt idle, lipsync speaking
 *   BENCH_PROFILE_WINDOW_S=30 npm run bench -- profile
 *   BENCH_PROFILE_CLIP=still npm run bench -- profile   # lipsync on a photo and on a video avatar (still or swaying clip)
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { startBenchService } from './service.ts';
import { createClipAvatar } from './session-cpu.ts';
import { SessionLoad, warmUp, type SessionModel, type WindowResult } from './session-load.ts';
import { parseProfileName, readProfile, summariseProfile, type ProfileSummary } from './cpuprofile.ts';

const WINDOW_S = Number(process.env.BENCH_PROFILE_WINDOW_S ?? 20);
/** Also profile lipsync on a video avatar made from this kind of clip (issue 27: where a clip session's CPU goes). */
const CLIP = ((): 'still' | 'swaying' | undefined => {
  const clip = process.env.BENCH_PROFILE_CLIP;
  if (clip === undefined || clip === '') return undefined;
  if (clip !== 'still' && clip !== 'swaying')
    throw new Error(`BENCH_PROFILE_CLIP must be still or swaying, not ${clip}`);
  return clip;
})();
const WARMUP_S = 5;
const SESSIONS = Number(process.env.BENCH_SESSIONS ?? 3);
/** Samples every this many µs (node's default is 1000); coarser keeps the profiler's own cost small. */
const SAMPLING_INTERVAL_US = 1000;

export interface ProfileWindow {
  name: string;
  proc: WindowResult;
  threads: ProfileSummary[];
}

async function profileModel(model: SessionModel, dir: string, clip?: 'still' | 'swaying'): Promise<ProfileWindow[]> {
  const name = clip ? `${model}_${clip}_clip` : model;
  const profileDir = path.join(dir, name);
  await fs.mkdir(profileDir, { recursive: true });
  const service = await startBenchService({
    nodeArgs: ['--cpu-prof', `--cpu-prof-dir=${profileDir}`, `--cpu-prof-interval=${SAMPLING_INTERVAL_US}`],
  });
  const load = new SessionLoad(service.baseUrl, service.pid);
  const windows: Array<{ name: string; proc: WindowResult }> = [];
  try {
    await warmUp(service.baseUrl, service.pid, model);
    await load.open(model, SESSIONS, clip ? await createClipAvatar(service, clip) : undefined);
    load.startSpeaking();
    windows.push({ name: `${name}_speaking`, proc: await load.measure(WINDOW_S * 1000, WARMUP_S * 1000) });
    if (model === 'rt') {
      await load.stopSpeaking();
      windows.push({ name: `${model}_idle`, proc: await load.measure(WINDOW_S * 1000, 3_000) });
    }
  } finally {
    await load.close();
    await service.stop();
  }
  const files = (await fs.readdir(profileDir))
    .map((f) => parseProfileName(path.join(profileDir, f)))
    .filter((f) => f !== null);
  const profiles = files.map((info) => ({ info, profile: readProfile(info.file) }));
  return windows.map(({ name, proc }) => ({
    name,
    proc,
    threads: profiles
      .map(({ info, profile }) => summariseProfile(profile, info, proc.hr_us.start, proc.hr_us.end))
      .filter((s) => s.window_ms > 0)
      .sort((a, b) => a.threadId - b.threadId),
  }));
}

/** The sampling profiler's own thread: not part of the service's cost. */
const PROFILER_THREAD = 'v8:ProfEvntProc';

/**
 * Where a session-second goes, ms of CPU per session per second: /proc gives each thread's CPU; the main
 * thread's is split by the profile's shares of its busy samples; JS worker threads count their busy
 * (non-idle) sampled time; node's remaining unnamed threads are V8's helpers (concurrent GC, compiler) and libuv.
 */
export function sessionSecondBudget(w: ProfileWindow): Array<{ item: string; ms: number }> {
  const per = (ms: number) => Math.round((ms / (w.proc.sessions * w.proc.window_s)) * 10) / 10;
  const threads = w.proc.cpu_ms_by_thread;
  const sum = (pick: (name: string) => boolean) =>
    Object.entries(threads).reduce((n, [k, v]) => n + (pick(k) ? v : 0), 0);
  const lines: Array<{ item: string; ms: number }> = [];
  const main = threads['main (JS event loop)'] ?? 0;
  const mainProfile = w.threads.find((t) => t.threadId === 0);
  if (mainProfile && mainProfile.busy_ms > 0) {
    let rest = 0;
    for (const [category, ms] of Object.entries(mainProfile.by_category_ms)) {
      const share = (main * ms) / mainProfile.busy_ms;
      if (ms / mainProfile.busy_ms >= 0.02) lines.push({ item: `main thread: ${category}`, ms: per(share) });
      else rest += share;
    }
    lines.push({ item: 'main thread: everything else (< 2 % each)', ms: per(rest) });
  } else {
    lines.push({ item: 'main thread (not profiled)', ms: per(main) });
  }
  const workerBusy = w.threads.filter((t) => t.threadId !== 0).reduce((n, t) => n + t.busy_ms, 0);
  const nodeThreads = sum((k) => k.startsWith('node thread'));
  lines.push({ item: 'JS worker threads (render pool; busy samples)', ms: per(Math.min(workerBusy, nodeThreads)) });
  lines.push({
    item: "node's other threads (V8 concurrent GC/compiler, libuv)",
    ms: per(Math.max(0, nodeThreads - workerBusy)),
  });
  lines.push({ item: 'libwebrtc EncoderQueue (VP8 encode)', ms: per(threads.EncoderQueue ?? 0) });
  lines.push({ item: 'libwebrtc AudioEncoder (Opus encode)', ms: per(threads.AudioEncoder ?? 0) });
  const known = new Set(['main (JS event loop)', 'EncoderQueue', 'AudioEncoder', PROFILER_THREAD]);
  lines.push({
    item: 'libwebrtc RTP send path & other threads (pacer, rtp_send, PeerConnectionFactory, …)',
    ms: per(sum((k) => !known.has(k) && !k.startsWith('node thread'))),
  });
  for (const [proc, ms] of Object.entries(w.proc.cpu_ms_by_process)) {
    if (proc === 'service') continue;
    lines.push({
      item: proc === 'child node' ? 'TTS engine process(es)' : proc === 'child esbuild' ? 'tsx/esbuild process' : proc,
      ms: per(ms),
    });
  }
  lines.sort((a, b) => b.ms - a.ms);
  const total = w.proc.cpu_ms - (threads[PROFILER_THREAD] ?? 0);
  lines.push({ item: 'total (service tree, without the profiler thread)', ms: per(total) });
  return lines;
}

/** Busy time of each JS thread as shares by category, scaled to ms of CPU per session-second. */
export function printWindow(w: ProfileWindow): void {
  const perSessionSecond = (ms: number) => Math.round((ms / (w.proc.sessions * w.proc.window_s)) * 10) / 10;
  console.log(
    `\n  == ${w.name}: ${w.proc.cpu_ms_per_session_second} ms CPU per session-second (service tree), ${w.proc.late_percent}% late, load ${w.proc.load_average.join(' ')}`,
  );
  console.log(
    '  CPU by process (ms per session-second):',
    JSON.stringify(
      Object.fromEntries(Object.entries(w.proc.cpu_ms_by_process).map(([k, v]) => [k, perSessionSecond(v)])),
    ),
  );
  console.log(
    '  CPU by thread (ms per session-second):',
    JSON.stringify(
      Object.fromEntries(Object.entries(w.proc.cpu_ms_by_thread).map(([k, v]) => [k, perSessionSecond(v)])),
    ),
  );
  console.log('  where a session-second goes (ms CPU per session-second):');
  for (const line of sessionSecondBudget(w)) console.log(`     ${String(line.ms).padStart(6)}  ${line.item}`);
  for (const t of w.threads) {
    const label = t.threadId === 0 ? 'main thread' : `worker thread ${t.threadId}`;
    console.log(`  -- ${label}: busy ${t.busy_ms} of ${t.window_ms} ms sampled`);
    for (const [category, ms] of Object.entries(t.by_category_ms).slice(0, 14)) {
      console.log(`     ${((ms / Math.max(1, t.busy_ms)) * 100).toFixed(1).padStart(5)}%  ${category}`);
    }
    for (const f of t.top_functions_ms.slice(0, 10)) console.log(`     ${String(f.ms).padStart(8)} ms  ${f.function}`);
  }
}

export async function benchProfile(): Promise<Record<string, unknown>> {
  const root = path.join(
    path.dirname(fileURLToPath(import.meta.url)),
    'results',
    `profile-${new Date().toISOString().replace(/[:.]/g, '-')}`,
  );
  const out: Record<string, unknown> = { profiles_dir: path.relative(process.cwd(), root) };
  for (const model of ['rt', 'lipsync'] as SessionModel[]) {
    for (const w of await profileModel(model, root)) {
      printWindow(w);
      out[w.name] = { budget_ms_per_session_second: sessionSecondBudget(w), ...w };
    }
  }
  if (CLIP) {
    for (const w of await profileModel('lipsync', root, CLIP)) {
      printWindow(w);
      out[w.name] = { budget_ms_per_session_second: sessionSecondBudget(w), ...w };
    }
  }
  await fs.writeFile(path.join(root, 'summary.json'), `${JSON.stringify(out, null, 2)}\n`);
  return out;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  await benchProfile();
  process.exit(0);
}
