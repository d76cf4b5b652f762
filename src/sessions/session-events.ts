/**
 * The vocabulary of a session's client events (spec 6.1): what the SSE hub streams, the bus relays and the schemas
 * (`src/schemas/events.ts`) are checked against. Its own file, below both the bus (`session-bus.ts`) and the hub
 * (`event-hub.ts`), so neither imports the other for it.
 */
import type { StageEventMap } from '../../actors/stage/ports.ts';

/** The spec events (6.1): those the stage actors publish (`StageEventMap`) and the session's own. */
export interface SessionEventMap extends StageEventMap {
  frame: { frame_idx: number; pts_ms: number };
  /** `turn_id`: the machine's turn when it emitted the status (the hub adds it to the other turn events). */
  status: { stage: string; message?: string; turn_id?: string };
  /** `output_id`: an output's failure (`output_failed`, docs/streaming.md), which belongs to no turn. */
  error: { code: string; message: string; output_id?: string };
  'session.terminated': Record<string, never>;
  /** A tool call of a chat turn (`tools.ts`): a client tool's client answers it on `POST /sessions/{id}/tool_results`. */
  tool_call: { turn_id: string; call_id: string; name: string; arguments: Record<string, unknown> };
  /** A sentence of a turn as it starts to be heard at the viewer (the media clock's `caption`, docs/events.md). */
  caption: { turn_id: string; text: string; start_ms: number; end_ms: number };
}
export type SessionEventType = keyof SessionEventMap;
export type SessionEventRecord = { [K in SessionEventType]: { type: K; data: SessionEventMap[K] } }[SessionEventType];
