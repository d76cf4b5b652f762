/**
 * A KServe v2 / Triton HTTP client for a Wav2Lip-family model served by an existing inference engine.
 *
 * - `ready()`: `GET /v2/health/ready` and `GET /v2/models/{name}/ready`, both 200.
 * - `metadata()`: `GET /v2/models/{name}` → tensor names, datatypes, shapes → the same shape-based signature check
 *   as a local ONNX model (`model-signature.ts`).
 * - `connect()`: readiness + server metadata (`GET /v2`, whose `extensions` decide the encoding: Triton's
 *   `binary_tensor_data` → binary, otherwise JSON) + model metadata → connected or a reason.
 * - `infer(batch)`: `POST /v2/models/{name}/infer` with FP32 tensors, either as JSON `data` arrays or with the
 *   binary tensor extension (`Inference-Header-Content-Length` header; JSON header then raw little-endian bytes,
 *   `binary_data_size` per input, `binary_data_output: true` for the answer).
 *
 * Several inferences may be in flight at once (pipelining over keep-alive connections: Node's fetch pools and
 * reuses sockets per origin); beyond `maxInFlight` callers wait in a bounded queue. Every call has a deadline
 * and follows the caller's AbortSignal; `close()` aborts whatever is still running. Error messages name the
 * endpoint kind, never the base URL (it may carry credentials or internal host names).
 */
import { readJsonOutputOffThread } from './kserve-json-pool.ts';
import { abortError } from '../upstream/abort.ts';
import { Admission, type Release } from '../admission.ts';
import { UpstreamError } from '../upstream/errors.ts';
import { describeTransportError, extractErrorText, readBoundedBytes } from '../upstream/http.ts';
import {
  inspectLipsyncModel,
  LIPSYNC_DATATYPE,
  tensorSpecsFromKserve,
  type KserveTensorMetadata,
  type LipsyncSignature,
  type LipsyncSignatureCheck,
  type LipsyncSignatureProblem,
} from './model-signature.ts';

/** Health and metadata are answered from memory by any engine; one slower than this cannot serve frames live. */
export const KSERVE_METADATA_TIMEOUT_MS = 5_000;
/** One batch, queue wait included. Generous for a cold first run on a GPU; a live renderer drops frames sooner. */
export const KSERVE_INFER_TIMEOUT_MS = 10_000;
/** Requests on the wire at once: enough to hide one round trip behind the engine's compute, few enough to keep latency. */
export const KSERVE_DEFAULT_MAX_IN_FLIGHT = 2;
/** Callers waiting for a slot; more than this means the engine cannot keep up, and waiting longer would not help. */
export const KSERVE_DEFAULT_MAX_QUEUED = 8;
/** Health answers, metadata and error bodies are small; anything bigger is not a KServe server talking. */
const MAX_METADATA_BYTES = 1 << 20;
/** The JSON part of a binary response (model name, outputs, shapes). */
const MAX_INFER_HEADER_BYTES = 64 << 10;
/** A float written as JSON text takes at most ~24 characters ("-0.12345678901234567e-10,"). */
const MAX_JSON_BYTES_PER_FLOAT = 32;
/** The KServe extension name Triton lists in `GET /v2` when it accepts binary tensors. */
export const BINARY_TENSOR_EXTENSION = 'binary_tensor_data';
const HEADER_LENGTH_FIELD = 'inference-header-content-length';

const HOST_IS_LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

export type KserveEncoding = 'json' | 'binary';

export interface KserveClientOptions {
  /** Server root, e.g. `http://127.0.0.1:8000` (the client appends `/v2/...`). */
  baseUrl: string;
  model: string;
  /** `auto` (default): binary when the server lists the binary tensor extension. */
  encoding?: 'auto' | KserveEncoding;
  maxInFlight?: number;
  maxQueued?: number;
  metadataTimeoutMs?: number;
  inferTimeoutMs?: number;
}

export type KserveErrorKind = 'timeout' | 'transport' | 'http' | 'protocol' | 'busy' | 'closed';

export class KserveError extends UpstreamError {
  constructor(
    readonly kind: KserveErrorKind,
    message: string,
    upstreamStatus?: number,
  ) {
    super(message, upstreamStatus);
    this.name = 'KserveError';
  }
}

export interface KserveServerMetadata {
  name: string;
  version: string;
  extensions: string[];
}

export interface KserveModelMetadata {
  name: string;
  platform?: string;
  versions?: string[];
  inputs: KserveTensorMetadata[];
  outputs: KserveTensorMetadata[];
}

/** `count` items: mel [count, 1, 80, 16] and face [count, 6, S, S], row-major FP32. */
export interface LipsyncBatch {
  count: number;
  mel: Float32Array;
  /**
   * The faces as one tensor, or one row per item. Rows must not change once passed: a session sends its avatar's
   * one prepared face with every frame, and JSON encoding writes the text of a row it has seen before only once.
   */
  face: Float32Array | readonly Float32Array[];
}

export type KserveConnection =
  | { connected: true; signature: LipsyncSignature; encoding: KserveEncoding; server: KserveServerMetadata }
  | { connected: false; problem: 'unreachable' | 'not_ready' | 'metadata' | LipsyncSignatureProblem; reason: string };

export class KserveLipsyncClient {
  private readonly baseUrl: string;
  private readonly modelPath: string;
  private readonly maxInFlight: number;
  private readonly maxQueued: number;
  private readonly metadataTimeoutMs: number;
  private readonly inferTimeoutMs: number;
  private readonly closing = new AbortController();
  /** The requests on the wire and the callers waiting for one of their slots. */
  private readonly slots: Admission;
  private closed = false;
  private connection: { signature: LipsyncSignature; encoding: KserveEncoding } | undefined;

  constructor(private readonly options: KserveClientOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, '');
    this.modelPath = `/v2/models/${encodeURIComponent(options.model)}`;
    this.maxInFlight = Math.max(1, options.maxInFlight ?? KSERVE_DEFAULT_MAX_IN_FLIGHT);
    this.maxQueued = Math.max(0, options.maxQueued ?? KSERVE_DEFAULT_MAX_QUEUED);
    this.metadataTimeoutMs = options.metadataTimeoutMs ?? KSERVE_METADATA_TIMEOUT_MS;
    this.inferTimeoutMs = options.inferTimeoutMs ?? KSERVE_INFER_TIMEOUT_MS;
    this.slots = new Admission({
      maxRunning: this.maxInFlight,
      maxWaiting: this.maxQueued,
      refusal: () =>
        new KserveError('busy', `inference queue full (${this.maxInFlight} in flight, ${this.maxQueued} waiting)`),
    });
  }

  /** Requests currently on the wire. */
  get inFlight(): number {
    return this.slots.load.running;
  }

  /** The signature and encoding `connect()` settled on, if it connected. */
  get current(): { signature: LipsyncSignature; encoding: KserveEncoding } | undefined {
    return this.connection;
  }

  /** Server and model both ready. A 4xx/5xx answer is "not ready"; no answer at all throws `KserveError`. */
  async ready(signal: AbortSignal): Promise<boolean> {
    const server = await this.request('GET', '/v2/health/ready', 'readiness', this.metadataTimeoutMs, signal);
    if (!server.ok) return false;
    const model = await this.request(
      'GET',
      `${this.modelPath}/ready`,
      'model readiness',
      this.metadataTimeoutMs,
      signal,
    );
    return model.ok;
  }

  async serverMetadata(signal: AbortSignal): Promise<KserveServerMetadata> {
    const answer = await this.request('GET', '/v2', 'server metadata', this.metadataTimeoutMs, signal);
    if (!answer.ok) throw httpError('server metadata', answer);
    const body = parseJson(answer.body, 'server metadata') as Partial<KserveServerMetadata>;
    return {
      name: typeof body.name === 'string' ? body.name : '',
      version: typeof body.version === 'string' ? body.version : '',
      extensions: Array.isArray(body.extensions)
        ? body.extensions.filter((e): e is string => typeof e === 'string')
        : [],
    };
  }

  async metadata(signal: AbortSignal): Promise<{ model: KserveModelMetadata; check: LipsyncSignatureCheck }> {
    const answer = await this.request('GET', this.modelPath, 'model metadata', this.metadataTimeoutMs, signal);
    if (!answer.ok) throw httpError('model metadata', answer);
    const model = parseModelMetadata(parseJson(answer.body, 'model metadata'));
    return {
      model,
      check: inspectLipsyncModel(tensorSpecsFromKserve(model.inputs), tensorSpecsFromKserve(model.outputs)),
    };
  }

  /** Decides connected (and how to talk) or says why not. Only the caller's abort throws. */
  async connect(signal: AbortSignal): Promise<KserveConnection> {
    this.connection = undefined;
    try {
      if (!(await this.ready(signal)))
        return { connected: false, problem: 'not_ready', reason: 'the server or the model is not ready' };
      const server = await this.serverMetadata(signal).catch((error: unknown): KserveServerMetadata => {
        // A bare KServe runtime may not serve `GET /v2`; that only means no extensions.
        if (error instanceof KserveError && error.kind === 'http') return { name: '', version: '', extensions: [] };
        throw error;
      });
      const { check } = await this.metadata(signal);
      if (!check.ok) return { connected: false, problem: check.problem, reason: check.reason };
      const wanted = this.options.encoding ?? 'auto';
      const encoding: KserveEncoding =
        wanted === 'auto' ? (server.extensions.includes(BINARY_TENSOR_EXTENSION) ? 'binary' : 'json') : wanted;
      this.connection = { signature: check.signature, encoding };
      return { connected: true, signature: check.signature, encoding, server };
    } catch (error) {
      if (!(error instanceof KserveError)) throw error;
      const problem = error.kind === 'timeout' || error.kind === 'transport' ? 'unreachable' : 'metadata';
      return { connected: false, problem, reason: error.message };
    }
  }

  /**
   * Runs one batch; resolves with the generated faces [count, 3, S, S] in [0, 1]. Requires `connect()`. `timeoutMs`
   * overrides the client's inference deadline for this call (a warm-up may take longer than a live frame).
   */
  async infer(batch: LipsyncBatch, signal: AbortSignal, timeoutMs = this.inferTimeoutMs): Promise<Float32Array> {
    const connection = this.connection;
    if (!connection) throw new Error('KServe lip-sync client used before connect() succeeded');
    const { signature, encoding } = connection;
    const size = signature.size;
    if (!Number.isInteger(batch.count) || batch.count < 1)
      throw new RangeError('batch count must be a positive integer');
    if (signature.fixedBatch !== null && batch.count !== signature.fixedBatch) {
      throw new RangeError(`the model takes batches of exactly ${signature.fixedBatch}`);
    }
    if (batch.mel.length !== batch.count * 80 * 16)
      throw new RangeError('mel batch must hold count × 1 × 80 × 16 values');
    const faceRows = batch.face instanceof Float32Array ? [batch.face] : batch.face;
    if (faceRows.reduce((sum, row) => sum + row.length, 0) !== batch.count * 6 * size * size) {
      throw new RangeError(`face batch must hold count × 6 × ${size} × ${size} values`);
    }

    const inputs: InputTensor[] = [
      { name: signature.melInput, shape: [batch.count, 1, 80, 16], parts: [batch.mel] },
      // Only rows are stable: a caller passing one whole tensor may refill it for its next batch.
      {
        name: signature.faceInput,
        shape: [batch.count, 6, size, size],
        parts: faceRows,
        stable: !(batch.face instanceof Float32Array),
      },
    ];
    const outputFloats = batch.count * 3 * size * size;
    const deadline = AbortSignal.timeout(timeoutMs);
    const releaseSlot = await this.acquireSlot(AbortSignal.any([signal, deadline]), signal);
    try {
      const { body, headers } =
        encoding === 'binary' ? binaryRequest(inputs, signature.output) : jsonRequest(inputs, signature.output);
      const maxBytes =
        encoding === 'binary'
          ? MAX_INFER_HEADER_BYTES + outputFloats * 4
          : MAX_INFER_HEADER_BYTES + outputFloats * MAX_JSON_BYTES_PER_FLOAT;
      const answer = await this.request('POST', `${this.modelPath}/infer`, 'inference', deadline, signal, {
        body,
        headers,
        maxBytes,
      });
      if (!answer.ok) throw httpError('inference', answer);
      const headerLength = answer.headers.get(HEADER_LENGTH_FIELD);
      const shape = [batch.count, 3, size, size];
      // A JSON answer (no binary header length) is megabytes of number text: read off the event loop.
      if (headerLength === null)
        return await this.readJsonAnswer(answer.body, signature.output, shape, signal, deadline);
      return readOutput(answer.body, headerLength, signature.output, shape);
    } finally {
      releaseSlot();
    }
  }

  /** `readJsonOutputOffThread` within the inference's deadline (a timeout like the request's own). */
  private async readJsonAnswer(
    body: Uint8Array,
    name: string,
    shape: number[],
    caller: AbortSignal,
    deadline: AbortSignal,
  ): Promise<Float32Array> {
    try {
      return await readJsonOutputOffThread(body, name, shape, AbortSignal.any([caller, deadline]));
    } catch (error) {
      if (caller.aborted) throw abortError(caller);
      if (deadline.aborted) throw new KserveError('timeout', 'inference: the answer was not read before the deadline');
      throw error;
    }
  }

  /** Aborts requests on the wire and rejects queued ones; idempotent. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.closing.abort(new KserveError('closed', 'KServe client closed'));
    this.slots.refuseWaiting(new KserveError('closed', 'KServe client closed'));
  }

  /** A slot on the wire, waiting within `bounded` (the caller's signal and the inference's deadline). */
  private async acquireSlot(bounded: AbortSignal, caller: AbortSignal): Promise<Release> {
    if (this.closed) throw new KserveError('closed', 'KServe client closed');
    try {
      return await this.slots.acquire(bounded);
    } catch (error) {
      if (!bounded.aborted) throw error;
      throw caller.aborted
        ? abortError(caller)
        : new KserveError('timeout', `inference: no free slot within ${this.inferTimeoutMs} ms`);
    }
  }

  /** One HTTP exchange with a deadline; the body is read (bounded) before returning. */
  private async request(
    method: 'GET' | 'POST',
    path: string,
    what: string,
    deadline: number | AbortSignal,
    caller: AbortSignal,
    send?: { body: Uint8Array<ArrayBuffer>; headers: Record<string, string>; maxBytes: number },
  ): Promise<Answer> {
    if (caller.aborted) throw abortError(caller);
    if (this.closed) throw new KserveError('closed', 'KServe client closed');
    const timer = typeof deadline === 'number' ? AbortSignal.timeout(deadline) : deadline;
    const signal = AbortSignal.any([caller, timer, this.closing.signal]);
    try {
      const response = await fetch(`${this.baseUrl}${path}`, {
        method,
        headers: send?.headers,
        body: send?.body,
        signal,
      });
      const maxBytes = send?.maxBytes ?? MAX_METADATA_BYTES;
      const oversized = () => new KserveError('protocol', `${what}: answer exceeds ${maxBytes} bytes`);
      const body = await readBoundedBytes(response, what, maxBytes, { oversized });
      return { ok: response.ok, status: response.status, headers: response.headers, body };
    } catch (error) {
      if (caller.aborted) throw abortError(caller);
      if (this.closed) throw new KserveError('closed', 'KServe client closed');
      if (timer.aborted) {
        const ms = typeof deadline === 'number' ? deadline : this.inferTimeoutMs;
        throw new KserveError('timeout', `${what}: no answer within ${ms} ms`);
      }
      if (error instanceof KserveError) throw error;
      throw new KserveError('transport', `${what} request failed: ${describeTransportError(error)}`);
    }
  }
}

interface Answer {
  ok: boolean;
  status: number;
  headers: Headers;
  body: Uint8Array;
}

interface InputTensor {
  name: string;
  shape: number[];
  /** The tensor's values, in order, in one or more pieces. */
  parts: readonly Float32Array[];
  /** The pieces never change (the avatar's prepared face): their JSON text is kept and reused. */
  stable?: boolean;
}

/**
 * JSON text of stable tensor pieces, by piece. A 96² face is ~1 MB of text and ~8 ms of main-thread work to write;
 * a session sends the same face with every frame, 25 times a second. Weak: a closed renderer's face text goes with it.
 */
const stableJsonText = new WeakMap<Float32Array, string>();

/** The values of `part` as JSON numbers separated by commas (no brackets). */
function jsonValues(part: Float32Array, stable: boolean): string {
  const kept = stable ? stableJsonText.get(part) : undefined;
  if (kept !== undefined) return kept;
  const text = JSON.stringify(Array.from(part)).slice(1, -1);
  if (stable) stableJsonText.set(part, text);
  return text;
}

function parseJson(bytes: Uint8Array, what: string): unknown {
  try {
    return JSON.parse(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8'));
  } catch {
    throw new KserveError('protocol', `${what}: answer is not JSON`);
  }
}

/** A non-2xx answer as `KserveError('http')`, with the server's own explanation in the words every upstream uses. */
function httpError(what: string, answer: Answer): KserveError {
  const explanation = extractErrorText(Buffer.from(answer.body).toString('utf8')) || 'no body';
  return new KserveError('http', `${what} returned ${answer.status}: ${explanation}`, answer.status);
}

function parseModelMetadata(raw: unknown): KserveModelMetadata {
  const body = raw as Partial<KserveModelMetadata> | null;
  const tensors = (list: unknown, which: string): KserveTensorMetadata[] => {
    if (!Array.isArray(list)) throw new KserveError('protocol', `model metadata: no ${which} list`);
    return list.map((entry: Partial<KserveTensorMetadata>) => {
      if (
        typeof entry?.name !== 'string' ||
        typeof entry.datatype !== 'string' ||
        !Array.isArray(entry.shape) ||
        !entry.shape.every(Number.isInteger)
      ) {
        throw new KserveError('protocol', `model metadata: malformed ${which} entry`);
      }
      return { name: entry.name, datatype: entry.datatype, shape: entry.shape };
    });
  };
  return {
    name: typeof body?.name === 'string' ? body.name : '',
    platform: typeof body?.platform === 'string' ? body.platform : undefined,
    versions: Array.isArray(body?.versions) ? body.versions.map(String) : undefined,
    inputs: tensors(body?.inputs, 'inputs'),
    outputs: tensors(body?.outputs, 'outputs'),
  };
}

function jsonRequest(
  inputs: InputTensor[],
  output: string,
): { body: Uint8Array<ArrayBuffer>; headers: Record<string, string> } {
  // Written by hand around the values' text so that a stable piece's text is reused, not rewritten per request.
  const tensors = inputs.map((input) => {
    const head = JSON.stringify({ name: input.name, shape: input.shape, datatype: LIPSYNC_DATATYPE }).slice(0, -1);
    const values = input.parts.filter((part) => part.length > 0).map((part) => jsonValues(part, input.stable === true));
    return `${head},"data":[${values.join(',')}]}`;
  });
  const text = `{"inputs":[${tensors.join(',')}],"outputs":${JSON.stringify([{ name: output }])}}`;
  return { body: Buffer.from(text), headers: { 'content-type': 'application/json' } };
}

function binaryRequest(
  inputs: InputTensor[],
  output: string,
): { body: Uint8Array<ArrayBuffer>; headers: Record<string, string> } {
  const header = Buffer.from(
    JSON.stringify({
      inputs: inputs.map((input) => ({
        name: input.name,
        shape: input.shape,
        datatype: LIPSYNC_DATATYPE,
        parameters: { binary_data_size: input.parts.reduce((sum, part) => sum + part.byteLength, 0) },
      })),
      outputs: [{ name: output, parameters: { binary_data: true } }],
      parameters: { binary_data_output: true },
    }),
  );
  const body = Buffer.concat([header, ...inputs.flatMap((input) => input.parts.map(littleEndianBytes))]);
  return {
    body,
    headers: { 'content-type': 'application/octet-stream', [HEADER_LENGTH_FIELD]: String(header.byteLength) },
  };
}

interface ResponseOutput {
  name?: unknown;
  datatype?: unknown;
  shape?: unknown;
  data?: unknown;
  parameters?: { binary_data_size?: unknown };
}

/**
 * Finds `name` in an infer response `body`, binary (`headerField`: its Inference-Header-Content-Length) or JSON
 * (null), and checks its type and shape. JSON answers are read through `readJsonOutputOffThread`.
 */
export function readOutput(body: Uint8Array, headerField: string | null, name: string, shape: number[]): Float32Array {
  const answer = { body };
  const headerLength = headerField === null ? answer.body.byteLength : Number(headerField);
  if (!Number.isInteger(headerLength) || headerLength < 0 || headerLength > answer.body.byteLength) {
    throw new KserveError('protocol', 'inference: bad Inference-Header-Content-Length');
  }
  const header = parseJson(answer.body.subarray(0, headerLength), 'inference') as { outputs?: ResponseOutput[] };
  if (!Array.isArray(header.outputs)) throw new KserveError('protocol', 'inference: answer has no outputs');
  const expectedCount = shape.reduce((a, b) => a * b, 1);
  // Binary outputs follow the header back to back, in the order the header lists them.
  let offset = headerLength;
  for (const output of header.outputs) {
    const binarySize = output.parameters?.binary_data_size;
    if (output.name !== name) {
      if (typeof binarySize === 'number') offset += binarySize;
      continue;
    }
    if (output.datatype !== LIPSYNC_DATATYPE)
      throw new KserveError(
        'protocol',
        `inference: output ${name} is ${String(output.datatype)}, not ${LIPSYNC_DATATYPE}`,
      );
    if (
      !Array.isArray(output.shape) ||
      output.shape.length !== shape.length ||
      output.shape.some((dim, i) => dim !== shape[i])
    ) {
      throw new KserveError(
        'protocol',
        `inference: output ${name} has shape ${JSON.stringify(output.shape)}, expected ${JSON.stringify(shape)}`,
      );
    }
    if (typeof binarySize === 'number') {
      if (binarySize !== expectedCount * 4 || offset + binarySize > answer.body.byteLength) {
        throw new KserveError(
          'protocol',
          `inference: output ${name} binary data is ${binarySize} bytes, expected ${expectedCount * 4}`,
        );
      }
      return float32FromLittleEndian(answer.body.subarray(offset, offset + binarySize));
    }
    // Triton answers flat; nested arrays are allowed by the protocol and flattened.
    const data = Array.isArray(output.data)
      ? output.data.some(Array.isArray)
        ? (output.data.flat(Infinity) as unknown[])
        : output.data
      : [];
    if (data.length !== expectedCount || !data.every((v) => typeof v === 'number')) {
      throw new KserveError(
        'protocol',
        `inference: output ${name} carries ${data.length} values, expected ${expectedCount}`,
      );
    }
    return Float32Array.from(data as number[]);
  }
  throw new KserveError('protocol', `inference: answer lacks output ${name}`);
}

function littleEndianBytes(data: Float32Array): Uint8Array {
  if (HOST_IS_LITTLE_ENDIAN) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  const bytes = new Uint8Array(data.byteLength);
  const view = new DataView(bytes.buffer);
  for (let i = 0; i < data.length; i++) view.setFloat32(i * 4, data[i], true);
  return bytes;
}

/** A fresh, aligned Float32Array (the bytes may start at any offset of the response buffer). */
function float32FromLittleEndian(bytes: Uint8Array): Float32Array {
  const out = new Float32Array(bytes.byteLength / 4);
  if (HOST_IS_LITTLE_ENDIAN) {
    new Uint8Array(out.buffer).set(bytes);
    return out;
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  for (let i = 0; i < out.length; i++) out[i] = view.getFloat32(i * 4, true);
  return out;
}
