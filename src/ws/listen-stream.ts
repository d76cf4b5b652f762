import type { WebSocket } from 'ws';
import type { Session } from '../sessions/index.ts';
import { pcm16FromLittleEndian } from '../../actors/audio/wav.ts';
import { MAX_VAD_BACKLOG_MS, type VoiceInput, type VoiceMessage, type VoiceSource } from '../sessions/voice-input.ts';
import { CLOSE_NORMAL, CLOSE_POLICY, SocketSession, fail, sendError } from './socket-session.ts';

/** After eos, the longest wait for the user's last turn to be answered before closing anyway. */
const EOS_ANSWER_LIMIT_MS = 120_000;

/**
 * Runs the `listen` socket of a started session: the user's microphone into the session's voice input, which
 * answers each turn like a chat. Closes with `voice_input_unavailable` when the session has none; the open socket
 * counts as a consumer of the session until it closes.
 */
export function openListenStream(socket: WebSocket, session: Session): void {
  const voice = session.voice;
  if (!voice) return fail(socket, 'voice_input_unavailable', 'this session has no voice input', CLOSE_POLICY);
  if (socket.readyState !== socket.OPEN) return;
  socket.once('close', session.holdConsumer('listen_ws'));
  new ListenStream(socket, session, voice).run();
}

/** One microphone: its audio goes to the voice input, whose messages (speech start and end, transcript) come back. */
class ListenStream extends SocketSession {
  private source: VoiceSource | null = null;
  private overflowReported = false;
  private eosLimit: NodeJS.Timeout | undefined;

  constructor(
    socket: WebSocket,
    session: Session,
    private readonly voice: VoiceInput,
  ) {
    super(socket, session, 'listen message failed');
  }

  override run(): void {
    this.source = this.voice.attach('listen', (message) => this.onVoiceMessage(message));
    super.run();
  }

  private onVoiceMessage(message: VoiceMessage): void {
    if (this.closed) return;
    this.send(message);
    if (message.type === 'error' && message.code === 'voice_input_replaced') this.close(CLOSE_POLICY, 'replaced');
  }

  protected onEos(): void {
    if (this.eos) return;
    this.eos = true;
    void this.finish();
  }

  protected onInterrupt(): void {
    this.session.interrupt();
  }

  protected onAudio(raw: Buffer): void {
    if (!this.source) return;
    const accepted = this.source.push(pcm16FromLittleEndian(raw), this.inputRate);
    if (accepted) {
      this.overflowReported = false;
    } else if (!this.overflowReported) {
      this.overflowReported = true;
      sendError(
        this.socket,
        'audio_overflow',
        `the voice detector is more than ${MAX_VAD_BACKLOG_MS} ms behind; audio was dropped (send at most real time)`,
      );
    }
  }

  /** eos: the open turn ends; once the pipeline is idle again (the turn answered), the socket closes. */
  private async finish(): Promise<void> {
    this.eosLimit = setTimeout(() => this.close(CLOSE_NORMAL, 'eos'), EOS_ANSWER_LIMIT_MS).unref();
    await this.source?.end();
    if (this.closed) return;
    if (!this.session.busy && this.session.pipelineStage === 'idle') return this.close(CLOSE_NORMAL, 'eos');
    this.unsubscribe.push(
      this.session.onEvent((event) => {
        if (event.type === 'status' && event.data.stage === 'idle') this.close(CLOSE_NORMAL, 'eos');
      }),
    );
  }

  protected release(): void {
    clearTimeout(this.eosLimit);
    this.source?.close();
    this.source = null;
  }
}
