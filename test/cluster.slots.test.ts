/**
 * Pure parts of cluster routing: session ids that carry their owner's routing slot (still UUID4 strings,
 * spec), and the signature that makes the internal forwarding headers unforgeable.
 */
import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { SLOT_COUNT, sessionIdForSlot, slotHex, slotOfSessionId } from '../src/cluster/slots.ts';
import { SIGNATURE_MAX_SKEW_MS, signForward, verifyForward } from '../src/cluster/internal-auth.ts';

/** RFC 4122 version 4, variant 10xx: what the spec's `session_id` is. */
const UUID4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/u;

describe('session ids carry their owner node routing slot', () => {
  it('every slot in range gives a UUID4 whose first three hex digits decode to that slot', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: SLOT_COUNT - 1 }), fc.uuid({ version: 4 }), (slot, uuid) => {
        const id = sessionIdForSlot(slot, uuid);
        expect(id).toMatch(UUID4);
        expect(slotOfSessionId(id)).toBe(slot);
        // Only the slot digits change: version and variant nibbles and every other random bit are the UUID's.
        expect(id.slice(3)).toBe(uuid.slice(3));
      }),
      { numRuns: 2000 },
    );
  });

  it('with the real generator, ids of one slot stay distinct and valid', () => {
    const ids = new Set(Array.from({ length: 5000 }, () => sessionIdForSlot(0x2a)));
    expect(ids.size).toBe(5000);
    for (const id of ids) {
      expect(id).toMatch(UUID4);
      expect(id.startsWith('02a')).toBe(true);
    }
  });

  it('slot digits are three lower-case hex digits; out-of-range slots and non-UUID4 ids are refused', () => {
    expect(slotHex(0)).toBe('000');
    expect(slotHex(4095)).toBe('fff');
    expect(() => slotHex(SLOT_COUNT)).toThrow(RangeError);
    expect(() => slotHex(-1)).toThrow(RangeError);
    expect(() => slotHex(1.5)).toThrow(RangeError);
    expect(slotOfSessionId('not-a-uuid')).toBeNull();
    // A UUID1 (version nibble 1) is not a session id.
    expect(slotOfSessionId('00000000-0000-1000-8000-000000000000')).toBeNull();
    expect(slotOfSessionId(randomUUID().toUpperCase())).not.toBeNull();
  });
});

describe('internal forwarding headers are signed with the cluster secret', () => {
  const secret = 'cluster-secret-for-tests-0123456789';
  const url = '/sessions/0a1b2c3d-0000-4000-8000-000000000000/speak';

  it('a node signature verifies for exactly its method, URL and reservation', () => {
    const signed = signForward(secret, 'node-a', 'POST', url);
    expect(verifyForward(secret, signed, 'POST', url, undefined)).toBe(true);
    expect(verifyForward(secret, signed, 'post', url, undefined)).toBe(true);
    expect(verifyForward(secret, signed, 'DELETE', url, undefined)).toBe(false);
    expect(verifyForward(secret, signed, 'POST', `${url}x`, undefined)).toBe(false);
    expect(verifyForward(secret, signed, 'POST', url, 'a-reservation')).toBe(false);
    const reserved = signForward(secret, 'node-a', 'POST', '/sessions', 'token-1');
    expect(verifyForward(secret, reserved, 'POST', '/sessions', 'token-1')).toBe(true);
    expect(verifyForward(secret, reserved, 'POST', '/sessions', 'token-2')).toBe(false);
    expect(verifyForward(secret, reserved, 'POST', '/sessions', undefined)).toBe(false);
  });

  it('what a client can send is refused: any value, another secret, a stale or future time, arrays', () => {
    const now = Date.now();
    expect(verifyForward(secret, 'node-a', 'GET', url, undefined)).toBe(false);
    expect(verifyForward(secret, '1', 'GET', url, undefined)).toBe(false);
    expect(
      verifyForward(secret, signForward('another-secret-of-length', 'node-a', 'GET', url), 'GET', url, undefined),
    ).toBe(false);
    expect(
      verifyForward(
        secret,
        signForward(secret, 'node-a', 'GET', url, '', now - SIGNATURE_MAX_SKEW_MS - 1),
        'GET',
        url,
        undefined,
        now,
      ),
    ).toBe(false);
    expect(
      verifyForward(
        secret,
        signForward(secret, 'node-a', 'GET', url, '', now + SIGNATURE_MAX_SKEW_MS + 1),
        'GET',
        url,
        undefined,
        now,
      ),
    ).toBe(false);
    expect(verifyForward(secret, [signForward(secret, 'node-a', 'GET', url)], 'GET', url, undefined)).toBe(false);
    fc.assert(
      fc.property(fc.string(), (forged) => {
        expect(verifyForward(secret, forged, 'GET', url, undefined)).toBe(false);
      }),
    );
    // A signature with the node id swapped is not the other node's.
    const [, at, mac] = signForward(secret, 'node-a', 'GET', url).split('.');
    expect(verifyForward(secret, `node-b.${at}.${mac}`, 'GET', url, undefined)).toBe(false);
  });
});
