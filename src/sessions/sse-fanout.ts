import type { Writable } from 'node:stream';

/**
 * One mechanism for every server-sent event stream the service writes (session events, the inspector feed):
 * producers never wait for a consumer. A consumer whose socket stops taking data accumulates a backlog; once its
 * oldest unsent chunk is older than `maxLagMs`, or its unsent bytes pass `maxBacklogBytes`, its socket is
 * destroyed (an `end()` would wait for the very backlog that will never drain, keeping it in memory).
 * Keepalive comments keep idle proxies from closing a stream, and their tick also finds stalled consumers when
 * nothing else is published.
 */
export interface SseLimits {
  /** A consumer this far behind is disconnected. */
  maxLagMs: number;
  /** A consumer with this many bytes unsent (its socket's buffer plus the backlog) is disconnected. */
  maxBacklogBytes: number;
  keepaliveMs: number;
  /** When set, a stream that was sent nothing but keepalives for this long is ended. */
  idleMs?: number;
}

export interface SseSubscriber<Tag> {
  readonly out: Writable;
  readonly tag: Tag;
  /** Chunks the socket has not accepted yet, with the time they were produced ('' marks a write the socket is still taking). */
  backlog: Array<{ at: number; chunk: string }>;
  backlogBytes: number;
  lastSentAt: number;
  closed: boolean;
  onClose: () => void;
}

export class SseFanout<Tag = undefined> {
  private readonly subscribers = new Set<SseSubscriber<Tag>>();
  private keepalive: NodeJS.Timeout | null = null;
  private closed = false;

  constructor(private readonly limits: SseLimits) {}

  /** Attaches a response stream; `onClose` runs once when it is dropped or the fan-out closes. Null once closed. */
  attach(out: Writable, tag: Tag, onClose: () => void = () => undefined): SseSubscriber<Tag> | null {
    if (this.closed) {
      out.end();
      onClose();
      return null;
    }
    const sub: SseSubscriber<Tag> = {
      out,
      tag,
      backlog: [],
      backlogBytes: 0,
      lastSentAt: Date.now(),
      closed: false,
      onClose,
    };
    this.subscribers.add(sub);
    out.on('drain', () => this.flush(sub));
    out.on('close', () => this.drop(sub));
    out.on('error', () => this.drop(sub));
    if (!this.keepalive) {
      this.keepalive = setInterval(() => this.tick(), this.limits.keepaliveMs);
      this.keepalive.unref();
    }
    return sub;
  }

  get size(): number {
    return this.subscribers.size;
  }

  /** Sends `chunk` to every subscriber `accepts` (all when omitted). */
  publish(chunk: string, accepts?: (tag: Tag) => boolean): void {
    if (this.closed) return;
    const now = Date.now();
    for (const sub of this.subscribers) if (!accepts || accepts(sub.tag)) this.send(sub, chunk, now);
  }

  /** Sends `chunk` to one subscriber (a replay of what it missed). */
  send(sub: SseSubscriber<Tag>, chunk: string, now = Date.now()): void {
    sub.lastSentAt = now;
    this.write(sub, chunk, now);
  }

  /** Ends every stream: drained ones at once, the others once they drain. Idempotent. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    if (this.keepalive) clearInterval(this.keepalive);
    for (const sub of [...this.subscribers]) {
      if (sub.backlog.length === 0) sub.out.end();
      else sub.out.once('drain', () => sub.out.end());
      this.drop(sub);
    }
  }

  private tick(): void {
    const now = Date.now();
    const { idleMs } = this.limits;
    for (const sub of [...this.subscribers]) {
      if (idleMs !== undefined && now - sub.lastSentAt > idleMs) {
        if (sub.backlog.length === 0 && sub.out.writableLength === 0) sub.out.end();
        else sub.out.destroy();
        this.drop(sub);
        continue;
      }
      this.write(sub, ': keepalive\n\n', now);
    }
  }

  private write(sub: SseSubscriber<Tag>, chunk: string, now: number): void {
    if (sub.closed) return;
    if (sub.backlog.length > 0) {
      const lagging = now - sub.backlog[0].at > this.limits.maxLagMs;
      if (lagging || sub.out.writableLength + sub.backlogBytes + chunk.length > this.limits.maxBacklogBytes) {
        sub.out.destroy();
        this.drop(sub);
        return;
      }
      sub.backlog.push({ at: now, chunk });
      sub.backlogBytes += chunk.length;
      return;
    }
    if (!sub.out.write(chunk)) sub.backlog.push({ at: now, chunk: '' });
  }

  private flush(sub: SseSubscriber<Tag>): void {
    while (sub.backlog.length > 0 && !sub.closed) {
      const next = sub.backlog.shift()!;
      sub.backlogBytes -= next.chunk.length;
      if (next.chunk && !sub.out.write(next.chunk)) {
        sub.backlog.unshift({ at: next.at, chunk: '' });
        return;
      }
    }
  }

  private drop(sub: SseSubscriber<Tag>): void {
    if (sub.closed) return;
    sub.closed = true;
    this.subscribers.delete(sub);
    sub.onClose();
  }
}
