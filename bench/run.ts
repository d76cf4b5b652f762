/**
 * `npm run bench`: latency, A/V sync, renderer cost, capacity, chat overhead, custom-avatar creation and
 * offline rendering speed, measured on this machine. Prints the figures and writes them to
 * `bench/results/<timestamp>.json`; docs/performance.md records them with the machine they came from.
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
import { benchRenderers } from './renderers.ts';
import { benchCapacity } from './capacity.ts';
import { benchChat } from './chat.ts';
import { benchOffline } from './offline.ts';
import { benchCustomAvatar } from './custom-avatar.ts';

const only = new Set(process.argv.slice(2));
const steps: Array<[string, () => Promise<unknown>]> = [
  ['renderers', benchRenderers],
  ['realtime', () => benchRealtime()],
  ['av_sync_sender', benchServerSync],
  ['av_sync_receiver', () => benchAvSync()],
  ['av_sync_browser', benchBrowserSync],
  ['chat', benchChat],
  ['custom_avatar', benchCustomAvatar],
  ['offline', () => benchOffline()],
  ['session_churn', benchLeak],
  ['capacity_rt', () => benchCapacity('rt')],
  ['capacity_lipsync', () => benchCapacity('lipsync')],
];

const results: Record<string, unknown> = {
  machine: { cpus: os.cpus().length, cpu: os.cpus()[0]?.model, memory_gb: Math.round(os.totalmem() / 1e9), node: process.version, platform: `${os.platform()} ${os.arch()}` },
  date: new Date().toISOString(),
};
for (const [name, run] of steps) {
  if (only.size > 0 && !only.has(name)) continue;
  const started = performance.now();
  process.stdout.write(`${name} …\n`);
  try {
    results[name] = await run();
  } catch (error) {
    results[name] = { error: (error as Error).message };
  }
  console.log(`${name} (${Math.round(performance.now() - started)} ms):`, JSON.stringify(results[name], null, 2));
}
const dir = path.join(path.dirname(fileURLToPath(import.meta.url)), 'results');
await fs.mkdir(dir, { recursive: true });
const file = path.join(dir, `${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
await fs.writeFile(file, `${JSON.stringify(results, null, 2)}\n`);
console.log(`results written to ${path.relative(process.cwd(), file)}`);
process.exit(0);
