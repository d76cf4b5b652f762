/**
 * The KServe v2 lip-sync client (actors/lipsync/kserve-client.ts) against a real loopback KServe/Triton-style
 * server (test/fakes/kserve-server.ts) that runs the tiny Wav2Lip-shaped ONNX model in onnxruntime-node:
 * both encodings, readiness, wrong signatures, pipelining, queue bound, timeouts, abort, dropped connections,
 * a dead server and close().
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  KserveError,
  KserveLipsyncClient,
  type KserveClientOptions,
  type LipsyncBatch,
} from '../actors/lipsync/kserve-client.ts';
import { prepareKserveJsonReader } from '../actors/lipsync/kserve-json-pool.ts';
import { BackendOverloadedError } from '../actors/lipsync/neural-renderer.ts';
import {
  BatchingKserveInference,
  MAX_FRAMES_WAITING,
  OFFLINE_MAX_FRAMES_WAITING,
  REMOTE_MAX_BATCH,
} from '../actors/lipsync/remote-model.ts';
import { FakeKserveServer, type FakeKserveOptions } from './fakes/kserve-server.ts';
import { tinyLipsyncModel, tinyLipsyncReference, wrongSignatureModel } from './helpers/tiny-onnx.ts';

const servers: FakeKserveServer[] = [];
const clients: KserveLipsyncClient[] = [];
afterEach(async () => {
  for (const client of clients.splice(0)) client.close();
  await Promise.all(servers.splice(0).map((server) => server.close()));
});

async function startServer(options: FakeKserveOptions = {}): Promise<FakeKserveServer> {
  const server = await FakeKserveServer.start(options);
  servers.push(server);
  return server;
}

function clientFor(server: FakeKserveServer, options: Partial<KserveClientOptions> = {}): KserveLipsyncClient {
  const client = new KserveLipsyncClient({ baseUrl: server.url, model: server.modelName, ...options });
  clients.push(client);
  return client;
}

/** A session's batching inference on a connected client, behind a server that takes `delayMs` per inference. */
async function batchingBehind(delayMs: number, maxFramesWaiting?: number) {
  const server = await startServer();
  server.behaviour.inferDelayMs = delayMs;
  const client = clientFor(server);
  const connection = await client.connect(never());
  if (!connection.connected) throw new Error('not connected');
  const inference = new BatchingKserveInference(client, connection.signature, maxFramesWaiting);
  return { server, inference, face: batchOf(1, 96).face };
}

const never = () => new AbortController().signal;

/** `count` items: item i has mel level −4 + i (silence first, then louder) and a face gradient. */
function batchOf(count: number, size: number): LipsyncBatch & { face: Float32Array } {
  const mel = new Float32Array(count * 80 * 16);
  for (let i = 0; i < count; i++) mel.fill(-4 + i, i * 1280, (i + 1) * 1280);
  const face = new Float32Array(count * 6 * size * size);
  for (let i = 0; i < face.length; i++) face[i] = (i % (size * size)) / (size * size);
  return { count, mel, face };
}

function expectReferenceOutput(output: Float32Array, batch: LipsyncBatch & { face: Float32Array }, size: number): void {
  const reference = tinyLipsyncReference(batch.mel, batch.face, batch.count, size);
  expect(output).toHaveLength(reference.length);
  let worst = 0;
  for (let i = 0; i < output.length; i++) worst = Math.max(worst, Math.abs(output[i] - reference[i]));
  expect(worst).toBeLessThan(1e-5);
}

async function rejectionOf(promise: Promise<unknown>): Promise<Error> {
  try {
    await promise;
  } catch (error) {
    return error as Error;
  }
  throw new Error('expected the promise to reject');
}

describe('KServe v2 lip-sync client against a loopback server', () => {
  it('connects, picks binary tensors when the server offers them, and gets the model function back', async () => {
    const server = await startServer();
    const client = clientFor(server);
    const connection = await client.connect(never());
    expect(connection).toMatchObject({
      connected: true,
      encoding: 'binary',
      signature: { melInput: 'mel', faceInput: 'face', output: 'output', size: 96, fixedBatch: null },
    });
    const batch = batchOf(3, 96);
    expectReferenceOutput(await client.infer(batch, never()), batch, 96);
    expect(server.stats).toMatchObject({ inferBinary: 1, inferJson: 0, binaryAnswers: 1, batches: [3] });
  });

  it('reuses keep-alive connections for requests one after another', async () => {
    const server = await startServer();
    const client = clientFor(server);
    await client.connect(never());
    for (let i = 0; i < 4; i++) await client.infer(batchOf(1, 96), never());
    expect(server.stats.requests).toHaveLength(4 + 4); // ready, model ready, server metadata, model metadata, 4 × infer
    // undici may open a second socket while the first is being handed back; without keep-alive it would be 8.
    expect(server.stats.connections).toBeLessThanOrEqual(2);
  });

  it('falls back to JSON tensors when the server does not list the binary extension', async () => {
    const server = await startServer({
      advertiseBinary: false,
      model: tinyLipsyncModel({ size: 64, melName: 'audio', faceName: 'video_frames' }),
    });
    const client = clientFor(server);
    expect(await client.connect(never())).toMatchObject({
      connected: true,
      encoding: 'json',
      signature: { melInput: 'audio', size: 64 },
    });
    const batch = batchOf(2, 64);
    expectReferenceOutput(await client.infer(batch, never()), batch, 64);
    expect(server.stats).toMatchObject({ inferBinary: 0, inferJson: 1, binaryAnswers: 0 });
  });

  for (const encoding of ['json', 'binary'] as const) {
    it(`sends a batch given as face rows, one row repeated as a session's frames repeat it, over ${encoding} tensors`, async () => {
      const server = await startServer();
      const client = clientFor(server, { encoding });
      expect(await client.connect(never())).toMatchObject({ connected: true, encoding });
      const row = batchOf(1, 96).face;
      // Twice with the same row object: JSON encoding reuses the row's text, and must send the same values.
      for (const count of [3, 2]) {
        const whole = batchOf(count, 96);
        const rows = Array.from({ length: count }, () => row);
        const output = await client.infer({ count, mel: whole.mel, face: rows }, never());
        expectReferenceOutput(output, { count, mel: whole.mel, face: whole.face }, 96);
      }
      expect(server.stats[encoding === 'json' ? 'inferJson' : 'inferBinary']).toBe(2);
    });
  }

  it('speaks JSON when told to, even to a server offering binary', async () => {
    const server = await startServer();
    const client = clientFor(server, { encoding: 'json' });
    expect(await client.connect(never())).toMatchObject({ connected: true, encoding: 'json' });
    const batch = batchOf(1, 96);
    expectReferenceOutput(await client.infer(batch, never()), batch, 96);
    expect(server.stats.inferJson).toBe(1);
  });

  it('reads a JSON answer off the event loop: the main thread never parses its megabytes of numbers', async () => {
    const server = await startServer();
    const client = clientFor(server, { encoding: 'json' });
    expect(await client.connect(never())).toMatchObject({ connected: true, encoding: 'json' });
    // The reader's thread is started first: its start-up on a loaded host is not what this test is about.
    await prepareKserveJsonReader();
    const batch = batchOf(REMOTE_MAX_BATCH, 96);
    // The fake server parses the request (`{"inputs":…`) in this thread too; only answers are counted.
    const parse = vi.spyOn(JSON, 'parse');
    let output: Float32Array;
    let parsed: unknown[][];
    try {
      output = await client.infer(batch, never());
    } finally {
      parsed = [...parse.mock.calls];
      parse.mockRestore();
    }
    const answersParsedHere = parsed.filter(
      ([text]) => typeof text === 'string' && text.length > 100_000 && !text.startsWith('{"inputs"'),
    );
    expect(answersParsedHere.map(([text]) => (text as string).length)).toEqual([]);
    expectReferenceOutput(output, batch, 96);
    expect(server.stats.inferJson).toBe(1);
  });

  it('stays unconnected while the server or the model is not ready, and connects once both are', async () => {
    const server = await startServer();
    const client = clientFor(server);
    server.behaviour.ready = false;
    expect(await client.ready(never())).toBe(false);
    expect(await client.connect(never())).toEqual({
      connected: false,
      problem: 'not_ready',
      reason: 'the server or the model is not ready',
    });
    server.behaviour.ready = true;
    server.behaviour.modelReady = false;
    expect(await client.ready(never())).toBe(false);
    server.behaviour.modelReady = true;
    expect(await client.ready(never())).toBe(true);
    expect(await client.connect(never())).toMatchObject({ connected: true });
  });

  it('refuses a served model whose signature does not fit, with the reason', async () => {
    const server = await startServer({ model: wrongSignatureModel('mel_wrong_width') });
    const client = clientFor(server);
    const connection = await client.connect(never());
    expect(connection).toMatchObject({ connected: false, problem: 'mel_input_missing' });
    expect(!connection.connected && connection.reason).toContain('mel FP32 [?, 1, 80, 20]');
    await expect(client.infer(batchOf(1, 96), never())).rejects.toThrow(/before connect/);
  });

  it('keeps several requests in flight, never more than maxInFlight', async () => {
    const server = await startServer();
    server.behaviour.inferDelayMs = 150;
    const client = clientFor(server, { maxInFlight: 3 });
    await client.connect(never());
    const batches = Array.from({ length: 6 }, (_, i) => batchOf(1 + (i % 2), 96));
    const started = performance.now();
    const outputs = await Promise.all(batches.map((batch) => client.infer(batch, never())));
    const elapsed = performance.now() - started;
    outputs.forEach((output, i) => expectReferenceOutput(output, batches[i], 96));
    // The server saw three at once (never more); two waves of 150 ms is the least it can take.
    expect(server.stats.maxInFlight).toBe(3);
    expect(elapsed).toBeGreaterThanOrEqual(290);
    expect(client.inFlight).toBe(0);
  });

  it("a session's frames asked for while the server is slow wait and leave together: fewer, larger requests, never more than 2 at once", async () => {
    const { server, inference, face } = await batchingBehind(120);
    // One signal for all, as a live renderer's frames share its own.
    const signal = never();
    // One frame every 20 ms (50 fps), as a clock catching up would ask: twice what 2 slots of 120 ms carry one by one.
    const pending: Array<Promise<Float32Array>> = [];
    const mels: Float32Array[] = [];
    for (let i = 0; i < 30; i++) {
      const mel = new Float32Array(1280).fill(-4 + (i % 5));
      mels.push(mel);
      pending.push(inference.infer(mel, face, signal));
      await new Promise((r) => setTimeout(r, 20));
    }
    const outputs = await Promise.all(pending);
    outputs.forEach((output, i) => expectReferenceOutput(output, { count: 1, mel: mels[i], face }, 96));
    expect(server.stats.maxInFlight).toBeLessThanOrEqual(2);
    expect(server.stats.batches.reduce((a, b) => a + b, 0)).toBe(30);
    expect(Math.max(...server.stats.batches)).toBeGreaterThan(2);
    expect(Math.max(...server.stats.batches)).toBeLessThanOrEqual(REMOTE_MAX_BATCH);
    expect(server.stats.batches.length).toBeLessThan(20);
    inference.close();
  });

  it('a backlog past MAX_FRAMES_WAITING frames is refused as overload at once, and the frames already taken still arrive', async () => {
    const { server, inference, face } = await batchingBehind(300);
    const mel = new Float32Array(1280).fill(-1);
    const signal = never();
    const ask = (count: number) => Array.from({ length: count }, () => inference.infer(mel, face, signal));
    // Two requests of REMOTE_MAX_BATCH go out on the next turn of the event loop…
    const sent = ask(2 * REMOTE_MAX_BATCH);
    await new Promise((r) => setImmediate(r));
    // …then MAX_FRAMES_WAITING frames wait for a slot, and the rest are refused.
    const settled = await Promise.allSettled([...sent, ...ask(MAX_FRAMES_WAITING + 5)]);
    const refused = settled.filter((r) => r.status === 'rejected');
    expect(refused).toHaveLength(5);
    for (const r of refused) expect((r as PromiseRejectedResult).reason).toBeInstanceOf(BackendOverloadedError);
    expect(settled.filter((r) => r.status === 'fulfilled')).toHaveLength(2 * REMOTE_MAX_BATCH + MAX_FRAMES_WAITING);
    expect(server.stats.batches).toEqual([REMOTE_MAX_BATCH, REMOTE_MAX_BATCH, REMOTE_MAX_BATCH, REMOTE_MAX_BATCH]);
    inference.close();
  });

  it("an offline job's three bursts of 16 frames all wait for a slow server (OFFLINE_MAX_FRAMES_WAITING), none refused", async () => {
    const { server, inference, face } = await batchingBehind(150, OFFLINE_MAX_FRAMES_WAITING);
    const mel = new Float32Array(1280).fill(-2);
    const bursts: Array<Promise<Float32Array[]>> = [];
    for (let burst = 0; burst < 3; burst++) {
      // Each burst is one render call with its own signal, as an offline job's are.
      const signal = never();
      bursts.push(Promise.all(Array.from({ length: 16 }, () => inference.infer(mel, face, signal))));
      await new Promise((r) => setTimeout(r, 5));
    }
    expect((await Promise.all(bursts)).flat()).toHaveLength(48);
    expect(server.stats.batches.reduce((a, b) => a + b, 0)).toBe(48);
    inference.close();
  });

  it("one caller's abort fails only its own frames: frames of another signal never share its request", async () => {
    const { server, inference, face } = await batchingBehind(200);
    const mel = new Float32Array(1280).fill(-1);
    const first = new AbortController();
    const second = new AbortController();
    // Asked for in the same tick, with different signals.
    const a = inference.infer(mel, face, first.signal);
    const b = inference.infer(mel, face, second.signal);
    a.catch(() => undefined);
    await new Promise((r) => setTimeout(r, 50));
    first.abort();
    await expect(a).rejects.toThrow();
    expectReferenceOutput(await b, { count: 1, mel, face }, 96);
    expect(server.stats.batches).toEqual([1, 1]);
    inference.close();
  });

  it('a per-call timeout outlasts the client deadline (the warm-up of a cold server)', async () => {
    const server = await startServer();
    server.behaviour.inferDelayMs = 300;
    const client = clientFor(server, { inferTimeoutMs: 100 });
    await client.connect(never());
    const batch = batchOf(1, 96);
    expect(await rejectionOf(client.infer(batch, never()))).toMatchObject({ kind: 'timeout' });
    expectReferenceOutput(await client.infer(batch, never(), 3_000), batch, 96);
  });

  it('rejects as busy beyond the bounded queue instead of waiting without end', async () => {
    const server = await startServer();
    server.behaviour.inferDelayMs = 200;
    const client = clientFor(server, { maxInFlight: 1, maxQueued: 1 });
    await client.connect(never());
    const first = client.infer(batchOf(1, 96), never());
    const second = client.infer(batchOf(1, 96), never());
    const third = await rejectionOf(client.infer(batchOf(1, 96), never()));
    expect(third).toBeInstanceOf(KserveError);
    expect((third as KserveError).kind).toBe('busy');
    await Promise.all([first, second]);
    expect(server.stats.maxInFlight).toBe(1);
  });

  it('gives up on a slow inference after its deadline', async () => {
    const server = await startServer();
    const client = clientFor(server, { inferTimeoutMs: 200 });
    await client.connect(never());
    server.behaviour.inferDelayMs = 5_000;
    const started = performance.now();
    const error = await rejectionOf(client.infer(batchOf(1, 96), never()));
    // Bounds leave room for a loaded machine; the server alone would take 5 s.
    expect(performance.now() - started).toBeLessThan(2_500);
    expect(error).toMatchObject({ name: 'KserveError', kind: 'timeout' });
    expect(error.message).not.toContain(server.url);
    expect(client.inFlight).toBe(0);
  });

  it('reports a server too slow to answer its health check as unreachable', async () => {
    const server = await startServer();
    server.behaviour.healthDelayMs = 5_000;
    const client = clientFor(server, { metadataTimeoutMs: 200 });
    const started = performance.now();
    const connection = await client.connect(never());
    expect(performance.now() - started).toBeLessThan(2_500);
    expect(connection).toMatchObject({ connected: false, problem: 'unreachable' });
    expect(!connection.connected && connection.reason).toMatch(/readiness: no answer within 200 ms/);
  });

  it('stops waiting as soon as the caller aborts, and the next request still works', async () => {
    const server = await startServer();
    const client = clientFor(server);
    await client.connect(never());
    server.behaviour.inferDelayMs = 5_000;
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 50);
    const started = performance.now();
    const error = await rejectionOf(client.infer(batchOf(1, 96), controller.signal));
    expect(performance.now() - started).toBeLessThan(2_500);
    expect(error.name).toBe('AbortError');
    server.behaviour.inferDelayMs = 0;
    const batch = batchOf(2, 96);
    expectReferenceOutput(await client.infer(batch, never()), batch, 96);
  });

  it('reports a connection dropped before or in the middle of the answer as a transport error', async () => {
    const server = await startServer();
    const client = clientFor(server);
    await client.connect(never());
    for (const drop of ['before_response', 'mid_response'] as const) {
      server.behaviour.drop = drop;
      const error = await rejectionOf(client.infer(batchOf(1, 96), never()));
      expect(error, drop).toMatchObject({ name: 'KserveError', kind: 'transport' });
    }
    server.behaviour.drop = 'none';
    const batch = batchOf(1, 96);
    expectReferenceOutput(await client.infer(batch, never()), batch, 96);
  });

  it("passes the server's own error text on for an HTTP failure", async () => {
    const server = await startServer();
    const client = clientFor(server);
    await client.connect(never());
    server.behaviour.inferFailStatus = 503;
    const error = await rejectionOf(client.infer(batchOf(1, 96), never()));
    expect(error).toMatchObject({ name: 'KserveError', kind: 'http', upstreamStatus: 503 });
    expect(error.message).toBe('inference returned 503: inference failed on purpose');
  });

  it('finds a dead server unreachable, without naming its address', async () => {
    const server = await startServer();
    const client = clientFor(server);
    await server.close();
    const error = await rejectionOf(client.ready(never()));
    expect(error).toMatchObject({ name: 'KserveError', kind: 'transport' });
    expect(error.message).toMatch(/ECONNREFUSED/);
    expect(error.message).not.toContain(server.url);
    expect(await client.connect(never())).toMatchObject({ connected: false, problem: 'unreachable' });
  });

  it('close() aborts the request on the wire and the queued ones, and may be called twice', async () => {
    const server = await startServer();
    server.behaviour.inferDelayMs = 2_000;
    const client = clientFor(server, { maxInFlight: 1 });
    await client.connect(never());
    const onWire = rejectionOf(client.infer(batchOf(1, 96), never()));
    const queued = rejectionOf(client.infer(batchOf(1, 96), never()));
    await new Promise((resolve) => setTimeout(resolve, 50));
    client.close();
    client.close();
    expect(await onWire).toMatchObject({ kind: 'closed' });
    expect(await queued).toMatchObject({ kind: 'closed' });
    await expect(client.infer(batchOf(1, 96), never())).rejects.toMatchObject({ kind: 'closed' });
  });

  it('checks batch shapes before sending anything', async () => {
    const server = await startServer({ model: tinyLipsyncModel({ batch: 1 }) });
    const client = clientFor(server);
    expect(await client.connect(never())).toMatchObject({ connected: true, signature: { fixedBatch: 1 } });
    await expect(client.infer(batchOf(2, 96), never())).rejects.toThrow(/batches of exactly 1/);
    await expect(client.infer({ ...batchOf(1, 96), face: new Float32Array(10) }, never())).rejects.toThrow(RangeError);
    expect(server.stats.requests.filter((r) => r.startsWith('POST'))).toHaveLength(0);
  });
});
