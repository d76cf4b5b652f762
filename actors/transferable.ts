/**
 * One way to hand a value to (or back from) a piscina worker with its big buffers transferred instead of cloned:
 * an upload's bytes, decoded samples, an inference answer. The buffers move; the sender must not use them after.
 */
import { Piscina } from 'piscina';

class Transferable<T> {
  constructor(
    private readonly value: T,
    private readonly buffers: ArrayBufferLike[],
  ) {}
  get [Piscina.transferableSymbol]() {
    return this.buffers;
  }
  get [Piscina.valueSymbol]() {
    return this.value;
  }
}

/** `value` marked for piscina to transfer `buffers` with it (typed as the value: piscina unwraps it on arrival). */
export function movedWith<T>(value: T, buffers: ArrayBufferLike[]): T {
  return Piscina.move(new Transferable(value, buffers) as never) as T;
}
