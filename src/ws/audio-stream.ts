import { randomUUID } from 'node:crypto';
import type { WebSocket } from 'ws';
import type { Session, SessionEventRecord } from '../sessions/index.ts';
import { AsyncQueue } from '../../actors/async-queue.ts';
import { PLAYOUT_HIGH_WATER_MS } from '../../actors/media/playout.ts';
import { resamplePcm16 } from '../../actors/audio/resample.ts';
import { pcm16FromLittleEndian } from '../../actors/audio/wav.ts';
import { CLOSE_INTERNAL_ERROR, CLOSE_NORMAL, SocketSession, sendError } from './socket-session.ts';

export { MAX_CONTROL_MESSAGE_BYTES } from './socket-session.ts';

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

/**
 * Runs the `speak_audio_stream` socket (spec 6.2) of a started session: PCM in, avatar speech out over WebRTC.
 * The open socket counts as a consumer of the session until it closes.
 */
export function openAudioStream(socket: WebSocket, session: Session): void {
  if (socket.readyState === socket.OPEN) socket.once('close', session.holdConsumer('audio_ws'));
  new AudioStream(socket, session).run();
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

/**
 * One client stream. Each burst of audio after an idle pipeline becomes one turn of mode `audio_stream`.
 * Back-pressure: the socket stops reading while queued speech is above the playout high-water mark, so TCP flow
 * control slows a client that sends faster than real time; beyond that, the inbound bound drops.
 */
class AudioStream extends SocketSession {
  private turn: StreamTurn | null = null;
  private inChain: InChain = { samples: 0 };
  /** Socket reading is paused for back-pressure (`pausePoll` resumes it). */
  private paused = false;
  private pausePoll: NodeJS.Timeout | undefined;
  /** The client kept sending through a pause: read on without pausing, drop what exceeds the bound. */
  private flooding = false;
  /** One `audio_overflow` per turn (and after an interrupt), one `busy` per rejected burst. */
  private overflowReported = false;
  private busyReported = false;
  /** Set while this stream itself sends INTERRUPT: its in-band order already separates stale from fresh audio. */
  private interruptingInBand = false;
  /** Dropping audio that was waiting in the kernel when a REST interrupt arrived (see STALE_QUIET_MS). */
  private staleDrain: { since: number; framesSinceCheck: number; timer: NodeJS.Timeout | undefined } | null = null;
  /** Resampling is async; this chain keeps chunks in arrival order. */
  private chain: Promise<void> = Promise.resolve();
  /** Closes the socket if the pipeline never flushes after eos; cleared on teardown so it does not hold the stream. */
  private eosLimit: NodeJS.Timeout | undefined;

  constructor(socket: WebSocket, session: Session) {
    super(socket, session, 'audio stream message failed');
  }

  protected override onSessionEvent(event: SessionEventRecord): void {
    if (event.type === 'error' && this.turn) sendError(this.socket, event.data.code, event.data.message);
    if (event.type === 'status' && event.data.stage === 'interrupted') this.onInterrupted();
    if (event.type === 'status' && (event.data.stage === 'idle' || event.data.stage === 'interrupted'))
      this.onTurnEnded();
  }

  protected onEos(): void {
    this.eos = true;
    this.inOrder(() => {
      if (this.turn) this.turn.chunks.end();
      else this.close(CLOSE_NORMAL, 'eos');
    });
    this.eosLimit ??= setTimeout(() => this.close(CLOSE_NORMAL, 'eos'), EOS_FLUSH_LIMIT_MS).unref();
  }

  protected onInterrupt(): void {
    // Everything read before this message is stale; what follows it is fresh.
    this.discardInbound();
    this.interruptingInBand = true;
    try {
      this.session.interrupt();
    } finally {
      this.interruptingInBand = false;
    }
  }

  protected onAudio(raw: Buffer): void {
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
        const sessionRate = this.session.sampleRate;
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
      const sessionRate = this.session.sampleRate;
      // The admission check in onAudio keeps within the bound; the capacity is a backstop (plus 10 ms for resampler rounding).
      const capacity = Math.ceil((INBOUND_AUDIO_LIMIT_MS * sessionRate) / 1000) + sessionRate / 100;
      const turn: StreamTurn = {
        id: randomUUID(),
        chunks: new AsyncQueue<Int16Array>({ weigh: (pcm) => pcm.length, capacity }),
      };
      // Each burst is a SPEAK_AUDIO turn the machine admits or refuses (busy, paused) like any other request.
      const refusal = this.session.speakAudioStream(turn.id, turn.chunks);
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
    return (
      this.inboundMs() >= STREAM_QUEUE_HIGH_WATER_MS &&
      this.session.queuedSpeechMs >= PLAYOUT_HIGH_WATER_MS - STREAM_QUEUE_HIGH_WATER_MS
    );
  }

  /** Audio this stream holds: in the resampling chain (input rate) and queued for the playout (session rate). */
  private inboundMs(): number {
    const queued = this.turn ? this.turn.chunks.weight : 0;
    return (this.inChain.samples * 1000) / this.inputRate + (queued * 1000) / this.session.sampleRate;
  }

  /** Input-rate samples that still fit under INBOUND_AUDIO_LIMIT_MS. */
  private roomSamples(): number {
    return Math.max(0, Math.floor(((INBOUND_AUDIO_LIMIT_MS - this.inboundMs()) * this.inputRate) / 1000));
  }

  /** The client is gone (or the stream ended): nothing it sent but the playout did not take yet may keep the session busy. */
  protected release(): void {
    clearTimeout(this.eosLimit);
    if (this.staleDrain) clearTimeout(this.staleDrain.timer);
    this.staleDrain = null;
    this.resumeReading();
    this.discardInbound();
    if (this.turn) this.turn.chunks.end();
  }
}
