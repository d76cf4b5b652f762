/**
 * Signing of every request the service sends to a customer's endpoint (webhook events and webhook tools), per
 * the Standard Webhooks specification: `webhook-id`, `webhook-timestamp` (Unix seconds) and
 * `webhook-signature: v1,<base64 HMAC-SHA256 of "id.timestamp.body">`, so receivers can verify with any Standard
 * Webhooks implementation. Computed with node:crypto's native HMAC (the `standardwebhooks` library's pure-JS SHA-256
 * cost ~1 ms per 100 KB body on every retry; test/webhooks.signing.test.ts checks the bytes against that library).
 * One place, so the event outbox and the tool calls cannot drift apart.
 */
import { createHmac, createSecretKey, randomUUID, type KeyObject } from 'node:crypto';

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
  // Padded base64 only: the reference implementation's decoder refuses anything else.
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(key) || key.length % 4 !== 0) return false;
  return Buffer.from(key, 'base64').length >= 16;
}

/** Signs one message body; a signer per secret is cheap, so nothing is cached (a secret never sits in a map). */
export class WebhookSigner {
  private readonly key: KeyObject;

  constructor(secret: string) {
    if (!isWebhookSecret(secret))
      throw new Error('webhook secret must be whsec_ followed by a base64 key of ≥ 16 bytes');
    this.key = createSecretKey(Buffer.from(secret.slice(WEBHOOK_SECRET_PREFIX.length), 'base64'));
  }

  /** The three headers for `body` sent as message `id` at `at` (the same id on every retry, a fresh time). */
  headers(id: string, body: string, at: Date = new Date()): WebhookSignatureHeaders {
    const timestamp = String(Math.floor(at.getTime() / 1000));
    const signature = createHmac('sha256', this.key).update(`${id}.${timestamp}.`).update(body).digest('base64');
    return { 'webhook-id': id, 'webhook-timestamp': timestamp, 'webhook-signature': `v1,${signature}` };
  }
}
