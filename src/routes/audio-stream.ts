import { randomUUID } from 'node:crypto';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { WebSocket } from 'ws';
import { Type, type Static } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { SessionIdParams } from '../schemas/common.ts';
import { SessionNotFound } from '../domain-errors.ts';
import { AsyncQueue, PLAYOUT_HIGH_WATER_MS, pcm16FromLittleEndian, resamplePcm16, type Session } from '../sessions/index.ts';
import type { SessionSupervisor } from '../sessions/supervisor.ts';

/** How often a paused socket checks whether playout made room again. */
const BACKPRESSURE_POLL_MS = 20;
/** After eos, the longest wait for the pipeline to flush before closing anyway (10 min of queued speech is absurd). */
const EOS_FLUSH_LIMIT_MS = 600_000;
/**
 * Audio held by this stream beyond the playout queue before the socket stops reading. Small, because the
 * playout already holds PLAYOUT_HIGH_WATER_MS and ws still delivers the rest of a socket read (≤ 64 KiB)
 * after `pause()`.
 */
const STREAM_QUEUE_HIGH_WATER_MS = 200;
/**
 * Inbound bound: audio read from the socket but not yet handed to the playout (at the stream's sample
 * rate). With the playout's own PLAYOUT_HIGH_WATER_MS a client may run about 4 s ahead of real time;
 * frames beyond it are dropped (`audio_overflow`), so a flooding client can neither grow server memory
 * nor keep the session speaking long after it stopped.
 */
export const INBOUND_AUDIO_LIMIT_MS = 2_000;
/**
 * Longest the socket stays paused for back-pressure. A client still ahead after this did not slow down
 * (or its kernel buffers already hold seconds of audio): the socket is read on and the excess dropped, so
 * its `interrupt`, `eos` or close are not held behind a backlog that would only play at real time.
 */
export const MAX_READ_PAUSE_MS = 250;
/**
 * After a REST interrupt that found the socket paused, audio the client sent earlier still sits in the
 * kernel. It arrives back to back once reading resumes; it is dropped until the socket has been quiet
 * this long (a real-time client sends every 10–20 ms, so at most its first fresh frame is lost)…
 */
const STALE_QUIET_MS = 5;
/** …or until this long has passed, whichever comes first. */
const STALE_DRAIN_LIMIT_MS = 1_000;
/** Text frames are tiny control messages; anything larger is a client bug. */
export const MAX_CONTROL_MESSAGE_BYTES = 4096;
/** Error messages to a client that does not read its socket are dropped beyond this much unsent data. */
const MAX_UNSENT_BYTES = 64 * 1024;

export const CLOSE_NORMAL = 1000;
export const CLOSE_GOING_AWAY = 1001;
export const CLOSE_POLICY = 1008;
export const CLOSE_INTERNAL_ERROR = 1011;

/** Spec 6.2's client control messages; anything else is answered with an error message and ignored. */
const ConfigMessage = Type.Object(
  {
    type: Type.Literal('config'),
    sample_rate: Type.Optional(Type.Integer({ minimum: 8000, maximum: 48000, description: 'Sample rate of this stream' })),
  },
  { additionalProperties: false },
);
const EosMessage = Type.Object({ type: Type.Literal('eos') }, { additionalProperties: false });
const InterruptMessage = Type.Object({ type: Type.Literal('interrupt') }, { additionalProperties: false });
const ControlMessage = Type.Union([ConfigMessage, EosMessage, InterruptMessage]);
export type ControlMessage = Static<typeof ControlMessage>;
/** Spec 6.2's control messages, compiled; `/listen` reuses the same framing. */
export const controlMessage = TypeCompiler.Compile(ControlMessage);

/**
 * `WebSocket /sessions/{id}/speak_audio_stream` (spec 6.2): PCM in, avatar speech out over WebRTC.
 * Back-pressure: the socket stops reading while queued speech is above the playout high-water mark, so
 * TCP flow control slows a client that sends faster than real time; beyond that, the inbound bound drops.
 */
const audioStreamRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { supervisor } = app.services;

  app.route({
    method: 'GET',
    url: '/sessions/:session_id/speak_audio_stream',
    schema: {
      tags: ['interaction'],
      summary: 'Audio input WebSocket',
      description:
        'Upgrade to a raw WebSocket (no subprotocol). Client → server: binary 16-bit signed little-endian mono PCM at the session ' +
        'sample rate (any whole number of samples per frame; 20 ms recommended), text {type:"config", sample_rate?: 8000–48000} ' +
        '(first message only; answered {type:"ack"}), {type:"eos"} (flush, then the server closes), {type:"interrupt"}. ' +
        `Server → client: {type:"ack"}; {type:"error", code, message}. An invalid message (not one of these JSON objects, over ${MAX_CONTROL_MESSAGE_BYTES} ` +
        'bytes, or a binary frame with an odd byte count) is answered with an error and ignored: the socket stays open. Frames over 1 MiB ' +
        'close the socket (1009). Flow control: while 2 s of speech wait for playout the server stops reading (TCP back-pressure) for ' +
        `at most ${MAX_READ_PAUSE_MS} ms; audio beyond ${INBOUND_AUDIO_LIMIT_MS / 1000} s queued in the stream is dropped with one error ` +
        '{code:"audio_overflow"} per turn, so send at most real time. An interrupt (this message or POST /interrupt) drops the ' +
        'audio queued in the stream; closing the socket ends its turn (what is already queued for playout, ≤ 2 s, still plays). ' +
        'The session must be started. Audio and video go out on WebRTC, status and frame timing on SSE. A plain GET without the upgrade ' +
        'answers 426. See docs/events.md for error codes.',
      params: SessionIdParams,
      response: {
        101: Type.Null({ description: 'Switching Protocols: the WebSocket is open' }),
        426: Type.Ref('ErrorBody'),
      },
    },
    handler: async (_request, reply) => {
      reply.code(426).header('upgrade', 'websocket').send({ detail: 'this endpoint is a WebSocket: send an Upgrade request' });
    },
    wsHandler: async (socket: WebSocket, request) => {
      const { session_id: sessionId } = request.params as { session_id: string };
      const session = await startedSessionFor(socket, supervisor, sessionId);
      if (!session) return;
      if (socket.readyState === socket.OPEN) socket.once('close', session.consumers.hold('audio_ws'));
      new AudioStream(socket, session).run();
    },
  });
};

/**
 * The started session an audio socket is for, or undefined after closing the socket with why (unknown, ended or
 * not started): the admission both audio sockets (speak_audio_stream, listen) share.
 */
export async function startedSessionFor(socket: WebSocket, supervisor: SessionSupervisor, sessionId: string): Promise<Session | undefined> {
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
 * A text frame of spec 6.2 as a control message, or undefined after telling the client what is wrong with it
 * (shared by the speak_audio_stream and listen sockets, which take the same control messages).
 */
export function readControlMessage(socket: WebSocket, raw: Buffer): ControlMessage | undefined {
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

/** One stream's turn: the samples (at the session rate) waiting for the playout, bounded by the inbound limit. */
interface StreamTurn {
  id: string;
  chunks: AsyncQueue<Int16Array>;
}

/** Input-rate samples accepted from the socket and still in the resampling chain; replaced when discarded. */
interface InChain {
  samples: number;
}

/** One client stream. Each burst of audio after an idle pipeline becomes one turn of mode `audio_stream`. */
class AudioStream {
  private inputRate: number;
  private turn: StreamTurn | null = null;
  private inChain: InChain = { samples: 0 };
  private configured = false;
  private receivedAudio = false;
  private closed = false;
  private eos = false;
  /** Socket reading is paused for back-pressure (`pausePoll` resumes it). */
  private paused = false;
  private pausePoll: NodeJS.Timeout | undefined;
  /** The client kept sending through a pause: read on without pausing, drop what exceeds the bound. */
  private flooding = false;
  /** One `audio_overflow` per turn (and after an interrupt), one `busy` per rejected burst, one error for audio after eos. */
  private overflowReported = false;
  private busyReported = false;
  private afterEosReported = false;
  /** Set while this stream itself sends INTERRUPT: its in-band order already separates stale from fresh audio. */
  private interruptingInBand = false;
  /** Dropping audio that was waiting in the kernel when a REST interrupt arrived (see STALE_QUIET_MS). */
  private staleDrain: { since: number; framesSinceCheck: number; timer: NodeJS.Timeout | undefined } | null = null;
  /** Resampling is async; this chain keeps chunks in arrival order. */
  private chain: Promise<void> = Promise.resolve();
  /** Closes the socket if the pipeline never flushes after eos; cleared on teardown so it does not hold the stream. */
  private eosLimit: NodeJS.Timeout | undefined;
  private readonly unsubscribe: Array<() => void> = [];

  constructor(
    private readonly socket: WebSocket,
    private readonly session: Session,
  ) {
    this.inputRate = session.stage.sampleRate;
  }

  run(): void {
    const { socket, session } = this;
    socket.on('message', (data, isBinary) => {
      if (this.closed) return;
      // Nothing a client sends may escape as an exception: ws would rethrow it and end the process.
      try {
        if (isBinary) this.onAudio(toBuffer(data));
        else this.onControl(toBuffer(data));
      } catch (error) {
        session.logger.warn({ err: (error as Error).message }, 'audio stream message failed');
        this.close(CLOSE_INTERNAL_ERROR, 'internal error');
      }
    });
    socket.on('close', () => this.teardown());
    socket.on('error', () => this.teardown());
    this.unsubscribe.push(
      session.events.listen((event) => {
        if (event.type === 'session.terminated') this.close(CLOSE_GOING_AWAY, 'session terminated');
        if (event.type === 'error' && this.turn) sendError(this.socket, event.data.code, event.data.message);
        if (event.type === 'status' && event.data.stage === 'interrupted') this.onInterrupted();
        if (event.type === 'status' && (event.data.stage === 'idle' || event.data.stage === 'interrupted')) this.onTurnEnded();
      }),
    );
  }

  private onControl(raw: Buffer): void {
    const message = readControlMessage(this.socket, raw);
    if (message) this.onControlMessage(message);
  }

  private onControlMessage(message: ControlMessage): void {
    switch (message.type) {
      case 'config':
        if (this.configured || this.receivedAudio) return sendError(this.socket, 'invalid_message', 'config must be the first message');
        if (message.sample_rate !== undefined) this.inputRate = message.sample_rate;
        this.configured = true;
        this.socket.send(JSON.stringify({ type: 'ack' }));
        return;
      case 'eos':
        this.eos = true;
        this.inOrder(() => {
          if (this.turn) this.turn.chunks.end();
          else this.close(CLOSE_NORMAL, 'eos');
        });
        this.eosLimit ??= setTimeout(() => this.close(CLOSE_NORMAL, 'eos'), EOS_FLUSH_LIMIT_MS).unref();
        return;
      case 'interrupt':
        // Everything read before this message is stale; what follows it is fresh.
        this.discardInbound();
        this.interruptingInBand = true;
        try {
          this.session.send({ type: 'INTERRUPT' });
        } finally {
          this.interruptingInBand = false;
        }
        return;
    }
  }

  private onAudio(raw: Buffer): void {
    if (raw.length % 2 !== 0) return sendError(this.socket, 'invalid_audio', 'binary frames must hold whole 16-bit samples (even byte count)');
    if (this.eos) {
      if (!this.afterEosReported) sendError(this.socket, 'invalid_message', 'audio after eos is ignored');
      this.afterEosReported = true;
      return;
    }
    if (raw.length === 0) return;
    this.receivedAudio = true;
    if (this.staleDrain) {
      this.staleDrain.framesSinceCheck++;
      return;
    }
    // The backlog is gone: back to pausing first.
    if (this.flooding && this.inboundMs() < STREAM_QUEUE_HIGH_WATER_MS) this.flooding = false;
    const offered = raw.length / 2;
    const accepted = Math.min(offered, this.roomSamples());
    if (accepted < offered) this.onOverflow();
    if (accepted > 0) this.accept(pcm16FromLittleEndian(raw.subarray(0, accepted * 2)));
    this.applyBackPressure();
  }

  private accept(pcm: Int16Array): void {
    // Counted now, not when the chain gets to it: ws emits every frame of one socket read synchronously,
    // so a burst must already count against the bounds frame by frame.
    const inChain = this.inChain;
    inChain.samples += pcm.length;
    this.inOrder(async () => {
      try {
        if (this.closed || inChain !== this.inChain) return;
        const sessionRate = this.session.stage.sampleRate;
        const samples = this.inputRate === sessionRate ? pcm : await resamplePcm16(pcm, this.inputRate, sessionRate);
        if (this.closed || inChain !== this.inChain) return;
        this.push(samples);
      } finally {
        inChain.samples -= pcm.length;
      }
    });
  }

  /**
   * Runs `step` after every earlier frame's step. A failing step (e.g. the resampler's WASM failing to
   * load) closes this stream rather than leaving an unhandled rejection that would end the process.
   */
  private inOrder(step: () => void | Promise<void>): void {
    this.chain = this.chain.then(step).catch(() => this.close(CLOSE_INTERNAL_ERROR, 'internal error'));
  }

  private push(samples: Int16Array): void {
    if (!this.turn) {
      const sessionRate = this.session.stage.sampleRate;
      // The admission check in onAudio keeps within the bound; the capacity is a backstop (plus 10 ms for resampler rounding).
      const capacity = Math.ceil((INBOUND_AUDIO_LIMIT_MS * sessionRate) / 1000) + sessionRate / 100;
      const turn: StreamTurn = { id: randomUUID(), chunks: new AsyncQueue<Int16Array>({ weigh: (pcm) => pcm.length, capacity }) };
      // Each burst is a SPEAK_AUDIO turn the machine admits or refuses (busy, paused) like any other request.
      const refusal = this.session.offer({ type: 'SPEAK_AUDIO', turn: { id: turn.id, mode: 'audio_stream', audio: { kind: 'stream', chunks: turn.chunks } } });
      if (refusal !== null) {
        if (!this.busyReported) sendError(this.socket, 'busy', refusal);
        this.busyReported = true;
        return;
      }
      this.turn = turn;
    }
    this.busyReported = false;
    if (!this.turn.chunks.push(samples)) this.onOverflow();
  }

  private onOverflow(): void {
    // The client is ahead of the bound despite back-pressure: stop pausing so its backlog, and anything
    // queued behind it (interrupt, eos, close), is read now instead of at real time.
    this.flooding = true;
    this.resumeReading();
    if (this.overflowReported) return;
    this.overflowReported = true;
    sendError(
      this.socket,
      'audio_overflow',
      `more than ${INBOUND_AUDIO_LIMIT_MS} ms of audio queued in the stream; the excess was dropped (send at most real time)`,
    );
  }

  /** Any interrupt (in-band, REST, another client's) makes the audio this stream holds stale. */
  private onInterrupted(): void {
    const mayHaveBacklog = this.paused || this.flooding;
    this.discardInbound();
    if (!this.interruptingInBand && mayHaveBacklog) this.drainStale();
  }

  private onTurnEnded(): void {
    this.busyReported = false;
    this.overflowReported = false;
    if (!this.turn) return;
    this.turn.chunks.end();
    this.turn = null;
    if (this.eos) this.close(CLOSE_NORMAL, 'eos');
  }

  /** Drops the audio read but not yet handed to the playout: queued, and still in the resampling chain. */
  private discardInbound(): void {
    this.inChain = { samples: 0 };
    this.turn?.chunks.clear();
    this.flooding = false;
    this.overflowReported = false;
  }

  /** Reads on and drops what arrives back to back, the kernel's backlog from before a REST interrupt. */
  private drainStale(): void {
    if (this.staleDrain || this.closed) return;
    const drain = { since: performance.now(), framesSinceCheck: 1, timer: undefined as NodeJS.Timeout | undefined };
    this.staleDrain = drain;
    this.resumeReading();
    const check = () => {
      // setImmediate after the timer: at least one poll phase (where socket reads happen) lies between checks.
      setImmediate(() => {
        if (this.staleDrain !== drain) return;
        if (drain.framesSinceCheck === 0 || performance.now() - drain.since > STALE_DRAIN_LIMIT_MS) {
          this.staleDrain = null;
          return;
        }
        drain.framesSinceCheck = 0;
        drain.timer = setTimeout(check, STALE_QUIET_MS);
      });
    };
    drain.timer = setTimeout(check, STALE_QUIET_MS);
  }

  /** Stops reading from the socket while speech is queued above the high-water mark, for at most MAX_READ_PAUSE_MS. */
  private applyBackPressure(): void {
    if (this.paused || this.closed || this.flooding || this.staleDrain) return;
    if (!this.overHighWater()) return;
    this.paused = true;
    const pausedAt = performance.now();
    this.socket.pause();
    this.pausePoll = setInterval(() => {
      if (this.closed || !this.overHighWater()) return this.resumeReading();
      if (performance.now() - pausedAt < MAX_READ_PAUSE_MS) return;
      this.flooding = true;
      this.resumeReading();
    }, BACKPRESSURE_POLL_MS);
  }

  private resumeReading(): void {
    clearInterval(this.pausePoll);
    this.pausePoll = undefined;
    if (!this.paused) return;
    this.paused = false;
    // Also after teardown: a paused socket never reads the peer's close frame or EOF, so a close
    // handshake would hang until ws's 30 s timeout. Frames read after teardown are ignored.
    this.socket.resume();
  }

  /** Playout is full (the turn cannot hand over more) and this stream already holds a little extra. */
  private overHighWater(): boolean {
    return this.inboundMs() >= STREAM_QUEUE_HIGH_WATER_MS && this.session.media.playout.queuedMs >= PLAYOUT_HIGH_WATER_MS - STREAM_QUEUE_HIGH_WATER_MS;
  }

  /** Audio this stream holds: in the resampling chain (input rate) and queued for the playout (session rate). */
  private inboundMs(): number {
    const queued = this.turn ? this.turn.chunks.weight : 0;
    return (this.inChain.samples * 1000) / this.inputRate + (queued * 1000) / this.session.stage.sampleRate;
  }

  /** Input-rate samples that still fit under INBOUND_AUDIO_LIMIT_MS. */
  private roomSamples(): number {
    return Math.max(0, Math.floor(((INBOUND_AUDIO_LIMIT_MS - this.inboundMs()) * this.inputRate) / 1000));
  }

  private close(code: number, reason: string): void {
    if (this.socket.readyState === this.socket.OPEN) this.socket.close(code, reason);
    this.teardown();
  }

  /** The client is gone (or the stream ended): nothing it sent but the playout did not take yet may keep the session busy. */
  private teardown(): void {
    if (this.closed) return;
    this.closed = true;
    clearTimeout(this.eosLimit);
    if (this.staleDrain) clearTimeout(this.staleDrain.timer);
    this.staleDrain = null;
    for (const off of this.unsubscribe.splice(0)) off();
    this.resumeReading();
    this.discardInbound();
    if (this.turn) this.turn.chunks.end();
  }
}

export function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

export function toBuffer(data: unknown): Buffer {
  if (Buffer.isBuffer(data)) return data;
  if (Array.isArray(data)) return Buffer.concat(data as Buffer[]);
  return Buffer.from(data as ArrayBuffer);
}

export default audioStreamRoutes;
