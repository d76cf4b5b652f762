import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { WebSocket } from 'ws';
import { Type } from '@sinclair/typebox';
import { SessionIdParams } from '../schemas/common.ts';
import { pcm16FromLittleEndian, type Session } from '../sessions/index.ts';
import { MAX_VAD_BACKLOG_MS, type VoiceMessage, type VoiceSource } from '../sessions/voice-input.ts';
import {
  CLOSE_GOING_AWAY,
  CLOSE_INTERNAL_ERROR,
  CLOSE_NORMAL,
  CLOSE_POLICY,
  fail,
  readControlMessage,
  startedSessionFor,
  sendError,
  toBuffer,
  type ControlMessage,
} from './audio-stream.ts';

/** After eos, the longest wait for the user's last turn to be answered before closing anyway. */
const EOS_ANSWER_LIMIT_MS = 120_000;
/** Server → client messages are tiny; a client that does not read them is not written to beyond this. */
const MAX_UNSENT_BYTES = 64 * 1024;

/**
 * `WebSocket /sessions/{id}/listen`: hands-free conversation for clients without WebRTC audio. The user's
 * microphone comes in with the framing of spec 6.2 (binary PCM, `config`, `eos`, `interrupt`); the service's
 * voice input detects speech, ends the turn after SERVICE_VAD_SILENCE_MS of silence, recognises and answers
 * it like a chat, and interrupts the avatar when the user talks over it. The client hears the answer on
 * WebRTC and follows the pipeline on SSE; this socket tells it about its own speech.
 */
const listenRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { supervisor } = app.services;

  app.route({
    method: 'GET',
    url: '/sessions/:session_id/listen',
    schema: {
      tags: ['interaction'],
      summary: 'Hands-free voice input WebSocket',
      description:
        'Upgrade to a raw WebSocket (no subprotocol). Client → server, as on speak_audio_stream (spec 6.2): binary 16-bit signed ' +
        'little-endian mono PCM of the user’s microphone at the session sample rate (any whole number of samples per frame; 20 ms ' +
        'recommended), text {type:"config", sample_rate?: 8000–48000} (first message only; answered {type:"ack"}), {type:"eos"} (end of ' +
        'the user’s audio: an open turn ends there; the server closes once it has been answered), {type:"interrupt"} (same as POST ' +
        '/interrupt). Server → client: {type:"ack"}; {type:"speech_start"} when voice activity detection (Silero VAD) hears speech of ' +
        'at least SERVICE_VAD_MIN_SPEECH_MS; {type:"speech_end"} after SERVICE_VAD_SILENCE_MS of silence; {type:"transcript", text} ' +
        'when the turn was recognised; {type:"error", code, message}. Each turn goes through SSE like a transcribe with trigger_chat: ' +
        'status listening (at speech start), transcript, then the chat turn. Speech while the avatar is busy interrupts it (barge-in). ' +
        `Without SERVICE_ASR_BASE_URL the socket is told once ({code:"asr_not_configured"}) and speech is not answered. Send at most ` +
        `real time: audio more than ${MAX_VAD_BACKLOG_MS / 1000} s ahead of the detector is dropped (one error {code:"audio_overflow"}). ` +
        'One microphone per session: a new /listen socket or a WebRTC offer carrying a microphone replaces this one (error ' +
        '{code:"voice_input_replaced"}, then close 1008). The session must be started. A plain GET answers 426. See docs/voice-input.md.',
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
      const voice = session.voice;
      if (!voice) return fail(socket, 'voice_input_unavailable', 'this session has no voice input', CLOSE_POLICY);
      if (socket.readyState !== socket.OPEN) return;
      socket.once('close', session.consumers.hold('listen_ws'));
      new ListenStream(socket, session).run((notify) => voice.attach('listen', notify));
    },
  });
};

class ListenStream {
  private inputRate: number;
  private source: VoiceSource | null = null;
  private configured = false;
  private receivedAudio = false;
  private eos = false;
  private closed = false;
  private overflowReported = false;
  private afterEosReported = false;
  private eosLimit: NodeJS.Timeout | undefined;
  private readonly unsubscribe: Array<() => void> = [];

  constructor(
    private readonly socket: WebSocket,
    private readonly session: Session,
  ) {
    this.inputRate = session.stage.sampleRate;
  }

  run(attach: (notify: (message: VoiceMessage) => void) => VoiceSource): void {
    const { socket, session } = this;
    this.source = attach((message) => this.onVoiceMessage(message));
    socket.on('message', (data, isBinary) => {
      if (this.closed) return;
      // Nothing a client sends may escape as an exception: ws would rethrow it and end the process.
      try {
        if (isBinary) this.onAudio(toBuffer(data));
        else this.onControl(toBuffer(data));
      } catch (error) {
        session.logger.warn({ err: (error as Error).message }, 'listen message failed');
        this.close(CLOSE_INTERNAL_ERROR, 'internal error');
      }
    });
    socket.on('close', () => this.teardown());
    socket.on('error', () => this.teardown());
    this.unsubscribe.push(
      session.events.listen((event) => {
        if (event.type === 'session.terminated') this.close(CLOSE_GOING_AWAY, 'session terminated');
      }),
    );
  }

  private send(message: object): void {
    if (this.socket.readyState !== this.socket.OPEN || this.socket.bufferedAmount > MAX_UNSENT_BYTES) return;
    this.socket.send(JSON.stringify(message));
  }

  private onVoiceMessage(message: VoiceMessage): void {
    if (this.closed) return;
    this.send(message);
    if (message.type === 'error' && message.code === 'voice_input_replaced') this.close(CLOSE_POLICY, 'replaced');
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
        this.send({ type: 'ack' });
        return;
      case 'eos':
        if (this.eos) return;
        this.eos = true;
        void this.finish();
        return;
      case 'interrupt':
        this.session.send({ type: 'INTERRUPT' });
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
    if (raw.length === 0 || !this.source) return;
    this.receivedAudio = true;
    const accepted = this.source.push(pcm16FromLittleEndian(raw), this.inputRate);
    if (accepted) {
      this.overflowReported = false;
    } else if (!this.overflowReported) {
      this.overflowReported = true;
      sendError(this.socket, 'audio_overflow', `the voice detector is more than ${MAX_VAD_BACKLOG_MS} ms behind; audio was dropped (send at most real time)`);
    }
  }

  /** eos: the open turn ends; once the pipeline is idle again (the turn answered), the socket closes. */
  private async finish(): Promise<void> {
    this.eosLimit = setTimeout(() => this.close(CLOSE_NORMAL, 'eos'), EOS_ANSWER_LIMIT_MS).unref();
    await this.source?.end();
    if (this.closed) return;
    if (!this.session.busy && this.session.pipelineStage === 'idle') return this.close(CLOSE_NORMAL, 'eos');
    this.unsubscribe.push(
      this.session.events.listen((event) => {
        if (event.type === 'status' && event.data.stage === 'idle') this.close(CLOSE_NORMAL, 'eos');
      }),
    );
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
    this.source?.close();
    this.source = null;
  }
}

export default listenRoutes;
