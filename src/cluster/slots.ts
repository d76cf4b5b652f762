import { randomUUID } from 'node:crypto';

/**
 * Routing slots: each live node holds one small number (claimed atomically in Redis, `avs:slot:<n>`), and
 * the session ids it creates carry that number in their first three hex digits. Those digits are random
 * bits of a UUID4 (the version nibble is the 13th hex digit, the variant the 17th), so an id stays a valid
 * UUID4 string (spec: `session_id` is a UUID4) with 110 random bits instead of 122. A balancer that maps
 * the first three hex digits of `/sessions/<id>` to a node (docs/scaling.md: nginx `map`, HAProxy ACLs)
 * sends every request of a session straight to its owner; forwarding stays as the fallback.
 */

/** Three hex digits: enough for the 1000-node cluster docs/scaling.md works through, with room. */
export const SLOT_HEX_DIGITS = 3;
export const SLOT_COUNT = 16 ** SLOT_HEX_DIGITS;

const UUID4_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/iu;

/** The slot as the balancer's map spells it: three lower-case hex digits (`007`, `0a2`). */
export function slotHex(slot: number): string {
  if (!Number.isInteger(slot) || slot < 0 || slot >= SLOT_COUNT) throw new RangeError('slot out of range');
  return slot.toString(16).padStart(SLOT_HEX_DIGITS, '0');
}

/** A fresh UUID4 whose first three hex digits are `slot`. */
export function sessionIdForSlot(slot: number, uuid: string = randomUUID()): string {
  return slotHex(slot) + uuid.slice(SLOT_HEX_DIGITS);
}

/** The slot a session id carries; null when it is not a UUID4. */
export function slotOfSessionId(sessionId: string): number | null {
  if (!UUID4_RE.test(sessionId)) return null;
  return Number.parseInt(sessionId.slice(0, SLOT_HEX_DIGITS), 16);
}
