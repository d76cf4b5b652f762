/**
 * A real loopback HTTP server (node:http, port 0) speaking the KServe v2 / Triton protocol for one ONNX model that
 * it runs in onnxruntime-node: by default the tiny Wav2Lip-shaped model of `test/helpers/tiny-onnx.ts`, so it
 * computes `tinyLipsyncReference`. Health, server metadata (`extensions` lists `binary_tensor_data` unless told
 * otherwise), model metadata derived from the session's own metadata, and inference with JSON or binary tensors.
 *
 * `behaviour` is mutable per scenario: unready, slow (health or inference), failing with a status, or dropping the
 * connection before or in the middle of the answer. `stats` records what was asked and how.
 */
import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import ort from 'onnxruntime-node';
import { tinyLipsyncModel } from '../helpers/tiny-onnx.ts';

/** Request bodies the fake accepts: a few batches of 288² faces, far more than any test sends. */
const MAX_BODY_BYTES = 64 << 20;

export interface FakeKserveOptions {
  /** ONNX bytes to serve (default: the tiny lip-sync model at S = 96). */
  model?: Uint8Array;
  modelName?: string;
  /** List `binary_tensor_data` in `GET /v2` (default true). Binary requests are understood either way. */
  advertiseBinary?: boolean;
}

export interface FakeKserveBehaviour {
  ready: boolean;
  modelReady: boolean;
  /** Delay before answering health and metadata requests. */
  healthDelayMs: number;
  /** Delay before running an inference. */
  inferDelayMs: number;
  /** Answer inference with this status and a KServe error body. */
  inferFailStatus: number | null;
  /** Destroy the socket instead of answering, or after half of the answer. */
  drop: 'none' | 'before_response' | 'mid_response';
}

export interface FakeKserveStats {
  requests: string[];
  /** TCP connections accepted (keep-alive clients reuse them). */
  connections: number;
  inferJson: number;
  inferBinary: number;
  /** Inference answers sent with binary output data. */
  binaryAnswers: number;
  inFlight: number;
  maxInFlight: number;
  /** Batch sizes seen, in arrival order. */
  batches: number[];
}

interface TensorMeta {
  name: string;
  datatype: string;
  shape: number[];
}

interface RequestInput {
  name?: unknown;
  shape?: unknown;
  datatype?: unknown;
  data?: unknown;
  parameters?: { binary_data_size?: unknown };
}

interface InferRequest {
  inputs?: RequestInput[];
  outputs?: Array<{ name?: unknown; parameters?: { binary_data?: unknown } }>;
  parameters?: { binary_data_output?: unknown };
}

class BadRequest extends Error {}

export class FakeKserveServer {
  readonly behaviour: FakeKserveBehaviour = {
    ready: true,
    modelReady: true,
    healthDelayMs: 0,
    inferDelayMs: 0,
    inferFailStatus: null,
    drop: 'none',
  };
  readonly stats: FakeKserveStats = {
    requests: [],
    connections: 0,
    inferJson: 0,
    inferBinary: 0,
    binaryAnswers: 0,
    inFlight: 0,
    maxInFlight: 0,
    batches: [],
  };
  private closed = false;
  private listeningUrl = '';
  /** Ends the scripted delays at close(), so no timer outlives the server. */
  private readonly stopping = new AbortController();

  private constructor(
    private readonly server: http.Server,
    private readonly session: ort.InferenceSession,
    readonly modelName: string,
    private readonly advertiseBinary: boolean,
  ) {}

  static async start(options: FakeKserveOptions = {}): Promise<FakeKserveServer> {
    const session = await ort.InferenceSession.create(options.model ?? tinyLipsyncModel());
    const server = http.createServer();
    const fake = new FakeKserveServer(server, session, options.modelName ?? 'wav2lip', options.advertiseBinary ?? true);
    server.on('request', (request, response) => {
      fake.handle(request, response).catch((error: unknown) => {
        if (response.headersSent) response.destroy();
        else
          fake.sendJson(response, error instanceof BadRequest ? 400 : 500, {
            error: error instanceof Error ? error.message : String(error),
          });
      });
    });
    server.on('connection', () => fake.stats.connections++);
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    fake.listeningUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    return fake;
  }

  /** Kept after close(), so a test can aim at the dead port. */
  get url(): string {
    return this.listeningUrl;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.stopping.abort();
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
    await this.session.release();
  }

  private async handle(request: http.IncomingMessage, response: http.ServerResponse): Promise<void> {
    const path = (request.url ?? '/').split('?')[0];
    this.stats.requests.push(`${request.method} ${path}`);
    const modelPath = `/v2/models/${encodeURIComponent(this.modelName)}`;
    if (request.method === 'POST' && path === `${modelPath}/infer`) return this.infer(request, response);
    if (request.method !== 'GET') return this.sendJson(response, 405, { error: 'method not allowed' });
    if (!(await this.delay(this.behaviour.healthDelayMs))) return;
    if (path === '/v2/health/live') return this.sendJson(response, 200, {});
    if (path === '/v2/health/ready') return this.sendJson(response, this.behaviour.ready ? 200 : 503, {});
    if (path === '/v2') {
      const extensions = [
        'classification',
        'sequence',
        'model_repository',
        'schedule_policy',
        'model_configuration',
        'statistics',
      ];
      if (this.advertiseBinary) extensions.push('binary_tensor_data');
      return this.sendJson(response, 200, { name: 'fake-kserve', version: '2.0.0', extensions });
    }
    if (path === `${modelPath}/ready`)
      return this.sendJson(
        response,
        this.behaviour.modelReady ? 200 : 400,
        this.behaviour.modelReady ? {} : { error: 'model not ready' },
      );
    if (path === modelPath) {
      return this.sendJson(response, 200, {
        name: this.modelName,
        versions: ['1'],
        platform: 'onnxruntime_onnx',
        inputs: this.tensorMetadata(this.session.inputMetadata),
        outputs: this.tensorMetadata(this.session.outputMetadata),
      });
    }
    return this.sendJson(response, 404, { error: `unknown path ${path}` });
  }

  /** The session's metadata the way Triton reports it: FP32 names, −1 for dynamic dimensions. */
  private tensorMetadata(values: readonly ort.InferenceSession.ValueMetadata[]): TensorMeta[] {
    return values.map((value) => ({
      name: value.name,
      datatype: value.isTensor && value.type === 'float32' ? 'FP32' : 'UNSUPPORTED',
      shape: value.isTensor ? value.shape.map((dim) => (typeof dim === 'number' ? dim : -1)) : [],
    }));
  }

  private async infer(request: http.IncomingMessage, response: http.ServerResponse): Promise<void> {
    this.stats.inFlight++;
    this.stats.maxInFlight = Math.max(this.stats.maxInFlight, this.stats.inFlight);
    try {
      const body = await readBody(request);
      const headerField = request.headers['inference-header-content-length'];
      const binaryRequest = typeof headerField === 'string';
      const headerLength = binaryRequest ? Number(headerField) : body.byteLength;
      if (!Number.isInteger(headerLength) || headerLength > body.byteLength)
        throw new BadRequest('bad Inference-Header-Content-Length');
      if (binaryRequest) this.stats.inferBinary++;
      else this.stats.inferJson++;
      const parsed = JSON.parse(body.subarray(0, headerLength).toString('utf8')) as InferRequest;
      const feeds = this.feedsFrom(parsed, body, headerLength);

      if (!(await this.delay(this.behaviour.inferDelayMs))) return;
      if (this.behaviour.drop === 'before_response') {
        request.socket.destroy();
        return;
      }
      if (this.behaviour.inferFailStatus !== null) {
        return this.sendJson(response, this.behaviour.inferFailStatus, { error: 'inference failed on purpose' });
      }
      const results = await this.session.run(feeds);
      const wanted = (parsed.outputs ?? []).map((output) => String(output.name));
      const names = wanted.length > 0 ? wanted : [...this.session.outputNames];
      const binaryOut =
        parsed.parameters?.binary_data_output === true ||
        (parsed.outputs ?? []).some((o) => o.parameters?.binary_data === true);
      this.answer(
        response,
        names.map((name) => ({ name, tensor: results[name] })),
        binaryOut,
      );
    } finally {
      this.stats.inFlight--;
    }
  }

  private feedsFrom(parsed: InferRequest, body: Buffer, headerLength: number): Record<string, ort.Tensor> {
    const feeds: Record<string, ort.Tensor> = {};
    let offset = headerLength;
    for (const input of parsed.inputs ?? []) {
      const name = String(input.name);
      if (!this.session.inputNames.includes(name)) throw new BadRequest(`unexpected input ${name}`);
      if (input.datatype !== 'FP32') throw new BadRequest(`input ${name} must be FP32`);
      const shape = Array.isArray(input.shape) ? input.shape.map(Number) : [];
      const count = shape.reduce((a, b) => a * b, 1);
      let data: Float32Array;
      const binarySize = input.parameters?.binary_data_size;
      if (typeof binarySize === 'number') {
        if (binarySize !== count * 4 || offset + binarySize > body.byteLength)
          throw new BadRequest(`input ${name}: binary size does not match its shape`);
        data = new Float32Array(count);
        new Uint8Array(data.buffer).set(body.subarray(offset, offset + binarySize));
        offset += binarySize;
      } else {
        if (!Array.isArray(input.data) || input.data.length !== count)
          throw new BadRequest(`input ${name}: data does not match its shape`);
        data = Float32Array.from(input.data as number[]);
      }
      feeds[name] = new ort.Tensor('float32', data, shape);
      if (name === this.session.inputNames[0]) this.stats.batches.push(shape[0]);
    }
    const missing = this.session.inputNames.filter((name) => !(name in feeds));
    if (missing.length > 0) throw new BadRequest(`missing inputs ${missing.join(', ')}`);
    return feeds;
  }

  private answer(
    response: http.ServerResponse,
    outputs: Array<{ name: string; tensor: ort.OnnxValue | undefined }>,
    binary: boolean,
  ): void {
    const present = outputs.filter(
      (output): output is { name: string; tensor: ort.Tensor } => output.tensor !== undefined,
    );
    const meta = (output: { name: string; tensor: ort.Tensor }) => ({
      name: output.name,
      datatype: 'FP32',
      shape: [...output.tensor.dims],
    });
    let payload: Buffer;
    const headers: Record<string, string> = {};
    if (binary) {
      const header = Buffer.from(
        JSON.stringify({
          model_name: this.modelName,
          model_version: '1',
          outputs: present.map((output) => ({
            ...meta(output),
            parameters: { binary_data_size: (output.tensor.data as Float32Array).byteLength },
          })),
        }),
      );
      const tensors = present.map((output) => {
        const data = output.tensor.data as Float32Array;
        return Buffer.from(data.buffer, data.byteOffset, data.byteLength);
      });
      payload = Buffer.concat([header, ...tensors]);
      headers['content-type'] = 'application/octet-stream';
      headers['inference-header-content-length'] = String(header.byteLength);
      this.stats.binaryAnswers++;
    } else {
      payload = Buffer.from(
        JSON.stringify({
          model_name: this.modelName,
          model_version: '1',
          outputs: present.map((output) => ({ ...meta(output), data: Array.from(output.tensor.data as Float32Array) })),
        }),
      );
      headers['content-type'] = 'application/json';
    }
    headers['content-length'] = String(payload.byteLength);
    if (this.behaviour.drop === 'mid_response') {
      response.writeHead(200, headers);
      response.write(payload.subarray(0, payload.byteLength >> 1), () => response.destroy());
      return;
    }
    response.writeHead(200, headers);
    response.end(payload);
  }

  /** False when the server closed during the wait. */
  private async delay(ms: number): Promise<boolean> {
    try {
      await sleep(ms, undefined, { signal: this.stopping.signal });
    } catch {
      // Aborted by close().
    }
    return !this.closed;
  }

  private sendJson(response: http.ServerResponse, status: number, body: unknown): void {
    const payload = Buffer.from(JSON.stringify(body));
    response.writeHead(status, { 'content-type': 'application/json', 'content-length': String(payload.byteLength) });
    response.end(payload);
  }
}

async function readBody(request: http.IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let total = 0;
  for await (const chunk of request as AsyncIterable<Buffer>) {
    total += chunk.byteLength;
    if (total > MAX_BODY_BYTES) throw new BadRequest('request body too large');
    chunks.push(chunk);
  }
  return Buffer.concat(chunks, total);
}
