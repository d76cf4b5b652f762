import type { Logger } from 'pino';
import { heardReply } from '../../actors/llm/heard.ts';
import type { TurnHandle } from '../../actors/stage/ports.ts';
import { InvalidInput } from '../domain-errors.ts';
import { errorForLog } from '../logger.ts';
import type {
  KeptTurn,
  TranscriptIndex,
  TranscriptStore,
  TranscriptToolCall,
  TranscriptTurn,
} from '../store/transcripts.ts';
import type { SessionBus, TurnKind, TurnOutcome } from './session-bus.ts';
import type { TranscriptDraft, Turn } from './turn.ts';

export type { TranscriptToolCall, TranscriptTurn };

/**
 * Turns a session's transcript keeps (`GET /sessions/{id}/transcript`): the newest ones, older turns are dropped.
 * 200 turns are an hour of brisk conversation; TRANSCRIPT_MAX_BYTES may keep fewer when turns are long.
 */
export const TRANSCRIPT_MAX_TURNS = 200;
/**
 * One text of a turn (user_text, assistant_text, heard_text) at most, in UTF-8 bytes: a whole 10,000-character speak
 * text or chat prompt (SPEAK_MAX_CHARS, CHAT_MAX_CHARS) in plain ASCII fits. A longer one (a CJK text that long, a
 * model's endless reply) keeps its first bytes, cut at a character boundary, and ends with `…`.
 */
export const TRANSCRIPT_TEXT_MAX_BYTES = 12 * 1024;
/**
 * One turn's JSON at most (three full texts and their tool calls): the unit the transcript and the `turn.completed`
 * webhook carry. Past it the tool calls' arguments are emptied (`{}`), then the last calls left out.
 */
export const TRANSCRIPT_TURN_MAX_BYTES = 40 * 1024;
/**
 * One session's kept turns at most, in JSON bytes: older turns are dropped past it (as past TRANSCRIPT_MAX_TURNS).
 * 200 ordinary turns (~1–3 KB) fit; at the per-turn budget ~25 do. This is what one read costs at most: 200 turns of
 * 10,000 characters made a 12 MB transcript whose concurrent reads stalled the event loop (issue 42, H3).
 */
export const TRANSCRIPT_MAX_BYTES = 1024 * 1024;
/**
 * Every kept transcript together at most, in JSON bytes (LevelDB adds its own overhead until it compacts): past it the
 * transcripts of ended sessions are removed whole, the least recently written first, before their tombstone expires.
 * 64 sessions at TRANSCRIPT_MAX_BYTES, or thousands of ordinary ones; without it one client could fill the disk at
 * ~1.5 MB/s (issue 42, H4). Live sessions are never cut here: they are bounded by SERVICE_MAX_SESSIONS ×
 * TRANSCRIPT_MAX_BYTES.
 */
export const TRANSCRIPTS_MAX_TOTAL_BYTES = 64 * 1024 * 1024;
/**
 * Tool calls kept per turn: the chat loop's rounds and parallel calls are bounded there; this keeps a transcript
 * bounded even if that bound grows.
 */
export const TRANSCRIPT_MAX_TOOL_CALLS = 64;
/** Expressions kept per turn: a reply tags a few; a client posting them in a loop must not grow the transcript. */
export const TRANSCRIPT_MAX_EXPRESSIONS = 64;

/** The session's media as the recorder asks it: how much of a turn left for the listener. */
export interface PlayedMedia {
  playedMsOf(turn: TurnHandle): number;
}

/**
 * Records one session's transcript from its bus: `turn.started` opens an entry (speak: the spoken text; chat: the
 * prompt), the final `transcript` event is the user's words of a voice or transcribe turn, `llm` deltas the
 * assistant's, `tool_call`/`tool.result` its tool calls, `tts.queued` the segments sent to playout, and
 * `turn.finished` closes it with its outcome and what was heard (`heardReply` over the media clock's played ms,
 * as the chat history keeps it). `onTurn` gets every finished entry (whole: `SessionTranscripts` applies the budgets).
 */
export class TranscriptRecorder {
  constructor(
    bus: SessionBus,
    private readonly media: PlayedMedia,
    private readonly onTurn: (turn: TranscriptTurn) => void,
  ) {
    // Each follower reaches the running turn's record by the id its event carries (`SessionBus.turn`).
    const recorded = (turnId: string) => {
      const turn = bus.turn(turnId);
      return turn?.transcript ? { turn, entry: turn.transcript } : null;
    };
    bus.on('turn.started', ({ turnId, kind, text }) => {
      const turn = bus.turn(turnId);
      if (turn) turn.transcript = newEntry(turnId, kind, text);
    });
    bus.on('turn.finished', ({ turnId, outcome }) => {
      const open = recorded(turnId);
      if (open) this.finish(open.turn, open.entry, outcome);
    });
    bus.on('tts.queued', ({ turnId, ...segment }) => recorded(turnId)?.turn.segments.push(segment));
    bus.on('tool.result', ({ turnId, callId, ok }) => {
      const call = recorded(turnId)?.entry.tool_calls.find((c) => c.call_id === callId);
      if (call) call.ok = ok;
    });
    bus.on('spec', (record) => {
      if (record.type === 'tool_call') {
        const calls = recorded(record.data.turn_id)?.entry.tool_calls;
        if (calls && calls.length < TRANSCRIPT_MAX_TOOL_CALLS) {
          calls.push({
            call_id: record.data.call_id,
            name: record.data.name,
            arguments: record.data.arguments,
            ok: null,
          });
        }
        return;
      }
      // Spec events carry no turn id of their own (the hub adds it for clients): they belong to the running turn.
      const entry = bus.runningTurn?.transcript;
      if (!entry) return;
      if (record.type === 'expression') {
        const { name, intensity, source, start_ms } = record.data;
        const expressions = (entry.expressions ??= []);
        if (expressions.length < TRANSCRIPT_MAX_EXPRESSIONS) expressions.push({ name, intensity, source, start_ms });
      } else if (record.type === 'llm') entry.assistant_text = (entry.assistant_text ?? '') + record.data.delta;
      else if (record.type === 'transcript' && record.data.is_final) entry.user_text = record.data.text;
    });
  }

  private finish(turn: Turn, draft: TranscriptDraft, machineOutcome: TurnOutcome): void {
    // Recorded once: a second `turn.finished` for it finds no draft.
    turn.transcript = null;
    const outcome = transcriptOutcome(machineOutcome);
    const { assistant_text } = draft;
    // A reply played to its end was heard whole; a cut one as far as its audio left (a segment cut midway counts).
    const heard_text =
      assistant_text === null
        ? null
        : outcome === 'completed'
          ? assistant_text
          : heardReply(turn.segments, this.media.playedMsOf(turn));
    const entry: TranscriptTurn = { ...draft, heard_text, outcome, ended_at: new Date().toISOString() };
    this.onTurn(entry);
  }
}

function newEntry(turnId: string, kind: TurnKind, text: string | undefined): TranscriptDraft {
  const said = kind === 'speak' ? (text ?? null) : null;
  const asked = kind === 'chat' ? (text ?? null) : null;
  return {
    turn_id: turnId,
    kind,
    user_text: asked,
    assistant_text: said,
    tool_calls: [],
    started_at: new Date().toISOString(),
  };
}

/** The transcript's four outcomes: a turn cut by the session ending was interrupted like any other cut turn. */
function transcriptOutcome(outcome: TurnOutcome): TranscriptTurn['outcome'] {
  return outcome === 'terminated' ? 'interrupted' : outcome;
}

/**
 * Ended sessions' whole transcripts kept serialised in memory, most recently read first: an ended transcript no
 * longer changes, so concurrent and repeated reads share one string instead of each reading up to
 * TRANSCRIPT_MAX_BYTES from LevelDB (20 concurrent readers took RSS +130 MB that way). 8 × 1 MiB at most.
 */
export const TRANSCRIPT_READ_CACHE_ENTRIES = 8;

/** A finished turn within TRANSCRIPT_TURN_MAX_BYTES, and its JSON: what the transcript keeps and the webhook sends. */
export function budgetedTurn(whole: TranscriptTurn): { turn: TranscriptTurn; json: string } {
  let turn: TranscriptTurn = {
    ...whole,
    user_text: cut(whole.user_text),
    assistant_text: cut(whole.assistant_text),
    heard_text: cut(whole.heard_text),
  };
  let json = jsonOf(turn);
  if (json !== null && Buffer.byteLength(json) <= TRANSCRIPT_TURN_MAX_BYTES) return { turn, json };
  // Too big (or arguments that do not serialise): the calls stay, their arguments go; then calls from the end.
  turn = { ...turn, tool_calls: turn.tool_calls.map((call) => ({ ...call, arguments: {} })) };
  json = JSON.stringify(turn);
  while (Buffer.byteLength(json) > TRANSCRIPT_TURN_MAX_BYTES && turn.tool_calls.length > 0) {
    turn = { ...turn, tool_calls: turn.tool_calls.slice(0, -1) };
    json = JSON.stringify(turn);
  }
  return { turn, json };
}

const ELLIPSIS = '…';
const encoder = new TextEncoder();

/** `text` within TRANSCRIPT_TEXT_MAX_BYTES: whole, or its first characters that fit with `…` after them. */
function cut(text: string | null): string | null {
  if (
    text === null ||
    text.length * 3 <= TRANSCRIPT_TEXT_MAX_BYTES ||
    Buffer.byteLength(text) <= TRANSCRIPT_TEXT_MAX_BYTES
  )
    return text;
  // encodeInto stops before a character that does not fit whole (a surrogate pair stays together).
  const { read } = encoder.encodeInto(text, new Uint8Array(TRANSCRIPT_TEXT_MAX_BYTES - Buffer.byteLength(ELLIPSIS)));
  return text.slice(0, read) + ELLIPSIS;
}

/** JSON of a turn; null when its tool arguments cannot be serialised (too deep, a cycle): they are dropped then. */
function jsonOf(turn: TranscriptTurn): string | null {
  try {
    return JSON.stringify(turn);
  } catch {
    return null;
  }
}

/** Which part of a transcript a read wants: up to `limit` turns after the turn `after` (all kept turns without them). */
export interface TranscriptPage {
  after?: string;
  limit?: number;
}

/**
 * The answer of `GET /sessions/{id}/transcript`, built from turns serialised once when they ended (no parse, no
 * re-serialise), as the bytes sent: a cached body is encoded once, not once per read.
 */
export function transcriptBody(sessionId: string, turnsJson: readonly string[]): Buffer {
  return Buffer.from(`{"session_id":${JSON.stringify(sessionId)},"turns":[${turnsJson.join(',')}]}`);
}

/** A live session's kept turns (their JSON, in memory) and where its writes stand. */
interface LiveTranscript {
  turns: KeptTurn[];
  /** The whole body as last read, until the next turn: concurrent readers share it. */
  body: Buffer | null;
  bytes: number;
  nextSeq: number;
  index: TranscriptIndex | null;
  writes: Promise<void>;
}

export interface TranscriptBudgets {
  /** TRANSCRIPT_MAX_BYTES unless told (tests). */
  maxBytes?: number;
  /** TRANSCRIPTS_MAX_TOTAL_BYTES unless told (tests). */
  maxTotalBytes?: number;
}

/**
 * Every session's transcript: recorded live (`follow`), each finished turn cut to its budget, serialised once and
 * appended to the store (one record per turn, with a small index; never a rewrite), so it survives a restart. Kept
 * after termination as long as the tombstone (`retain` stamps the tombstone's expiry, `sweep` removes it with the
 * tombstone), or until the global byte bound removes it (oldest first). One write at a time per session, in order.
 */
export class SessionTranscripts {
  private readonly live = new Map<string, LiveTranscript>();
  /** JSON bytes of every stored transcript, least recently written first (the global bound's order). */
  private readonly retained = new Map<string, number>();
  private retainedBytes = 0;
  private removals: Promise<void> = Promise.resolve();
  /** Whole bodies of ended transcripts, least recently read first (TRANSCRIPT_READ_CACHE_ENTRIES). */
  private readonly endedBodies = new Map<string, Promise<Buffer>>();
  private readonly maxBytes: number;
  private readonly maxTotalBytes: number;

  constructor(
    private readonly store: TranscriptStore,
    private readonly logger: Logger,
    budgets: TranscriptBudgets = {},
  ) {
    this.maxBytes = budgets.maxBytes ?? TRANSCRIPT_MAX_BYTES;
    this.maxTotalBytes = budgets.maxTotalBytes ?? TRANSCRIPTS_MAX_TOTAL_BYTES;
  }

  /** Start-up: what earlier runs kept, in the global bound's order (whole transcripts of an earlier version re-appended). */
  async load(): Promise<void> {
    await this.store.migrateWholeTranscripts(async ({ session_id, turns, expires_at }) => {
      const transcript = newTranscript();
      for (const turn of turns) this.append(session_id, transcript, budgetedTurn(turn));
      await transcript.writes;
      if (transcript.index && expires_at) await this.store.putIndex({ ...transcript.index, expires_at });
    });
    this.retained.clear();
    this.retainedBytes = 0;
    const indexes = await this.store.allIndexes();
    for (const index of indexes.sort((a, b) => a.updated_at - b.updated_at))
      this.noteStored(index.session_id, index.bytes);
    await this.removeOverBudget();
  }

  /** Starts recording a session; `onTurn` hears each finished turn (within its budget) after it was handed to the store. */
  follow(sessionId: string, bus: SessionBus, media: PlayedMedia, onTurn: (turn: TranscriptTurn) => void): void {
    const live = newTranscript();
    // The bus holds the recorder (its listeners) as long as the session lives.
    new TranscriptRecorder(bus, media, (whole) => {
      const budgeted = budgetedTurn(whole);
      if (this.live.get(sessionId) === live) this.append(sessionId, live, budgeted);
      onTurn(budgeted.turn);
    });
    this.live.set(sessionId, live);
  }

  /** The session ended: its index gets the tombstone's expiry, then the transcript is left to the store. */
  async retain(sessionId: string, expiresAt: string | undefined): Promise<void> {
    const live = this.live.get(sessionId);
    if (!live) return;
    await live.writes;
    if (live.index && expiresAt) {
      await this.store
        .putIndex({ ...live.index, expires_at: expiresAt })
        .catch((error: unknown) => this.notPersisted(sessionId, error));
    }
    this.live.delete(sessionId);
  }

  /** A session that was live when the service stopped got its tombstone at start-up: its stored transcript gets its expiry. */
  async expireWith(sessionId: string, expiresAt: string | undefined): Promise<void> {
    const index = await this.store.index(sessionId);
    if (index && expiresAt) await this.store.putIndex({ ...index, expires_at: expiresAt });
  }

  /**
   * The transcript's JSON body (`{session_id, turns}`), live or stored, optionally one page of it; undefined when none
   * was recorded. `InvalidInput` when `after` is not a kept turn.
   */
  async read(sessionId: string, page: TranscriptPage = {}): Promise<Buffer | undefined> {
    const limit = page.limit ?? TRANSCRIPT_MAX_TURNS;
    const live = this.live.get(sessionId);
    if (live && page.after === undefined && page.limit === undefined) {
      live.body ??= transcriptBody(
        sessionId,
        live.turns.map((turn) => turn.json),
      );
      return live.body;
    }
    if (live) {
      const from = page.after === undefined ? 0 : live.turns.findIndex((turn) => turn.turnId === page.after) + 1;
      if (from === 0 && page.after !== undefined) throw notKept();
      return transcriptBody(
        sessionId,
        live.turns.slice(from, from + limit).map((turn) => turn.json),
      );
    }
    if (!this.retained.has(sessionId)) {
      if (page.after !== undefined) throw notKept();
      return undefined;
    }
    if (page.after === undefined && page.limit === undefined) return this.endedBody(sessionId);
    const turns = await this.store.page(sessionId, page.after, limit);
    if (turns === null) throw notKept();
    return transcriptBody(sessionId, turns);
  }

  /** An ended transcript's whole body: read from the store once, then shared while it stays in the cache. */
  private endedBody(sessionId: string): Promise<Buffer> {
    let body = this.endedBodies.get(sessionId);
    if (body) this.endedBodies.delete(sessionId);
    body ??= this.store
      .page(sessionId, undefined, TRANSCRIPT_MAX_TURNS)
      .then((turns) => transcriptBody(sessionId, turns ?? []));
    this.endedBodies.set(sessionId, body);
    // A failed read is not kept.
    body.catch(() => this.endedBodies.get(sessionId) === body && this.endedBodies.delete(sessionId));
    for (const oldest of this.endedBodies.keys()) {
      if (this.endedBodies.size <= TRANSCRIPT_READ_CACHE_ENTRIES) break;
      this.endedBodies.delete(oldest);
    }
    return body;
  }

  /** Removes the transcript of a tombstone that expired (the tombstone sweep calls it). */
  async remove(sessionId: string): Promise<void> {
    this.forgetStored(sessionId);
    await this.store.delete(sessionId);
  }

  /** Transcripts whose session is gone for good (expired, or a tombstone that no longer exists): `isKept` decides. */
  async sweep(isKept: (transcript: TranscriptIndex) => Promise<boolean>): Promise<void> {
    for (const index of await this.store.allIndexes()) {
      if (this.live.has(index.session_id)) continue;
      if (!(await isKept(index))) await this.remove(index.session_id);
    }
  }

  /** Appends a turn, dropping the oldest past the session's budgets, and queues its write; then the global bound. */
  private append(
    sessionId: string,
    transcript: LiveTranscript,
    { turn, json }: { turn: TranscriptTurn; json: string },
  ): void {
    const kept: KeptTurn = { seq: transcript.nextSeq++, turnId: turn.turn_id, json, bytes: Buffer.byteLength(json) };
    transcript.turns.push(kept);
    transcript.body = null;
    transcript.bytes += kept.bytes;
    const dropped: KeptTurn[] = [];
    while (
      transcript.turns.length > 1 &&
      (transcript.turns.length > TRANSCRIPT_MAX_TURNS || transcript.bytes > this.maxBytes)
    ) {
      const oldest = transcript.turns.shift()!;
      transcript.bytes -= oldest.bytes;
      dropped.push(oldest);
    }
    const index: TranscriptIndex = {
      session_id: sessionId,
      first_seq: transcript.turns[0].seq,
      next_seq: transcript.nextSeq,
      bytes: transcript.bytes,
      updated_at: Date.now(),
    };
    transcript.index = index;
    this.noteStored(sessionId, index.bytes);
    transcript.writes = transcript.writes
      .then(() => this.store.append(index, kept, dropped))
      .catch((error: unknown) => this.notPersisted(sessionId, error));
    void this.removeOverBudget();
  }

  private notPersisted(sessionId: string, error: unknown): void {
    this.logger.warn({ sessionId, err: errorForLog(error) }, 'transcript not persisted');
  }

  /** Stored (or about to be): moves to the newest end of the global bound's order. */
  private noteStored(sessionId: string, bytes: number): void {
    this.forgetStored(sessionId);
    this.retained.set(sessionId, bytes);
    this.retainedBytes += bytes;
  }

  private forgetStored(sessionId: string): void {
    this.endedBodies.delete(sessionId);
    this.retainedBytes -= this.retained.get(sessionId) ?? 0;
    this.retained.delete(sessionId);
  }

  /** Past TRANSCRIPTS_MAX_TOTAL_BYTES: ended sessions' transcripts go, least recently written first. */
  private removeOverBudget(): Promise<void> {
    const removed: string[] = [];
    for (const sessionId of this.retained.keys()) {
      if (this.retainedBytes <= this.maxTotalBytes) break;
      if (this.live.has(sessionId)) continue;
      this.forgetStored(sessionId);
      removed.push(sessionId);
    }
    if (removed.length === 0) return this.removals;
    this.logger.info({ transcripts: removed.length }, 'oldest transcripts removed to stay within their byte budget');
    this.removals = this.removals
      .then(async () => {
        for (const sessionId of removed) await this.store.delete(sessionId);
      })
      .catch((error: unknown) => this.logger.warn({ err: errorForLog(error) }, 'transcripts not removed'));
    return this.removals;
  }
}

function newTranscript(): LiveTranscript {
  return { turns: [], body: null, bytes: 0, nextSeq: 0, index: null, writes: Promise.resolve() };
}

function notKept(): InvalidInput {
  return new InvalidInput('after must be the turn_id of a turn this transcript keeps');
}
