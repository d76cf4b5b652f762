import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json, post, startTestApp, type TestApp } from './helpers/app.ts';
import { ReceivingPeer, lumaDiff } from './helpers/peer.ts';
import { SseClient } from './helpers/sse.ts';
import { AUDIBLE_RMS, expectCausalOrder } from './helpers/conversation.ts';

describe('speak → WebRTC audio and video, interrupt → silence', () => {
  let t: TestApp;
  let peer: ReceivingPeer;
  let sse: SseClient;
  let sessionId: string;
  let avatar: { id: string; width: number; height: number };

  beforeAll(async () => {
    t = await startTestApp();
    const avatars = await json(await fetch(`${t.baseUrl}/avatars`));
    avatar = avatars.find((a: { model_type: string }) => a.model_type === 'rt');
    expect(avatar).toBeDefined();
    sessionId = (await json(await post(t.baseUrl, '/sessions', { avatar_id: avatar.id, model: 'rt' }))).session_id;
    sse = await SseClient.open(`${t.baseUrl}/sessions/${sessionId}/events`);
    peer = await ReceivingPeer.connect(t.baseUrl, sessionId);
    expect((await post(t.baseUrl, `/sessions/${sessionId}/start`)).status).toBe(200);
    await peer.until(() => peer.frames.length >= 10 && peer.audio.length >= 20, 15_000, 'idle media');
  });

  afterAll(async () => {
    peer?.close();
    sse?.close();
    await t?.close();
  });

  it('delivers idle video at the avatar size and silent audio before any speech', () => {
    const last = peer.frames.at(-1)!;
    expect(last.width).toBe(avatar.width);
    expect(last.height).toBe(avatar.height);
    const recent = peer.audio.slice(-20);
    expect(Math.max(...recent.map((a) => a.rms))).toBeLessThan(AUDIBLE_RMS);
  });

  it('speaks: audio turns audible, the mouth moves, SSE events follow the spec order', async () => {
    const from = sse.events.length;
    const before = peer.frames.length;
    const sentAt = performance.now();
    const res = await post(t.baseUrl, `/sessions/${sessionId}/speak`, {
      text: 'Hello there. I am a talking avatar, and my mouth is moving.',
    });
    expect(res.status).toBe(200);
    expect(await res.text()).toBe('');
    const overlap = await post(t.baseUrl, `/sessions/${sessionId}/speak`, { text: 'overlap' });
    expect(overlap.status).toBe(409);

    await peer.until(() => peer.firstAudible(sentAt, AUDIBLE_RMS) !== undefined, 15_000, 'audible audio');
    await sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', 30_000, 'status idle', from);

    const turn = sse.events.slice(from);
    const kinds = turn.map((e) => (e.type === 'tts' || e.type === 'status' ? `${e.type}:${e.data.stage}` : e.type));
    expectCausalOrder(kinds, ['tts:start', 'tts:first_audio', 'frame']);
    const firstAudio = turn.find((e) => e.type === 'tts' && e.data.stage === 'first_audio')!;
    expect(Number.isInteger(firstAudio.data.ms_elapsed)).toBe(true);
    const frames = turn.filter((e) => e.type === 'frame');
    expect(frames.length).toBeGreaterThan(20);
    for (let i = 1; i < frames.length; i++) {
      expect(frames[i].data.frame_idx).toBeGreaterThan(frames[i - 1].data.frame_idx);
      expect(frames[i].data.pts_ms).toBeGreaterThanOrEqual(frames[i - 1].data.pts_ms);
    }
    expect(frames[0].data.pts_ms).toBeLessThan(100);

    // The mouth region changes between speech frames far more than between idle frames.
    const speaking = peer.frames.slice(before);
    const box = {
      x: Math.round(avatar.width * 0.35),
      y: Math.round(avatar.height * 0.6),
      w: Math.round(avatar.width * 0.3),
      h: Math.round(avatar.height * 0.2),
    };
    let maxDiff = 0;
    for (let i = 1; i < speaking.length; i++) maxDiff = Math.max(maxDiff, lumaDiff(speaking[0], speaking[i], box));
    expect(maxDiff).toBeGreaterThan(5);
  });

  it('interrupt: {interrupted: true}, silence at the receiver soon after, status interrupted then idle', async () => {
    const from = sse.events.length;
    const sentAt = performance.now();
    await post(t.baseUrl, `/sessions/${sessionId}/speak`, {
      text: 'This is a long sentence that keeps going so that there is plenty of speech to interrupt. It continues with a second sentence. And a third one follows it.',
    });
    await peer.until(() => peer.firstAudible(sentAt, AUDIBLE_RMS) !== undefined, 15_000, 'audible audio');
    await new Promise((r) => setTimeout(r, 300));
    const interruptAt = performance.now();
    const res = await post(t.baseUrl, `/sessions/${sessionId}/interrupt`);
    expect(await json(res)).toEqual({ interrupted: true });
    await sse.waitFor((e) => e.type === 'status' && e.data.stage === 'interrupted', 2_000, 'status interrupted', from);
    await sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', 2_000, 'status idle', from);
    // Receiver jitter buffers add delay; require sustained silence to begin within a bounded time.
    await peer.until(
      () => {
        const after = peer.audio.filter((a) => a.at > interruptAt);
        for (let i = 0; i + 10 <= after.length; i++)
          if (after.slice(i, i + 10).every((a) => a.rms < AUDIBLE_RMS)) return true;
        return false;
      },
      3_000,
      'silence after interrupt',
    );
    const statusAfter = sse.events
      .slice(from)
      .filter((e) => e.type === 'status')
      .map((e) => e.data.stage);
    expect(statusAfter.indexOf('interrupted')).toBeLessThan(statusAfter.lastIndexOf('idle'));
    // The session is usable again right away.
    expect((await post(t.baseUrl, `/sessions/${sessionId}/speak`, { text: 'Back again.' })).status).toBe(200);
    await sse.waitFor(
      (e) => e.type === 'status' && e.data.stage === 'idle',
      20_000,
      'idle after third turn',
      sse.events.length - 1,
    );
  });

  it('ends the event stream with session.terminated on delete', async () => {
    await fetch(`${t.baseUrl}/sessions/${sessionId}`, { method: 'DELETE' });
    await sse.waitFor((e) => e.type === 'session.terminated', 3_000, 'session.terminated');
    await peer.until(() => sse.closed, 3_000, 'stream close');
    expect(sse.events.at(-1)!.type).toBe('session.terminated');
    expect(sse.contentType).toMatch(/^text\/event-stream/);
  });
});
