import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json, post, startTestApp, type TestApp } from './helpers/app.ts';
import { ReceivingPeer } from './helpers/peer.ts';
import { SseClient, type SseEvent } from './helpers/sse.ts';
import { AUDIBLE_RMS } from './helpers/conversation.ts';
import { parseVtt } from './helpers/vtt.ts';

const THREE_SENTENCES =
  'The first sentence is here. Then comes a second one, a little longer. And the third closes it.';

describe('SSE caption events of a session, and the recording captions.vtt made from them', () => {
  let t: TestApp;
  let sse: SseClient;
  let peer: ReceivingPeer;
  let sessionId: string;

  beforeAll(async () => {
    t = await startTestApp();
    const avatars = await json(await fetch(`${t.baseUrl}/avatars`));
    const avatar = avatars.find((a: { model_type: string }) => a.model_type === 'rt');
    sessionId = (await json(await post(t.baseUrl, '/sessions', { avatar_id: avatar.id, model: 'rt' }))).session_id;
    sse = await SseClient.open(`${t.baseUrl}/sessions/${sessionId}/events`);
    peer = await ReceivingPeer.connect(t.baseUrl, sessionId);
    expect((await post(t.baseUrl, `/sessions/${sessionId}/start`)).status).toBe(200);
    await peer.until(() => peer.audio.length >= 20, 15_000, 'idle media');
  });

  afterAll(async () => {
    peer?.close();
    sse?.close();
    await t?.close();
  });

  it('captions.vtt: unknown session → 404; a session that never recorded → 404, as the artifact', async () => {
    const unknown = await fetch(`${t.baseUrl}/sessions/00000000-0000-4000-8000-000000000000/rt-recording/captions.vtt`);
    expect(unknown.status).toBe(404);
    expect((await json(unknown)).detail).toBeTruthy();
    const idle = await fetch(`${t.baseUrl}/sessions/${sessionId}/rt-recording/captions.vtt`);
    expect(idle.status).toBe(404);
    expect((await fetch(`${t.baseUrl}/sessions/${sessionId}/rt-recording/artifact`)).status).toBe(404);
    expect((await fetch(`${t.baseUrl}/sessions/not-a-uuid/rt-recording/captions.vtt`)).status).toBe(400);
  });

  it('a spoken turn sends one caption per sentence, after its audio started, and the recording VTT holds the same cues', async () => {
    expect((await post(t.baseUrl, `/sessions/${sessionId}/rt-recording/start`)).status).toBe(200);
    const from = sse.events.length;
    const res = await post(t.baseUrl, `/sessions/${sessionId}/speak`, { text: THREE_SENTENCES });
    const turnId = res.headers.get('x-turn-id');
    await sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', 30_000, 'status idle', from);
    const turn = sse.events.slice(from);
    const captions = turn.filter((e) => e.type === 'caption').map((e) => e.data);
    expect(captions.map((c) => c.text)).toEqual([
      'The first sentence is here.',
      'Then comes a second one, a little longer.',
      'And the third closes it.',
    ]);
    for (const c of captions) expect(c.turn_id).toBe(turnId);
    // Each starts at its sentence's speech onset: after the synthesised sentence's opening near-silence (tens of ms),
    // so after the end of the sentence before it and well before its own end.
    expect(captions[0].start_ms).toBeGreaterThanOrEqual(0);
    expect(captions[0].start_ms).toBeLessThan(150);
    for (let i = 1; i < captions.length; i++) {
      expect(captions[i].start_ms).toBeGreaterThanOrEqual(captions[i - 1].end_ms);
      expect(captions[i].start_ms).toBeLessThan(captions[i - 1].end_ms + 150);
    }
    // Sent as the audio plays: never before the turn is speaking, the first after tts first_audio.
    const kinds = turn.map((e: SseEvent) =>
      e.type === 'tts' || e.type === 'status' ? `${e.type}:${e.data.stage}` : e.type,
    );
    expect(kinds.indexOf('caption')).toBeGreaterThan(kinds.indexOf('tts:first_audio'));

    const stopped = await json(await post(t.baseUrl, `/sessions/${sessionId}/rt-recording/stop`));
    expect(stopped.state).toBe('complete');
    const vtt = await fetch(`${t.baseUrl}/sessions/${sessionId}/rt-recording/captions.vtt`);
    expect(vtt.status).toBe(200);
    expect(vtt.headers.get('content-type')).toMatch(/^text\/vtt/);
    const cues = parseVtt(await vtt.text());
    expect(cues.map((c) => c.text)).toEqual(captions.map((c) => c.text));
    // Same durations and spacing as the events, on the file's timeline (within a ms of rounding).
    for (let i = 0; i < cues.length; i++) {
      expect(Math.abs(cues[i].toMs - cues[i].fromMs - (captions[i].end_ms - captions[i].start_ms))).toBeLessThanOrEqual(
        1,
      );
      expect(
        Math.abs(cues[i].fromMs - cues[0].fromMs - (captions[i].start_ms - captions[0].start_ms)),
      ).toBeLessThanOrEqual(1);
    }
    expect(cues[0].fromMs).toBeGreaterThan(0);
    expect(cues.at(-1)!.toMs).toBeLessThanOrEqual(stopped.duration_ms);
  }, 60_000);

  it('an interrupted turn sends no caption for sentences that never played', async () => {
    const from = sse.events.length;
    const sentAt = performance.now();
    await post(t.baseUrl, `/sessions/${sessionId}/speak`, { text: THREE_SENTENCES });
    await peer.until(() => peer.firstAudible(sentAt, AUDIBLE_RMS) !== undefined, 15_000, 'audible audio');
    await sse.waitFor((e) => e.type === 'caption', 5_000, 'first caption', from);
    expect(await json(await post(t.baseUrl, `/sessions/${sessionId}/interrupt`))).toEqual({ interrupted: true });
    await sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', 5_000, 'status idle', from);
    await new Promise((r) => setTimeout(r, 500));
    const captions = sse.events
      .slice(from)
      .filter((e) => e.type === 'caption')
      .map((e) => e.data.text);
    expect(captions[0]).toBe('The first sentence is here.');
    expect(captions).not.toContain('And the third closes it.');
  }, 60_000);
});
