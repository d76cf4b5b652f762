/**
 * A hands-free turn's latency figures (`voice.latency` on the session bus, the `voice turn latency` log line, the
 * service's end-of-speech → first-audio histogram): kept on the turn's own record (`Turn.voiceLatency`) from the
 * VAD's end of turn to the turn's first sample sent. Real service, real Silero VAD on the VAD fixture's speech over
 * WebSocket /listen, loopback OpenAI-compatible recogniser and language model, built-in TTS.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json, post, startTestApp, type TestApp } from './helpers/app.ts';
import { pcmBytes } from './helpers/conversation.ts';
import { SseClient } from './helpers/sse.ts';
import { loadVadFixture } from './helpers/vad-fixture.ts';
import { AudioStreamClient, framesOf, streamPcm } from './helpers/ws-audio.ts';
import { startOpenAiUpstream, type OpenAiUpstream } from './fakes/openai-upstream.ts';
import { sessionParts } from '../src/sessions/session.ts';
import type { SessionBusEvents } from '../src/sessions/session-bus.ts';

/** Recognition + chat + synthesis + real-time playout, on 2 shared cores. */
const TURN_MS = 30_000;
const fixture = loadVadFixture();
const firstSpeech = fixture.labels.segments.filter((segment) => segment.kind === 'speech')[0];

describe('a voice turn times itself on its own turn record', () => {
  let upstream: OpenAiUpstream;
  let t: TestApp;

  beforeAll(async () => {
    upstream = await startOpenAiUpstream({
      transcription: { transcript: 'What time is it?' },
      chat: { replyTokens: ['It is ', 'noon.'], tokenDelayMs: 5 },
    });
    t = await startTestApp({ env: { SERVICE_LLM_BASE_URL: upstream.baseUrl, SERVICE_ASR_BASE_URL: upstream.baseUrl } });
  });

  afterAll(async () => {
    await t?.close();
    await upstream?.close();
  });

  it('end of turn → transcript → first token → first sample, once, for the turn the transcript names', async () => {
    const avatars = await json(await fetch(`${t.baseUrl}/avatars`));
    const avatar = avatars.find((a: { model_type: string }) => a.model_type === 'rt');
    const { session_id: sessionId } = await json(
      await post(t.baseUrl, '/sessions', { avatar_id: avatar.id, model: 'rt' }),
    );
    const sse = await SseClient.open(`${t.baseUrl}/sessions/${sessionId}/events`);
    expect((await post(t.baseUrl, `/sessions/${sessionId}/start`)).status).toBe(200);
    const { bus } = sessionParts(t.services.supervisor.liveSession(sessionId)!);
    const latencies: Array<SessionBusEvents['voice.latency']> = [];
    bus.on('voice.latency', (figures) => latencies.push(figures));

    const listen = AudioStreamClient.connectTo(`${t.baseUrl.replace(/^http/, 'ws')}/sessions/${sessionId}/listen`);
    await listen.waitOpen();
    const silence = new Int16Array(16_000 * 0.6);
    const speech = fixture.pcm.slice((firstSpeech.startMs - 100) * 16, (firstSpeech.endMs + 100) * 16);
    await streamPcm(listen, framesOf(pcmBytes(Int16Array.from([...silence, ...speech, ...silence])), 640));
    const transcript = await sse.waitFor((e) => e.type === 'transcript', TURN_MS, 'transcript');
    await sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', TURN_MS, 'the answer played');

    expect(latencies).toHaveLength(1);
    const [figures] = latencies;
    expect(figures.turnId).toBe(transcript.data.turn_id);
    expect(figures.transcriptMs).not.toBeNull();
    expect(figures.firstTokenMs).not.toBeNull();
    expect(figures.transcriptMs!).toBeLessThanOrEqual(figures.firstTokenMs!);
    expect(figures.firstTokenMs!).toBeLessThanOrEqual(figures.firstSampleMs);
    // The record let go of them once reported: the turn's first sample is reported once.
    expect(bus.latestTurn?.voiceLatency).toBeNull();
    listen.sendJson({ type: 'eos' });
    await listen.waitClosed(10_000);
    sse.close();
  });
});
