// Loaded into a bench's service process with NODE_OPTIONS=--import (bench/service.ts): SIGUSR2 runs a full
// garbage collection in the main thread, so resident-memory readings compare heaps without floating garbage.
// Plain .mjs, main thread only; the service itself does not use SIGUSR2.
import v8 from 'node:v8';
import vm from 'node:vm';
import { isMainThread } from 'node:worker_threads';

if (isMainThread) {
  v8.setFlagsFromString('--expose-gc');
  const gc = vm.runInNewContext('gc');
  process.on('SIGUSR2', () => gc());
}
