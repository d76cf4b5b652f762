import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Real wrtc peers, ffmpeg and workers: generous per-test time, files in a few forks.
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    // Two long-lived forks run the files one after another: native add-ons (wrtc, sharp, tfjs-wasm in worker
    // threads) can crash a process as it exits, and a fork exiting after every file made that an intermittent
    // "Channel closed" that aborted whole runs. Each file still builds its own app on fresh temp dirs.
    poolOptions: { forks: { maxForks: 2, minForks: 2, isolate: false } },
    reporters: ['default'],
  },
});
