/**
 * `npm run bench`: latency, A/V sync, renderer cost, capacity, chat overhead, custom-avatar creation,
 * offline rendering speed, server CPU per session-second and memory over many sessions, measured on this
 * machine. Prints the figures, then a summary table of every target row (measured, target, met?), and
 * writes all of it to `bench/results/<timestamp>.json`; docs/performance.md records them with the machine
 * they came from.
 *
 *   npm run bench                        # every step except `profile`
 *   npm run bench -- realtime chat       # only these steps (the summary shows the rows they measure)
 *   npm run bench -- profile             # --cpu-prof profile: where a session-second goes
 *   npm run bench -- stage_costs         # wrtc calls, VP8/Opus encoder threads and GC in isolation
 *   npm run bench -- audio_path [speech …]   # 24 audio senders, wrtc's track per Opus option against the pose channel's
 *                                            # own Opus per complexity: CPU, bytes, first audible, what each complexity keeps
 *   BENCH_SERVICE_DIR=<checkout> npm run bench -- session_cpu   # the process steps against another checkout
 *   npm run bench -- streaming_cpu       # a WHEP viewer's and an RTMP output's CPU beside the session's
 *   npm run bench -- client_render_cpu   # 24 client-rendered sessions (pose stream + channel audio; BENCH_CLIENT_AUDIO=track|both) beside server rendering and the floor
 *   npm run bench -- mouth_sheet [clip-or-photo …]   # contact sheets of mouth crops and the artefact measures
 *   npm run bench -- kept_bytes          # transcripts and the webhook outbox against their byte budgets
 *   npm run bench -- render_kit          # render kits: build time, size against budget, draw cost in Chromium
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { benchRealtime } from './realtime.ts';
import { benchAvSync } from './av-sync.ts';
import { benchServerSync } from './server-sync.ts';
import { benchLeak } from './leak.ts';
import { benchBrowserSync } from './browser-sync.ts';
import { benchMouthSyncBrowser } from './mouth-sync-browser.ts';
import { benchMouthSheet } from './mouth-sheet.ts';
import { benchCaptions } from './captions.ts';
import { benchRenderers } from './renderers.ts';
import { benchNeuralLipsync } from './neural-lipsync.ts';
import { benchCapacity } from './capacity.ts';
import { benchChat } from './chat.ts';
import { benchVoice } from './voice.ts';
import { benchOffline } from './offline.ts';
import { benchCustomAvatar } from './custom-avatar.ts';
import { benchAvatarFidelity } from './avatar-fidelity.ts';
import { benchSessionCpu } from './session-cpu.ts';
import { benchSessionCycles } from './session-cycles.ts';
import { benchStreamingCpu } from './streaming-cpu.ts';
import { benchClientRenderCpu } from './client-render-cpu.ts';
import { benchProfile } from './profile.ts';
import { benchStageCosts } from './stage-costs.ts';
import { benchAudioPath } from './audio-path.ts';
import { benchCluster } from './cluster.ts';
import { benchHostile } from './hostile.ts';
import { benchKeptBytes } from './kept-bytes.ts';
import { benchRenderKit } from './render-kit.ts';
import { formatSummary, summarise } from './targets.ts';
import { loadAverage } from './proc.ts';

const only = new Set(process.argv.slice(2));
const steps: Array<[string, () => Promise<unknown>]> = [
  ['renderers', benchRenderers],
  ['neural_lipsync', benchNeuralLipsync],
  ['realtime', () => benchRealtime()],
  ['av_sync_sender', benchServerSync],
  ['av_sync_receiver', () => benchAvSync()],
  ['av_sync_browser', benchBrowserSync],
  ['mouth_sync_browser', benchMouthSyncBrowser],
  ['captions', benchCaptions],
  ['chat', benchChat],
  ['voice', benchVoice],
  ['custom_avatar', benchCustomAvatar],
  ['avatar_fidelity', benchAvatarFidelity],
  ['mouth_sheet', benchMouthSheet],
  ['offline', () => benchOffline()],
  ['session_churn', benchLeak],
  ['capacity_rt', () => benchCapacity('rt')],
  ['capacity_lipsync', () => benchCapacity('lipsync')],
  ['session_cpu', benchSessionCpu],
  ['streaming_cpu', benchStreamingCpu],
  ['client_render_cpu', benchClientRenderCpu],
  ['session_cycles', () => benchSessionCycles()],
  ['profile', benchProfile],
  ['stage_costs', benchStageCosts],
  ['audio_path', benchAudioPath],
  ['cluster', benchCluster],
  ['hostile', benchHostile],
  ['kept_bytes', benchKeptBytes],
  ['render_kit', benchRenderKit],
];
/**
 * Steps that run only when named: diagnostics behind the figures (the profile repeats session_cpu's load under the
 * sampler) and contact sheets for people to look at (`mouth_sheet`, which takes clips and photos as further arguments).
 */
const OPT_IN = new Set(['profile', 'stage_costs', 'audio_path', 'mouth_sheet']);

const results: Record<string, unknown> = {
  machine: {
    cpus: os.cpus().length,
    cpu: os.cpus()[0]?.model,
    memory_gb: Math.round(os.totalmem() / 1e9),
    node: process.version,
    platform: `${os.platform()} ${os.arch()}`,
  },
  date: new Date().toISOString(),
  load_average_at_start: loadAverage(),
  service_dir: process.env.BENCH_SERVICE_DIR ? 'BENCH_SERVICE_DIR' : 'this repository',
};
for (const [name, run] of steps) {
  if (only.size > 0 ? !only.has(name) : OPT_IN.has(name)) continue;
  const started = performance.now();
  process.stdout.write(`${name} …\n`);
  try {
    results[name] = await run();
  } catch (error) {
    results[name] = { error: (error as Error).message };
  }
  console.log(`${name} (${Math.round(performance.now() - started)} ms):`, JSON.stringify(results[name], null, 2));
}
results.load_average_at_end = loadAverage();
const summary = summarise(results);
results.summary = summary;
console.log(
  `\nsummary (load average ${(results.load_average_at_start as number[]).join(' ')} at start, ${(results.load_average_at_end as number[]).join(' ')} at end; ${os.cpus().length} cores):\n`,
);
console.log(formatSummary(summary));
const dir = path.join(path.dirname(fileURLToPath(import.meta.url)), 'results');
await fs.mkdir(dir, { recursive: true });
const file = path.join(dir, `${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
await fs.writeFile(file, `${JSON.stringify(results, null, 2)}\n`);
console.log(`results written to ${path.relative(process.cwd(), file)}`);
process.exit(0);
