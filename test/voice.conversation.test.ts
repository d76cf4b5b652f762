/**
 * Hands-free conversation end to end: the user's speech (the VAD fixture, real synthesised speech) goes in
 * on a real wrtc peer's microphone track or over WebSocket /listen; the service detects it, recognises it
 * (loopback OpenAI-compatible fake), answers it as a chat turn the receiver hears, and a second utterance
 * during the answer interrupts it.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json, post, startTestApp, type TestApp } from './helpers/app.ts';
import { AUDIBLE_RMS, labels, pcmBytes, sleep, waitForSilence } from './helpers/conversation.ts';
import { MicrophonePeer } from './helpers/mic-peer.ts';
import { SseClient } from './helpers/sse.ts';
import { loadVadFixture, whiteNoise } from './helpers/vad-fixture.ts';
import { AudioStreamClient, framesOf, streamPcm } from './helpers/ws-audio.ts';
import { startOpenAiUpstream, type OpenAiUpstream } from './fakes/openai-upstream.ts';

/** Recognition + chat + synthesis + real-time playout, on 2 shared cores. */
const TURN_MS = 30_000;
const fixture = loadVadFixture();
const speech = fixture.labels.segments.filter((segment) => segment.kind === 'speech');

/** One labelled utterance of the fixture with `padMs` of its own surrounding audio. */
function utterance(index: number, padMs = 100): Int16Array {
  const { startMs, endMs } = speech[index];
  return fixture.pcm.slice((startMs - padMs) * 16, (endMs + padMs) * 16);
}

/** A reply long enough to be talked over: several sentences of synthesised speech. */
const LONG_REPLY =
  'The weather tomorrow will be sunny and warm. There is a light breeze from the west. In the evening a few clouds may come in from the sea. Take a jacket if you go out late.'.split(
    /(?<= )/,
  );

async function createSession(t: TestApp): Promise<string> {
  const avatars = await json(await fetch(`${t.baseUrl}/avatars`));
  const avatar = avatars.find((a: { model_type: string }) => a.model_type === 'rt');
  const created = await post(t.baseUrl, '/sessions', { avatar_id: avatar.id, model: 'rt' });
  expect(created.status).toBe(200);
  return (await json(created)).session_id as string;
}

describe('hands-free conversation', () => {
  let upstream: OpenAiUpstream;
  let t: TestApp;

  beforeAll(async () => {
    upstream = await startOpenAiUpstream({
      transcription: { transcript: 'What will the weather be like tomorrow?' },
      chat: { replyTokens: LONG_REPLY, tokenDelayMs: 5 },
    });
    t = await startTestApp({ env: { SERVICE_LLM_BASE_URL: upstream.baseUrl, SERVICE_ASR_BASE_URL: upstream.baseUrl } });
  });

  afterAll(async () => {
    await t?.close();
    await upstream?.close();
  });

  describe('over a WebRTC microphone', () => {
    let sessionId: string;
    let sse: SseClient;
    let peer: MicrophonePeer;

    beforeAll(async () => {
      sessionId = await createSession(t);
      sse = await SseClient.open(`${t.baseUrl}/sessions/${sessionId}/events`);
      peer = await MicrophonePeer.connectMic(t.baseUrl, sessionId);
      peer.keepFrames = false;
      expect((await post(t.baseUrl, `/sessions/${sessionId}/start`)).status).toBe(200);
      await peer.until(() => peer.frames.length >= 5 && peer.audio.length >= 20, 15_000, 'idle media');
    });

    afterAll(() => {
      peer?.close();
      sse?.close();
    });

    it('speech on the track → status listening, transcript, the chat turn and its audio; a second utterance interrupts the answer', async () => {
      const from = sse.events.length;
      const transcriptionsBefore = upstream.requests.filter((r) => r.transcription).length;
      const sent = peer.say(utterance(1));
      const listening = await sse.waitFor(
        (e) => e.type === 'status' && e.data.stage === 'listening',
        10_000,
        'status listening',
        from,
      );
      await sent;
      const transcript = await sse.waitFor((e) => e.type === 'transcript', 10_000, 'transcript', from);
      expect(transcript.data).toEqual({
        text: 'What will the weather be like tomorrow?',
        is_final: true,
        turn_id: expect.any(String),
      });
      expect(transcript.at).toBeGreaterThan(listening.at);
      const speaking = await sse.waitFor(
        (e) => e.type === 'status' && e.data.stage === 'speaking',
        TURN_MS,
        'status speaking',
        from,
      );
      const kinds = labels(sse.events.slice(from));
      expect(kinds.indexOf('status:listening')).toBeLessThan(kinds.indexOf('transcript'));
      expect(kinds.indexOf('transcript')).toBeLessThan(kinds.indexOf('status:thinking'));
      expect(kinds.indexOf('status:thinking')).toBeLessThan(kinds.indexOf('llm'));
      // Listening is said once per turn: at speech start, not again when recognition begins.
      expect(kinds.filter((k) => k === 'status:listening')).toHaveLength(1);

      // The recogniser got the utterance: its 2.64 s of speech with pre/post-roll, not the whole stream.
      const uploads = upstream.requests.filter((r) => r.transcription).slice(transcriptionsBefore);
      expect(uploads).toHaveLength(1);
      const seconds = uploads[0].transcription!.wav!.samples / uploads[0].transcription!.wav!.sampleRate;
      expect(seconds).toBeGreaterThan(2.2);
      expect(seconds).toBeLessThan(4);
      // The chat got the transcript as the user's message.
      const chat = upstream.requests.filter((r) => r.chat).at(-1)!.chat!;
      expect(chat.messages.at(-1)).toEqual({ role: 'user', content: 'What will the weather be like tomorrow?' });

      // The receiver hears the answer.
      await peer.until(() => peer.firstAudible(speaking.at, AUDIBLE_RMS) !== undefined, 10_000, 'the answer audible');
      await sleep(1_000);
      expect(sse.events.slice(from).some((e) => e.type === 'status' && e.data.stage === 'idle')).toBe(false);

      // Barge-in: the user talks over the answer.
      const bargeFrom = sse.events.length;
      const second = peer.say(utterance(3));
      const interrupted = await sse.waitFor(
        (e) => e.type === 'status' && e.data.stage === 'interrupted',
        10_000,
        'status interrupted',
        bargeFrom,
      );
      await waitForSilence(peer, interrupted.at, 5_000);
      await sse.waitFor(
        (e) => e.type === 'status' && e.data.stage === 'listening',
        5_000,
        'listening again',
        bargeFrom,
      );
      await second;
      await sse.waitFor((e) => e.type === 'transcript', 10_000, 'second transcript', bargeFrom);
      await sse.waitFor((e) => e.type === 'status' && e.data.stage === 'speaking', TURN_MS, 'second answer', bargeFrom);

      // Per-turn latency figures, timed from the end of the user's turn.
      const metrics = await json(await fetch(`${t.baseUrl}/sessions/${sessionId}/metrics`));
      const voiceTurns = metrics.turns.filter((turn: { mode: string }) => turn.mode === 'voice');
      expect(voiceTurns.length).toBeGreaterThanOrEqual(2);
      expect(voiceTurns[0].outcome).toBe('interrupted');
      for (const key of ['transcript_ms', 'llm_first_token_ms', 'first_sample_sent_ms'])
        expect(voiceTurns[0][key], key).toBeGreaterThanOrEqual(0);
      expect(voiceTurns[0].transcript_ms).toBeLessThanOrEqual(voiceTurns[0].llm_first_token_ms);
      expect(voiceTurns[0].llm_first_token_ms).toBeLessThanOrEqual(voiceTurns[0].first_sample_sent_ms);
      console.log(
        `voice turn over WebRTC: end of turn → transcript ${voiceTurns[0].transcript_ms} ms, first token ${voiceTurns[0].llm_first_token_ms} ms, first sample sent ${voiceTurns[0].first_sample_sent_ms} ms`,
      );
      expect((await post(t.baseUrl, `/sessions/${sessionId}/interrupt`)).status).toBe(200);
    });
  });

  describe('over WebSocket /listen', () => {
    let sessionId: string;
    let sse: SseClient;
    let viewer: MicrophonePeer;

    beforeAll(async () => {
      sessionId = await createSession(t);
      sse = await SseClient.open(`${t.baseUrl}/sessions/${sessionId}/events`);
      // A viewer without a microphone would do; this one keeps its microphone silent (never says anything).
      viewer = await MicrophonePeer.connectMic(t.baseUrl, sessionId);
      viewer.keepFrames = false;
      expect((await post(t.baseUrl, `/sessions/${sessionId}/start`)).status).toBe(200);
      await viewer.until(() => viewer.frames.length >= 5 && viewer.audio.length >= 20, 15_000, 'idle media');
    });

    afterAll(() => {
      viewer?.close();
      sse?.close();
    });

    it('speech_start, speech_end and transcript on the socket; the chat turn on SSE and WebRTC; a second utterance interrupts', async () => {
      const listen = await openListen(t.baseUrl, sessionId);
      const from = sse.events.length;
      const silence = new Int16Array(16_000 * 0.6);
      await streamPcm(listen, framesOf(pcmBytes(concat(silence, utterance(0), silence)), 640));
      await listen.waitMessage('speech_start', 5_000);
      await listen.waitMessage('speech_end', 5_000);
      const transcript = await listen.waitMessage('transcript', 10_000);
      expect((transcript as unknown as { text: string }).text).toBe('What will the weather be like tomorrow?');
      expect(listen.messages.map((m) => m.type)).toEqual(['speech_start', 'speech_end', 'transcript']);
      const speaking = await sse.waitFor(
        (e) => e.type === 'status' && e.data.stage === 'speaking',
        TURN_MS,
        'status speaking',
        from,
      );
      expect(labels(sse.events.slice(from)).slice(0, 3)).toEqual(['status:listening', 'transcript', 'status:thinking']);
      await viewer.until(
        () => viewer.firstAudible(speaking.at, AUDIBLE_RMS) !== undefined,
        10_000,
        'the answer audible',
      );

      const bargeFrom = sse.events.length;
      // Real time, with the silence a live microphone keeps sending.
      const streaming = streamPcm(listen, framesOf(pcmBytes(concat(utterance(3), silence, silence)), 640));
      const interrupted = await sse.waitFor(
        (e) => e.type === 'status' && e.data.stage === 'interrupted',
        10_000,
        'status interrupted',
        bargeFrom,
      );
      await waitForSilence(viewer, interrupted.at, 5_000);
      await streaming;
      await sse.waitFor((e) => e.type === 'transcript', 10_000, 'second transcript', bargeFrom);
      listen.sendJson({ type: 'interrupt' });
      await sse.waitFor(
        (e) => e.type === 'status' && e.data.stage === 'idle',
        10_000,
        'idle after interrupt',
        bargeFrom,
      );
      listen.sendJson({ type: 'eos' });
      expect((await listen.waitClosed(10_000)).code).toBe(1000);
    });

    it('silence, white noise and a cough-length blip make no turn', async () => {
      const listen = await openListen(t.baseUrl, sessionId);
      const from = sse.events.length;
      const transcriptionsBefore = upstream.requests.filter((r) => r.transcription).length;
      const blip = concat(
        new Int16Array(16_000),
        fixture.pcm.slice((speech[0].startMs + 400) * 16, (speech[0].startMs + 520) * 16),
        new Int16Array(16_000),
      );
      const audio = concat(
        new Int16Array(16_000 * 2),
        whiteNoise(16_000 * 2, -30, 11),
        whiteNoise(16_000 * 2, -15, 12),
        blip,
      );
      // At real time, as the route asks of clients: sent faster, a host at half speed let the detector fall more than
      // MAX_VAD_BACKLOG_MS behind and the socket rightly answered audio_overflow.
      await streamPcm(listen, framesOf(pcmBytes(audio), 640));
      listen.sendJson({ type: 'eos' });
      expect((await listen.waitClosed(15_000)).code).toBe(1000);
      expect(listen.messages.filter((m) => m.type !== 'ack')).toEqual([]);
      expect(sse.events.slice(from).filter((e) => e.type !== 'frame')).toEqual([]);
      expect(upstream.requests.filter((r) => r.transcription).length).toBe(transcriptionsBefore);
    });

    it('answers a malformed control message with an error and keeps the socket; config is acknowledged only first', async () => {
      const listen = await openListen(t.baseUrl, sessionId);
      listen.sendJson({ type: 'config', sample_rate: 48_000 });
      await listen.waitMessage('ack', 5_000);
      listen.sendText('not json');
      listen.sendJson({ type: 'config', sample_rate: 16_000 });
      await listen.waitErrorCount(2, 5_000);
      expect(listen.errors().map((e) => e.code)).toEqual(['invalid_message', 'invalid_message']);
      expect(listen.closed).toBeNull();
      listen.close();
    });

    it('random frames (odd-sized and huge binary, junk text, wrong JSON, early eos) never crash: the service and session live on', async () => {
      await fc.assert(
        fc.asyncProperty(
          fc.array(
            fc.oneof(
              fc.uint8Array({ minLength: 0, maxLength: 3_000 }).map((bytes) => ({ binary: Buffer.from(bytes) })),
              fc.string({ maxLength: 200 }).map((text) => ({ text })),
              fc.jsonValue({ maxDepth: 2 }).map((value) => ({ text: JSON.stringify(value) })),
              fc.constantFrom(
                { text: '{"type":"config","sample_rate":8000}' },
                { text: '{"type":"config","sample_rate":7}' },
                { text: '{"type":"interrupt"}' },
                { text: '{"type":"eos"}' },
                { text: 'x'.repeat(5_000) },
              ),
            ),
            { maxLength: 25 },
          ),
          async (frames) => {
            const listen = await openListen(t.baseUrl, sessionId);
            for (const frame of frames) {
              if (listen.closed) break;
              if ('binary' in frame) listen.sendPcm(frame.binary);
              else listen.sendText(frame.text);
            }
            await sleep(20);
            listen.close();
          },
        ),
        { numRuns: 25 },
      );
      expect((await fetch(`${t.baseUrl}/healthz`)).status).toBe(200);
      expect((await json(await fetch(`${t.baseUrl}/sessions/${sessionId}`))).state).toBe('running');
    });

    it('a new /listen socket replaces the previous one, which is told and closed', async () => {
      const first = await openListen(t.baseUrl, sessionId);
      const second = await openListen(t.baseUrl, sessionId);
      const error = await first.waitErrorCount(1, 5_000);
      expect(error.code).toBe('voice_input_replaced');
      expect((await first.waitClosed(5_000)).code).toBe(1008);
      expect(second.closed).toBeNull();
      second.close();
    });
  });

  it('without a speech recogniser the client is told once, not for every utterance', async () => {
    const bare = await startTestApp({ env: { SERVICE_LLM_BASE_URL: upstream.baseUrl } });
    try {
      const sessionId = await createSession(bare);
      const sse = await SseClient.open(`${bare.baseUrl}/sessions/${sessionId}/events`);
      expect((await post(bare.baseUrl, `/sessions/${sessionId}/start`)).status).toBe(200);
      const listen = await openListen(bare.baseUrl, sessionId);
      await listen.waitErrorCount(1, 5_000);
      const silence = new Int16Array(16_000 * 0.8);
      // Real time, as /listen asks of clients: at twice real time a host slower than the development VM leaves the
      // detector 2 s behind, and the service rightly adds audio_overflow, which is not what this test is about.
      // Two utterances (the fixture's shortest full sentences) are enough to show it is said once, not per utterance.
      await streamPcm(listen, framesOf(pcmBytes(concat(utterance(0), silence, utterance(3), silence)), 640), {
        speed: 1,
      });
      // Both utterances detected (the detector may still be catching up on a loaded host), then time for any late error.
      const speechStarts = () => listen.messages.filter((m) => m.type === 'speech_start').length;
      for (const deadline = performance.now() + TURN_MS; speechStarts() < 2 && performance.now() < deadline; )
        await sleep(50);
      await sleep(500);
      const errors = listen.errors();
      expect(errors.map((e) => e.code)).toEqual(['asr_not_configured']);
      expect(listen.messages.filter((m) => m.type === 'speech_start').length).toBe(2);
      // SSE: one error, followed by idle (spec 6.1 rule 5), and no turn.
      const sseErrors = sse.of('error');
      expect(sseErrors.map((e) => e.data.code)).toEqual(['asr_not_configured']);
      expect(sse.of('status').map((e) => e.data.stage)).toEqual(['error', 'idle']);
      listen.close();
      sse.close();
    } finally {
      await bare.close();
    }
  });
});

function concat(...parts: Int16Array[]): Int16Array {
  const out = new Int16Array(parts.reduce((n, p) => n + p.length, 0));
  let offset = 0;
  for (const part of parts) {
    out.set(part, offset);
    offset += part.length;
  }
  return out;
}

async function openListen(baseUrl: string, sessionId: string): Promise<AudioStreamClient> {
  const client = AudioStreamClient.connectTo(`${baseUrl.replace(/^http/, 'ws')}/sessions/${sessionId}/listen`);
  await client.waitOpen();
  return client;
}
