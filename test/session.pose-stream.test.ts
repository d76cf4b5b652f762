import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { PoseChannelData, PoseChannelMessage } from '../client/face-canvas.ts';
import { MOUTH_LOOKAHEAD_MS } from '../actors/media/timeline.ts';
import { sessionParts } from '../src/sessions/session.ts';
import { MAX_POSE_BUFFERED_BYTES, PoseChannel } from '../src/sessions/pose-channel.ts';
import { json, post, startTestApp, type TestApp } from './helpers/app.ts';
import { eventually, postAudio, sleep, tone, wavBytes } from './helpers/conversation.ts';
import { ReceivingPeer } from './helpers/peer.ts';
import { PosePeer } from './helpers/pose-peer.ts';
import { SseClient } from './helpers/sse.ts';

/** The media section of `kind` in an SDP. */
function section(sdp: string, kind: string): string {
  return sdp.split(/\r?\n(?=m=)/).find((s) => s.startsWith(`m=${kind} `)) ?? '';
}

describe('a client-rendered session: audio and the pose stream, no video', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({ env: { SERVICE_ORPHAN_TIMEOUT_S: '1' } });
  });
  afterAll(async () => t?.close());

  async function clientSession(avatar = 'demo-rt', model = 'rt'): Promise<string> {
    const created = await json(await post(t.baseUrl, '/sessions', { avatar_id: avatar, model, render: 'client' }));
    expect((await post(t.baseUrl, `/sessions/${created.session_id}/start`)).status).toBe(200);
    return created.session_id;
  }

  it('sends hello, then poses stamped with their audio RTP time ahead of playout, flushes on interrupt, and never renders or sends video', async () => {
    const id = await clientSession();
    const session = t.services.supervisor.liveSession(id)!;
    const peer = new PosePeer();
    let sse: SseClient | null = null;
    try {
      await peer.connect(t.baseUrl, id);
      // The answer offers no video: the viewer's video section is inactive.
      expect(section(peer.answerSdp, 'video')).toMatch(/a=inactive/);
      expect(section(peer.answerSdp, 'application')).not.toBe('');
      expect(await eventually(() => peer.of('pose').length > 10, 15_000)).toBe(true);

      const hello = peer.messages[0];
      expect(hello).toMatchObject({
        type: 'hello',
        kitUrl: '/avatars/demo-rt/render-kit?model=rt',
        model: 'rt',
        rtpClockRate: 48_000,
      });
      const manifest = await json(await fetch(`${t.baseUrl}/avatars/demo-rt`));
      expect(hello).toMatchObject({ width: manifest.width, height: manifest.height, fps: manifest.fps });

      // Two seconds of tone after 200 ms of silence: the mouth opens under it.
      const pcm = new Int16Array(16_000 * 2.2);
      pcm.set(tone(16_000, 2_000, 220, 12_000), 3_200);
      sse = await SseClient.open(`${t.baseUrl}/sessions/${id}/events`);
      const spoken = await postAudio(t.baseUrl, `/sessions/${id}/speak_audio`, wavBytes(pcm, 16_000), {}, 'a.wav');
      expect(spoken.status).toBe(200);
      expect(
        await eventually(() => peer.of('pose').some((m) => m.pose.speaking && m.pose.mouth.open > 0.1), 10_000),
      ).toBe(true);
      expect(await eventually(() => peer.audio.some((a) => a.rms > 1000), 10_000), 'audio is heard').toBe(true);
      await sleep(500);
      const interruptedAt = performance.now();
      expect((await post(t.baseUrl, `/sessions/${id}/interrupt`)).status).toBe(200);
      expect(
        await eventually(() => peer.of('flush').some((m) => m.at >= interruptedAt && m.fromRtp === undefined), 5_000),
      ).toBe(true);
      await sleep(300);

      const poses = peer.of('pose');
      for (const { rtp, pose } of poses) {
        // Stamped with the time its mouth sounds: the frame's time plus the timeline's mouth lookahead.
        expect(rtp).toBe(Math.round((pose.ptsMs + MOUTH_LOOKAHEAD_MS) * 48) % 2 ** 32);
        expect(pose).not.toHaveProperty('audio');
        expect(pose).toMatchObject({
          frameIdx: expect.any(Number),
          mouth: expect.any(Object),
          level: expect.any(Number),
        });
      }
      // New audio voided the idle poses sent ahead under it: a flush from the first voided frame's time on.
      expect(peer.of('flush').some((m) => m.fromRtp !== undefined)).toBe(true);
      // After the interrupt's flush, poses are idle again.
      const afterFlush = poses.filter((m) => m.at > interruptedAt + 200);
      expect(afterFlush.length).toBeGreaterThan(0);
      expect(afterFlush.every((m) => !m.pose.speaking)).toBe(true);
      // Syncs name the audio leaving now, on the poses' clock.
      const syncs = peer.of('sync');
      expect(syncs.length).toBeGreaterThan(4);
      const parts = sessionParts(session);
      const lastSync = syncs.at(-1)!;
      expect(Math.abs(lastSync.rtp / 48 - parts.media.playout.mediaMs)).toBeLessThan(5_000);

      const figures = parts.media.poseFigures!;
      expect(figures.sentPoses).toBeGreaterThanOrEqual(poses.length);
      expect(figures.skippedPoses).toBe(0);
      const metrics = await json(await fetch(`${t.baseUrl}/sessions/${id}/metrics`));
      expect(metrics.media.poses_sent).toBeGreaterThanOrEqual(poses.length);
      expect(metrics.media).toMatchObject({ poses_late: expect.any(Number), poses_skipped: 0 });
      // Nothing rendered on the server and no video for this viewer.
      expect(parts.media.rendersOnServer).toBe(false);
      expect(parts.media.playout.sentFrames).toBe(0);
      expect(metrics.media.frames_sent).toBe(0);
      expect(section(peer.answerSdp, 'video')).not.toMatch(/a=send(only|recv)/);
      // The turn's frames still play (drawn in the browser): SSE `frame` events as for a server-rendered session.
      const frames = sse.of('frame');
      expect(frames.length).toBeGreaterThan(10);
      expect(frames.every((e) => typeof e.data.turn_id === 'string' && e.data.pts_ms >= 0)).toBe(true);
      for (let i = 1; i < frames.length; i++)
        expect(frames[i].data.frame_idx).toBeGreaterThan(frames[i - 1].data.frame_idx);
    } finally {
      sse?.close();
      peer.close();
    }
  }, 60_000);

  it('a viewer that never opens the data channel still hears the audio, and the session is reaped once it leaves', async () => {
    const id = await clientSession('astronaut', 'lipsync');
    const peer = await ReceivingPeer.connect(t.baseUrl, id);
    try {
      const pcm = tone(16_000, 1_500, 330, 12_000);
      expect(
        (await postAudio(t.baseUrl, `/sessions/${id}/speak_audio`, wavBytes(pcm, 16_000), {}, 'a.wav')).status,
      ).toBe(200);
      await peer.until(() => peer.audio.some((a) => a.rms > 1000), 10_000, 'audio at the receiver');
      expect(peer.frames.length).toBe(0);
    } finally {
      peer.close();
    }
    const isLive = () => t.services.supervisor.liveSession(id) !== undefined;
    expect(await eventually(() => !isLive(), 20_000, 100)).toBe(true);
    expect(await json(await fetch(`${t.baseUrl}/sessions/${id}`))).toMatchObject({
      state: 'terminated',
      terminated_reason: 'orphaned',
      render: 'client',
    });
  }, 40_000);
});

describe('the pose channel bounds what it queues and batches what one clock tick sends', () => {
  const request = (ptsMs: number) => ({
    frameIdx: ptsMs / 40,
    ptsMs,
    mouth: { open: 0, wide: 0, round: 0 },
    level: 0,
    speaking: false,
  });
  /** The end of a clock tick: its batch has been sent. */
  const endOfTick = () => new Promise<void>((resolve) => setImmediate(resolve));
  /** The messages in the channel's texts, each text one message or a JSON array of them. */
  const messagesOf = (texts: string[]): PoseChannelMessage[] =>
    texts.flatMap((text) => {
      const data = JSON.parse(text) as PoseChannelData;
      return Array.isArray(data) ? data : [data];
    });

  it('skips poses while the channel holds MAX_POSE_BUFFERED_BYTES, and counts poses sent after their audio left as late', async () => {
    const sent: string[] = [];
    // SCTP keeps what a browser that stopped reading did not take: the channel's buffered amount grows with each send.
    let stalled = false;
    let buffered = 0;
    const channel = {
      label: 'avatar',
      readyState: 'open',
      get bufferedAmount() {
        return buffered;
      },
      send: (data: string) => {
        sent.push(data);
        if (stalled) buffered += data.length;
      },
      close: () => undefined,
      addEventListener: () => undefined,
    };
    const mediaMs = 1_000;
    const poses = new PoseChannel({ kitUrl: '/k', model: 'rt', fps: 25, width: 512, height: 512 }, () => mediaMs);
    poses.attach(channel);
    await endOfTick();
    expect(JSON.parse(sent[0]).type).toBe('hello');
    poses.pose(request(1_040));
    await endOfTick();
    poses.pose(request(960));
    await endOfTick();
    expect(poses.counts).toMatchObject({ sentPoses: 2, latePoses: 1, skippedPoses: 0 });
    stalled = true;
    for (let i = 0; i < 200; i++) {
      poses.pose(request(1_080 + i * 40));
      await endOfTick();
    }
    expect(poses.counts.skippedPoses).toBeGreaterThan(0);
    expect(poses.counts.sentPoses + poses.counts.skippedPoses).toBe(202);
    // Nothing went once the bound was passed: at most one pose over it.
    expect(buffered).toBeLessThanOrEqual(MAX_POSE_BUFFERED_BYTES + sent[1].length + 16);
    // A flush still goes: without it the browser would show void poses.
    poses.flush(null);
    await endOfTick();
    expect(JSON.parse(sent.at(-1)!)).toEqual({ type: 'flush' });
  });

  it("sends one message per clock tick (its audio's sync first, then its poses), follows the channel's state by its events and reads its buffered amount rarely (each a call into libwebrtc)", async () => {
    const listeners = new Map<string, () => void>();
    let state = 'connecting';
    const reads = { readyState: 0, bufferedAmount: 0 };
    const sent: string[] = [];
    const channel = {
      label: 'avatar',
      get readyState() {
        reads.readyState++;
        return state;
      },
      get bufferedAmount() {
        reads.bufferedAmount++;
        return 0;
      },
      send: (data: string) => sent.push(data),
      close: () => undefined,
      addEventListener: (type: string, listener: (event: never) => void) => listeners.set(type, listener as () => void),
    };
    const poses = new PoseChannel({ kitUrl: '/k', model: 'rt', fps: 25, width: 512, height: 512 }, () => 0);
    poses.attach(channel);
    poses.pose(request(40));
    await endOfTick();
    expect(sent).toEqual([]);
    state = 'open';
    listeners.get('open')!();
    await endOfTick();
    expect(JSON.parse(sent[0]).type).toBe('hello');
    // A second of speech as the clock produces it: 100 ticks with a 10 ms audio chunk each, two poses every 80 ms.
    for (let chunk = 0; chunk < 100; chunk++) {
      poses.audioLeft(chunk * 10);
      if (chunk % 8 === 0) {
        poses.pose(request(chunk * 10 + 160));
        poses.pose(request(chunk * 10 + 200));
      }
      await endOfTick();
    }
    expect(poses.counts.sentPoses).toBe(26);
    const batches = sent.slice(1).map((text) => messagesOf([text]));
    // 13 ticks with poses, each one message led by the sync of its audio; a sync alone where 100 ms passed without one.
    const withPoses = batches.filter((batch) => batch.some((m) => m.type === 'pose'));
    expect(withPoses).toHaveLength(13);
    for (const batch of withPoses) expect(batch.map((m) => m.type)).toEqual(['sync', 'pose', 'pose']);
    const alone = batches.filter((batch) => batch.every((m) => m.type === 'sync'));
    expect(alone).toHaveLength(0);
    expect(batches).toHaveLength(13);
    const syncs = messagesOf(sent).filter((m) => m.type === 'sync');
    expect(syncs.map((m) => m.rtp)).toEqual(Array.from({ length: 13 }, (_, i) => i * 80 * 48));
    expect(reads.readyState).toBeLessThanOrEqual(1);
    expect(reads.bufferedAmount).toBeLessThanOrEqual(2);

    // Without poses (none asked for), syncs go alone, every SYNC_INTERVAL_MS.
    sent.length = 0;
    for (let chunk = 100; chunk < 130; chunk++) {
      poses.audioLeft(chunk * 10);
      await endOfTick();
    }
    expect(messagesOf(sent).map((m) => m.type)).toEqual(['sync', 'sync', 'sync']);

    state = 'closed';
    listeners.get('close')!();
    poses.pose(request(4_000));
    await endOfTick();
    expect(poses.counts.sentPoses).toBe(26);
  });
});
