/**
 * A fixed piece of CPU work timed on its own, so that CPU figures taken hours apart on a VM can be compared: the
 * same build read 148 and 201 ms per session-second on two days (docs/performance.md). The probe is native
 * hashing plus a JIT-compiled integer loop, single-threaded, ~1.1 s on the 2-core development VM; a run whose probe
 * reads slower ran on a slower host, whatever the code did.
 */
import crypto from 'node:crypto';

/** Bytes hashed per round: large enough to run from memory, not cache. */
const HASHED_BYTES = 64 << 20;
const HASH_ROUNDS = 4;
const LOOP_STEPS = 300_000_000;
/** Probes per reading; the median is reported (one may meet a burst of other work). */
const PROBES = 3;

function probeOnce(buffer: Buffer): number {
  const started = performance.now();
  for (let i = 0; i < HASH_ROUNDS; i++) crypto.createHash('sha256').update(buffer).digest();
  let x = 0;
  for (let i = 0; i < LOOP_STEPS; i++) x = (x + i * 7) % 1_000_003;
  if (x < 0) throw new Error('unreachable: keeps the loop from being optimised away');
  return performance.now() - started;
}

/** Median ms of `PROBES` runs of the fixed work. */
export function hostProbeMs(): number {
  const buffer = Buffer.alloc(HASHED_BYTES, 7);
  const times = Array.from({ length: PROBES }, () => probeOnce(buffer)).sort((a, b) => a - b);
  return Math.round(times[Math.floor(PROBES / 2)]);
}
