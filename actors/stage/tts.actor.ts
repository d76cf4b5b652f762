import { fromCallback } from 'xstate';
import type { TtsActorEvent, TtsInput, TurnInfo } from '../../machines/session.machine.ts';
import { buildMouthTimeline } from '../mouth/timeline.ts';
import { isTtsProviderId } from '../tts/types.ts';
import { untilAborted } from '../upstream/abort.ts';
import { AsyncQueue } from '../async-queue.ts';
import { splitSentences } from '../tts/sentences.ts';
import { runStage, type SendBack, type StageContext } from './stage.ts';
import { showReplyExpression } from './reply-expression.ts';
import type { SegmentExpression } from '../llm/types.ts';

/** A segment of the turn's text to speak, with the reply's expression tags written in it; `filler`: not the model's words. */
interface TextSegment {
  text: string;
  expressions?: SegmentExpression[];
  filler?: boolean;
}

/**
 * The turn's speech: synthesises text segments (the speak text, or the LLM's sentences as they come) or
 * plays the turn's direct audio, feeds the playout, reports TTS.FIRST_AUDIO and, once the turn's audio
 * has played out, TTS.DONE.
 */
export function createTtsActor(ctx: StageContext) {
  return fromCallback<TtsActorEvent, TtsInput>(({ input, receive, sendBack }) => {
    const segments = new AsyncQueue<TextSegment>();
    if (input.turn.mode === 'speak') {
      segments.push({ text: input.turn.text ?? '' });
      segments.end();
    }
    receive((event) => {
      if (event.type === 'TEXT.SEGMENT' && event.text)
        segments.push({ text: event.text, expressions: event.expressions, filler: event.filler });
      if (event.type === 'TEXT.END') segments.end();
    });
    const stop = runStage(ctx, 'tts', sendBack, async (signal) => {
      const turn = input.turn;
      if (turn.mode === 'audio' || turn.mode === 'audio_stream') {
        await playDirectAudio(ctx, turn, sendBack, signal);
      } else {
        await synthesizeTurn(ctx, input, segments, sendBack, signal);
      }
      ctx.media.endTurn(turn);
      await untilAborted(ctx.media.whenDrained(turn), signal);
      return { type: 'TTS.DONE' };
    });
    return () => {
      stop();
      // A turn stopped while waiting for its next LLM segment would otherwise wait forever.
      segments.fail(new DOMException('stage stopped', 'AbortError'));
    };
  });
}

async function synthesizeTurn(
  ctx: StageContext,
  input: TtsInput,
  segments: AsyncQueue<TextSegment>,
  sendBack: SendBack,
  signal: AbortSignal,
): Promise<void> {
  const { turn } = input;
  const providerId = input.tts.provider;
  if (!isTtsProviderId(providerId)) throw new Error(`unknown tts provider ${providerId}`);
  const provider = ctx.tts(providerId);
  const startedAt = performance.now();
  const elapsed = () => Math.round(performance.now() - startedAt);
  let started = false;
  let firstAudio = false;
  let sentenceIndex = 0;
  for await (const { text, expressions = [], filler } of segments) {
    if (signal.aborted) throw signal.reason;
    if (!text.trim()) continue;
    if (!started) {
      started = true;
      ctx.events.publish('tts', { stage: 'start', ms_elapsed: 0, sentence_index: sentenceIndex });
    }
    let lastIndex = 0;
    let segmentSamples = 0;
    // Providers synthesise `splitSentences(text)` one by one: a chunk's `sentenceIndex` names its sentence's text.
    const sentences = splitSentences(text);
    let captioned = -1;
    for await (const chunk of provider.synthesize({
      text,
      voice: input.tts.voice,
      model: input.tts.model,
      sampleRate: ctx.sampleRate,
      signal,
    })) {
      if (signal.aborted) throw signal.reason;
      lastIndex = chunk.sentenceIndex ?? 0;
      if (!firstAudio) {
        firstAudio = true;
        ctx.events.publish('tts', {
          stage: 'first_audio',
          ms_elapsed: elapsed(),
          sentence_index: sentenceIndex + lastIndex,
        });
        ctx.metrics.mark(turn.id, 'first_audio_queued_ms');
        sendBack({ type: 'TTS.FIRST_AUDIO' });
      }
      await ctx.media.waitForRoom(signal);
      // Each sentence's caption goes with its first audio: the clock emits it as that audio starts to be heard.
      const caption =
        lastIndex !== captioned ? (sentences[lastIndex] ?? (lastIndex === 0 ? text : undefined)) : undefined;
      captioned = lastIndex;
      // The segment's tags start with its first audio: queued right behind the speech already queued.
      for (const tag of expressions.splice(0)) showReplyExpression(ctx, tag);
      ctx.media.enqueue(turn, chunk.pcm, buildMouthTimeline(chunk), sentenceIndex + lastIndex, caption);
      segmentSamples += chunk.pcm.length;
    }
    // A segment that gave no audio still shows its tags, after the speech before it.
    for (const tag of expressions.splice(0)) showReplyExpression(ctx, tag);
    sentenceIndex += lastIndex + 1;
    // The llm actor (history) and the transcript keep what the listener heard: they learn here how long each segment plays.
    const durationMs = (segmentSamples * 1000) / ctx.sampleRate;
    const queued = { text, durationMs, ...(filler ? { filler } : {}) };
    ctx.events.segmentQueued(turn.id, queued);
    if (turn.mode === 'chat') sendBack({ type: 'TTS.QUEUED', ...queued });
  }
  if (started)
    ctx.events.publish('tts', {
      stage: 'complete',
      ms_elapsed: elapsed(),
      sentence_index: Math.max(0, sentenceIndex - 1),
    });
}

async function playDirectAudio(
  ctx: StageContext,
  turn: TurnInfo,
  sendBack: SendBack,
  signal: AbortSignal,
): Promise<void> {
  const audio = turn.audio;
  if (!audio) throw new Error('turn audio missing');
  const chunks = audio.kind === 'clip' ? [audio.pcm] : audio.chunks;
  let first = true;
  for await (const raw of untilAbortedEach(chunks, signal)) {
    if (raw.length === 0) continue;
    const pcm = turn.smoothing ? ctx.smoothAudio(raw) : raw;
    if (first) {
      first = false;
      ctx.metrics.mark(turn.id, 'first_audio_queued_ms');
      sendBack({ type: 'TTS.FIRST_AUDIO' });
    }
    await ctx.media.waitForRoom(signal);
    ctx.media.enqueue(turn, pcm, buildMouthTimeline({ pcm, sampleRate: ctx.sampleRate }));
  }
}

/**
 * Iterates `source` until `signal` aborts: a stream whose producer went quiet (a WebSocket client that
 * stopped sending) must not keep a stopped turn waiting for its next chunk.
 */
async function* untilAbortedEach<T>(source: AsyncIterable<T> | Iterable<T>, signal: AbortSignal): AsyncGenerator<T> {
  const iterator = Symbol.asyncIterator in source ? source[Symbol.asyncIterator]() : toAsync(source[Symbol.iterator]());
  try {
    for (;;) {
      const next = await untilAborted(iterator.next(), signal);
      if (next.done) return;
      yield next.value;
    }
  } finally {
    // Only a finished or aborted iteration gets here; returning lets the source release what it holds.
    void iterator.return?.();
  }
}

function toAsync<T>(iterator: Iterator<T>): AsyncIterator<T> {
  return { next: async () => iterator.next() };
}
