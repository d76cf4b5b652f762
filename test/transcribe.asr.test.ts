import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json, post, startTestApp, type TestApp } from './helpers/app.ts';
import {
  AUDIBLE_RMS,
  expectCausalOrder,
  labels,
  openSession,
  pcmBytes,
  postAudio,
  tone,
  wavBytes,
  type LiveSession,
} from './helpers/conversation.ts';
import { startOpenAiUpstream, type OpenAiUpstream } from './fakes/openai-upstream.ts';

/** Transcription + LLM + synthesis + real-time playout of a short reply. */
const TURN_MS = 20_000;
const INTERRUPT_SETTLE_MS = 1_500;

describe('POST /sessions/{id}/transcribe through an OpenAI-compatible recognizer', () => {
  let upstream: OpenAiUpstream;
  let t: TestApp;
  let s: LiveSession;
  const transcribe = (audio: Buffer, fields: Record<string, string> = {}) =>
    postAudio(t.baseUrl, `/sessions/${s.sessionId}/transcribe`, audio, fields);
  const idleAfter = (from: number, timeout = TURN_MS) =>
    s.sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', timeout, 'status idle', from);

  beforeAll(async () => {
    upstream = await startOpenAiUpstream({
      transcription: { transcript: '  What is the weather like?  ' },
      chat: { replyTokens: ['It', ' is', ' sunny', ' today', '.'] },
    });
    t = await startTestApp({ env: { SERVICE_LLM_BASE_URL: upstream.baseUrl, SERVICE_ASR_BASE_URL: upstream.baseUrl } });
    s = await openSession(t);
  });

  afterAll(async () => {
    s?.close();
    await t?.close();
    await upstream?.close();
  });

  it('raw PCM16 at 16 kHz → {transcript}; SSE listening then a final transcript; the upstream got the same samples as a 16 kHz WAV', async () => {
    const pcm = tone(16_000, 800, 300);
    const from = s.sse.events.length;
    const before = upstream.requests.length;
    const res = await transcribe(pcmBytes(pcm));
    expect(res.status).toBe(200);
    expect(await json(res)).toEqual({ transcript: 'What is the weather like?', turn_id: expect.any(String) });
    await idleAfter(from, 5_000);

    const kinds = labels(s.sse.events.slice(from));
    expect(kinds).toEqual(['status:listening', 'transcript', 'status:idle']);
    expect(s.sse.events.slice(from).find((e) => e.type === 'transcript')!.data).toEqual({
      text: 'What is the weather like?',
      is_final: true,
      turn_id: expect.any(String),
    });

    const sent = upstream.requests.slice(before).find((r) => r.transcription)!.transcription!;
    expect(sent.wav).toEqual({ sampleRate: 16_000, channels: 1, bitDepth: '16', samples: pcm.length });
    expect(Array.from(sent.samples!)).toEqual(Array.from(pcm));
    expect(sent.fields.model).toBeTruthy();
    // No chat without trigger_chat.
    expect(upstream.requests.slice(before).some((r) => r.chat)).toBe(false);
  });

  it('long audio is cut at pauses by the VAD into pieces of at most 30 s, with partial transcripts', async () => {
    // 3 × 20 s of speech-like sound separated by 1.5 s pauses: 63 s in all.
    const rate = 16_000;
    const parts: Int16Array[] = [];
    for (let block = 0; block < 3; block++) {
      parts.push(speechLike(rate, 20_000, block));
      parts.push(new Int16Array((rate * 1500) / 1000));
    }
    const pcm = new Int16Array(parts.reduce((n, p) => n + p.length, 0));
    let offset = 0;
    for (const part of parts) {
      pcm.set(part, offset);
      offset += part.length;
    }
    const before = upstream.requests.length;
    const from = s.sse.events.length;
    const res = await transcribe(pcmBytes(pcm));
    expect(res.status).toBe(200);
    const { transcript } = await json(res);
    await idleAfter(from, 10_000);
    const pieces = upstream.requests
      .slice(before)
      .filter((r) => r.transcription)
      .map((r) => r.transcription!.wav!.samples / rate);
    expect(pieces.length).toBeGreaterThanOrEqual(3);
    for (const seconds of pieces) expect(seconds).toBeLessThanOrEqual(30);
    // Silence between pieces is dropped, speech is kept.
    const total = pieces.reduce((a, b) => a + b, 0);
    expect(total).toBeGreaterThan(55);
    expect(total).toBeLessThan(63);
    expect(transcript).toBe(Array(pieces.length).fill('What is the weather like?').join(' '));
    const transcripts = s.sse.events.slice(from).filter((e) => e.type === 'transcript');
    expect(transcripts.filter((e) => !e.data.is_final)).toHaveLength(pieces.length);
    expect(transcripts.at(-1)!.data).toEqual({ text: transcript, is_final: true, turn_id: expect.any(String) });
  });

  it('a 48 kHz WAV upload reaches the recognizer resampled to 16 kHz', async () => {
    const before = upstream.requests.length;
    const from = s.sse.events.length;
    const res = await transcribe(wavBytes(tone(48_000, 600, 300), 48_000));
    expect(res.status).toBe(200);
    await idleAfter(from, 5_000);
    const sent = upstream.requests.slice(before).find((r) => r.transcription)!.transcription!;
    expect(sent.wav!.sampleRate).toBe(16_000);
    expect(Math.abs(sent.wav!.samples - 9_600)).toBeLessThanOrEqual(2);
  });

  it('trigger_chat=true continues into the language model: transcript → thinking → llm → tts → frames → idle, audible', async () => {
    const from = s.sse.events.length;
    const before = upstream.requests.length;
    const sentAt = performance.now();
    const res = await transcribe(pcmBytes(tone(16_000, 500)), { trigger_chat: 'true' });
    expect(res.status).toBe(200);
    expect(await json(res)).toEqual({ transcript: 'What is the weather like?', turn_id: expect.any(String) });
    await s.peer.until(() => s.peer.firstAudible(sentAt, AUDIBLE_RMS) !== undefined, TURN_MS, 'audible reply');
    await idleAfter(from);

    const turn = s.sse.events.slice(from);
    const kinds = labels(turn);
    expect(kinds.indexOf('status:listening')).toBe(0);
    expectCausalOrder(kinds, ['transcript', 'status:thinking', 'llm', 'tts:start', 'tts:first_audio', 'frame']);
    // Exactly one idle: the transcription did not end the turn before the chat.
    expect(kinds.filter((k) => k === 'status:idle')).toHaveLength(1);
    expect(
      turn
        .filter((e) => e.type === 'llm')
        .map((e) => e.data.delta)
        .join(''),
    ).toBe('It is sunny today.');

    const chat = upstream.requests.slice(before).find((r) => r.chat)!.chat!;
    expect(chat.messages.at(-1)).toEqual({ role: 'user', content: 'What is the weather like?' });
  });

  it('an empty transcript with trigger_chat does not call the language model', async () => {
    upstream.setScenario({ transcription: { transcript: '   ' } });
    const from = s.sse.events.length;
    const before = upstream.requests.length;
    const res = await transcribe(pcmBytes(tone(16_000, 300)), { trigger_chat: 'true' });
    expect(await json(res)).toEqual({ transcript: '', turn_id: expect.any(String) });
    await idleAfter(from, 5_000);
    expect(upstream.requests.slice(before).some((r) => r.chat)).toBe(false);
    upstream.setScenario({ transcription: { transcript: 'What is the weather like?' } });
  });

  it('409 while busy and when interrupted; interrupt gives SSE interrupted then idle', async () => {
    upstream.setScenario({ transcription: { delayMs: 3_000 } });
    const from = s.sse.events.length;
    const pending = transcribe(pcmBytes(tone(16_000, 300)));
    await s.sse.waitFor((e) => e.type === 'status' && e.data.stage === 'listening', 5_000, 'listening', from);
    const overlap = await transcribe(pcmBytes(tone(16_000, 300)));
    expect(overlap.status).toBe(409);
    expect((await post(t.baseUrl, `/sessions/${s.sessionId}/speak`, { text: 'no' })).status).toBe(409);
    expect(await json(await post(t.baseUrl, `/sessions/${s.sessionId}/interrupt`))).toEqual({ interrupted: true });
    const res = await pending;
    expect(res.status).toBe(409);
    expect((await json(res)).detail).toMatch(/interrupted/);
    await idleAfter(from, INTERRUPT_SETTLE_MS);
    const kinds = labels(s.sse.events.slice(from));
    expect(kinds.indexOf('status:interrupted')).toBeLessThan(kinds.lastIndexOf('status:idle'));
    expect(kinds).not.toContain('transcript');
    upstream.setScenario({ transcription: { delayMs: 0 } });
  });

  it('401 from the recognizer → 502 with the upstream text; SSE error then idle', async () => {
    upstream.setScenario({ requiredApiKey: 'sk-right' });
    try {
      const from = s.sse.events.length;
      const res = await transcribe(pcmBytes(tone(16_000, 300)), { trigger_chat: 'true' });
      expect(res.status).toBe(502);
      expect((await json(res)).detail).toContain('Incorrect API key provided.');
      await idleAfter(from, 5_000);
      const kinds = labels(s.sse.events.slice(from));
      expect(kinds.indexOf('error')).toBeGreaterThan(kinds.indexOf('status:listening'));
      expect(kinds.indexOf('error')).toBeLessThan(kinds.lastIndexOf('status:idle'));
      expect(s.sse.events.slice(from).find((e) => e.type === 'error')!.data.code).toBe('asr_upstream_error');
    } finally {
      upstream.setScenario({ requiredApiKey: null });
    }
  });

  it('validates the upload: missing audio, odd byte count, bad trigger_chat → 400', async () => {
    const noAudio = await fetch(`${t.baseUrl}/sessions/${s.sessionId}/transcribe`, {
      method: 'POST',
      body: new FormData(),
    });
    expect(noAudio.status).toBe(400);
    expect(typeof (await json(noAudio)).detail).toBe('string');
    const odd = await transcribe(Buffer.alloc(1001, 1));
    expect(odd.status).toBe(400);
    const badFlag = await transcribe(pcmBytes(tone(16_000, 100)), { trigger_chat: 'maybe' });
    expect(badFlag.status).toBe(400);
  });

  it('409 before start', async () => {
    const fresh = await openSession(t, { start: false });
    try {
      const res = await postAudio(t.baseUrl, `/sessions/${fresh.sessionId}/transcribe`, pcmBytes(tone(16_000, 100)));
      expect(res.status).toBe(409);
    } finally {
      fresh.close();
      await fetch(`${t.baseUrl}/sessions/${fresh.sessionId}`, { method: 'DELETE' });
    }
  });
});

describe('transcribe without a recognizer', () => {
  it('answers 503 naming SERVICE_ASR_BASE_URL', async () => {
    const t = await startTestApp();
    const s = await openSession(t);
    try {
      const res = await postAudio(t.baseUrl, `/sessions/${s.sessionId}/transcribe`, pcmBytes(tone(16_000, 200)));
      expect(res.status).toBe(503);
      expect((await json(res)).detail).toContain('SERVICE_ASR_BASE_URL');
    } finally {
      s.close();
      await t.close();
    }
  });
});

/** Voiced sound with syllable-rate bursts: what a VAD takes for speech, unlike a steady tone. */
function speechLike(rate: number, ms: number, seed: number): Int16Array {
  const pcm = new Int16Array(Math.round((rate * ms) / 1000));
  for (let i = 0; i < pcm.length; i++) {
    const t = i / rate;
    const syllable = Math.max(0, Math.sin(2 * Math.PI * (3.5 + seed * 0.3) * t));
    const pitch = 120 + 30 * Math.sin(2 * Math.PI * 0.7 * t);
    const voiced =
      Math.sin(2 * Math.PI * pitch * t) +
      0.6 * Math.sin(2 * Math.PI * 2 * pitch * t) +
      0.4 * Math.sin(2 * Math.PI * 5 * pitch * t);
    pcm[i] = Math.round(5000 * syllable * voiced);
  }
  return pcm;
}
