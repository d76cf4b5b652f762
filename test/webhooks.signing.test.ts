import { randomBytes } from 'node:crypto';
import { Webhook } from 'standardwebhooks';
import { describe, expect, it } from 'vitest';
import { isWebhookSecret, newWebhookId, WebhookSigner } from '../actors/upstream/webhook-signing.ts';

describe('Standard Webhooks signing', () => {
  const secret = `whsec_${randomBytes(24).toString('base64')}`;

  it('signs a body that the standardwebhooks library verifies, and a changed body does not verify', () => {
    const id = newWebhookId();
    const body = JSON.stringify({ type: 'session.started', timestamp: new Date().toISOString(), data: { a: 1 } });
    const headers = new WebhookSigner(secret).headers(id, body);
    expect(headers['webhook-id']).toBe(id);
    expect(headers['webhook-signature']).toMatch(/^v1,[A-Za-z0-9+/]+=*$/);
    expect(new Webhook(secret).verify(body, { ...headers })).toEqual(JSON.parse(body));
    expect(() => new Webhook(secret).verify(`${body} `, { ...headers })).toThrow();
  });

  it('gives byte for byte the signature of the standardwebhooks reference, for any id, time and body (multi-byte text too)', () => {
    const reference = new Webhook(secret);
    const signer = new WebhookSigner(secret);
    const bodies = ['', '{}', JSON.stringify({ text: 'Grüße, 你好 🚀'.repeat(50) }), 'x'.repeat(300_000)];
    for (const [i, body] of bodies.entries()) {
      const at = new Date(1_700_000_000_123 + i * 997_000);
      const id = newWebhookId();
      expect(signer.headers(id, body, at)['webhook-signature']).toBe(reference.sign(id, at, body));
      expect(signer.headers(id, body, at)['webhook-timestamp']).toBe(String(Math.floor(at.getTime() / 1000)));
    }
  });

  it('refuses secrets that are not whsec_ + base64 of at least 16 bytes', () => {
    expect(isWebhookSecret(secret)).toBe(true);
    for (const bad of [
      '',
      'whsec_',
      'secret',
      `whsec_${randomBytes(8).toString('base64')}`,
      'whsec_!!!!notbase64!!!!',
      `whsec_${randomBytes(24).toString('base64').slice(0, -1)}`,
    ]) {
      expect(isWebhookSecret(bad), bad).toBe(false);
      expect(() => new WebhookSigner(bad)).toThrow();
    }
  });

  it('gives every message its own id', () => {
    expect(new Set(Array.from({ length: 100 }, newWebhookId)).size).toBe(100);
  });
});
