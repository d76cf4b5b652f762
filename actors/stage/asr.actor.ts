import { fromCallback, type EventObject } from 'xstate';
import type { AsrInput, TranscribeRequest } from '../../machines/session.machine.ts';
import { splitForAsr } from '../audio/vad.ts';
import { runStage, type StageContext } from './stage.ts';

/**
 * A transcription: the upload (carried on the TRANSCRIBE event) through the speech recogniser; SSE
 * `transcript`, the waiting request's result, then ASR.DONE with the text. Stopped early, the request is
 * answered with an AbortError (the route's 409).
 */
export function createAsrActor(ctx: StageContext) {
  return fromCallback<EventObject, AsrInput>(({ input, sendBack }) => {
    const { request } = input;
    const stop = runStage(ctx, 'asr', sendBack, async (signal) => {
      try {
        const transcript = await transcribeInPieces(ctx, request, signal);
        ctx.metrics.mark(request.id, 'transcript_ms');
        ctx.events.publish('transcript', { text: transcript, is_final: true });
        request.result.resolve(transcript);
        return { type: 'ASR.DONE', text: transcript };
      } catch (error) {
        request.result.reject(error);
        throw error;
      }
    });
    return () => {
      stop();
      request.result.reject(new DOMException('transcription stopped', 'AbortError'));
    };
  });
}

/**
 * Whisper-style recognisers work on windows of about 30 s. Longer uploads are cut at pauses found by the
 * VAD (silence between pieces is dropped, which also stops hallucinated text on long silence) and sent
 * piece by piece, with a partial transcript event after each. Shorter ones go upstream untouched.
 */
export const ASR_SINGLE_REQUEST_MAX_MS = 30_000;

async function transcribeInPieces(ctx: StageContext, request: TranscribeRequest, signal: AbortSignal): Promise<string> {
  const durationMs = (request.pcm.length / request.sampleRate) * 1000;
  if (durationMs <= ASR_SINGLE_REQUEST_MAX_MS) {
    const { text } = await ctx.asr.transcribe({ pcm: request.pcm, sampleRate: request.sampleRate, signal });
    return text.trim();
  }
  const pieces = await splitForAsr(request.pcm, request.sampleRate, ASR_SINGLE_REQUEST_MAX_MS, { signal });
  const texts: string[] = [];
  for (const piece of pieces) {
    signal.throwIfAborted();
    const { text } = await ctx.asr.transcribe({ pcm: piece.pcm, sampleRate: request.sampleRate, signal });
    if (text.trim()) texts.push(text.trim());
    ctx.events.publish('transcript', { text: texts.join(' '), is_final: false });
  }
  return texts.join(' ');
}
