/**
 * Signing of every request the service sends to a customer's endpoint (webhook events and webhook tools), per
 * the Standard Webhooks specification: `webhook-id`, `webhook-timestamp` (Unix seconds) and
 * `webhook-signature: v1,<base64 HMAC-SHA256 of "id.timestamp.body">`, computed by the `standardwebhooks`
 * library so receivers can verify with any Standard Webhooks implementation. One place, so the event outbox and
 * the tool calls cannot drift apart.
 */
import { randomUUID } from 'node:crypto';
import { Webhook } from 'standardwebhooks';

/** Standard Webhooks secrets are `whsec_` followed by the base64 key; the library takes exactly that form. */
export const WEBHOOK_SECRET_PREFIX = 'whsec_';

export interface WebhookSignatureHeaders {
  'webhook-id': string;
  'webhook-timestamp': string;
  'webhook-signature': string;
}

/** A new message id. Retries of one message must reuse its id (receivers deduplicate on it). */
export function newWebhookId(): string {
  return `msg_${randomUUID().replaceAll('-', '')}`;
}

/** Whether `secret` is a usable Standard Webhooks secret (`whsec_` + base64 of at least 16 bytes). */
export function isWebhookSecret(secret: string): boolean {
  if (!secret.startsWith(WEBHOOK_SECRET_PREFIX)) return false;
  const key = secret.slice(WEBHOOK_SECRET_PREFIX.length);
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(key)) return false;
  return Buffer.from(key, 'base64').length >= 16;
}

/** Signs one message body; a `Webhook` per secret is cheap, so nothing is cached (a secret never sits in a map). */
export class WebhookSigner {
  private readonly webhook: Webhook;

  constructor(secret: string) {
    if (!isWebhookSecret(secret)) throw new Error('webhook secret must be whsec_ followed by a base64 key of ≥ 16 bytes');
    this.webhook = new Webhook(secret);
  }

  /** The three headers for `body` sent as message `id` at `at` (the same id on every retry, a fresh time). */
  headers(id: string, body: string, at: Date = new Date()): WebhookSignatureHeaders {
    return {
      'webhook-id': id,
      'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
      'webhook-signature': this.webhook.sign(id, at, body),
    };
  }
}
