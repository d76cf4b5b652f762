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
