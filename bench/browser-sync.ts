import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { json, post, startTestApp } from '../test/helpers/app.ts';
import { SseClient } from '../test/helpers/sse.ts';
import { summary } from './stats.ts';

const CHROMIUM = '/usr/bin/chromium';
/** Speech onsets per run: each is one speak turn; 6 is the quick default, BENCH_AV_RUNS=20+ for a before/after comparison (p95 of 6 is just the max). */
const RUNS = Math.max(1, Number(process.env.BENCH_AV_RUNS ?? 6));
const PAGE_SCRIPT = fs.readFileSync(
  path.join(path.dirname(fileURLToPath(import.meta.url)), 'browser-sync.page.js'),
  'utf8',
);

/**
 * A/V offset as a browser user gets it: headless Chromium plays the session; WebAudio taps the audio track
 * for the speech onset and requestVideoFrameCallback reads the mock renderer's pixel timecode of every
 * presented frame. Offset = presentation time of the turn's first frame − audio onset time (positive:
 * video late). Chromium aligns the two tracks of one stream itself, as every browser does.
 */
export async function benchBrowserSync(): Promise<Record<string, unknown>> {
  if (!fs.existsSync(CHROMIUM)) return { skipped: 'chromium not installed' };
  // SERVICE_VIDEO_DELAY_MS from the bench's environment, so delays can be compared without editing code.
  const delay = process.env.SERVICE_VIDEO_DELAY_MS;
  const t = await startTestApp(delay ? { env: { SERVICE_VIDEO_DELAY_MS: delay } } : {});
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--autoplay-policy=no-user-gesture-required',
    ],
  });
  try {
    const avatars = await json(await fetch(`${t.baseUrl}/avatars`));
    const avatar = avatars.find((a: { model_type: string }) => a.model_type === 'rt') ?? avatars[0];
    const { session_id } = await json(await post(t.baseUrl, '/sessions', { avatar_id: avatar.id, model: 'mock' }));
    const sse = await SseClient.open(`${t.baseUrl}/sessions/${session_id}/events`);
    const page = await browser.newPage();
    await page.goto(`${t.baseUrl}/healthz`);
    await page.evaluate(`${PAGE_SCRIPT}\npageScript(${JSON.stringify({ base: t.baseUrl, sessionId: session_id })})`);
    await post(t.baseUrl, `/sessions/${session_id}/start`);
    await page.waitForFunction('window.bench && window.bench.frames.length > 25', null, { timeout: 20_000 });
    const offsets: number[] = [];
    for (let run = 0; run < RUNS; run++) {
      const from = sse.events.length;
      await page.evaluate('window.bench.onsets.length = 0');
      await post(t.baseUrl, `/sessions/${session_id}/speak`, { text: 'Sync check, one two three.' });
      const first = await sse.waitFor((e) => e.type === 'frame', 15_000, 'frame', from);
      await sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', 20_000, 'idle', from);
      const result: { onset?: number; frameAt?: number; framePts: number } = await page.evaluate(
        `(() => { const b = window.bench; const f = b.frames.find((x) => x.idx >= ${Number(first.data.frame_idx)});
          return { onset: b.onsets[0], frameAt: f ? f.at : undefined, framePts: f ? (f.idx - ${Number(first.data.frame_idx)}) * 40 : 0 }; })()`,
      );
      if (result.onset !== undefined && result.frameAt !== undefined)
        offsets.push(result.frameAt - result.framePts - first.data.pts_ms - result.onset);
      await new Promise((r) => setTimeout(r, 500));
    }
    sse.close();
    const audioOutputLatencyMs = await page.evaluate('window.bench.audioLatencyMs');
    return {
      browserAvOffsetMs: summary(offsets),
      browserAvAbsOffsetMs: summary(offsets.map(Math.abs)),
      audioOutputLatencyMs,
    };
  } finally {
    await browser.close();
    await t.close();
  }
}
