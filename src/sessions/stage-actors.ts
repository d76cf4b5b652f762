import { fromCallback } from 'xstate';
import type { Logger } from 'pino';
import type { StageInput, SessionEvent, TurnInfo } from '../../machines/session.machine.ts';
import { buildMouthTimeline } from '../../actors/mouth/timeline.ts';
import { EagerSentenceStream } from '../../actors/tts/sentences.ts';
import { isTtsProviderId, type TtsProvider, type TtsProviderId } from '../../actors/tts/types.ts';
import type { LlmProvider } from '../../actors/llm/types.ts';
import type { AsrProvider } from '../../actors/asr/types.ts';
import type { ConversationHistory } from '../../actors/llm/history.ts';
import { AsyncQueue, type Deferred } from './async-queue.ts';
import { untilAborted } from '../../actors/abort.ts';
import type { SessionEventHub } from './event-hub.ts';
import type { SessionMedia } from './media.ts';
import { stageErrorOf } from './stage-errors.ts';
import type { SessionMetrics } from './metrics.ts';
import { splitForAsr } from '../../actors/audio/vad.ts';

/** Audio handed to a turn that skips synthesis (speak_audio, the audio WebSocket). */
export type TurnAudio = { kind: 'clip'; pcm: Int16Array } | { kind: 'stream'; chunks: AsyncQueue<Int16Array> };

export interface TranscribeJob {
  pcm: Int16Array;
  sampleRate: number;
  result: Deferred<string>;
}

/** What the stage actors of one session need; the session owns all of it. */
export interface StageContext {
  sessionId: string;
  sampleRate: number;
  logger: Logger;
  events: SessionEventHub;
  media: SessionMedia;
  history: ConversationHistory;
  tts(id: TtsProviderId): TtsProvider;
  llm: LlmProvider;
  asr: AsrProvider;
  turnAudio: Map<string, TurnAudio>;
  transcribeJobs: Map<string, TranscribeJob>;
  /** Resolved once a chat's upstream accepted the request (first delta), or rejected with its error. */
  chatAccepted: Map<string, Deferred<void>>;
  /** Per-turn latency bookkeeping (`GET /sessions/{id}/metrics`). */
  metrics: SessionMetrics;
  /** Applies rt-family segmentation and smoothing to direct audio. */
  smoothAudio(pcm: Int16Array): Int16Array;
}

type SendBack = (event: SessionEvent) => void;

function isAbort(error: unknown, signal: AbortSignal): boolean {
  return signal.aborted || (error instanceof Error && error.name === 'AbortError');
}

/** Runs an async stage body; reports completion or a (non-abort) failure to the machine. */
function runStage(
  ctx: StageContext,
  stage: string,
  sendBack: SendBack,
  body: (signal: AbortSignal) => Promise<SessionEvent | null>,
): () => void {
  const controller = new AbortController();
  body(controller.signal).then(
    (done) => {
      if (done && !controller.signal.aborted) sendBack(done);
    },
    (error) => {
      if (isAbort(error, controller.signal)) return;
      const { code, message, fatal } = stageErrorOf(stage, error);
      ctx.logger.warn({ stage, code, err: message }, 'stage failed');
      sendBack({ type: 'STAGE.ERROR', code, message, fatal });
    },
  );
  return () => controller.abort(new DOMException('stage stopped', 'AbortError'));
}

export function createStageActors(ctx: StageContext) {
  const media = fromCallback<{ type: string }, { sessionId: string }>(({ receive, sendBack }) => {
    receive((event) => {
      if (event.type === 'FLUSH') {
        ctx.media.flush();
        sendBack({ type: 'MEDIA.FLUSHED' });
      }
    });
    return () => ctx.media.close();
  });

  const tts = fromCallback<{ type: string; text?: string }, StageInput & { voice: string | null; ttsProvider: string }>(
    ({ input, receive, sendBack }) => {
      const segments = new AsyncQueue<string>();
      if (input.turn.mode === 'speak') {
        segments.push(input.turn.text ?? '');
        segments.end();
      }
      receive((event) => {
        if (event.type === 'TEXT.SEGMENT' && event.text) segments.push(event.text);
        if (event.type === 'TEXT.END') segments.end();
      });
      const stop = runStage(ctx, 'tts', sendBack, async (signal) => {
        const turn = input.turn;
        if (turn.mode === 'audio' || turn.mode === 'audio_stream') {
          await playDirectAudio(ctx, turn, sendBack, signal);
        } else {
          await synthesizeTurn(ctx, input, segments, sendBack, signal);
        }
        ctx.media.playout.endTurn(turn.id);
        await untilAborted(ctx.media.playout.whenDrained(turn.id), signal);
        return { type: 'TTS.DONE' };
      });
      return () => {
        stop();
        // A turn stopped while waiting for its next LLM segment would otherwise wait forever.
        segments.fail(new DOMException('stage stopped', 'AbortError'));
      };
    },
  );

  const llm = fromCallback<{ type: string }, StageInput & { systemPrompt: string }>(({ input, sendBack }) =>
    runStage(ctx, 'llm', sendBack, async (signal) => {
      const prompt = input.turn.text ?? '';
      const accepted = ctx.chatAccepted.get(input.turn.id);
      const splitter = new EagerSentenceStream();
      let reply = '';
      try {
        ctx.history.systemPrompt = input.systemPrompt || null;
        const messages = ctx.history.messagesFor(prompt);
        for await (const delta of ctx.llm.stream({ messages, signal })) {
          accepted?.resolve();
          if (!delta) continue;
          ctx.metrics.mark(input.turn.id, 'llm_first_token_ms');
          reply += delta;
          ctx.events.publish('llm', { delta });
          for (const sentence of splitter.push(delta)) sendBack({ type: 'LLM.SEGMENT', text: sentence });
        }
        accepted?.resolve();
        for (const sentence of splitter.flush()) sendBack({ type: 'LLM.SEGMENT', text: sentence });
        ctx.history.commit(prompt, reply, { interrupted: false });
        return { type: 'LLM.DONE' };
      } catch (error) {
        accepted?.reject(error);
        if (signal.aborted && reply) ctx.history.commit(prompt, reply, { interrupted: true });
        throw error;
      } finally {
        ctx.chatAccepted.delete(input.turn.id);
      }
    }),
  );

  const asr = fromCallback<{ type: string }, { sessionId: string; transcribeId: string }>(({ input, sendBack }) =>
    runStage(ctx, 'asr', sendBack, async (signal) => {
      const job = ctx.transcribeJobs.get(input.transcribeId);
      if (!job) throw new Error('transcription audio missing');
      try {
        const transcript = await transcribeInPieces(ctx, job, signal);
        ctx.events.publish('transcript', { text: transcript, is_final: true });
        job.result.resolve(transcript);
        return { type: 'ASR.DONE', text: transcript };
      } catch (error) {
        job.result.reject(error);
        throw error;
      } finally {
        ctx.transcribeJobs.delete(input.transcribeId);
      }
    }),
  );

  return { media, tts, llm, asr };
}

/**
 * Whisper-style recognisers work on windows of about 30 s. Longer uploads are cut at pauses found by the
 * VAD (silence between pieces is dropped, which also stops hallucinated text on long silence) and sent
 * piece by piece, with a partial transcript event after each. Shorter ones go upstream untouched.
 */
export const ASR_SINGLE_REQUEST_MAX_MS = 30_000;

async function transcribeInPieces(ctx: StageContext, job: TranscribeJob, signal: AbortSignal): Promise<string> {
  const durationMs = (job.pcm.length / job.sampleRate) * 1000;
  if (durationMs <= ASR_SINGLE_REQUEST_MAX_MS) {
    const { text } = await ctx.asr.transcribe({ pcm: job.pcm, sampleRate: job.sampleRate, signal });
    return text.trim();
  }
  const pieces = await splitForAsr(job.pcm, job.sampleRate, ASR_SINGLE_REQUEST_MAX_MS, { signal });
  const texts: string[] = [];
  for (const piece of pieces) {
    signal.throwIfAborted();
    const { text } = await ctx.asr.transcribe({ pcm: piece.pcm, sampleRate: job.sampleRate, signal });
    if (text.trim()) texts.push(text.trim());
    ctx.events.publish('transcript', { text: texts.join(' '), is_final: false });
  }
  return texts.join(' ');
}

async function synthesizeTurn(
  ctx: StageContext,
  input: StageInput & { voice: string | null; ttsProvider: string },
  segments: AsyncQueue<string>,
  sendBack: SendBack,
  signal: AbortSignal,
): Promise<void> {
  const { turn } = input;
  const providerId = input.ttsProvider;
  if (!isTtsProviderId(providerId)) throw new Error(`unknown tts provider ${providerId}`);
  const provider = ctx.tts(providerId);
  const startedAt = performance.now();
  const elapsed = () => Math.round(performance.now() - startedAt);
  let started = false;
  let firstAudio = false;
  let sentenceIndex = 0;
  for await (const text of segments) {
    if (signal.aborted) throw signal.reason;
    if (!text.trim()) continue;
    if (!started) {
      started = true;
      ctx.events.publish('tts', { stage: 'start', ms_elapsed: 0, sentence_index: sentenceIndex });
    }
    let lastIndex = 0;
    for await (const chunk of provider.synthesize({
      text,
      voice: input.voice,
      model: turn.ttsModel ?? null,
      sampleRate: ctx.sampleRate,
      signal,
    })) {
      if (signal.aborted) throw signal.reason;
      lastIndex = chunk.sentenceIndex ?? 0;
      if (!firstAudio) {
        firstAudio = true;
        ctx.events.publish('tts', { stage: 'first_audio', ms_elapsed: elapsed(), sentence_index: sentenceIndex + lastIndex });
        ctx.metrics.mark(turn.id, 'first_audio_queued_ms');
        sendBack({ type: 'TTS.FIRST_AUDIO' });
      }
      await ctx.media.playout.waitForRoom(signal);
      ctx.media.playout.enqueue(turn.id, chunk.pcm, buildMouthTimeline(chunk));
    }
    sentenceIndex += lastIndex + 1;
  }
  if (started) ctx.events.publish('tts', { stage: 'complete', ms_elapsed: elapsed(), sentence_index: Math.max(0, sentenceIndex - 1) });
}

async function playDirectAudio(ctx: StageContext, turn: TurnInfo, sendBack: SendBack, signal: AbortSignal): Promise<void> {
  const audio = ctx.turnAudio.get(turn.id);
  if (!audio) throw new Error('turn audio missing');
  try {
    const chunks: AsyncIterable<Int16Array> | Iterable<Int16Array> = audio.kind === 'clip' ? [audio.pcm] : audio.chunks;
    let first = true;
    for await (const raw of chunks) {
      if (signal.aborted) throw signal.reason;
      if (raw.length === 0) continue;
      const pcm = turn.smoothing ? ctx.smoothAudio(raw) : raw;
      if (first) {
        first = false;
        ctx.metrics.mark(turn.id, 'first_audio_queued_ms');
        sendBack({ type: 'TTS.FIRST_AUDIO' });
      }
      await ctx.media.playout.waitForRoom(signal);
      ctx.media.playout.enqueue(turn.id, pcm, buildMouthTimeline({ pcm, sampleRate: ctx.sampleRate }));
    }
  } finally {
    ctx.turnAudio.delete(turn.id);
  }
}
