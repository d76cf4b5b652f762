import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // A temp root per test file, removed after it (test/setup/temp-root.ts).
    setupFiles: ['test/setup/temp-root.ts'],
    // Real wrtc peers, ffmpeg and workers: generous per-test time, files in a few forks.
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    // Each file runs in a fresh fork (isolate), so no module state leaks from one file into the next. The
    // intermittent "Channel closed" that once made the runner share forks was the flite heap corruption below,
    // which now costs at most one engine child process, never a fork.
    // --no-turbo-fast-api-calls: the WASI engines (flite) corrupt V8's heap through the fast-API call path
    // (nodejs/node#46777); the flag must be on every process that may load them, test forks included.
    poolOptions: { forks: { maxForks: 2, minForks: 2, isolate: true, execArgv: ['--no-turbo-fast-api-calls'] } },
    reporters: ['default'],
  },
});
