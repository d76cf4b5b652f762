import type { Logger } from 'pino';
import { errorForLog } from '../logger.ts';
import type { SessionEventHub } from './event-hub.ts';
import type { SessionMedia } from './media.ts';
import type { SessionBus } from './session-bus.ts';

/**
 * Bound on finalising recordings while a session closes. An MP4 whose encoder is still writing needs ffmpeg to
 * finish its last frames (well under a second); a stuck one must not keep the session, its SSE streams and
 * its slot alive. The recording still completes or fails on its own afterwards.
 */
export const CLOSE_TAPS_WAIT_MS = 5_000;

/** The close steps in the order they run; also what `closed` lists, for tests and logs. */
export const CLOSE_ORDER = ['clock', 'webrtc', 'renderer', 'recording', 'events'] as const;
export type CloseStep = (typeof CLOSE_ORDER)[number];

export interface CloseParts {
  media: Pick<SessionMedia, 'playout' | 'output' | 'releaseRenderer'>;
  events: Pick<SessionEventHub, 'publish' | 'close'>;
  bus: Pick<SessionBus, 'close'>;
  logger: Logger;
}

/**
 * The one close cascade of a session, whoever starts it (DELETE, the machine terminating itself on a fatal
 * error, the orphan reaper, shutdown), run once:
 *
 * 1. clock — nothing more is played, rendered or scheduled;
 * 2. webrtc — the peer and its tracks close;
 * 3. renderer — released (a reopen in progress is abandoned);
 * 4. recording — taps of the clock (recordings; outputs: ffmpeg ended, WHIP resources DELETEd) finalise what they have, bounded by `CLOSE_TAPS_WAIT_MS`;
 * 5. events — `session.terminated` goes to SSE clients, their streams end, the bus stops.
 *
 * Idempotent: every caller gets the same promise. A failing step is logged and the cascade goes on.
 */
export class SessionCloser {
  private readonly taps = new Map<string, () => Promise<unknown>>();
  private running: Promise<void> | null = null;
  /** Steps done so far, in order. */
  readonly closed: CloseStep[] = [];

  constructor(private readonly parts: CloseParts) {}

  get closing(): boolean {
    return this.running !== null;
  }

  /** A tap of the media clock to finalise at step 4 (a recording); returns its removal. */
  addTap(name: string, finalise: () => Promise<unknown>): () => void {
    this.taps.set(name, finalise);
    return () => {
      if (this.taps.get(name) === finalise) this.taps.delete(name);
    };
  }

  close(): Promise<void> {
    this.running ??= this.run();
    return this.running;
  }

  private async run(): Promise<void> {
    const { media, events, bus, logger } = this.parts;
    await this.step('clock', () => media.playout.close());
    await this.step('webrtc', () => media.output.close());
    await this.step('renderer', () => media.releaseRenderer());
    await this.step('recording', () => this.finaliseTaps());
    await this.step('events', () => {
      events.publish('session.terminated', {});
      events.close();
      bus.close();
    });
    logger.debug({ lateFrames: media.playout.lateFrames, sentFrames: media.playout.sentFrames }, 'session closed');
  }

  private async finaliseTaps(): Promise<void> {
    const taps = [...this.taps.entries()];
    this.taps.clear();
    let timer: NodeJS.Timeout | undefined;
    const bound = new Promise<void>((resolve) => (timer = setTimeout(resolve, CLOSE_TAPS_WAIT_MS).unref()));
    const all = Promise.all(
      taps.map(([name, finalise]) =>
        finalise().catch((error: unknown) =>
          this.parts.logger.warn({ tap: name, err: errorForLog(error) }, 'tap not finalised on close'),
        ),
      ),
    );
    await Promise.race([all, bound]);
    clearTimeout(timer);
  }

  private async step(name: CloseStep, run: () => unknown): Promise<void> {
    try {
      await run();
    } catch (error) {
      this.parts.logger.warn({ step: name, err: errorForLog(error) }, 'close step failed');
    }
    this.closed.push(name);
  }
}
