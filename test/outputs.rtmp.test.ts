/**
 * RTMP output into a real Debian nginx with libnginx-mod-rtmp: ffmpeg pulling the stream back sees H.264 at the
 * avatar size and AAC with the avatar's speech in it; the server killed mid-stream gives SSE `error` output_failed and
 * state `retrying` while the session goes on speaking to its WebRTC viewer; bad requests are 4xx `{detail}` and no URL leaks its key.
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FFMPEG_PATH } from '../src/recording/encoder.ts';
import { MAX_OUTPUTS_PER_SESSION } from '../src/streaming/outputs.ts';
import { RTMP_LIVE_TIMEOUT_MS } from '../src/streaming/rtmp-push.ts';
import { json, post, startTestApp, type TestApp } from './helpers/app.ts';
import { NginxRtmp } from './helpers/nginx-rtmp.ts';
import { SseClient } from './helpers/sse.ts';
import { ReceivingPeer } from './helpers/peer.ts';

/** ffmpeg start, RTMP handshake and the first frames on 2 shared cores. */
const LIVE_WAIT_MS = 30_000;
/** Seconds of the stream pulled back. */
const PULL_SECONDS = 3;
/** RMS of 16-bit speech over 100 ms windows; silence is 0 and AAC's noise floor far below. */
const SPEECH_RMS = 300;
const LONG_TEXT =
  'Hello, I am the avatar and I am streaming to a media server right now. My voice travels through ffmpeg and nginx. ' +
  'Every word you hear was spoken on the same clock as the picture. This sentence keeps me talking a little longer.';

interface Pulled {
  log: string;
  pcm: Int16Array;
}

/**
 * ffmpeg pulling the live stream: its log (the input's streams) and `PULL_SECONDS` of its audio as 16 kHz mono PCM,
 * counted in samples as they arrive. Not `-t`: that counts from the stream's earliest timestamp, and nginx starts a
 * new subscriber at the last keyframe, up to a GOP (2 s) of video before the audio it sends; on a host at half speed
 * the publisher's audio lagged its video further, and `-t 3` gave 20 ms of audio.
 */
function pull(url: string): Promise<Pulled> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      FFMPEG_PATH,
      ['-hide_banner', '-nostdin', '-i', url, '-map', '0:a:0', '-f', 's16le', '-ac', '1', '-ar', '16000', 'pipe:1'],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    const chunks: Buffer[] = [];
    let bytes = 0;
    let log = '';
    child.stdout.on('data', (chunk: Buffer) => {
      chunks.push(chunk);
      bytes += chunk.length;
      if (bytes >= PULL_SECONDS * 16_000 * 2) child.kill('SIGKILL');
    });
    child.stderr.setEncoding('utf8').on('data', (text: string) => (log += text));
    const timer = setTimeout(() => child.kill('SIGKILL'), LIVE_WAIT_MS);
    child.once('error', reject);
    child.once('close', () => {
      clearTimeout(timer);
      const bytes = Buffer.concat(chunks);
      resolve({ log, pcm: new Int16Array(bytes.buffer, bytes.byteOffset, Math.floor(bytes.length / 2)) });
    });
  });
}

function loudestWindowRms(pcm: Int16Array, window = 1600): number {
  let loudest = 0;
  for (let start = 0; start + window <= pcm.length; start += window) {
    let sum = 0;
    for (let i = start; i < start + window; i++) sum += pcm[i] * pcm[i];
    loudest = Math.max(loudest, Math.sqrt(sum / window));
  }
  return loudest;
}

async function until(predicate: () => Promise<boolean>, what: string, timeoutMs = LIVE_WAIT_MS): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!(await predicate())) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

describe('RTMP output to nginx-rtmp', () => {
  let t: TestApp;
  let nginx: NginxRtmp;
  let sessionId: string;
  let sse: SseClient;
  let avatar: { width: number; height: number };
  let viewer: ReceivingPeer;

  const outputs = async (id = sessionId) =>
    (await json(await fetch(`${t.baseUrl}/sessions/${id}/outputs`))).outputs as Array<Record<string, string>>;

  beforeAll(async () => {
    nginx = await NginxRtmp.start();
    t = await startTestApp();
    avatar = (await json(await fetch(`${t.baseUrl}/avatars`))).find((a: { id: string }) => a.id === 'demo-rt');
    sessionId = (await json(await post(t.baseUrl, '/sessions', { avatar_id: 'demo-rt', model: 'rt' }))).session_id;
    sse = await SseClient.open(`${t.baseUrl}/sessions/${sessionId}/events`);
    viewer = await ReceivingPeer.connect(t.baseUrl, sessionId);
    expect((await post(t.baseUrl, `/sessions/${sessionId}/start`)).status).toBe(200);
  });

  afterAll(async () => {
    sse?.close();
    viewer?.close();
    await t?.close();
    await nginx?.kill();
  });

  it('nginx receives H.264 at the avatar size and AAC with the speech; killing nginx gives output_failed, retrying, and the session still speaks', async () => {
    const created = await post(t.baseUrl, `/sessions/${sessionId}/outputs`, {
      type: 'rtmp',
      url: nginx.url('secret-stream-key'),
    });
    expect(created.status).toBe(201);
    const output = await json(created);
    expect(output).toMatchObject({ type: 'rtmp', state: 'connecting' });
    await until(
      async () => (await outputs()).some((o) => o.output_id === output.output_id && o.state === 'live'),
      'the output to go live',
    );
    const listed = JSON.stringify(await outputs());
    expect(listed).not.toContain('secret-stream-key');
    expect((await outputs())[0].url).toBe(`rtmp://127.0.0.1:${nginx.port}/live`);

    expect((await post(t.baseUrl, `/sessions/${sessionId}/speak`, { text: LONG_TEXT })).status).toBe(200);
    await sse.waitFor((e) => e.type === 'tts' && e.data.stage === 'first_audio', LIVE_WAIT_MS, 'first audio');
    const pulled = await pull(nginx.url('secret-stream-key'));
    expect(pulled.log).toMatch(new RegExp(`Video: h264.*${avatar.width}x${avatar.height}`));
    expect(pulled.log).toMatch(/Audio: aac/);
    expect(pulled.pcm.length).toBeGreaterThan(16_000);
    expect(loudestWindowRms(pulled.pcm)).toBeGreaterThan(SPEECH_RMS);
    // The long text only had to outlast the pull: the rest of it is cut rather than waited for.
    const cutFrom = sse.events.length;
    expect((await post(t.baseUrl, `/sessions/${sessionId}/interrupt`)).status).toBe(200);
    await sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', LIVE_WAIT_MS, 'the turn to end', cutFrom);

    const from = sse.events.length;
    await nginx.kill();
    const failed = await sse.waitFor(
      (e) => e.type === 'error' && e.data.code === 'output_failed',
      LIVE_WAIT_MS,
      'output_failed',
      from,
    );
    expect(failed.data.output_id).toBe(output.output_id);
    expect(failed.data.turn_id).toBeUndefined();
    expect(String(failed.data.message)).not.toContain('secret-stream-key');
    await until(async () => (await outputs())[0].state === 'retrying', 'state retrying');

    const spokeAt = performance.now();
    const spoke = await post(t.baseUrl, `/sessions/${sessionId}/speak`, {
      text: 'I am still here, and my viewer still hears me.',
    });
    expect(spoke.status).toBe(200);
    await sse.waitFor(
      (e) => e.type === 'tts' && e.data.stage === 'first_audio',
      LIVE_WAIT_MS,
      'first audio after the failure',
      from,
    );
    await viewer.until(
      () => viewer.firstAudible(spokeAt, SPEECH_RMS) !== undefined,
      LIVE_WAIT_MS,
      'speech at the WebRTC viewer after the failure',
    );
    await sse.waitFor(
      (e) => e.type === 'status' && e.data.stage === 'idle',
      LIVE_WAIT_MS,
      'idle after the failure',
      from,
    );
    // The output's failure is no turn's error: no `status error` came with it.
    expect(sse.events.slice(from).some((e) => e.type === 'status' && e.data.stage === 'error')).toBe(false);

    expect(
      (await fetch(`${t.baseUrl}/sessions/${sessionId}/outputs/${output.output_id}`, { method: 'DELETE' })).status,
    ).toBe(204);
    expect(await outputs()).toEqual([]);
  });

  it('a server that accepts the connection and never handshakes: the output never becomes live, it fails and retries', async () => {
    const received: number[] = [];
    const silent = net.createServer((socket) => {
      received.push(0);
      const index = received.length - 1;
      socket.on('data', (chunk: Buffer) => (received[index] += chunk.length));
      socket.on('error', () => undefined);
    });
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const port = (silent.address() as net.AddressInfo).port;
    try {
      const from = sse.events.length;
      const created = await post(t.baseUrl, `/sessions/${sessionId}/outputs`, {
        type: 'rtmp',
        url: `rtmp://127.0.0.1:${port}/live/never`,
      });
      expect(created.status).toBe(201);
      const { output_id: outputId } = await json(created);
      const states = new Set<string>();
      const failedAt = sse.waitFor(
        (e) => e.type === 'error' && e.data.code === 'output_failed' && e.data.output_id === outputId,
        LIVE_WAIT_MS + RTMP_LIVE_TIMEOUT_MS,
        'output_failed',
        from,
      );
      let failed = false;
      void failedAt.then(
        () => (failed = true),
        () => undefined,
      );
      // Every state it shows until it failed, polled often enough to see a live of even a fraction of a second.
      while (!failed && !states.has('live')) {
        const state = (await outputs()).find((o) => o.output_id === outputId)?.state;
        if (state) states.add(state);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      await failedAt;
      await until(
        async () => (await outputs()).find((o) => o.output_id === outputId)?.state === 'retrying',
        'state retrying',
      );
      expect([...states]).not.toContain('live');
      // ffmpeg did connect and sent its half of the handshake (C0 + C1: 1 + 1536 bytes), which was never answered.
      expect(received[0]).toBeGreaterThanOrEqual(1537);
      expect((await fetch(`${t.baseUrl}/sessions/${sessionId}/outputs/${outputId}`, { method: 'DELETE' })).status).toBe(
        204,
      );
    } finally {
      silent.close();
    }
  });

  it('bad requests: wrong scheme, credentials, no stream key 400; unknown output 404; not started 409; past the bound 409', async () => {
    const bad = [
      { type: 'rtmp', url: 'http://127.0.0.1/live/key' },
      { type: 'whip', url: 'rtmp://127.0.0.1/live/key' },
      { type: 'rtmp', url: 'rtmp://user:hunter2@127.0.0.1/live/key' },
      { type: 'rtmp', url: 'rtmp://127.0.0.1/live' },
      { type: 'rtmp', url: 'not a url' },
      { type: 'srt', url: 'srt://127.0.0.1:9000' },
    ];
    for (const body of bad) {
      const res = await post(t.baseUrl, `/sessions/${sessionId}/outputs`, body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      const detail = (await json(res)).detail as string;
      expect(detail).not.toContain('hunter2');
    }
    expect(
      (await fetch(`${t.baseUrl}/sessions/${sessionId}/outputs/${randomUUID()}`, { method: 'DELETE' })).status,
    ).toBe(404);
    expect((await fetch(`${t.baseUrl}/sessions/${randomUUID()}/outputs`)).status).toBe(404);

    const created = (await json(await post(t.baseUrl, '/sessions', { avatar_id: 'demo-rt', model: 'rt' }))).session_id;
    expect((await post(t.baseUrl, `/sessions/${created}/outputs`, { type: 'rtmp', url: nginx.url('x') })).status).toBe(
      409,
    );
    expect((await post(t.baseUrl, `/sessions/${created}/start`)).status).toBe(200);
    // Nothing listens on port 9 (discard): each output retries; the bound still counts them.
    for (let i = 0; i < MAX_OUTPUTS_PER_SESSION; i++) {
      expect(
        (await post(t.baseUrl, `/sessions/${created}/outputs`, { type: 'rtmp', url: `rtmp://127.0.0.1:9/live/k${i}` }))
          .status,
      ).toBe(201);
    }
    const full = await post(t.baseUrl, `/sessions/${created}/outputs`, {
      type: 'rtmp',
      url: 'rtmp://127.0.0.1:9/live/more',
    });
    expect(full.status).toBe(409);
    expect((await json(full)).detail).toMatch(/outputs/);
    expect((await fetch(`${t.baseUrl}/sessions/${created}`, { method: 'DELETE' })).status).toBeLessThan(300);
  });
});
