import type { Logger } from 'pino';
import type { SessionEvent } from '../../machines/session.machine.ts';
import type { TtsProvider, TtsProviderId } from '../tts/types.ts';
import type { LlmProvider, ToolRunner } from '../llm/types.ts';
import type { AsrProvider } from '../asr/types.ts';
import { isAbortError } from '../upstream/abort.ts';
import type { ConversationHistory } from '../llm/history.ts';
import type { StageBus, StageMedia, StageMetrics } from './ports.ts';
import { stageErrorOf } from './errors.ts';

/** What the stage actors of one session need; the session owns all of it. */
export interface StageContext {
  sessionId: string;
  sampleRate: number;
  logger: Logger;
  /** The session's bus: `publish` puts a spec event out for SSE clients (the hub subscribes). */
  events: StageBus;
  media: StageMedia;
  history: ConversationHistory;
  tts(id: TtsProviderId): TtsProvider;
  llm: LlmProvider;
  /** The session's tools (function calling in chat turns); absent: the model is offered none. */
  tools?: ToolRunner;
  /** SERVICE_THINKING_FILLER_TEXT: said once in a chat turn whose reply is slow to start (`actors/llm/filler.ts`); null/absent: silence. */
  thinkingFillerText?: string | null;
  asr: AsrProvider;
  /** Per-turn latency bookkeeping (`GET /sessions/{id}/metrics`). */
  metrics: StageMetrics;
  /** Applies rt-family segmentation and smoothing to direct audio. */
  smoothAudio(pcm: Int16Array): Int16Array;
}

export type SendBack = (event: SessionEvent) => void;

/** Runs an async stage body; reports completion or a (non-abort) failure to the machine. */
export function runStage(
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
      if (controller.signal.aborted || isAbortError(error, { includeTimeout: false })) return;
      const { code, message, fatal } = stageErrorOf(stage, error);
      ctx.logger.warn({ stage, code, err: message }, 'stage failed');
      sendBack({ type: 'STAGE.ERROR', code, message, fatal });
    },
  );
  return () => controller.abort(new DOMException('stage stopped', 'AbortError'));
}
