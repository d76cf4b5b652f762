import { randomUUID } from 'node:crypto';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { WebSocket } from 'ws';
import { Type } from '@sinclair/typebox';
import { SessionIdParams } from '../schemas/common.ts';
import { HttpError } from '../errors.ts';
import { AsyncQueue } from '../sessions/async-queue.ts';
import { PLAYOUT_HIGH_WATER_MS } from '../../actors/media/playout.ts';
import { resamplePcm16 } from '../../actors/audio/resample.ts';
import { pcm16FromLittleEndian } from '../../actors/audio/wav.ts';
import type { Session } from '../sessions/session.ts';

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
/** Text frames are tiny control messages; anything larger is a client bug. */
const MAX_CONTROL_MESSAGE_BYTES = 4096;

const CLOSE_NORMAL = 1000;
const CLOSE_GOING_AWAY = 1001;
const CLOSE_UNSUPPORTED = 1003;
const CLOSE_POLICY = 1008;
const CLOSE_INTERNAL_ERROR = 1011;

/**
 * `WebSocket /sessions/{id}/speak_audio_stream` (spec 6.2): PCM in, avatar speech out over WebRTC.
 * Back-pressure: the socket stops reading while queued speech is above the playout high-water mark, so
 * TCP flow control slows a client that sends faster than real time.
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
        'sample rate (any whole number of samples per frame; 20 ms recommended), text {type:"config", sample_rate?} (answered ' +
        '{type:"ack"}), {type:"eos"} (flush, then the server closes), {type:"interrupt"}. Server → client: {type:"ack"}, ' +
        '{type:"error", code, message} before closing on an error. The session must be started. Audio and video go out on WebRTC, ' +
        'status and frame timing on SSE. A plain GET without the upgrade answers 426. See docs/events.md for error codes.',
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
      let session: Session;
      try {
        session = await supervisor.requireSession(sessionId);
      } catch (error) {
        const status = error instanceof HttpError ? error.statusCode : 500;
        return fail(socket, status === 404 ? 'session_not_found' : 'session_terminated', (error as Error).message, CLOSE_POLICY);
      }
      if (session.state !== 'running') {
        return fail(socket, 'session_not_started', `session is ${session.state}; start it before streaming audio`, CLOSE_POLICY);
      }
      if (socket.readyState === socket.OPEN) socket.once('close', session.consumers.hold('audio_ws'));
      new AudioStream(socket, session).run();
    },
  });
};

function fail(socket: WebSocket, code: string, message: string, closeCode: number): void {
  if (socket.readyState !== socket.OPEN) return;
  socket.send(JSON.stringify({ type: 'error', code, message }));
  socket.close(closeCode, code);
}

/** One client stream. Each burst of audio after an idle pipeline becomes one turn of mode `audio_stream`. */
class AudioStream {
  private inputRate: number;
  private turn: { id: string; chunks: SampleQueue } | null = null;
  /** Samples (at the session rate) accepted from the socket but still in the resampling chain. */
  private inChainSamples = 0;
  private configured = false;
  private paused = false;
  private closed = false;
  private eos = false;
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
      if (isBinary) this.onAudio(toBuffer(data));
      else this.onControl(toBuffer(data));
    });
    socket.on('close', () => this.teardown());
    socket.on('error', () => this.teardown());
    this.unsubscribe.push(
      session.events.listen((event) => {
        if (event.type === 'session.terminated') this.close(CLOSE_GOING_AWAY, 'session terminated');
        if (event.type === 'error' && this.turn) this.error(event.data.code, event.data.message);
        if (event.type === 'status' && (event.data.stage === 'idle' || event.data.stage === 'interrupted')) this.onTurnEnded();
      }),
    );
  }

  private onControl(raw: Buffer): void {
    if (raw.length > MAX_CONTROL_MESSAGE_BYTES) return this.error('invalid_message', 'control message too large');
    let message: { type?: unknown; sample_rate?: unknown };
    try {
      message = JSON.parse(raw.toString('utf8'));
    } catch {
      return this.error('invalid_message', 'text frames must be JSON control messages');
    }
    switch (message.type) {
      case 'config': {
        if (this.configured || this.turn) return this.error('invalid_message', 'config must be the first message');
        const rate = message.sample_rate;
        if (rate !== undefined && (!Number.isInteger(rate) || (rate as number) < 8000 || (rate as number) > 48000)) {
          return this.error('invalid_config', 'sample_rate must be an integer between 8000 and 48000');
        }
        if (rate !== undefined) this.inputRate = rate as number;
        this.configured = true;
        this.socket.send(JSON.stringify({ type: 'ack' }));
        return;
      }
      case 'eos':
        this.eos = true;
        this.inOrder(() => {
          if (this.turn) this.turn.chunks.end();
          else this.close(CLOSE_NORMAL, 'eos');
        });
        this.eosLimit ??= setTimeout(() => this.close(CLOSE_NORMAL, 'eos'), EOS_FLUSH_LIMIT_MS).unref();
        return;
      case 'interrupt':
        this.session.send({ type: 'INTERRUPT' });
        return;
      default:
        return this.error('invalid_message', `unknown message type ${JSON.stringify(message.type)}`);
    }
  }

  private onAudio(raw: Buffer): void {
    if (this.eos) return this.error('invalid_message', 'audio after eos');
    if (raw.length % 2 !== 0) return this.error('invalid_audio', 'binary frames must hold whole 16-bit samples (even byte count)');
    if (raw.length === 0) return;
    const pcm = pcm16FromLittleEndian(raw);
    // Counted now, not when the chain gets to it: ws emits every frame of one socket read synchronously,
    // so a burst must already count against the high-water mark frame by frame.
    const sessionRateSamples = Math.round((pcm.length * this.session.stage.sampleRate) / this.inputRate);
    this.inChainSamples += sessionRateSamples;
    this.inOrder(async () => {
      try {
        if (this.closed) return;
        const samples = this.inputRate === this.session.stage.sampleRate ? pcm : await resamplePcm16(pcm, this.inputRate, this.session.stage.sampleRate);
        this.push(samples);
      } finally {
        this.inChainSamples -= sessionRateSamples;
      }
    });
    this.applyBackPressure();
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
      if (this.session.busy || this.session.state !== 'running') {
        return this.error('busy', 'another chat, speak or audio turn is in flight; interrupt it first');
      }
      const turn = { id: randomUUID(), chunks: new SampleQueue() };
      this.turn = turn;
      this.session.stage.turnAudio.set(turn.id, { kind: 'stream', chunks: turn.chunks });
      this.session.send({ type: 'SPEAK_AUDIO', turn: { id: turn.id, mode: 'audio_stream' } });
    }
    this.turn.chunks.push(samples);
  }

  private onTurnEnded(): void {
    if (!this.turn) return;
    this.turn.chunks.end();
    this.turn = null;
    if (this.eos) this.close(CLOSE_NORMAL, 'eos');
  }

  /** Stops reading from the socket while speech is queued above the high-water mark. */
  private applyBackPressure(): void {
    if (this.paused || this.closed) return;
    if (!this.overHighWater()) return;
    this.paused = true;
    this.socket.pause();
    const poll = setInterval(() => {
      if (this.closed || !this.overHighWater()) {
        clearInterval(poll);
        this.paused = false;
        // Also after teardown: a paused socket never reads the peer's close frame or EOF, so a close
        // handshake would hang until ws's 30 s timeout. Frames read after teardown are ignored.
        this.socket.resume();
      }
    }, BACKPRESSURE_POLL_MS);
  }

  /** Playout is full (the turn cannot hand over more) and this stream already holds a little extra. */
  private overHighWater(): boolean {
    const streamSamples = this.inChainSamples + (this.turn ? this.turn.chunks.samples : 0);
    const streamMs = (streamSamples * 1000) / this.session.stage.sampleRate;
    return streamMs >= STREAM_QUEUE_HIGH_WATER_MS && this.session.media.playout.queuedMs >= PLAYOUT_HIGH_WATER_MS - STREAM_QUEUE_HIGH_WATER_MS;
  }

  private error(code: string, message: string): void {
    fail(this.socket, code, message, code === 'invalid_audio' ? CLOSE_UNSUPPORTED : CLOSE_POLICY);
    this.teardown();
  }

  private close(code: number, reason: string): void {
    if (this.socket.readyState === this.socket.OPEN) this.socket.close(code, reason);
    this.teardown();
  }

  private teardown(): void {
    if (this.closed) return;
    this.closed = true;
    clearTimeout(this.eosLimit);
    for (const off of this.unsubscribe.splice(0)) off();
    if (this.turn) this.turn.chunks.end();
  }
}

/** The stream's queue, tracking how many samples wait in it (frames may be any size, so `size` is not time). */
class SampleQueue extends AsyncQueue<Int16Array> {
  samples = 0;

  override push(item: Int16Array): void {
    this.samples += item.length;
    super.push(item);
  }

  override async *[Symbol.asyncIterator](): AsyncIterator<Int16Array> {
    const inner = super[Symbol.asyncIterator]();
    for (;;) {
      const next = await inner.next();
      if (next.done) return;
      this.samples -= next.value.length;
      yield next.value;
    }
  }
}

function toBuffer(data: unknown): Buffer {
  if (Buffer.isBuffer(data)) return data;
  if (Array.isArray(data)) return Buffer.concat(data as Buffer[]);
  return Buffer.from(data as ArrayBuffer);
}

export default audioStreamRoutes;
