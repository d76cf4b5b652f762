export function percentile(values: number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const idx = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[idx];
}

export function summary(values: number[]): { p50: number; p95: number; min: number; max: number; n: number } {
  return {
    p50: round(percentile(values, 50)),
    p95: round(percentile(values, 95)),
    min: round(Math.min(...values)),
    max: round(Math.max(...values)),
    n: values.length,
  };
}

export const round = (v: number, digits = 1) => Math.round(v * 10 ** digits) / 10 ** digits;

/**
 * The item whose `key` is the median of the items' (the lower middle for an even count), the item itself so its other
 * fields come with it: the repeated-measurement rows report one whole run, not a mix of runs. Undefined when empty.
 */
export function medianBy<T>(items: readonly T[], key: (item: T) => number): T | undefined {
  return [...items].sort((a, b) => key(a) - key(b))[Math.floor((items.length - 1) / 2)];
}
