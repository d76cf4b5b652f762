import { json, startTestApp } from '../test/helpers/app.ts';
import { AudioStreamClient, framesOf, streamPcm } from '../test/helpers/ws-audio.ts';
import { loadVadFixture } from '../test/helpers/vad-fixture.ts';
import { startOpenAiUpstream } from '../test/fakes/openai-upstream.ts';
import { openWarmSession } from './chat.ts';
import { summary } from './stats.ts';

/** Loopback recogniser and language model with fixed delays, so the service's own share can be told apart. */
const ASR_MS = 150;
const TTFT_MS = 300;
const RUNS = 7;
const AUDIBLE_RMS = 300;
const QUIET_BUFFERS = 20;

/**
 * Hands-free turn latency (docs/voice-input.md): a /listen client speaks the fixture's utterances in real
 * time; a wrtc viewer listens. Per turn: the user's end of speech (last speech sample sent) and the end of
 * turn (the service's `speech_end`, SERVICE_VAD_SILENCE_MS later) → first audible sample at the viewer, and
 * the service's figures (end of turn → transcript, first token, first sample sent) from its metrics.
 * Target: end of turn → first audible ≤ ASR + LLM time + 250 ms.
 */
export async function benchVoice(): Promise<Record<string, unknown>> {
  const fixture = loadVadFixture();
  const utterances = fixture.labels.segments.filter((segment) => segment.kind === 'speech');
  const upstream = await startOpenAiUpstream({
    transcription: { transcript: 'What will the weather be like tomorrow?', delayMs: ASR_MS },
    // As in the chat step: a first sentence complete at the second token, so token pacing hardly counts.
    chat: {
      replyTokens: ['Sure', '!', ' It', ' will', ' be', ' sunny', '.'],
      firstTokenDelayMs: TTFT_MS,
      tokenDelayMs: 20,
    },
  });
  const t = await startTestApp({
    env: { SERVICE_LLM_BASE_URL: upstream.baseUrl, SERVICE_ASR_BASE_URL: upstream.baseUrl },
  });
  const { session_id, sse, peer } = await openWarmSession(t.baseUrl);
  const listen = AudioStreamClient.connectTo(`${t.baseUrl.replace(/^http/, 'ws')}/sessions/${session_id}/listen`);
  await listen.waitOpen();
  const endOfTurnOverhead: number[] = [];
  const endOfTurnToAudible: number[] = [];
  const speechEndToAudible: number[] = [];
  const endOfTurnDelay: number[] = [];
  try {
    for (let run = 0; run < RUNS; run++) {
      const quietSince = performance.now();
      await peer.until(
        () => {
          const recent = peer.audio.slice(-QUIET_BUFFERS);
          return (
            recent.length === QUIET_BUFFERS && recent[0].at > quietSince && recent.every((a) => a.rms < AUDIBLE_RMS)
          );
        },
        10_000,
        'silence before the next turn',
      );
      const { startMs, endMs } = utterances[run % utterances.length];
      const lead = new Int16Array(16 * 300);
      const spoken = fixture.pcm.subarray(startMs * 16, endMs * 16);
      const trail = new Int16Array(16 * 1_500);
      const messagesBefore = listen.messages.length;
      const from = sse.events.length;
      const startedAt = performance.now();
      // The user's speech ends when its last sample is sent; the rest is the silence a live microphone sends.
      const userEndAt = startedAt + 300 + (endMs - startMs);
      const sending = streamPcm(listen, framesOf(pcmBytes(concat(lead, spoken, trail)), 640));
      await until(
        () => listen.messages.slice(messagesBefore).some((m) => m.type === 'speech_end'),
        10_000,
        'speech_end',
      );
      const endOfTurnAt = listen.messages.slice(messagesBefore).find((m) => m.type === 'speech_end')!.at;
      await peer.until(() => peer.firstAudible(endOfTurnAt, AUDIBLE_RMS) !== undefined, 15_000, 'audible');
      const audibleAt = peer.firstAudible(endOfTurnAt, AUDIBLE_RMS)!.at;
      endOfTurnToAudible.push(audibleAt - endOfTurnAt);
      endOfTurnOverhead.push(audibleAt - endOfTurnAt - ASR_MS - TTFT_MS);
      speechEndToAudible.push(audibleAt - userEndAt);
      endOfTurnDelay.push(endOfTurnAt - userEndAt);
      await sending;
      await sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', 30_000, 'idle', from);
    }
    const metrics = await json(await fetch(`${t.baseUrl}/sessions/${session_id}/metrics`));
    const turns = (metrics.turns as Array<Record<string, number | string | null>>).filter(
      (turn) => turn.mode === 'voice',
    );
    const figures = (key: string) =>
      summary(turns.map((turn) => turn[key]).filter((v): v is number => typeof v === 'number'));
    return {
      asr_ms: ASR_MS,
      ttft_ms: TTFT_MS,
      endOfTurnOverheadMs: summary(endOfTurnOverhead),
      endOfTurnToFirstAudibleMs: summary(endOfTurnToAudible),
      userSpeechEndToFirstAudibleMs: summary(speechEndToAudible),
      userSpeechEndToEndOfTurnMs: summary(endOfTurnDelay),
      server: {
        endOfTurnToTranscriptMs: figures('transcript_ms'),
        endOfTurnToFirstTokenMs: figures('llm_first_token_ms'),
        endOfTurnToFirstSampleSentMs: figures('first_sample_sent_ms'),
      },
    };
  } finally {
    listen.close();
    peer.close();
    sse.close();
    await t.close();
    await upstream.close();
  }
}

/** Little-endian PCM16 bytes (test/helpers/conversation.ts imports vitest, which a bench step cannot). */
function pcmBytes(pcm: Int16Array): Buffer {
  return Buffer.from(pcm.buffer, pcm.byteOffset, pcm.byteLength);
}

function concat(...parts: Int16Array[]): Int16Array {
  const out = new Int16Array(parts.reduce((n, p) => n + p.length, 0));
  let offset = 0;
  for (const part of parts) {
    out.set(part, offset);
    offset += part.length;
  }
  return out;
}

async function until(predicate: () => boolean, timeoutMs: number, what: string): Promise<void> {
  const start = performance.now();
  while (!predicate()) {
    if (performance.now() - start > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}
