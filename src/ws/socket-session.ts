import type { WebSocket } from 'ws';
import { Type, type Static } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { SessionNotFound } from '../domain-errors.ts';
import type { Session, SessionEventRecord } from '../sessions/index.ts';
import type { SessionSupervisor } from '../sessions/supervisor.ts';

/** Text frames are tiny control messages; anything larger is a client bug. */
export const MAX_CONTROL_MESSAGE_BYTES = 4096;
/** Messages to a client that does not read its socket (they are tiny) are dropped beyond this much unsent data. */
const MAX_UNSENT_BYTES = 64 * 1024;

export const CLOSE_NORMAL = 1000;
export const CLOSE_GOING_AWAY = 1001;
export const CLOSE_POLICY = 1008;
export const CLOSE_INTERNAL_ERROR = 1011;

/** Spec 6.2's client control messages; anything else is answered with an error message and ignored. */
const ConfigMessage = Type.Object(
  {
    type: Type.Literal('config'),
    sample_rate: Type.Optional(
      Type.Integer({ minimum: 8000, maximum: 48000, description: 'Sample rate of this stream' }),
    ),
  },
  { additionalProperties: false },
);
const EosMessage = Type.Object({ type: Type.Literal('eos') }, { additionalProperties: false });
const InterruptMessage = Type.Object({ type: Type.Literal('interrupt') }, { additionalProperties: false });
const ControlMessage = Type.Union([ConfigMessage, EosMessage, InterruptMessage]);
type ControlMessage = Static<typeof ControlMessage>;
/** Spec 6.2's control messages, compiled; both audio sockets take the same framing. */
const controlMessage = TypeCompiler.Compile(ControlMessage);

/**
 * The started session an audio socket is for, or undefined after closing the socket with why (unknown, ended or
 * not started): the admission both audio sockets (speak_audio_stream, listen) share.
 */
export async function startedSessionFor(
  socket: WebSocket,
  supervisor: SessionSupervisor,
  sessionId: string,
): Promise<Session | undefined> {
  let session: Session;
  try {
    session = await supervisor.requireSession(sessionId);
  } catch (error) {
    fail(socket, webSocketCodeOf(error), (error as Error).message, CLOSE_POLICY);
    return undefined;
  }
  const refusal = session.audioStreamRefusal;
  if (refusal !== null) {
    fail(socket, 'session_not_started', refusal, CLOSE_POLICY);
    return undefined;
  }
  return session;
}

/**
 * The WebSocket error code (docs/events.md) of a session an audio socket cannot have: the WebSocket side of the
 * domain errors (`src/domain-errors.ts`), as the error plugin is their HTTP side. An unknown session is
 * `session_not_found`; a terminated one, and anything else that keeps the session out of reach, `session_terminated`.
 */
function webSocketCodeOf(error: unknown): 'session_not_found' | 'session_terminated' {
  return error instanceof SessionNotFound ? 'session_not_found' : 'session_terminated';
}

/**
 * One audio socket of a session (spec 6.2's framing, shared by `speak_audio_stream` and `listen`): binary frames of
 * 16-bit PCM, text frames of control messages (`config` first, `eos`, `interrupt`). This skeleton reads the socket,
 * answers malformed frames with an error message (the socket stays open), keeps the stream's input rate, closes when
 * the session terminates and tears down once, whichever end comes first; a subclass says what audio, `eos` and
 * `interrupt` do.
 */
export abstract class SocketSession {
  /** The sample rate of the client's PCM: the session's unless its `config` said otherwise. */
  protected inputRate: number;
  protected closed = false;
  /** The client sent `eos` (set by the subclass's `onEos`): audio after it is ignored. */
  protected eos = false;
  /** Undone when the stream tears down: session event listeners. */
  protected readonly unsubscribe: Array<() => void> = [];
  private configured = false;
  private receivedAudio = false;
  private afterEosReported = false;

  constructor(
    protected readonly socket: WebSocket,
    protected readonly session: Session,
    /** The log line when handling a message failed (a static message per socket kind). */
    private readonly failureMessage: string,
  ) {
    this.inputRate = session.sampleRate;
  }

  run(): void {
    const { socket, session } = this;
    socket.on('message', (data, isBinary) => {
      if (this.closed) return;
      // Nothing a client sends may escape as an exception: ws would rethrow it and end the process.
      try {
        if (isBinary) this.onBinary(toBuffer(data));
        else this.onText(toBuffer(data));
      } catch (error) {
        session.log.warn({ err: (error as Error).message }, this.failureMessage);
        this.close(CLOSE_INTERNAL_ERROR, 'internal error');
      }
    });
    socket.on('close', () => this.teardown());
    socket.on('error', () => this.teardown());
    this.unsubscribe.push(
      session.onEvent((event) => {
        if (event.type === 'session.terminated') this.close(CLOSE_GOING_AWAY, 'session terminated');
        else this.onSessionEvent(event);
      }),
    );
  }

  /** A whole number of samples, not after eos, not empty. */
  protected abstract onAudio(raw: Buffer): void;
  protected abstract onEos(): void;
  protected abstract onInterrupt(): void;
  /** Releases what the stream holds; runs once, after the session listeners are gone. */
  protected abstract release(): void;

  /** Each session event but `session.terminated` (which closes the socket). */
  protected onSessionEvent(_event: SessionEventRecord): void {}

  /** A JSON message to the client, unless it is gone or does not read what it was sent. */
  protected send(message: object): void {
    if (this.socket.readyState !== this.socket.OPEN || this.socket.bufferedAmount > MAX_UNSENT_BYTES) return;
    this.socket.send(JSON.stringify(message));
  }

  protected close(code: number, reason: string): void {
    if (this.socket.readyState === this.socket.OPEN) this.socket.close(code, reason);
    this.teardown();
  }

  private onText(raw: Buffer): void {
    const message = readControlMessage(this.socket, raw);
    if (!message) return;
    switch (message.type) {
      case 'config':
        if (this.configured || this.receivedAudio)
          return sendError(this.socket, 'invalid_message', 'config must be the first message');
        if (message.sample_rate !== undefined) this.inputRate = message.sample_rate;
        this.configured = true;
        this.send({ type: 'ack' });
        return;
      case 'eos':
        return this.onEos();
      case 'interrupt':
        return this.onInterrupt();
    }
  }

  private onBinary(raw: Buffer): void {
    if (raw.length % 2 !== 0)
      return sendError(this.socket, 'invalid_audio', 'binary frames must hold whole 16-bit samples (even byte count)');
    if (this.eos) {
      if (!this.afterEosReported) sendError(this.socket, 'invalid_message', 'audio after eos is ignored');
      this.afterEosReported = true;
      return;
    }
    if (raw.length === 0) return;
    this.receivedAudio = true;
    this.onAudio(raw);
  }

  /** The client is gone (or the stream ended): runs once. */
  private teardown(): void {
    if (this.closed) return;
    this.closed = true;
    for (const off of this.unsubscribe.splice(0)) off();
    this.release();
  }
}

/** A text frame of spec 6.2 as a control message, or undefined after telling the client what is wrong with it. */
function readControlMessage(socket: WebSocket, raw: Buffer): ControlMessage | undefined {
  if (raw.length > MAX_CONTROL_MESSAGE_BYTES) {
    sendError(socket, 'invalid_message', `control messages are at most ${MAX_CONTROL_MESSAGE_BYTES} bytes`);
    return undefined;
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw.toString('utf8'));
  } catch {
    sendError(socket, 'invalid_message', 'text frames must be JSON control messages');
    return undefined;
  }
  if (controlMessage.Check(parsed)) return parsed;
  if (isObject(parsed) && parsed.type === 'config') {
    sendError(socket, 'invalid_config', 'config takes only sample_rate, an integer between 8000 and 48000');
  } else {
    sendError(socket, 'invalid_message', 'expected {"type": "config" | "eos" | "interrupt"}');
  }
  return undefined;
}

export function sendError(socket: WebSocket, code: string, message: string): void {
  if (socket.readyState !== socket.OPEN || socket.bufferedAmount > MAX_UNSENT_BYTES) return;
  socket.send(JSON.stringify({ type: 'error', code, message }));
}

export function fail(socket: WebSocket, code: string, message: string, closeCode: number): void {
  sendError(socket, code, message);
  if (socket.readyState === socket.OPEN) socket.close(closeCode, code);
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function toBuffer(data: unknown): Buffer {
  if (Buffer.isBuffer(data)) return data;
  if (Array.isArray(data)) return Buffer.concat(data as Buffer[]);
  return Buffer.from(data as ArrayBuffer);
}
