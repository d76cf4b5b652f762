import type { Logger } from 'pino';
import { newWebhookId } from '../../actors/upstream/webhook-signing.ts';
import type { WebhookConfig } from '../config.ts';
import { InvalidInput } from '../domain-errors.ts';
import { errorForLog } from '../logger.ts';
import type { StoredJob } from '../store/jobs.ts';
import type { StoredSession } from '../store/sessions.ts';
import type { TranscriptTurn } from '../store/transcripts.ts';
import type { AvatarSummary } from '../catalog/catalog.ts';
import type { OutboxEntry } from './outbox.ts';
import { callbackUrlAllowed } from './allowed-hosts.ts';

export const WEBHOOK_EVENT_TYPES = [
  'session.started',
  'session.terminated',
  'turn.completed',
  'recording.ready',
  'bundle.completed',
  'bundle.failed',
  'avatar.created',
] as const;
export type WebhookEventType = (typeof WEBHOOK_EVENT_TYPES)[number];

/** Where delivery picks new entries up. */
export interface DeliveryKick {
  kick(): void;
}

/** Where an emitted event is stored until delivered: the LevelDB outbox, or BullMQ's queue in cluster mode. */
export interface WebhookSink {
  add(entry: Omit<OutboxEntry, 'key'>): Promise<unknown>;
}

export interface WebhookEventsDeps {
  config: WebhookConfig;
  outbox: WebhookSink;
  delivery: DeliveryKick;
  logger: Logger;
  /** The per-session callback URL of a session, if it has one (live sessions only: the supervisor knows them). */
  sessionUrlOf?: (sessionId: string) => string | null | undefined;
}

/**
 * The one owner of what is sent when: every webhook event of the service is built here (`{type, timestamp, data}`)
 * and put in the outbox, once per receiver (SERVICE_WEBHOOK_URL, and the session's own `webhook_url` for events
 * of a session). An event counts as emitted once it is stored; callers never wait for a receiver and never see an
 * error (a failing store is logged): delivery never delays a turn.
 */
export class WebhookEvents {
  constructor(private readonly deps: WebhookEventsDeps) {}

  /** Whether anything is signed and sent at all (SERVICE_WEBHOOK_SECRET is set). */
  get enabled(): boolean {
    return this.deps.config.secret !== null;
  }

  /** A per-session callback URL is allowed only on SERVICE_WEBHOOK_ALLOWED_HOSTS (400 otherwise). */
  assertCallbackUrl(url: string): void {
    if (!this.enabled || this.deps.config.allowedHosts.length === 0) {
      throw new InvalidInput(
        'webhook_url needs SERVICE_WEBHOOK_ALLOWED_HOSTS (and SERVICE_WEBHOOK_SECRET) on the service',
      );
    }
    if (!callbackUrlAllowed(url, this.deps.config.allowedHosts)) {
      throw new InvalidInput('webhook_url must be an http(s) URL on a host listed in SERVICE_WEBHOOK_ALLOWED_HOSTS');
    }
  }

  sessionStarted(session: StoredSession): Promise<void> {
    return this.emit(
      'session.started',
      { session_id: session.session_id, avatar_id: session.avatar_id, model: session.model },
      session.webhook_url,
    );
  }

  sessionTerminated(session: StoredSession, reason: string): Promise<void> {
    return this.emit('session.terminated', { session_id: session.session_id, reason }, session.webhook_url);
  }

  turnCompleted(session: StoredSession, turn: TranscriptTurn): Promise<void> {
    return this.emit('turn.completed', { session_id: session.session_id, ...turn }, session.webhook_url);
  }

  recordingReady(sessionId: string, recording: { artifact_url: string; duration_ms: number }): Promise<void> {
    return this.emit('recording.ready', { session_id: sessionId, ...recording }, this.deps.sessionUrlOf?.(sessionId));
  }

  bundleSettled(job: StoredJob, artifactUrl: string): Promise<void> {
    const base = { job_id: job.job_id, session_id: job.session_id };
    const sessionUrl = this.deps.sessionUrlOf?.(job.session_id);
    if (job.status === 'complete')
      return this.emit(
        'bundle.completed',
        { ...base, artifact_url: artifactUrl, duration_ms: job.duration_ms ?? null },
        sessionUrl,
      );
    return this.emit('bundle.failed', { ...base, error: job.error }, sessionUrl);
  }

  avatarCreated(avatar: AvatarSummary): Promise<void> {
    return this.emit('avatar.created', { avatar_id: avatar.id, name: avatar.name, model_type: avatar.model_type });
  }

  /** Stores one delivery per receiver, then wakes the delivery loop. Never rejects. */
  async emit(type: WebhookEventType, data: object, sessionUrl?: string | null): Promise<void> {
    if (!this.enabled) return;
    const receivers = new Set(
      [this.deps.config.url, sessionUrl].filter((url): url is string => typeof url === 'string'),
    );
    if (receivers.size === 0) return;
    const now = Date.now();
    const body = JSON.stringify({ type, timestamp: new Date(now).toISOString(), data });
    try {
      for (const url of receivers) {
        await this.deps.outbox.add({ id: newWebhookId(), url, type, body, createdAt: now, attempts: 0, nextAt: now });
      }
    } catch (error) {
      this.deps.logger.error({ type, err: errorForLog(error) }, 'webhook event not stored');
    }
    this.deps.delivery.kick();
  }
}
