import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { OpusPacketEncoder } from '../actors/audio/opus-encoder.ts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chromium, type Browser, type Page } from 'playwright-core';
import { buildClientBundle } from '../src/ui/client-bundles.ts';
import { ANCHOR_MARGIN_MS, CHANNEL_AUDIO_RATE } from '../client/channel-audio.ts';

// The browser's channel audio player alone (client/channel-audio.ts), in headless Chromium: Opus packets encoded here
// (by the service's encoder, `OpusPacketEncoder`: 16 kHz mono, 20 ms) are handed to the player as the `avatar` channel would, on a
// simulated service clock whose `sync`s arrive every 80 ms; a worklet tap records what the player outputs, frame by
// frame of the AudioContext, to check where each sound lands.

const CHROMIUM = '/usr/bin/chromium';
const hasChromium = fs.existsSync(CHROMIUM);
const SESSION_RATE = 16_000;
const PACKET_SAMPLES = SESSION_RATE / 50;
/**
 * How far ahead of the simulated clock the first packets are handed over: the service sends 240 ms ahead; more here,
 * so that a slow `page.evaluate` on a loaded host (each send is one) cannot make them late.
 */
const LEAD_MS = 1_000;
/** Opus smears an onset over a few ms (its MDCT/LPC windows): a tone's start is found within this of its rtp. */
const ONSET_TOLERANCE_MS = 3;
/** A level the tones (0.3) exceed and the player's silence (exact zeros) and Opus' decay tails do not. */
const LOUD = 0.05;

const PAGE = `<!doctype html><script type="module">
import * as lib from '/client.js';
const TAP = \`class Tap extends AudioWorkletProcessor {
  constructor() { super(); this.chunk = new Float32Array(4096); this.at = 0; this.from = -1; }
  process(inputs) {
    const input = inputs[0][0];
    if (!input) return true;
    if (this.from < 0) this.from = currentFrame;
    this.chunk.set(input, this.at);
    this.at += input.length;
    if (this.at === this.chunk.length) {
      this.port.postMessage({ from: this.from, samples: this.chunk }, [this.chunk.buffer]);
      this.chunk = new Float32Array(4096); this.at = 0; this.from = -1;
    }
    return true;
  }
}
registerProcessor('tap', Tap);\`;
window.start = async (base, encoderDelay) => {
  const context = lib.channelAudioContext(null);
  const player = new lib.ChannelAudioPlayer(context);
  player.setEncoderDelay(encoderDelay);
  await player.ready;
  const url = URL.createObjectURL(new Blob([TAP], { type: 'text/javascript' }));
  await context.audioWorklet.addModule(url);
  const tap = new AudioWorkletNode(context, 'tap', { numberOfInputs: 1, numberOfOutputs: 1, outputChannelCount: [1] });
  const chunks = [];
  tap.port.onmessage = (event) => chunks.push({ from: event.data.from, samples: Array.from(event.data.samples) });
  player.output.connect(tap);
  tap.connect(context.destination);
  // The simulated service clock: unwrapped rtp = base + context frame; its syncs carry it modulo 2^32.
  const clock = () => base + Math.round(context.currentTime * 48000);
  setInterval(() => player.sync(clock() % 2 ** 32), 80);
  player.sync(clock() % 2 ** 32);
  Object.assign(window, { context, player, chunks, clock });
};
window.send = (rtp, packets, fresh) => player.receive({ type: 'audio', rtp: rtp % 2 ** 32, packets, fresh });
</script>`;

/** 16 kHz PCM: silence, then a tone of `hz` at 0.3 for `toneMs`, then silence, `totalMs` in all. */
function toneBurst(totalMs: number, silenceMs: number, toneMs: number, hz: number): Int16Array {
  const pcm = new Int16Array((totalMs * SESSION_RATE) / 1000);
  const from = (silenceMs * SESSION_RATE) / 1000;
  const to = from + (toneMs * SESSION_RATE) / 1000;
  for (let i = from; i < to; i++)
    pcm[i] = Math.round(0.3 * 32767 * Math.sin((2 * Math.PI * hz * (i - from)) / SESSION_RATE));
  return pcm;
}

/** The service's encoding: a fresh encoder (`OpusPacketEncoder`), 20 ms packets, base64. */
function opusPackets(pcm: Int16Array): string[] {
  const encoder = new OpusPacketEncoder(SESSION_RATE, 20);
  const packets: string[] = [];
  for (let at = 0; at + PACKET_SAMPLES <= pcm.length; at += PACKET_SAMPLES)
    packets.push(encoder.encode(pcm.subarray(at, at + PACKET_SAMPLES)));
  return packets;
}

/** The service's encoder delay as `audio-route` states it (rtp ticks). */
const ENCODER_DELAY_TICKS = (new OpusPacketEncoder(SESSION_RATE, 20).delaySamples * 48_000) / SESSION_RATE;

/** Hands the player `pcm` as the service would: Opus packets from `rtp` (unwrapped; sent modulo 2^32), fresh. */
async function sendPcm(page: Page, rtp: number, pcm: Int16Array): Promise<void> {
  await page.evaluate(([rtp, packets]) => (window as any).send(rtp, packets, true), [rtp, opusPackets(pcm)] as const);
}

const ticks = (ms: number) => Math.round((ms * CHANNEL_AUDIO_RATE) / 1000);

describe.skipIf(!hasChromium)('the channel audio player in headless Chromium', () => {
  let browser: Browser;
  let server: http.Server;
  let origin: string;

  beforeAll(async () => {
    const bundle = await buildClientBundle('avatar-client.ts', 'esm');
    server = http.createServer((req, res) =>
      req.url === '/client.js'
        ? res.writeHead(200, { 'content-type': 'text/javascript' }).end(bundle)
        : res.writeHead(200, { 'content-type': 'text/html' }).end(PAGE),
    );
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--no-sandbox', '--autoplay-policy=no-user-gesture-required', '--no-first-run'],
    });
  }, 60_000);
  afterAll(async () => {
    await browser?.close();
    await new Promise((resolve) => server?.close(resolve));
  });

  /** What the player output, as one array from the context frame `from`. */
  async function heard(page: Page): Promise<{ from: number; samples: Float32Array }> {
    const chunks = (await page.evaluate(() => (window as any).chunks)) as Array<{ from: number; samples: number[] }>;
    const from = chunks[0].from;
    const last = chunks.at(-1)!;
    const samples = new Float32Array(last.from + last.samples.length - from);
    for (const chunk of chunks) samples.set(chunk.samples, chunk.from - from);
    return { from, samples };
  }

  /** The first context frame in [start, end) louder than LOUD, or -1. */
  function firstLoud(out: { from: number; samples: Float32Array }, start: number, end: number): number {
    for (let f = Math.max(start, out.from); f < Math.min(end, out.from + out.samples.length); f++)
      if (Math.abs(out.samples[f - out.from]) > LOUD) return f;
    return -1;
  }

  /** Zero crossings per second over [start, end): twice the frequency of a tone. */
  function frequency(out: { from: number; samples: Float32Array }, start: number, end: number): number {
    let crossings = 0;
    for (let f = start + 1; f < end; f++)
      if (out.samples[f - out.from - 1] < 0 !== out.samples[f - out.from] < 0) crossings++;
    return crossings / 2 / ((end - start) / CHANNEL_AUDIO_RATE);
  }

  it('plays each packet at its rtp + D (D from the syncs plus the margin), across the rtp wrap; overwrites a re-sent packet; plays silence in a gap', async () => {
    const page = await browser.newPage();
    try {
      await page.goto(origin);
      await page.waitForFunction(() => typeof (window as any).start === 'function');
      // The clock starts so that the rtp wraps at 2^32 while the packets below play (between the first and the third).
      const base = 2 ** 32 - ticks(LEAD_MS + 800);
      await page.evaluate(([base, delay]) => (window as any).start(base, delay), [base, ENCODER_DELAY_TICKS] as const);
      await page.waitForTimeout(300);
      const offset = (await page.evaluate(() => (window as any).player.figures.offset)) as number;
      // D: the syncs arrive at the frame they name (the simulated clock is the context's) a little late; D adds the margin.
      expect(offset + base).toBeGreaterThanOrEqual(ticks(ANCHOR_MARGIN_MS));
      expect(offset + base).toBeLessThanOrEqual(ticks(ANCHOR_MARGIN_MS + 30));

      // 1. Timing at the anchor: a 440 Hz tone starting 100 ms into a burst sent LEAD_MS ahead, on the 20 ms grid.
      const now = (await page.evaluate(() => (window as any).clock())) as number;
      const first = Math.ceil((now + ticks(LEAD_MS)) / 960) * 960;
      await sendPcm(page, first, toneBurst(400, 100, 200, 440));

      // 2. Overwrite: 200 ms of silence sent for a span, then a 660 Hz tone for the same rtp (fresh): the tone plays.
      const second = first + ticks(600);
      await sendPcm(page, second, toneBurst(200, 0, 0, 660));
      await sendPcm(page, second, toneBurst(200, 0, 200, 660));

      // 3. Gap: 100 ms of tone, nothing for 200 ms, 100 ms of tone (each fresh).
      const third = second + ticks(400);
      await sendPcm(page, third, toneBurst(100, 0, 100, 440));
      await sendPcm(page, third + ticks(300), toneBurst(100, 0, 100, 440));

      // Wait until all of it played.
      await page.waitForFunction(
        (end) => (window as any).clock() > end,
        third + ticks(400) + ticks(ANCHOR_MARGIN_MS + 200),
        { timeout: 10_000 },
      );
      await page.waitForTimeout(300);
      const out = await heard(page);
      const figures = await page.evaluate(() => (window as any).player.figures);
      expect(figures.late).toBe(0);
      expect(figures.offset).toBe(offset);

      // 1: silence before the tone, the tone from its rtp + D (the rtp wraps between the first packets and the third).
      const onsetRtp = first + ticks(100);
      expect(first).toBeLessThan(2 ** 32);
      expect(third).toBeGreaterThan(2 ** 32);
      const onset = firstLoud(out, first + offset, first + offset + ticks(400));
      expect(onset, 'the tone is heard').toBeGreaterThan(0);
      console.log(
        `channel audio: the tone's onset heard ${((onset - onsetRtp - offset) / 48).toFixed(2)} ms from its rtp + D`,
      );
      expect(Math.abs(onset - (onsetRtp + offset))).toBeLessThanOrEqual(ticks(ONSET_TOLERANCE_MS));
      expect(firstLoud(out, first + offset - ticks(200), onset)).toBe(-1);
      expect(frequency(out, onset + ticks(20), onset + ticks(180))).toBeCloseTo(440, -1);
      // Its end: silence again 10 ms after the tone's last rtp (Opus' decay tail is shorter).
      expect(firstLoud(out, onsetRtp + ticks(210) + offset, second + offset)).toBe(-1);

      // 2: the re-sent packets replaced the silence: 660 Hz through the span.
      expect(firstLoud(out, second + offset, second + offset + ticks(10))).toBeGreaterThan(0);
      expect(frequency(out, second + offset + ticks(20), second + offset + ticks(180))).toBeCloseTo(660, -1);

      // 3: the tone, silence where nothing was sent, the tone again.
      expect(firstLoud(out, third + offset, third + offset + ticks(10))).toBeGreaterThan(0);
      expect(firstLoud(out, third + offset + ticks(110), third + offset + ticks(295))).toBe(-1);
      expect(firstLoud(out, third + offset + ticks(300), third + offset + ticks(310))).toBeGreaterThan(0);
    } finally {
      await page.close();
    }
  }, 60_000);

  it('flush drops every packet not yet heard; a late speech onset moves D and plays whole; a packet after its slot while audio plays counts late and raises the margin of the next anchor', async () => {
    const page = await browser.newPage();
    try {
      await page.goto(origin);
      await page.waitForFunction(() => typeof (window as any).start === 'function');
      await page.evaluate((delay) => (window as any).start(1_000_000, delay), ENCODER_DELAY_TICKS);
      await page.waitForTimeout(300);
      const offset = (await page.evaluate(() => (window as any).player.figures.offset)) as number;

      // A second of tone sent ahead; flushed while it plays.
      const now = (await page.evaluate(() => (window as any).clock())) as number;
      const first = Math.ceil((now + ticks(LEAD_MS)) / 960) * 960;
      await sendPcm(page, first, toneBurst(1000, 0, 1000, 440));
      // Flushed when 300 ms of it have been rendered.
      await page.waitForFunction(
        ([at, offset]) => (window as any).context.currentTime * 48000 - offset > at,
        [first + ticks(300), offset],
        { timeout: 10_000 },
      );
      const flushedAt = (await page.evaluate(() => {
        const w = window as any;
        w.player.flush();
        return Math.round(w.context.currentTime * 48000) - w.player.figures.offset;
      })) as number;
      await page.waitForFunction(
        (end) => (window as any).clock() > end,
        first + ticks(1000) + ticks(ANCHOR_MARGIN_MS + 200),
        { timeout: 10_000 },
      );

      const out = await heard(page);
      expect(firstLoud(out, first + offset, first + offset + ticks(10))).toBeGreaterThan(0);
      // Nothing of the tone after the flush reached the worklet (a render quantum and the message's way).
      let lastLoud = -1;
      for (let at = first + offset; at < first + offset + ticks(1000); at++)
        if (Math.abs(out.samples[at - out.from]) > LOUD) lastLoud = at;
      console.log(
        `channel audio: the tone's last sound ${((lastLoud - offset - flushedAt) / 48).toFixed(1)} ms after the flush`,
      );
      expect(lastLoud - offset).toBeLessThan(flushedAt + ticks(30));
      expect((await page.evaluate(() => (window as any).player.figures)).flushes).toBe(1);

      // A speech onset after silence, handed over 100 ms after the clock's now (a busy service): D moves before it
      // plays, so it plays whole, from its rtp + the new D.
      const onset = ((await page.evaluate(() => (window as any).clock())) as number) - ticks(100);
      await sendPcm(page, onset, toneBurst(600, 0, 600, 440));
      await page.waitForFunction(() => (window as any).player.figures.lateOnsets > 0, null, { timeout: 5_000 });
      const moved = (await page.evaluate(() => (window as any).player.figures.offset)) as number;
      expect(moved - offset).toBeGreaterThanOrEqual(ticks(100));

      // While it plays (audio is buffered), a packet for a slot 50 ms past: late; D stays, the margin grows.
      await page.evaluate(
        ([packets, past]) => {
          const w = window as any;
          const playhead = Math.round(w.context.currentTime * 48000) - w.player.figures.offset;
          w.send(playhead - past, packets, true);
        },
        [opusPackets(toneBurst(20, 0, 20, 880)), ticks(50)] as const,
      );
      await page.waitForFunction(() => (window as any).player.figures.late > 0, null, { timeout: 5_000 });
      expect(await page.evaluate(() => (window as any).player.figures.offset)).toBe(moved);
      // Re-anchored with the larger margin once nothing is buffered.
      await page.waitForFunction((moved) => (window as any).player.figures.offset !== moved, moved, { timeout: 5_000 });
      await page.waitForTimeout(200);
      const after = await heard(page);
      const figures = await page.evaluate(() => (window as any).player.figures);
      const heardOnset = firstLoud(after, onset + moved - ticks(50), onset + moved + ticks(100));
      console.log(
        `channel audio: a late onset heard ${((heardOnset - onset - moved) / 48).toFixed(2)} ms from rtp + D`,
      );
      expect(Math.abs(heardOnset - (onset + moved))).toBeLessThanOrEqual(ticks(ONSET_TOLERANCE_MS));
      expect(figures.lateOnsets).toBe(1);
      expect(figures.marginMs).toBeGreaterThan(ANCHOR_MARGIN_MS + 30);
      expect(figures.offset - offset).toBeGreaterThanOrEqual(ticks(figures.marginMs - ANCHOR_MARGIN_MS - 5));
    } finally {
      await page.close();
    }
  }, 60_000);
});
