import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { Redis } from 'ioredis';
import { SECRET_KEY } from './scripts.ts';

/**
 * Nodes sign the headers only they may send (FORWARDED_HEADER: "served where it lands, never forwarded
 * again"; RESERVATION_HEADER: "placement already reserved this slot"). A client that sends them is
 * treated as any other client: the headers are dropped before routing looks at them.
 *
 * FORWARDED_HEADER = `<node id>.<unix ms>.<base64url HMAC-SHA256>` over node id, time, method, URL and the
 * reservation token (empty when none), keyed by the cluster secret: SERVICE_CLUSTER_SECRET, or one random
 * secret the first node writes to Redis with SET NX and every node reads.
 */

/**
 * A signature older (or newer: node clocks differ) than this is refused. Long enough for clock skew
 * between nodes and a request queued behind FORWARD_MAX_SOCKETS_PER_NODE; short enough that a captured
 * header is soon useless for another request (it is bound to one method and URL anyway).
 */
export const SIGNATURE_MAX_SKEW_MS = 5 * 60_000;
/** Bytes of a generated cluster secret. */
const SECRET_BYTES = 32;

/** The cluster secret: the configured one, or the one in Redis (created once, by whichever node is first). */
export async function clusterSecret(redis: Redis, configured: string | null): Promise<string> {
  if (configured !== null) return configured;
  await redis.set(SECRET_KEY, randomBytes(SECRET_BYTES).toString('base64url'), 'NX');
  const secret = await redis.get(SECRET_KEY);
  if (!secret) throw new Error('cluster secret missing from redis');
  return secret;
}

function mac(secret: string, nodeId: string, at: string, method: string, url: string, reservation: string): string {
  return createHmac('sha256', secret)
    .update(`${nodeId}\n${at}\n${method.toUpperCase()}\n${url}\n${reservation}`)
    .digest('base64url');
}

/** The FORWARDED_HEADER value a node sends with a request it forwards. */
export function signForward(
  secret: string,
  nodeId: string,
  method: string,
  url: string,
  reservation = '',
  now = Date.now(),
): string {
  const at = String(now);
  return `${nodeId}.${at}.${mac(secret, nodeId, at, method, url, reservation)}`;
}

/** True when `header` is a node's signature of exactly this request (method, URL, reservation) and is fresh. */
export function verifyForward(
  secret: string,
  header: unknown,
  method: string,
  url: string,
  reservation: unknown,
  now = Date.now(),
): boolean {
  if (typeof header !== 'string' || (reservation !== undefined && typeof reservation !== 'string')) return false;
  const parts = header.split('.');
  if (parts.length !== 3) return false;
  const [nodeId, at, given] = parts;
  const time = Number(at);
  if (!/^\d{1,16}$/u.test(at) || Math.abs(now - time) > SIGNATURE_MAX_SKEW_MS) return false;
  const expected = Buffer.from(mac(secret, nodeId, at, method, url, reservation ?? ''));
  const actual = Buffer.from(given);
  return actual.length === expected.length && timingSafeEqual(actual, expected);
}
