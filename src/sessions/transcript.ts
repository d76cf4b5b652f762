import type { Logger } from 'pino';
import { heardReply, type QueuedSegment } from '../../actors/llm/heard.ts';
import { errorForLog } from '../logger.ts';
import type { StoredTranscript, TranscriptStore, TranscriptToolCall, TranscriptTurn } from '../store/transcripts.ts';
import type { SessionBus, TurnKind, TurnOutcome } from './session-bus.ts';

export type { TranscriptToolCall, TranscriptTurn };

/**
 * Turns a session's transcript keeps (`GET /sessions/{id}/transcript`): the newest ones, older turns are dropped.
 * 200 turns are an hour of brisk conversation and at most a few hundred KB of JSON in LevelDB (a turn's text is
 * bounded by the request and the model's reply), rewritten once per turn.
 */
export const TRANSCRIPT_MAX_TURNS = 200;
/**
 * Tool calls kept per turn: the chat loop's rounds and parallel calls are bounded there; this keeps a transcript
 * bounded even if that bound grows.
 */
export const TRANSCRIPT_MAX_TOOL_CALLS = 64;
/** Expressions kept per turn: a reply tags a few; a client posting them in a loop must not grow the transcript. */
export const TRANSCRIPT_MAX_EXPRESSIONS = 64;

/** A turn as it is being recorded: the transcript entry plus the segments its speech queued. */
interface OpenTurn {
  entry: Omit<TranscriptTurn, 'outcome' | 'ended_at' | 'heard_text'>;
  segments: QueuedSegment[];
}

/** The session's media as the recorder asks it: how much of a turn left for the listener. */
export interface PlayedMedia {
  playedMsOf(turnId: string): number;
}

/**
 * Records one session's transcript from its bus: `turn.started` opens an entry (speak: the spoken text; chat: the
 * prompt), the final `transcript` event is the user's words of a voice or transcribe turn, `llm` deltas the
 * assistant's, `tool_call`/`tool.result` its tool calls, `tts.queued` the segments sent to playout, and
 * `turn.finished` closes it with its outcome and what was heard (`heardReply` over the media clock's played ms,
 * as the chat history keeps it). `onTurn` gets every finished entry.
 */
export class TranscriptRecorder {
  private readonly finished: TranscriptTurn[] = [];
  private readonly open = new Map<string, OpenTurn>();
  /** Spec events carry no turn id of their own (the hub adds it for clients): the machine's current turn. */
  private current: string | null = null;

  constructor(
    bus: SessionBus,
    private readonly media: PlayedMedia,
    private readonly onTurn: (turn: TranscriptTurn) => void,
  ) {
    bus.on('turn.started', ({ turnId, kind, text }) => {
      this.current = turnId;
      this.open.set(turnId, { entry: newEntry(turnId, kind, text), segments: [] });
    });
    bus.on('turn.finished', ({ turnId, outcome }) => {
      if (this.current === turnId) this.current = null;
      this.finish(turnId, outcome);
    });
    bus.on('tts.queued', ({ turnId, text, durationMs }) => this.open.get(turnId)?.segments.push({ text, durationMs }));
    bus.on('tool.result', ({ turnId, callId, ok }) => {
      const call = this.open.get(turnId)?.entry.tool_calls.find((c) => c.call_id === callId);
      if (call) call.ok = ok;
    });
    bus.on('spec', (record) => {
      if (record.type === 'tool_call') {
        const calls = this.open.get(record.data.turn_id)?.entry.tool_calls;
        if (calls && calls.length < TRANSCRIPT_MAX_TOOL_CALLS) {
          calls.push({ call_id: record.data.call_id, name: record.data.name, arguments: record.data.arguments, ok: null });
        }
        return;
      }
      const turn = this.current ? this.open.get(this.current) : undefined;
      if (!turn) return;
      if (record.type === 'expression') {
        const { name, intensity, source, start_ms } = record.data;
        const expressions = (turn.entry.expressions ??= []);
        if (expressions.length < TRANSCRIPT_MAX_EXPRESSIONS) expressions.push({ name, intensity, source, start_ms });
      } else if (record.type === 'llm') turn.entry.assistant_text = (turn.entry.assistant_text ?? '') + record.data.delta;
      else if (record.type === 'transcript' && record.data.is_final) turn.entry.user_text = record.data.text;
    });
  }

  /** The finished turns, oldest first. */
  turns(): TranscriptTurn[] {
    return [...this.finished];
  }

  private finish(turnId: string, machineOutcome: TurnOutcome): void {
    const turn = this.open.get(turnId);
    if (!turn) return;
    this.open.delete(turnId);
    const outcome = transcriptOutcome(machineOutcome);
    const { assistant_text } = turn.entry;
    // A reply played to its end was heard whole; a cut one as far as its audio left (a segment cut midway counts).
    const heard_text =
      assistant_text === null ? null : outcome === 'completed' ? assistant_text : heardReply(turn.segments, this.media.playedMsOf(turnId));
    const entry: TranscriptTurn = { ...turn.entry, heard_text, outcome, ended_at: new Date().toISOString() };
    this.finished.push(entry);
    if (this.finished.length > TRANSCRIPT_MAX_TURNS) this.finished.splice(0, this.finished.length - TRANSCRIPT_MAX_TURNS);
    this.onTurn(entry);
  }
}

function newEntry(turnId: string, kind: TurnKind, text: string | undefined): OpenTurn['entry'] {
  const said = kind === 'speak' ? (text ?? null) : null;
  const asked = kind === 'chat' ? (text ?? null) : null;
  return { turn_id: turnId, kind, user_text: asked, assistant_text: said, tool_calls: [], started_at: new Date().toISOString() };
}

/** The transcript's four outcomes: a turn cut by the session ending was interrupted like any other cut turn. */
function transcriptOutcome(outcome: TurnOutcome): TranscriptTurn['outcome'] {
  return outcome === 'terminated' ? 'interrupted' : outcome;
}

/**
 * Every session's transcript: recorded live (`follow`), persisted after each turn so it survives a restart, and kept
 * after termination exactly as long as the tombstone (`retain` stamps the tombstone's expiry, `sweep` removes it
 * with the tombstone). One write at a time per session, in order, so an older transcript never overwrites a newer.
 */
export class SessionTranscripts {
  private readonly live = new Map<string, { recorder: TranscriptRecorder; writes: Promise<void> }>();

  constructor(
    private readonly store: TranscriptStore,
    private readonly logger: Logger,
  ) {}

  /** Starts recording a session; `onTurn` hears each finished turn after it was handed to the store. */
  follow(sessionId: string, bus: SessionBus, media: PlayedMedia, onTurn: (turn: TranscriptTurn) => void): void {
    const recorder = new TranscriptRecorder(bus, media, (turn) => {
      this.persist(sessionId, undefined);
      onTurn(turn);
    });
    this.live.set(sessionId, { recorder, writes: Promise.resolve() });
  }

  /** The session ended: its transcript is written once more with the tombstone's expiry, then left to the store. */
  async retain(sessionId: string, expiresAt: string | undefined): Promise<void> {
    if (!this.live.has(sessionId)) return;
    await this.persist(sessionId, expiresAt);
    this.live.delete(sessionId);
  }

  /** A session that was live when the service stopped got its tombstone at start-up: its stored transcript gets its expiry. */
  async expireWith(sessionId: string, expiresAt: string | undefined): Promise<void> {
    const stored = await this.store.get(sessionId);
    if (stored && expiresAt) await this.store.put({ ...stored, expires_at: expiresAt });
  }

  /** A live session's turns, else what the store kept; undefined when none was recorded. */
  async turnsOf(sessionId: string): Promise<TranscriptTurn[] | undefined> {
    const live = this.live.get(sessionId);
    if (live) return live.recorder.turns();
    return (await this.store.get(sessionId))?.turns;
  }

  /** Removes the transcript of a tombstone that expired (the tombstone sweep calls it). */
  async remove(sessionId: string): Promise<void> {
    await this.store.delete(sessionId);
  }

  /** Transcripts whose session is gone for good (expired, or a tombstone that no longer exists): `isKept` decides. */
  async sweep(isKept: (transcript: StoredTranscript) => Promise<boolean>): Promise<void> {
    for (const transcript of await this.store.all()) {
      if (this.live.has(transcript.session_id)) continue;
      if (!(await isKept(transcript))) await this.store.delete(transcript.session_id);
    }
  }

  private persist(sessionId: string, expiresAt: string | undefined): Promise<void> {
    const live = this.live.get(sessionId);
    if (!live) return Promise.resolve();
    const record: StoredTranscript = { session_id: sessionId, turns: live.recorder.turns(), ...(expiresAt ? { expires_at: expiresAt } : {}) };
    const written = live.writes.then(() => this.store.put(record));
    live.writes = written.catch((error: unknown) => this.logger.warn({ sessionId, err: errorForLog(error) }, 'transcript not persisted'));
    return live.writes;
  }
}
