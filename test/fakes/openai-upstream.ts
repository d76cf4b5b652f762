/**
 * A real loopback HTTP server (node:http, port 0) speaking the two OpenAI-compatible protocols the
 * service consumes: streaming chat completions (SSE) and audio transcriptions (multipart WAV).
 * Tests script its behaviour per scenario and assert on what it recorded; `openStreams()` shows
 * whether a client that gave up really closed its upstream connection.
 */
import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import wavefile from 'wavefile';
import { drainOrClose } from './drain-or-close.ts';

/** A tool call the fake model makes: streamed as OpenAI does, the arguments cut into small fragments. */
export interface FakeToolCall {
  id: string;
  name: string;
  /** The argument text as the model writes it (normally JSON). */
  arguments: string;
}

/** The fake model's answer to one chat request: text (possibly built from the request), then tool calls. */
export interface ScriptedChatReply {
  tokens?: string[] | ((messages: RecordedChatMessage[]) => string[]);
  toolCalls?: FakeToolCall[];
}

export interface RecordedChatMessage {
  role: string;
  content: string | null;
  tool_call_id?: string;
  tool_calls?: Array<{ id: string; type: string; function: { name: string; arguments: string } }>;
}

export interface ChatScenario {
  /**
   * Answers to the next chat requests, one each, taken in order; once used up, requests get `replyTokens`. Tool calls
   * are streamed interleaved (parallel calls), each call's arguments in fragments, ending with finish_reason tool_calls.
   */
  scripted?: ScriptedChatReply[];
  /** Deltas sent in order, one SSE event each. */
  replyTokens: string[];
  /** Delay after the response headers before the first token (headers go out at once, as real servers do). */
  firstTokenDelayMs: number;
  /** Delay between subsequent tokens. */
  tokenDelayMs: number;
  /** Answer with this status and an OpenAI-style error JSON instead of streaming. */
  failStatus?: number;
  failMessage?: string;
  /** With `failStatus`: an error body of this many bytes (an HTML page gone wrong) instead of the JSON. */
  failBodyBytes?: number;
  /** Destroy the socket after sending this many tokens (no finish chunk, no [DONE]). */
  disconnectAfterTokens?: number;
  /**
   * After the tokens, stream one SSE `data:` line of this many bytes with no line end in sight, written
   * as the client reads it (never buffered here whole); stops when the client disconnects.
   */
  endlessLineBytes?: number;
}

export interface TranscriptionScenario {
  transcript: string;
  delayMs: number;
  failStatus?: number;
  failMessage?: string;
  /** Answer 200 with a JSON body this many bytes long (the transcript padded), streamed as the client reads it. */
  oversizedBodyBytes?: number;
}

/** `GET /v1/models`, which `/health` uses as the server's probe. */
export interface ModelListScenario {
  /** Model ids listed in `{object: 'list', data: [{id}]}`. */
  ids: string[];
  /** Answer with this status and an OpenAI-style error JSON instead of the list. */
  failStatus?: number;
}

export interface ScenarioPatch {
  chat?: Partial<ChatScenario>;
  models?: Partial<ModelListScenario>;
  transcription?: Partial<TranscriptionScenario>;
  /** When set, requests without `Authorization: Bearer <key>` get OpenAI's 401 JSON. `null` clears it. */
  requiredApiKey?: string | null;
}

export interface RecordedWav {
  sampleRate: number;
  channels: number;
  bitDepth: string;
  samples: number;
}

export interface RecordedRequest {
  method: string;
  path: string;
  headers: http.IncomingHttpHeaders;
  /** Parsed JSON body of a chat-completions request. */
  chat?: { model: unknown; stream: unknown; messages: RecordedChatMessage[]; body: Record<string, unknown> };
  /** Parsed multipart body of a transcription request; `wav` is parsed with the independent `wavefile` package. */
  transcription?: {
    fields: Record<string, string>;
    fileName: string | undefined;
    fileType: string | undefined;
    wav: RecordedWav | undefined;
    samples: Int16Array | undefined;
  };
}

export interface OpenAiUpstream {
  /** Includes `/v1`, as clients are configured. */
  baseUrl: string;
  requests: RecordedRequest[];
  setScenario(patch: ScenarioPatch): void;
  /** Chat streams whose connection has not closed yet. */
  openStreams(): number;
  /** Bytes of `endlessLineBytes`/`oversizedBodyBytes` bodies written so far (what the client made the server send). */
  oversizedBytesWritten(): number;
  close(): Promise<void>;
}

const DEFAULT_CHAT: ChatScenario = { replyTokens: ['Hello', ' there', '!'], firstTokenDelayMs: 0, tokenDelayMs: 0 };
const DEFAULT_TRANSCRIPTION: TranscriptionScenario = { transcript: 'hello world', delayMs: 0 };
const DEFAULT_MODELS: ModelListScenario = { ids: ['llama3.2', 'whisper-1'] };

export async function startOpenAiUpstream(initial: ScenarioPatch = {}): Promise<OpenAiUpstream> {
  let chat: ChatScenario = { ...DEFAULT_CHAT };
  let transcription: TranscriptionScenario = { ...DEFAULT_TRANSCRIPTION };
  let models: ModelListScenario = { ...DEFAULT_MODELS };
  let requiredApiKey: string | undefined;
  const requests: RecordedRequest[] = [];
  let openChatStreams = 0;
  let oversizedWritten = 0;

  const setScenario = (patch: ScenarioPatch): void => {
    if (patch.chat) chat = { ...chat, ...patch.chat };
    if (patch.transcription) transcription = { ...transcription, ...patch.transcription };
    if (patch.models) models = { ...models, ...patch.models };
    if (patch.requiredApiKey !== undefined) requiredApiKey = patch.requiredApiKey ?? undefined;
  };
  setScenario(initial);

  const server = http.createServer((req, res) => {
    void handle(req, res).catch((error: unknown) => {
      if (!res.headersSent) sendError(res, 500, `fake upstream failed: ${String(error)}`, 'server_error');
      else res.destroy();
    });
  });

  async function handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const body = await readBody(req);
    const path = (req.url ?? '/').split('?')[0];
    const recorded: RecordedRequest = { method: req.method ?? '', path, headers: req.headers };
    requests.push(recorded);

    if (requiredApiKey !== undefined && req.headers.authorization !== `Bearer ${requiredApiKey}`) {
      sendError(res, 401, 'Incorrect API key provided.', 'invalid_request_error', 'invalid_api_key');
      return;
    }
    if (req.method === 'POST' && path === '/v1/chat/completions') {
      const parsed = JSON.parse(body.toString('utf8')) as Record<string, unknown>;
      recorded.chat = {
        model: parsed.model,
        stream: parsed.stream,
        messages: parsed.messages as RecordedChatMessage[],
        body: parsed,
      };
      const scripted = chat.scripted?.length ? chat.scripted.shift() : undefined;
      if (scripted) await streamScripted(res, scripted, recorded.chat.messages, String(parsed.model), { ...chat });
      else await streamChat(res, { ...chat }, String(parsed.model));
      return;
    }
    if (req.method === 'POST' && path === '/v1/audio/transcriptions') {
      recorded.transcription = await parseTranscriptionUpload(req, body);
      await answerTranscription(res, { ...transcription });
      return;
    }
    if (req.method === 'GET' && path === '/v1/models') {
      if (models.failStatus) {
        sendError(res, models.failStatus, 'The server had an error', 'server_error');
        return;
      }
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({ object: 'list', data: models.ids.map((id) => ({ id, object: 'model', owned_by: 'fake' })) }),
      );
      return;
    }
    sendError(res, 404, `Unknown route ${req.method} ${path}`, 'invalid_request_error');
  }

  /** Opens a chat completion event stream (counted in `openChatStreams` until its connection closes). */
  function openChatStream(res: http.ServerResponse, model: string) {
    openChatStreams++;
    let closed = false;
    res.on('close', () => {
      closed = true;
      openChatStreams--;
    });
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
    res.flushHeaders();
    return {
      closed: () => closed,
      chunk: (delta: Record<string, unknown>, finishReason: string | null) =>
        `data: ${JSON.stringify({
          id: 'chatcmpl-fake',
          object: 'chat.completion.chunk',
          created: Math.floor(Date.now() / 1000),
          model,
          choices: [{ index: 0, delta, finish_reason: finishReason }],
        })}\n\n`,
    };
  }

  async function streamChat(res: http.ServerResponse, scenario: ChatScenario, model: string): Promise<void> {
    if (scenario.failStatus && scenario.failBodyBytes !== undefined) {
      res.writeHead(scenario.failStatus, { 'content-type': 'text/html' });
      res.write('<html><body>upstream exploded ');
      if (await writePaced(res, scenario.failBodyBytes)) res.end('</body></html>');
      return;
    }
    if (scenario.failStatus) {
      sendError(res, scenario.failStatus, scenario.failMessage ?? 'The server had an error', 'server_error');
      return;
    }
    const stream = openChatStream(res, model);
    const chunk = stream.chunk;
    res.write(chunk({ role: 'assistant', content: '' }, null));
    for (let index = 0; index < scenario.replyTokens.length; index++) {
      await delay(index === 0 ? scenario.firstTokenDelayMs : scenario.tokenDelayMs);
      if (stream.closed()) return;
      if (scenario.disconnectAfterTokens !== undefined && index >= scenario.disconnectAfterTokens) {
        res.socket?.destroy();
        return;
      }
      res.write(chunk({ content: scenario.replyTokens[index] }, null));
    }
    if (scenario.disconnectAfterTokens !== undefined && scenario.disconnectAfterTokens >= scenario.replyTokens.length) {
      res.socket?.destroy();
      return;
    }
    if (scenario.endlessLineBytes !== undefined) {
      res.write('data: {"choices":[{"index":0,"delta":{"content":"');
      if (!(await writePaced(res, scenario.endlessLineBytes))) return;
      res.write('"},"finish_reason":null}]}\n\n');
    }
    if (stream.closed()) return;
    res.write(chunk({}, 'stop'));
    res.end('data: [DONE]\n\n');
  }

  async function streamScripted(
    res: http.ServerResponse,
    reply: ScriptedChatReply,
    messages: RecordedChatMessage[],
    model: string,
    scenario: ChatScenario,
  ): Promise<void> {
    const stream = openChatStream(res, model);
    const chunk = stream.chunk;
    res.write(chunk({ role: 'assistant', content: '' }, null));
    const tokens = typeof reply.tokens === 'function' ? reply.tokens(messages) : (reply.tokens ?? []);
    for (const token of tokens) {
      await delay(scenario.tokenDelayMs);
      if (stream.closed()) return;
      res.write(chunk({ content: token }, null));
    }
    const calls = reply.toolCalls ?? [];
    // The first fragment of each call names it; the arguments follow in 4-character pieces, the calls interleaved.
    calls.forEach((call, index) => {
      res.write(
        chunk(
          { tool_calls: [{ index, id: call.id, type: 'function', function: { name: call.name, arguments: '' } }] },
          null,
        ),
      );
    });
    const pieces = calls.map((call) => call.arguments.match(/[\s\S]{1,4}/gu) ?? []);
    for (let step = 0; pieces.some((list) => step < list.length); step++) {
      await delay(scenario.tokenDelayMs);
      if (stream.closed()) return;
      pieces.forEach((list, index) => {
        if (step < list.length)
          res.write(chunk({ tool_calls: [{ index, function: { arguments: list[step] } }] }, null));
      });
    }
    res.write(chunk({}, calls.length > 0 ? 'tool_calls' : 'stop'));
    res.end('data: [DONE]\n\n');
  }

  async function answerTranscription(res: http.ServerResponse, scenario: TranscriptionScenario): Promise<void> {
    await delay(scenario.delayMs);
    if (res.destroyed) return;
    if (scenario.failStatus) {
      sendError(res, scenario.failStatus, scenario.failMessage ?? 'The server had an error', 'server_error');
      return;
    }
    if (scenario.oversizedBodyBytes !== undefined) {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write(`{"text":${JSON.stringify(scenario.transcript)},"pad":"`);
      if (await writePaced(res, scenario.oversizedBodyBytes)) res.end('"}');
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ text: scenario.transcript }));
  }

  /** Writes `total` bytes of 'x' in 64 KiB pieces, each after the client took the previous; false if it went away. */
  async function writePaced(res: http.ServerResponse, total: number): Promise<boolean> {
    const piece = Buffer.alloc(64 * 1024, 'x');
    for (let sent = 0; sent < total; ) {
      if (res.destroyed || res.writableEnded) return false;
      const bytes = Math.min(piece.length, total - sent);
      const flushed = res.write(bytes === piece.length ? piece : piece.subarray(0, bytes));
      sent += bytes;
      oversizedWritten += bytes;
      if (!flushed && (await drainOrClose(res)) === 'close') return false;
    }
    return !res.destroyed;
  }

  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;

  return {
    baseUrl: `http://127.0.0.1:${port}/v1`,
    requests,
    setScenario,
    openStreams: () => openChatStreams,
    oversizedBytesWritten: () => oversizedWritten,
    close: async () => {
      if (!server.listening) return;
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

async function parseTranscriptionUpload(
  req: http.IncomingMessage,
  body: Buffer,
): Promise<NonNullable<RecordedRequest['transcription']>> {
  // undici's own multipart parser: independent of the client code that built the body.
  const form = await new Request('http://fake.invalid/', {
    method: 'POST',
    headers: { 'content-type': req.headers['content-type'] ?? '' },
    body: new Uint8Array(body),
  }).formData();
  const fields: Record<string, string> = {};
  let file: File | undefined;
  for (const [name, value] of form.entries()) {
    if (typeof value === 'string') fields[name] = value;
    else if (name === 'file') file = value;
  }
  let wav: RecordedWav | undefined;
  let samples: Int16Array | undefined;
  if (file) {
    try {
      const parsed = new wavefile.WaveFile(Buffer.from(await file.arrayBuffer()));
      const fmt = parsed.fmt as { sampleRate: number; numChannels: number };
      samples = parsed.getSamples(false, Int16Array) as unknown as Int16Array;
      wav = {
        sampleRate: fmt.sampleRate,
        channels: fmt.numChannels,
        bitDepth: parsed.bitDepth,
        samples: samples.length,
      };
    } catch {
      // Not a WAV: the test sees `wav: undefined` and fails on it.
    }
  }
  return { fields, fileName: file?.name, fileType: file?.type, wav, samples };
}

function sendError(
  res: http.ServerResponse,
  status: number,
  message: string,
  type: string,
  code: string | null = null,
): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ error: { message, type, param: null, code } }));
}

async function readBody(req: http.IncomingMessage): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const part of req) parts.push(part as Buffer);
  return Buffer.concat(parts);
}

function delay(ms: number): Promise<void> {
  return ms > 0 ? new Promise((resolve) => setTimeout(resolve, ms)) : Promise.resolve();
}
