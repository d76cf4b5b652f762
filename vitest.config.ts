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
    // --no-turbo-fast-api-calls: the WASI engines (flite) corrupt V8's heap through the fast-API call path
    // (nodejs/node#46777); the flag must be on every process that may load them, test forks included.
    poolOptions: { forks: { maxForks: 2, minForks: 2, isolate: false, execArgv: ['--no-turbo-fast-api-calls'] } },
    reporters: ['default'],
  },
});
