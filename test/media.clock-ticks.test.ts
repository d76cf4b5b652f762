import { describe, expect, it } from 'vitest';
import { CLOCK_TICK_MS, onClockTick } from '../actors/media/clock-ticks.ts';
import { sleep } from './helpers/conversation.ts';

describe('the media clocks share one tick', () => {
  it('wakes every subscribed clock in the same timer callback until each stops, and a clock that starts later joins it', async () => {
    const ticks: Array<{ clock: string; at: number }> = [];
    let callback = 0;
    // The timer callback a tick runs in: the same for every clock woken by it.
    const stopMarker = onClockTick(() => callback++);
    const stopA = onClockTick(() => ticks.push({ clock: 'a', at: callback }));
    await sleep(CLOCK_TICK_MS * 3);
    const stopB = onClockTick(() => ticks.push({ clock: 'b', at: callback }));
    await sleep(CLOCK_TICK_MS * 10);
    stopA();
    const aTicks = ticks.filter((t) => t.clock === 'a').length;
    await sleep(CLOCK_TICK_MS * 6);
    expect(ticks.filter((t) => t.clock === 'a').length).toBe(aTicks);
    const b = ticks.filter((t) => t.clock === 'b');
    expect(b.length).toBeGreaterThan(3);
    // b was woken in the same callbacks as a while both ran: one timer, not one each.
    const aCallbacks = new Set(ticks.filter((t) => t.clock === 'a').map((t) => t.at));
    const bWhileA = b.filter((t) => t.at <= Math.max(...aCallbacks));
    expect(bWhileA.length).toBeGreaterThan(0);
    for (const t of bWhileA) expect(aCallbacks.has(t.at)).toBe(true);
    stopB();
    stopMarker();
    const after = ticks.length;
    await sleep(CLOCK_TICK_MS * 4);
    expect(ticks.length).toBe(after);
  });
});
