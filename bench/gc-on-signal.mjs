// Loaded into a bench's service process with NODE_OPTIONS=--import (bench/service.ts): SIGUSR2 runs a full
// garbage collection in the main thread and in every worker thread (render, inference and face pools load this
// preload too), so resident-memory readings compare heaps without floating garbage.
// Then it writes one line to stderr, `{"bench_memory_after_gc":{…}}`: the main thread's memoryUsage() (V8 heap
// used/total, external, arrayBuffers, rss), V8's committed size per space and its resident heap size, its live libuv
// handles by type, and each worker's heap, so a bench can tell a JS or buffer leak (heap/external climb) from native
// or allocator growth (only RSS climbs).
// Plain .mjs; the service itself does not use SIGUSR2 or this channel.
import v8 from 'node:v8';
import vm from 'node:vm';
import { BroadcastChannel, isMainThread, threadId } from 'node:worker_threads';

/** Marker the bench looks for in the service's output (bench/service.ts, `MEMORY_MARKER`). */
const MARKER = 'bench_memory_after_gc';
/** Main thread → workers ("collect"), workers → main thread (their heap after collecting). */
const CHANNEL = 'bench-gc-on-signal';
/**
 * Full GCs per signal, a turn of the event loop apart: native wrappers (wrtc, sockets) free their C++ side in weak
 * callbacks and finalizers that run after a GC, and what those release is only collected by the next one.
 */
const GC_PASSES = 3;
/** Idle workers answer within milliseconds; one busy with a long task is reported as missing rather than waited for. */
const WORKER_REPLY_MS = 1_000;

v8.setFlagsFromString('--expose-gc');
const gc = vm.runInNewContext('gc');
const channel = new BroadcastChannel(CHANNEL);
// Neither side may keep a thread alive for the bench's sake.
channel.unref();

async function collectFully() {
  for (let pass = 0; pass < GC_PASSES; pass++) {
    if (pass > 0) await new Promise((resolve) => setImmediate(resolve));
    gc();
  }
}

function heapOfThisThread() {
  const heap = v8.getHeapStatistics();
  return { threadId, heapUsed: heap.used_heap_size, heapTotal: heap.total_heap_size, external: heap.external_memory };
}

if (isMainThread) {
  let sequence = 0;
  process.on('SIGUSR2', async () => {
    const workers = [];
    const onReply = (event) => {
      if (event.data?.type === 'heap') workers.push(event.data.heap);
    };
    channel.onmessage = onReply;
    channel.postMessage({ type: 'collect' });
    await collectFully();
    await new Promise((resolve) => setTimeout(resolve, WORKER_REPLY_MS));
    channel.onmessage = null;
    const resources = {};
    for (const type of process.getActiveResourcesInfo()) resources[type] = (resources[type] ?? 0) + 1;
    const heap = v8.getHeapStatistics();
    // Committed size of each V8 space: new space grows and shrinks with the allocation rate, so a change in
    // heapTotal can be told apart from old-space growth.
    const spaces = Object.fromEntries(v8.getHeapSpaceStatistics().map((space) => [space.space_name, space.space_size]));
    const reading = {
      sequence: ++sequence,
      ...process.memoryUsage(),
      heapPhysical: heap.total_physical_size,
      mallocedByV8: heap.malloced_memory,
      spaces,
      resources,
      workers,
    };
    process.stderr.write(`${JSON.stringify({ [MARKER]: reading })}\n`);
  });
} else {
  channel.onmessage = async (event) => {
    if (event.data?.type !== 'collect') return;
    await collectFully();
    channel.postMessage({ type: 'heap', heap: heapOfThisThread() });
  };
}
