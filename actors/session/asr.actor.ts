import { fromCallback } from 'xstate';
import { splitForAsr } from '../audio/vad.ts';
import { runStage, type StageContext, type TranscribeJob } from './stage.ts';

/** A transcription: the upload through the speech recogniser; SSE `transcript`, then ASR.DONE with the text. */
export function createAsrActor(ctx: StageContext) {
  return fromCallback<{ type: string }, { sessionId: string; transcribeId: string }>(({ input, sendBack }) =>
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
