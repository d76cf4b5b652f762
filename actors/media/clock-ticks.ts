/**
 * One timer wakes every media clock of the process (`PlayoutClock`), instead of one 5 ms interval per session: 24
 * speaking sessions each with its own interval woke the event loop up to 4 800 times a second at scattered moments
 * (docs/performance.md, "Client-rendered sessions"); sharing one makes it 200. Each clock still decides from its own
 * start time what is due (it catches up by wall time), so when in the 5 ms it is woken does not change what it sends.
 */

/** How often the clocks wake; catching up by wall time keeps each exact even when a tick is late. */
export const CLOCK_TICK_MS = 5;

const clocks = new Set<() => void>();
let timer: NodeJS.Timeout | null = null;

/** Calls `tick` every `CLOCK_TICK_MS` (with every other clock's) until the returned stop is called. */
export function onClockTick(tick: () => void): () => void {
  clocks.add(tick);
  timer ??= setInterval(tickAll, CLOCK_TICK_MS);
  return () => {
    clocks.delete(tick);
    if (clocks.size > 0 || !timer) return;
    clearInterval(timer);
    timer = null;
  };
}

function tickAll(): void {
  for (const tick of clocks) {
    try {
      tick();
    } catch (error) {
      // As from a timer of its own: the failure is the process's uncaught exception, and the other clocks still tick.
      queueMicrotask(() => {
        throw error;
      });
    }
  }
}
