import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chromium, type Browser, type Page } from 'playwright-core';
import { rtpDiff, wrapRtp } from '../client/face-canvas.ts';
import { sessionParts } from '../src/sessions/session.ts';
import { startTestApp, type TestApp } from './helpers/app.ts';
import { postAudio, tone, wavBytes } from './helpers/conversation.ts';

const CHROMIUM = '/usr/bin/chromium';
const hasChromium = fs.existsSync(CHROMIUM);
/** Session setup and the first audio on 2 shared cores under load. */
const STEP_MS = 30_000;
/** How far the drawn pose may be from the audio heard (issue 47): ±80 ms on the 48 kHz RTP clock. */
const SYNC_TOLERANCE_RTP = 80 * 48;
/** The pose stream's frame interval (25 fps) on the 48 kHz rtp clock: a drawn pose is at most this before the heard time. */
const POSE_INTERVAL_RTP = (1000 / 25) * 48;
/**
 * How exactly the page's player plays rtp R at R + D, against the service's own record of the tone's onset (the media
 * clock's position at `turnStarted`, which it takes per 10 ms chunk): one chunk.
 */
const ONSET_REFERENCE_RTP = 10 * 48;
/** A level the spoken tone exceeds and silence does not. */
const LOUD = 0.05;
/**
 * Runs in the page: a worklet tap on what the page hears of channel audio (the player's output), posting the context
 * frame of the first sample over LOUD after each 'arm'.
 */
const ONSET_TAP = `class OnsetTap extends AudioWorkletProcessor {
  constructor() { super(); this.armed = false; this.port.onmessage = () => (this.armed = true); }
  process(inputs) {
    const input = inputs[0][0];
    if (!this.armed || !input) return true;
    for (let i = 0; i < input.length; i++)
      if (Math.abs(input[i]) > ${LOUD}) { this.armed = false; this.port.postMessage(currentFrame + i); break; }
    return true;
  }
}
registerProcessor('onset-tap', OnsetTap);`;
/**
 * Before any page script: every AudioNode connected to a context's destination is kept in `window.heardNodes`, so a
 * test can listen to what a page plays without the page's help (the page at / keeps its client to itself).
 */
const KEEP_HEARD_NODES = () => {
  const w = window as any;
  w.heardNodes = [];
  const connect = AudioNode.prototype.connect as (...args: unknown[]) => unknown;
  AudioNode.prototype.connect = function (this: AudioNode, ...args: unknown[]) {
    if (args[0] instanceof AudioDestinationNode) w.heardNodes.push(this);
    return connect.apply(this, args);
  } as typeof AudioNode.prototype.connect;
};
/** Runs in the page: the loudest level of what the page plays through `node` since the last read, polled each 10 ms. */
const LISTEN = (node: AudioNode) => {
  const w = window as any;
  const analyser = node.context.createAnalyser();
  analyser.fftSize = 1024;
  node.connect(analyser);
  const buf = new Float32Array(analyser.fftSize);
  w.loudest = 0;
  setInterval(() => {
    analyser.getFloatTimeDomainData(buf);
    for (const v of buf) w.loudest = Math.max(w.loudest, Math.abs(v));
  }, 10);
};
/** One display frame at 60 Hz: how often the page polls what is played when it is not starved. */
const DISPLAY_FRAME_MS = 1000 / 60;

/** A free loopback port, reserved by listening (the service lists the host page's origin before it starts). */
async function reservePort(): Promise<number> {
  const server = http.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

describe.skipIf(!hasChromium)('<avatar-chat render="client"> on a page of another origin, in headless Chromium', () => {
  let t: TestApp;
  let browser: Browser;
  /** Chromium with its default autoplay policy: sound only after a user gesture on the page. */
  let plain: Browser;
  let port: number;

  beforeAll(async () => {
    port = await reservePort();
    t = await startTestApp({ env: { SERVICE_CORS_ORIGINS: `http://127.0.0.1:${port}` } });
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--no-sandbox', '--disable-gpu', '--autoplay-policy=no-user-gesture-required', '--no-first-run'],
    });
    plain = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--no-sandbox', '--disable-gpu', '--no-first-run'],
    });
  });
  afterAll(async () => {
    await browser?.close();
    await plain?.close();
    await t?.close();
  });

  /** Serves `page` at the reserved port (the origin the service lets in) for `use`. */
  async function hostPage<T>(page: string, use: () => Promise<T>): Promise<T> {
    const server = http.createServer((_req, res) => res.writeHead(200, { 'content-type': 'text/html' }).end(page));
    await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
    try {
      return await use();
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  }
  const widgetPage = (head = '') =>
    `<!doctype html>\n${head}<script src="${t.baseUrl}/widget.js"></script>\n<avatar-chat avatar="demo-rt" render="client" reply="speak"></avatar-chat>\n`;

  /** Clicks Start in the widget and answers the session it made. */
  async function startWidget(tab: Page): Promise<string> {
    await tab.goto(`http://127.0.0.1:${port}/`);
    await tab.evaluate(() => {
      const w = window as any;
      w.ready = null;
      document.querySelector('avatar-chat')!.addEventListener('ready', (e) => (w.ready = (e as CustomEvent).detail));
    });
    await tab.getByRole('button', { name: 'Start conversation' }).click();
    await tab.waitForFunction(() => (window as any).ready !== null, null, { timeout: STEP_MS });
    return tab.evaluate(() => (window as any).ready.sessionId as string);
  }

  /** What the widget's client set up: the hello, the peer's receivers and its track, the canvas, the audio route. */
  function widgetSetup(tab: Page) {
    return tab.evaluate(() => {
      const element = document.querySelector('avatar-chat') as any;
      const client = element.client;
      return {
        hello: client.poseStream.figures.hello,
        receivers: client.peer.getReceivers().map((r: RTCRtpReceiver) => r.track.kind),
        trackEnabled: client.peer.getReceivers()[0].track.enabled as boolean,
        canvas: !!element.shadowRoot.querySelector('canvas'),
        route: client.poseStream.figures.audioRoute as string,
        context: client.audioContext?.state as string | undefined,
        rate: client.audioContext?.sampleRate as number | undefined,
      };
    });
  }

  /** The tone the tests speak, and where its first sample played on the media clock (the service's own record). */
  async function speakTone(sessionId: string): Promise<() => number> {
    const session = t.services.supervisor.liveSession(sessionId)!;
    const playout = sessionParts(session).media.playout;
    let onsetMs = -1;
    playout.once('turnStarted', () => (onsetMs = playout.mediaMs));
    const spoken = await postAudio(
      t.baseUrl,
      `/sessions/${sessionId}/speak_audio`,
      wavBytes(tone(16_000, 2_500, 220, 14_000), 16_000),
      {},
      'a.wav',
    );
    expect(spoken.status).toBe(200);
    return () => onsetMs;
  }

  it('channel audio: the page asks for the audio on the avatar channel, plays it at rtp + D, mutes the track, draws the pose of the rtp heard (within one pose interval), and Stop flushes poses and unheard audio', async () => {
    const tab = await browser.newPage();
    try {
      await hostPage(widgetPage(), async () => {
        const sessionId = await startWidget(tab);
        expect((await (await fetch(`${t.baseUrl}/sessions/${sessionId}`)).json()).render).toBe('client');
        await tab.waitForFunction(
          () => {
            const stream = (document.querySelector('avatar-chat') as any).client?.poseStream;
            return stream?.figures.audioRoute === 'channel' && stream.audio?.figures.offset !== null;
          },
          null,
          { timeout: STEP_MS },
        );
        const setup = await widgetSetup(tab);
        expect(setup.hello).toMatchObject({ type: 'hello', model: 'rt', channelAudio: ['opus'] });
        expect(setup.receivers).toEqual(['audio']);
        // The track is muted on the page: only the player is heard.
        expect(setup.trackEnabled).toBe(false);
        expect(setup).toMatchObject({ context: 'running', rate: 48_000 });

        // A tap on what the page hears: the context frame where the tone starts.
        await tab.evaluate(async (source) => {
          const w = window as any;
          const client = (document.querySelector('avatar-chat') as any).client;
          const context: AudioContext = client.audioContext;
          const url = URL.createObjectURL(new Blob([source], { type: 'text/javascript' }));
          await context.audioWorklet.addModule(url);
          const tap = new AudioWorkletNode(context, 'onset-tap', { numberOfOutputs: 1, outputChannelCount: [1] });
          w.onsets = [];
          // With the D the player had then (D may move later: at the next silence, or for audio after an underrun).
          tap.port.onmessage = (event) =>
            w.onsets.push({ frame: event.data, offset: client.poseStream.audio.figures.offset });
          client.channelAudioOutput.connect(tap);
          tap.connect(context.destination);
          tap.port.postMessage('arm');
        }, ONSET_TAP);
        const onsetMs = await speakTone(sessionId);
        await tab.waitForFunction(() => (window as any).onsets.length > 0, null, { timeout: STEP_MS });
        await tab.waitForTimeout(1_500);
        expect(onsetMs()).toBeGreaterThanOrEqual(0);
        const seen = await tab.evaluate(() => {
          const w = window as any;
          const stream = (document.querySelector('avatar-chat') as any).client.poseStream;
          return {
            onset: w.onsets[0] as { frame: number; offset: number },
            player: stream.audio.figures,
            drawn: stream.figures.drawn,
          };
        });
        // The player plays rtp R at context frame R + D: the tone's onset rtp (the service's record) against the
        // frame the page heard it at.
        const onsetRtp = Math.round(onsetMs() * 48);
        const trueOffset = seen.onset.frame - onsetRtp;
        console.log(
          `channel audio: the tone heard ${((trueOffset - seen.onset.offset) / 48).toFixed(1)} ms from rtp + D (D ${seen.onset.offset}, then ${seen.player.offset}; margin ${seen.player.marginMs} ms, ${seen.player.late} late of ${seen.player.packets} packets, ${seen.player.lateOnsets} late onsets)`,
        );
        expect(Math.abs(trueOffset - seen.onset.offset)).toBeLessThanOrEqual(ONSET_REFERENCE_RTP);

        // Every pose drawn while the tone played: the latest at or before the rtp heard then (the player's output).
        const speaking = seen.drawn.filter((d: { speaking: boolean }) => d.speaking);
        expect(speaking.length).toBeGreaterThan(10);
        for (const drawn of speaking) {
          expect(drawn.route).toBe('channel');
          const behind = rtpDiff(drawn.heardRtp, drawn.poseRtp);
          expect(behind, `pose ${(behind / 48).toFixed(1)} ms before the heard rtp`).toBeGreaterThanOrEqual(0);
          expect(behind).toBeLessThanOrEqual(POSE_INTERVAL_RTP);
        }

        // Stop: the service flushes the poses and the audio not yet heard; the face drawn next is idle.
        const before = await tab.evaluate(
          () => (document.querySelector('avatar-chat') as any).client.poseStream.audio.figures.flushes,
        );
        // Once the first tone's turn is over (the widget says idle), a second one, stopped while it plays.
        await tab.waitForFunction(
          () =>
            (document.querySelector('avatar-chat') as any).shadowRoot.querySelector('.badge').textContent === 'idle',
          null,
          { timeout: STEP_MS },
        );
        await speakTone(sessionId);
        await tab.waitForFunction(
          () => (document.querySelector('avatar-chat') as any).client.poseStream.figures.drawn.at(-1)?.speaking,
          null,
          { timeout: STEP_MS },
        );
        await tab.getByRole('button', { name: 'Stop' }).click();
        await tab.waitForFunction(
          (flushes) => (document.querySelector('avatar-chat') as any).client.poseStream.audio.figures.flushes > flushes,
          before,
          { timeout: 10_000 },
        );
        await tab.waitForTimeout(500);
        const after = await tab.evaluate(
          () => (document.querySelector('avatar-chat') as any).client.poseStream.figures,
        );
        expect(after.drawn.at(-1).speaking).toBe(false);
      });
    } finally {
      await tab.close();
    }
  }, 120_000);

  it('the track fallback: a page that cannot play channel audio (no WebCodecs) never asks, hears the track, and draws the pose of the audio heard (±80 ms of the played RTP time); Stop flushes the poses', async () => {
    // This browser without WebCodecs' AudioDecoder: as an older browser, it keeps the track.
    const page = widgetPage('<script>delete window.AudioDecoder;</script>\n');
    const server = http.createServer((_req, res) => res.writeHead(200, { 'content-type': 'text/html' }).end(page));
    await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
    const tab = await browser.newPage();
    try {
      const sessionId = await startWidget(tab);
      const session = t.services.supervisor.liveSession(sessionId)!;
      expect((await (await fetch(`${t.baseUrl}/sessions/${sessionId}`)).json()).render).toBe('client');

      // The page's peer: no video track, the hello, poses and syncs on the avatar channel, a canvas in the widget.
      await tab.waitForFunction(
        () => {
          const stream = (document.querySelector('avatar-chat') as any).client?.poseStream;
          return stream && stream.figures.hello && stream.figures.poses > 20 && stream.figures.offset !== null;
        },
        null,
        { timeout: STEP_MS },
      );
      const setup = await widgetSetup(tab);
      expect(setup.hello).toMatchObject({ type: 'hello', kitUrl: '/avatars/demo-rt/render-kit?model=rt', model: 'rt' });
      expect(setup.receivers).toEqual(['audio']);
      expect(setup.canvas).toBe(true);
      expect(setup.route).toBe('track');
      expect(setup.trackEnabled).toBe(true);

      // Record what is played (RTP timestamp and level of the audio receiver) at every display frame.
      await tab.evaluate(() => {
        const w = window as any;
        const receiver: RTCRtpReceiver = (document.querySelector('avatar-chat') as any).client.peer.getReceivers()[0];
        w.played = [];
        const sample = () => {
          const source = receiver.getSynchronizationSources()[0];
          if (source) w.played.push({ rtp: source.rtpTimestamp, level: source.audioLevel ?? 0, at: performance.now() });
          if (w.played.length < 20_000) requestAnimationFrame(sample);
        };
        requestAnimationFrame(sample);
      });
      // The reference needs quiet samples before the tone: the sampler runs before it is spoken (a page starved under
      // CI load took its first display frame after the tone was heard).
      await tab.waitForFunction(() => (window as any).played.length >= 5, null, { timeout: STEP_MS });
      // The onset of the tone on the media clock, from the service's side: where the turn's first sample played.
      const playout = sessionParts(session).media.playout;
      let onsetMs = -1;
      playout.once('turnStarted', () => (onsetMs = playout.mediaMs));
      const pcm = tone(16_000, 2_500, 220, 14_000);
      const spoken = await postAudio(
        t.baseUrl,
        `/sessions/${sessionId}/speak_audio`,
        wavBytes(pcm, 16_000),
        {},
        'a.wav',
      );
      expect(spoken.status).toBe(200);
      await tab.waitForFunction(() => (window as any).played.some((p: any) => p.level > 0.05), null, {
        timeout: STEP_MS,
      });
      await tab.waitForTimeout(1_500);
      expect(onsetMs).toBeGreaterThanOrEqual(0);

      const seen = await tab.evaluate(() => {
        const w = window as any;
        const figures = (document.querySelector('avatar-chat') as any).client.poseStream.figures;
        return {
          played: w.played as Array<{ rtp: number; level: number; at: number }>,
          offset: figures.offset,
          jitterMs: figures.jitterMs,
          drawn: figures.drawn,
        };
      });
      // The true offset of the track's RTP clock: the first loud RTP time played against the onset on the media clock.
      // Silence before it went as DTX (a packet per 400 ms), so the first loud packet is the one holding the onset:
      // its RTP time is at most one 20 ms packet before the onset, plus up to a display frame of polling after it.
      const loud = seen.played.findIndex((p) => p.level > 0.05);
      expect(loud).toBeGreaterThan(0);
      const trueOffset = wrapRtp(seen.played[loud].rtp - Math.round(onsetMs * 48));
      const offsetError = rtpDiff(seen.offset, trueOffset);
      // That reference is only as exact as the polling: a display frame that came late (a starved page under CI
      // load) first saw the tone that much after its onset. The tolerance takes the lateness past a 60 Hz frame.
      const pollLateMs = Math.max(0, seen.played[loud].at - seen.played[loud - 1].at - DISPLAY_FRAME_MS);
      console.log(
        `pose stream: offset estimate off by ${(offsetError / 48).toFixed(1)} ms (jitter buffer ${seen.jitterMs?.toFixed(1)} ms, reference polled ${pollLateMs.toFixed(0)} ms late)`,
      );
      expect(Math.abs(offsetError)).toBeLessThanOrEqual(SYNC_TOLERANCE_RTP + Math.round(pollLateMs * 48));

      // Every pose drawn while the tone played: its time against the audio heard, with the true offset.
      const speaking = seen.drawn.filter((d: { speaking: boolean }) => d.speaking);
      expect(speaking.length).toBeGreaterThan(10);
      for (const drawn of speaking) {
        const heardTrue = wrapRtp(drawn.heardRtp + drawn.offset - trueOffset);
        // On failure, say which part is off: the pose against the heard time the page estimated (sample and hold: the
        // latest pose at or before it), or the estimate itself against the true offset.
        const againstEstimateMs = rtpDiff(drawn.poseRtp, drawn.heardRtp) / 48;
        const estimateOffMs = rtpDiff(drawn.offset, trueOffset) / 48;
        expect(
          Math.abs(rtpDiff(drawn.poseRtp, heardTrue)),
          `pose ${againstEstimateMs.toFixed(1)} ms from the estimated heard time; estimate off by ${estimateOffMs.toFixed(1)} ms`,
        ).toBeLessThanOrEqual(SYNC_TOLERANCE_RTP);
      }

      // Stop: the service flushes the poses, and the face drawn next is idle.
      const before = await tab.evaluate(() => (document.querySelector('avatar-chat') as any).client.poseStream.figures);
      await tab.getByRole('button', { name: 'Stop' }).click();
      await tab.waitForFunction(
        (flushes) => (document.querySelector('avatar-chat') as any).client.poseStream.figures.flushes > flushes,
        before.flushes,
        { timeout: 10_000 },
      );
      await tab.waitForTimeout(500);
      const after = await tab.evaluate(() => (document.querySelector('avatar-chat') as any).client.poseStream.figures);
      expect(after.drawn.at(-1).speaking).toBe(false);
    } finally {
      await tab.close();
      await new Promise((resolve) => server.close(resolve));
    }
  }, 120_000);

  /** After the user's click started the session: a spoken tone is heard from the page's channel audio player. */
  async function hearsChannelAudio(tab: Page, sessionId: string): Promise<void> {
    await tab.waitForFunction(() => (window as any).heardNodes.length > 0, null, { timeout: STEP_MS });
    const player = await tab.evaluateHandle(() => (window as any).heardNodes.at(-1) as AudioNode);
    await tab.evaluate(LISTEN, player);
    expect(await tab.evaluate(() => (window as any).heardNodes.at(-1).context.state)).toBe('running');
    await speakTone(sessionId);
    await tab.waitForFunction((loud) => (window as any).loudest > loud, LOUD, { timeout: STEP_MS });
  }

  it('autoplay: <avatar-chat render="client"> in a browser that plays sound only after a user gesture plays the channel audio after the click on Start', async () => {
    const tab = await plain.newPage();
    await tab.addInitScript(KEEP_HEARD_NODES);
    try {
      await hostPage(widgetPage(), async () => {
        const sessionId = await startWidget(tab);
        await hearsChannelAudio(tab, sessionId);
      });
    } finally {
      await tab.close();
    }
  }, 120_000);

  it('a page whose AudioContext was made outside a user gesture (suspended) stays on the track, and asks for channel audio once a click lets the context run', async () => {
    const page = `<!doctype html>\n<script type="module">
import { AvatarClient } from '${t.baseUrl}/client.js';
const client = new AvatarClient({ server: '${t.baseUrl}', render: 'client' });
window.client = client;
document.body.onclick = () => client.audioContext.resume();
await client.createSession({ avatar_id: 'demo-rt', model: 'rt' });
await client.connect();
await client.start();
// Reported without the test evaluating anything in the page (Playwright's evaluations count as user gestures).
setTimeout(() => console.log(JSON.stringify({ context: client.audioContext.state, route: client.poseStream.figures.audioRoute, poses: client.poseStream.figures.poses })), 2000);
</script><body style="height: 100vh">click</body>\n`;
    const tab = await plain.newPage();
    try {
      await hostPage(page, async () => {
        const report = tab.waitForEvent('console', { predicate: (m) => m.text().startsWith('{'), timeout: STEP_MS });
        await tab.goto(`http://127.0.0.1:${port}/`);
        const { poses, ...before } = JSON.parse((await report).text());
        expect(poses).toBeGreaterThan(20);
        expect(before).toEqual({ context: 'suspended', route: 'track' });
        await tab.locator('body').click();
        await tab.waitForFunction(() => (window as any).client.poseStream.figures.audioRoute === 'channel', null, {
          timeout: STEP_MS,
        });
        await tab.evaluate(() => (window as any).client.end());
      });
    } finally {
      await tab.close();
    }
  }, 60_000);

  it('the page at /: the switch "Draw the face in this browser" starts a client-rendered session drawn in a canvas whose channel audio plays after the click (default autoplay policy), and End removes it', async () => {
    const tab = await plain.newPage();
    await tab.addInitScript(KEEP_HEARD_NODES);
    try {
      await tab.goto(`${t.baseUrl}/`);
      await tab.getByRole('radio', { name: 'Demo (drawn, real-time)' }).check();
      await tab.getByLabel(/Draw the face in this browser/).check();
      const before = new Set(t.services.supervisor.liveIds());
      await tab.getByRole('button', { name: 'Start session' }).click();
      await tab.waitForFunction(() => document.getElementById('state')!.textContent === 'running', null, {
        timeout: STEP_MS,
      });
      const id = t.services.supervisor.liveIds().find((live) => !before.has(live))!;
      expect((await (await fetch(`${t.baseUrl}/sessions/${id}`)).json()).render).toBe('client');
      expect(await tab.locator('.stage canvas').count()).toBe(1);
      await hearsChannelAudio(tab, id);
      await tab.getByRole('button', { name: 'End session' }).click();
      await tab.waitForFunction(() => !document.querySelector('.stage canvas'), null, { timeout: STEP_MS });
    } finally {
      await tab.close();
    }
  }, 60_000);
});
