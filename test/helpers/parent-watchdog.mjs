import { isMainThread } from 'node:worker_threads';

/**
 * Loaded with `--import` into a service child started by `service-process.ts`. The parent holds the
 * other end of the child's stdin; when the parent dies in any way (a timed-out test run, SIGKILL of the
 * test fork) the pipe closes and the child shuts itself down, so no service outlives the test that
 * started it. SIGTERM takes the service's own graceful path (bounded by its shutdown timeout).
 * Plain .mjs and main-thread only: worker threads inherit `--import` but not the stdin pipe, and they
 * load it before tsx is registered in them.
 */
if (isMainThread) {
  const shutDown = () => process.kill(process.pid, 'SIGTERM');
  process.stdin.on('end', shutDown);
  process.stdin.on('error', shutDown);
  process.stdin.resume();
}
