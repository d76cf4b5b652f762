/**
 * Loopback stand-ins for the real speech services the TTS adapters speak to. Each is a real
 * node:http server on port 0 that checks what it receives the way the real service would (auth
 * header, body fields, format of clone samples) and answers in the service's own format with a
 * generated tone. `scenario` switches every route to a failure: 401, 500, a slow answer, or a body
 * cut off before its declared length.
 */
import { once } from 'node:events';
import { readFile } from 'node:fs/promises';
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { WebSocketServer, type WebSocket } from 'ws';
import { encodeWav, parseWav, isWav } from '../../actors/audio/wav.ts';

export type FakeScenario = 'ok' | 'unauthorized' | 'server_error' | 'slow' | 'truncated';

export interface RecordedRequest {
  method: string;
  path: string;
  query: URLSearchParams;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
  json?: any;
  form?: FormData;
}

export interface FakeUpstream {
  url: string;
  requests: RecordedRequest[];
  scenario: FakeScenario;
  /** Delay of the `slow` scenario. */
  slowMs: number;
  /** Problems the fake found in what it received (wrong fields, bad samples); tests expect it empty. */
  complaints: string[];
  close(): Promise<void>;
}

/** Seconds of tone per synthesis request: lets tests check lengths exactly. */
export const TONE_SECONDS = 0.5;
export const TONE_HZ = 440;

export function tone(sampleRate: number, seconds = TONE_SECONDS, hz = TONE_HZ, amplitude = 8000): Int16Array {
  const pcm = new Int16Array(Math.round(sampleRate * seconds));
  for (let i = 0; i < pcm.length; i++) pcm[i] = Math.round(amplitude * Math.sin((2 * Math.PI * hz * i) / sampleRate));
  return pcm;
}

export function pcmBytes(pcm: Int16Array): Buffer {
  return Buffer.from(pcm.buffer, pcm.byteOffset, pcm.byteLength);
}

/** True when `bytes` is the 24 kHz mono WAV the service promises to send as a clone sample. */
export function isCloneSample(bytes: Uint8Array): boolean {
  if (!isWav(bytes)) return false;
  const wav = parseWav(bytes);
  return wav.sampleRate === 24000 && wav.channels === 1 && wav.pcm.length > 0;
}

type Handler = (request: RecordedRequest, response: ServerResponse, fake: FakeUpstream) => Promise<unknown> | unknown;

interface FailureTexts {
  unauthorized: { contentType: string; body: string };
  server_error: { contentType: string; body: string };
}

function send(response: ServerResponse, status: number, contentType: string, body: Buffer | string): void {
  const bytes = typeof body === 'string' ? Buffer.from(body) : body;
  response.writeHead(status, { 'content-type': contentType, 'content-length': bytes.length });
  response.end(bytes);
}

export function sendJson(response: ServerResponse, status: number, value: unknown): void {
  send(response, status, 'application/json', JSON.stringify(value));
}

/** Sends `body` in several writes (like a streaming server) with small gaps. */
async function sendStreamed(response: ServerResponse, contentType: string, body: Buffer, pieces = 4): Promise<void> {
  response.writeHead(200, { 'content-type': contentType });
  // An odd piece size on purpose: adapters must re-align PCM samples split between chunks.
  const size = Math.ceil(body.length / pieces) | 1;
  for (let offset = 0; offset < body.length; offset += size) {
    response.write(body.subarray(offset, offset + size));
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
  response.end();
}

async function startFake(
  handler: Handler,
  failures: FailureTexts,
  onServer?: (server: http.Server, fake: FakeUpstream) => void,
): Promise<FakeUpstream> {
  const sockets = new Set<import('node:net').Socket>();
  const fake: FakeUpstream = {
    url: '',
    requests: [],
    scenario: 'ok',
    slowMs: 2000,
    complaints: [],
    close: async () => {
      for (const socket of sockets) socket.destroy();
      server.close();
      await once(server, 'close').catch(() => {});
    },
  };
  const server = http.createServer(async (req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const url = new URL(req.url ?? '/', 'http://fake');
    const recorded: RecordedRequest = {
      method: req.method ?? 'GET',
      path: url.pathname,
      query: url.searchParams,
      headers: req.headers,
      body: Buffer.concat(chunks),
    };
    const type = String(req.headers['content-type'] ?? '');
    if (type.includes('application/json')) {
      try {
        recorded.json = JSON.parse(recorded.body.toString('utf8'));
      } catch {
        fake.complaints.push(`invalid JSON body on ${recorded.path}`);
      }
    } else if (type.includes('multipart/form-data')) {
      recorded.form = await new Response(new Uint8Array(recorded.body), {
        headers: { 'content-type': type },
      }).formData();
    }
    fake.requests.push(recorded);
    try {
      switch (fake.scenario) {
        case 'unauthorized':
          return send(res, 401, failures.unauthorized.contentType, failures.unauthorized.body);
        case 'server_error':
          return send(res, 500, failures.server_error.contentType, failures.server_error.body);
        case 'slow':
          await new Promise((resolve) => setTimeout(resolve, fake.slowMs));
          break;
        case 'truncated':
          // Promise more than is sent, then cut the connection.
          res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': 100_000 });
          res.write(Buffer.alloc(1000));
          setTimeout(() => res.socket?.destroy(), 10);
          return;
      }
      if (res.destroyed) return;
      await handler(recorded, res, fake);
    } catch (error) {
      if (!res.headersSent) send(res, 500, 'text/plain', `fake failed: ${(error as Error).message}`);
    }
  });
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  onServer?.(server, fake);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  fake.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return fake;
}

function complainUnless(fake: FakeUpstream, condition: boolean, complaint: string): boolean {
  if (!condition) fake.complaints.push(complaint);
  return condition;
}

const openAiError = (message: string, type: string) =>
  JSON.stringify({ error: { message, type, param: null, code: null } });

/** OpenAI `POST /v1/audio/speech`: Bearer key (when configured), `response_format` wav or pcm (24 kHz). */
export function startOpenAiSpeechFake(options: { apiKey?: string } = {}): Promise<FakeUpstream> {
  return startFake(
    (request, response, fake) => {
      if (request.method !== 'POST' || request.path !== '/v1/audio/speech')
        return sendJson(response, 404, { error: { message: 'not found' } });
      if (options.apiKey && request.headers.authorization !== `Bearer ${options.apiKey}`) {
        return send(
          response,
          401,
          'application/json',
          openAiError('Incorrect API key provided', 'invalid_request_error'),
        );
      }
      const body = request.json ?? {};
      const valid =
        complainUnless(fake, typeof body.input === 'string' && body.input.length > 0, 'input missing') &&
        complainUnless(fake, typeof body.model === 'string' && typeof body.voice === 'string', 'model/voice missing') &&
        complainUnless(fake, ['wav', 'pcm'].includes(body.response_format), `response_format ${body.response_format}`);
      if (!valid)
        return send(response, 400, 'application/json', openAiError('invalid request', 'invalid_request_error'));
      const pcm = tone(24000);
      if (body.response_format === 'pcm') return sendStreamed(response, 'audio/pcm', pcmBytes(pcm));
      return sendStreamed(response, 'audio/wav', encodeWav(pcm, 24000));
    },
    {
      unauthorized: {
        contentType: 'application/json',
        body: openAiError('Incorrect API key provided: sk-wrong', 'invalid_request_error'),
      },
      server_error: {
        contentType: 'application/json',
        body: openAiError('The server had an error while processing your request', 'server_error'),
      },
    },
  );
}

/** What the voice-list fakes answer: a few real entries in each service's format, plus one the adapter must drop. */
export const ELEVENLABS_VOICES = [
  {
    voice_id: '21m00Tcm4TlvDq8ikWAM',
    name: 'Rachel',
    category: 'premade',
    labels: { accent: 'american', gender: 'female', age: 'young' },
    verified_languages: [],
  },
  {
    voice_id: 'TxGEqnHWrfWFTfGW9XjX',
    name: 'Josh',
    category: 'premade',
    labels: { gender: 'male' },
    verified_languages: [{ language: 'en', locale: 'en-US', model_id: 'eleven_multilingual_v2' }],
  },
  { voice_id: 'not-an-elevenlabs-id', name: 'Broken entry', labels: {} },
];
export const AZURE_VOICES = [
  {
    Name: 'Microsoft Server Speech Text to Speech Voice (en-US, JennyNeural)',
    DisplayName: 'Jenny',
    LocalName: 'Jenny',
    ShortName: 'en-US-JennyNeural',
    Gender: 'Female',
    Locale: 'en-US',
    SampleRateHertz: '24000',
    VoiceType: 'Neural',
    Status: 'GA',
  },
  {
    Name: 'Microsoft Server Speech Text to Speech Voice (de-DE, ConradNeural)',
    DisplayName: 'Conrad',
    LocalName: 'Conrad',
    ShortName: 'de-DE-ConradNeural',
    Gender: 'Male',
    Locale: 'de-DE',
    SampleRateHertz: '48000',
    VoiceType: 'Neural',
    Status: 'GA',
  },
  {
    Name: 'Microsoft Server Speech Text to Speech Voice (en-US, Guy24kRUS)',
    DisplayName: 'Guy',
    ShortName: 'en-US-Guy24kRUS',
    Gender: 'Male',
    Locale: 'en-US',
    VoiceType: 'Standard',
  },
];
export const GOOGLE_VOICES = [
  { languageCodes: ['en-US'], name: 'en-US-Neural2-F', ssmlGender: 'FEMALE', naturalSampleRateHertz: 24000 },
  { languageCodes: ['cmn-CN'], name: 'cmn-CN-Wavenet-A', ssmlGender: 'FEMALE', naturalSampleRateHertz: 24000 },
  { languageCodes: ['en-GB'], name: 'en-GB-Standard-B', ssmlGender: 'MALE', naturalSampleRateHertz: 24000 },
  { languageCodes: ['en-US'], name: 'Kore', ssmlGender: 'FEMALE', naturalSampleRateHertz: 24000 },
];

/** ElevenLabs `POST /v1/text-to-speech/{voice_id}[/stream]?output_format=pcm_<rate>` with `xi-api-key`; `GET /v1/voices`. */
export function startElevenLabsFake(options: { apiKey: string }): Promise<FakeUpstream> {
  const unauthorized = JSON.stringify({ detail: { status: 'invalid_api_key', message: 'Invalid API key' } });
  return startFake(
    (request, response, fake) => {
      if (request.method === 'GET' && request.path === '/v1/voices') {
        if (request.headers['xi-api-key'] !== options.apiKey)
          return send(response, 401, 'application/json', unauthorized);
        return sendJson(response, 200, { voices: ELEVENLABS_VOICES });
      }
      const match = /^\/v1\/text-to-speech\/([^/]+)(\/stream)?$/.exec(request.path);
      if (request.method !== 'POST' || !match) return sendJson(response, 404, { detail: 'Not Found' });
      if (request.headers['xi-api-key'] !== options.apiKey)
        return send(response, 401, 'application/json', unauthorized);
      if (!/^[A-Za-z0-9]{20}$/.test(match[1]))
        return sendJson(response, 404, {
          detail: { status: 'voice_not_found', message: 'A voice with the voice_id was not found.' },
        });
      const format = /^pcm_(\d+)$/.exec(request.query.get('output_format') ?? '');
      if (
        !complainUnless(
          fake,
          !!format && [8000, 16000, 22050, 24000, 44100, 48000].includes(Number(format[1])),
          'bad output_format',
        )
      ) {
        return sendJson(response, 422, { detail: 'invalid output_format' });
      }
      if (
        !complainUnless(
          fake,
          typeof request.json?.text === 'string' && typeof request.json?.model_id === 'string',
          'text/model_id missing',
        )
      ) {
        return sendJson(response, 422, { detail: 'text required' });
      }
      return sendStreamed(response, 'audio/pcm', pcmBytes(tone(Number(format![1]))));
    },
    {
      unauthorized: { contentType: 'application/json', body: unauthorized },
      server_error: {
        contentType: 'application/json',
        body: JSON.stringify({ detail: { status: 'internal_error', message: 'An internal error occurred' } }),
      },
    },
  );
}

/** Azure Speech REST `POST /cognitiveservices/v1`: SSML, `Ocp-Apim-Subscription-Key`, raw PCM output formats; `GET /cognitiveservices/voices/list`. */
export function startAzureSpeechFake(options: { apiKey: string }): Promise<FakeUpstream> {
  const rates: Record<string, number> = {
    'raw-8khz-16bit-mono-pcm': 8000,
    'raw-16khz-16bit-mono-pcm': 16000,
    'raw-22050hz-16bit-mono-pcm': 22050,
    'raw-24khz-16bit-mono-pcm': 24000,
    'raw-44100hz-16bit-mono-pcm': 44100,
    'raw-48khz-16bit-mono-pcm': 48000,
  };
  return startFake(
    (request, response, fake) => {
      const isVoiceList = request.method === 'GET' && request.path === '/cognitiveservices/voices/list';
      if (!isVoiceList && (request.method !== 'POST' || request.path !== '/cognitiveservices/v1'))
        return send(response, 404, 'text/plain', '');
      if (request.headers['ocp-apim-subscription-key'] !== options.apiKey) {
        return send(
          response,
          401,
          'application/json',
          JSON.stringify({
            error: { code: '401', message: 'Access denied due to invalid subscription key or wrong API endpoint.' },
          }),
        );
      }
      if (isVoiceList) return sendJson(response, 200, AZURE_VOICES);
      const ssml = request.body.toString('utf8');
      const rate = rates[String(request.headers['x-microsoft-outputformat'])];
      const valid =
        complainUnless(
          fake,
          String(request.headers['content-type']).startsWith('application/ssml+xml'),
          'content-type is not SSML',
        ) &&
        complainUnless(fake, rate !== undefined, 'unknown output format') &&
        complainUnless(
          fake,
          /<speak [^>]*xml:lang='[a-z]{2}-[A-Z]{2}'[^>]*><voice name='[^']+Neural'>[^<]+<\/voice><\/speak>/.test(ssml),
          `bad SSML ${ssml}`,
        );
      if (!valid) return send(response, 400, 'text/plain', 'Bad request');
      return sendStreamed(response, 'audio/x-wav', pcmBytes(tone(rate)));
    },
    {
      unauthorized: {
        contentType: 'application/json',
        body: JSON.stringify({
          error: { code: '401', message: 'Access denied due to invalid subscription key or wrong API endpoint.' },
        }),
      },
      server_error: { contentType: 'text/plain', body: 'Internal server error' },
    },
  );
}

/** Google Cloud TTS `POST /v1/text:synthesize` with `X-Goog-Api-Key`; answers base64 LINEAR16 (WAV); `GET /v1/voices`. */
export function startGoogleTtsFake(options: { apiKey: string }): Promise<FakeUpstream> {
  const googleError = (code: number, status: string, message: string) =>
    JSON.stringify({ error: { code, message, status } });
  return startFake(
    (request, response, fake) => {
      const isVoiceList = request.method === 'GET' && request.path === '/v1/voices';
      if (!isVoiceList && (request.method !== 'POST' || request.path !== '/v1/text:synthesize'))
        return send(response, 404, 'text/plain', 'Not Found');
      if (request.headers['x-goog-api-key'] !== options.apiKey) {
        return send(
          response,
          400,
          'application/json',
          googleError(400, 'INVALID_ARGUMENT', 'API key not valid. Please pass a valid API key.'),
        );
      }
      if (isVoiceList) return sendJson(response, 200, { voices: GOOGLE_VOICES });
      const body = request.json ?? {};
      const rate = body.audioConfig?.sampleRateHertz ?? 24000;
      const valid =
        complainUnless(fake, typeof body.input?.text === 'string', 'input.text missing') &&
        complainUnless(
          fake,
          typeof body.voice?.languageCode === 'string' && String(body.voice?.name).startsWith(body.voice.languageCode),
          'voice mismatch',
        ) &&
        complainUnless(fake, body.audioConfig?.audioEncoding === 'LINEAR16', 'encoding not LINEAR16');
      if (!valid)
        return send(response, 400, 'application/json', googleError(400, 'INVALID_ARGUMENT', 'Invalid request'));
      return sendJson(response, 200, { audioContent: encodeWav(tone(rate), rate).toString('base64') });
    },
    {
      unauthorized: {
        contentType: 'application/json',
        body: googleError(401, 'UNAUTHENTICATED', 'API key not valid. Request had invalid authentication credentials.'),
      },
      server_error: {
        contentType: 'application/json',
        body: googleError(500, 'INTERNAL', 'Internal error encountered.'),
      },
    },
  );
}

/**
 * DashScope (Alibaba Cloud Model Studio): Qwen-TTS SSE generation, the voice customization API
 * (`qwen-voice-enrollment` with an inline data URI, `voice-enrollment` fetching a URL), and the
 * CosyVoice duplex WebSocket. Enrolled voices are remembered and accepted by synthesis.
 */
export interface DashscopeFake extends FakeUpstream {
  voices: Set<string>;
  /** What the CosyVoice socket received, one array of JSON messages per connection. */
  socketMessages: any[][];
}

export async function startDashscopeFake(options: { apiKey: string }): Promise<DashscopeFake> {
  const voices = new Set<string>(['Cherry', 'Ethan', 'longxiaochun_v2']);
  const socketMessages: any[][] = [];
  const dashError = (code: string, message: string) => JSON.stringify({ code, message, request_id: 'fake-request' });
  const authorised = (headers: http.IncomingHttpHeaders) =>
    String(headers.authorization ?? '').toLowerCase() === `bearer ${options.apiKey.toLowerCase()}`;
  let counter = 0;
  const fake = (await startFake(
    async (request, response, self) => {
      if (!authorised(request.headers))
        return send(response, 401, 'application/json', dashError('InvalidApiKey', 'Invalid API-key provided.'));
      const body = request.json ?? {};
      if (request.method === 'POST' && request.path === '/api/v1/services/aigc/multimodal-generation/generation') {
        const valid =
          complainUnless(self, request.headers['x-dashscope-sse'] === 'enable', 'SSE not enabled') &&
          complainUnless(self, typeof body.input?.text === 'string', 'input.text missing');
        if (!valid) return send(response, 400, 'application/json', dashError('InvalidParameter', 'bad request'));
        if (!voices.has(body.input.voice))
          return send(
            response,
            400,
            'application/json',
            dashError('InvalidParameter', `Voice ${body.input.voice} not found`),
          );
        response.writeHead(200, { 'content-type': 'text/event-stream' });
        const audio = pcmBytes(tone(24000));
        const pieces = 3;
        const size = Math.ceil(audio.length / pieces);
        for (let i = 0; i < pieces; i++) {
          const data = audio.subarray(i * size, (i + 1) * size).toString('base64');
          response.write(
            `id:${i + 1}\nevent:result\n:HTTP_STATUS/200\ndata:${JSON.stringify({ output: { audio: { data, id: 'audio_1' }, finish_reason: 'null' }, request_id: 'r' })}\n\n`,
          );
          await new Promise((resolve) => setTimeout(resolve, 2));
        }
        response.write(
          `id:${pieces + 1}\nevent:result\n:HTTP_STATUS/200\ndata:${JSON.stringify({ output: { audio: { data: '', url: 'http://example.invalid/a.wav' }, finish_reason: 'stop' }, usage: {} })}\n\n`,
        );
        return response.end();
      }
      if (request.method === 'POST' && request.path === '/api/v1/services/audio/tts/customization') {
        counter++;
        if (body.model === 'qwen-voice-enrollment' && body.input?.action === 'create') {
          const dataUri = String(body.input?.audio?.data ?? '');
          const match = /^data:audio\/wav;base64,(.+)$/.exec(dataUri);
          if (
            !complainUnless(
              self,
              !!match && isCloneSample(Buffer.from(match[1], 'base64')),
              'cloud_a sample is not a 24 kHz mono WAV data URI',
            )
          ) {
            return send(response, 400, 'application/json', dashError('InvalidParameter', 'Audio format not supported'));
          }
          const voice = `qwen-tts-vc-${body.input.preferred_name}-voice-${counter}`;
          voices.add(voice);
          return sendJson(response, 200, {
            output: { voice, target_model: body.input.target_model },
            usage: { count: 1 },
            request_id: 'r',
          });
        }
        if (body.model === 'voice-enrollment' && body.input?.action === 'create_voice') {
          // The real service downloads the sample from the given URL.
          let sample: Buffer;
          try {
            const fetched = await fetch(String(body.input.url));
            if (!fetched.ok)
              return send(
                response,
                400,
                'application/json',
                dashError('InvalidParameter', `Download audio failed: ${fetched.status}`),
              );
            sample = Buffer.from(await fetched.arrayBuffer());
          } catch (error) {
            return send(
              response,
              400,
              'application/json',
              dashError('InvalidParameter', `Download audio failed: ${(error as Error).message}`),
            );
          }
          if (!complainUnless(self, isCloneSample(sample), 'cloud_b sample is not a 24 kHz mono WAV')) {
            return send(response, 400, 'application/json', dashError('InvalidParameter', 'Audio format not supported'));
          }
          const voice = `${body.input.target_model}-${body.input.prefix}-${counter.toString(16).padStart(8, '0')}`;
          voices.add(voice);
          return sendJson(response, 200, { output: { voice_id: voice }, usage: { count: 1 }, request_id: 'r' });
        }
        return send(response, 400, 'application/json', dashError('InvalidParameter', 'unsupported action'));
      }
      return send(response, 404, 'application/json', dashError('NotFound', 'not found'));
    },
    {
      unauthorized: { contentType: 'application/json', body: dashError('InvalidApiKey', 'Invalid API-key provided.') },
      server_error: {
        contentType: 'application/json',
        body: dashError('InternalError', 'An internal error has occured, please try again later.'),
      },
    },
    (server, self) => {
      const wss = new WebSocketServer({ noServer: true });
      server.on('upgrade', (req, socket, head) => {
        const path = new URL(req.url ?? '/', 'http://fake').pathname;
        if (self.scenario === 'unauthorized' || !authorised(req.headers)) {
          socket.end(
            'HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n' +
              dashError('InvalidApiKey', 'Invalid API-key provided.'),
          );
          return;
        }
        if (path !== '/api-ws/v1/inference/') return socket.destroy();
        wss.handleUpgrade(req, socket, head, (ws) => cosyVoiceSession(ws, self as DashscopeFake));
      });
    },
  )) as DashscopeFake;
  fake.voices = voices;
  fake.socketMessages = socketMessages;
  return fake;

  function cosyVoiceSession(ws: WebSocket, self: DashscopeFake): void {
    const received: any[] = [];
    socketMessages.push(received);
    let parameters: any = null;
    const event = (taskId: string, name: string, extra: object = {}) =>
      ws.send(JSON.stringify({ header: { task_id: taskId, event: name, attributes: {}, ...extra }, payload: {} }));
    // Messages are handled strictly in order, like the real task runner (finish waits for continue).
    let sequence: Promise<unknown> = Promise.resolve();
    ws.on('message', (data, isBinary) => {
      sequence = sequence.then(() => handle(data as Buffer, isBinary));
    });
    const handle = async (data: Buffer, isBinary: boolean) => {
      if (isBinary) return self.complaints.push('client sent binary on the CosyVoice socket');
      const message = JSON.parse(data.toString());
      received.push(message);
      const { action, task_id: taskId } = message.header ?? {};
      if (action === 'run-task') {
        parameters = message.payload?.parameters;
        const valid =
          complainUnless(self, message.header.streaming === 'duplex', 'streaming is not duplex') &&
          complainUnless(
            self,
            message.payload?.task === 'tts' && message.payload?.function === 'SpeechSynthesizer',
            'wrong task',
          );
        if (!valid || !voices.has(parameters?.voice)) {
          return event(taskId, 'task-failed', {
            error_code: 'InvalidParameter',
            error_message: `voice ${parameters?.voice} not found`,
          });
        }
        if (self.scenario === 'server_error')
          return event(taskId, 'task-failed', { error_code: 'InternalError', error_message: 'internal error' });
        return event(taskId, 'task-started');
      }
      if (action === 'continue-task') {
        if (self.scenario === 'slow') await new Promise((resolve) => setTimeout(resolve, self.slowMs));
        if (ws.readyState !== ws.OPEN) return;
        const audio = pcmBytes(tone(parameters.sample_rate));
        const half = Math.floor(audio.length / 2) + 1;
        ws.send(audio.subarray(0, half));
        ws.send(audio.subarray(half));
        return event(taskId, 'result-generated');
      }
      if (action === 'finish-task') {
        if (self.scenario === 'truncated') return ws.terminate();
        return event(taskId, 'task-finished');
      }
    };
  }
}

/** fal.ai synchronous run `POST /fal-ai/f5-tts` (`Authorization: Key`), answering `{audio_url: {url}}` served by the fake. */
export function startFalFake(options: { apiKey: string }): Promise<FakeUpstream> {
  const files = new Map<string, Buffer>();
  let counter = 0;
  return startFake(
    (request, response, fake) => {
      if (request.method === 'GET' && files.has(request.path))
        return send(response, 200, 'audio/wav', files.get(request.path)!);
      if (request.headers.authorization !== `Key ${options.apiKey}`) {
        return send(
          response,
          401,
          'application/json',
          JSON.stringify({ detail: 'Authentication is required to access this application.' }),
        );
      }
      if (request.method !== 'POST' || request.path !== '/fal-ai/f5-tts')
        return sendJson(response, 404, { detail: 'Application not found' });
      const body = request.json ?? {};
      const reference = /^data:audio\/wav;base64,(.+)$/.exec(String(body.ref_audio_url ?? ''));
      const valid =
        complainUnless(fake, typeof body.gen_text === 'string' && body.gen_text.length > 0, 'gen_text missing') &&
        complainUnless(
          fake,
          !!reference && isCloneSample(Buffer.from(reference[1], 'base64')),
          'ref_audio_url is not a 24 kHz WAV data URI',
        );
      if (!valid)
        return sendJson(response, 422, {
          detail: [{ loc: ['body', 'ref_audio_url'], msg: 'invalid reference', type: 'value_error' }],
        });
      const file = `/files/${++counter}.wav`;
      files.set(file, encodeWav(tone(24000), 24000));
      return sendJson(response, 200, {
        audio_url: { url: `${fake.url}${file}`, content_type: 'audio/wav', file_name: 'out.wav' },
      });
    },
    {
      unauthorized: {
        contentType: 'application/json',
        body: JSON.stringify({ detail: 'Authentication is required to access this application.' }),
      },
      server_error: { contentType: 'application/json', body: JSON.stringify({ detail: 'Internal Server Error' }) },
    },
  );
}

/** daswer123 xtts-api-server: `POST /tts_to_audio/` (speaker name or path of a WAV) and `GET /speakers_list`. */
export function startXttsFake(options: { speakers?: string[] } = {}): Promise<FakeUpstream> {
  const speakers = options.speakers ?? ['female', 'male', 'calm_female'];
  return startFake(
    async (request, response, fake) => {
      if (request.method === 'GET' && request.path === '/speakers_list') return sendJson(response, 200, speakers);
      if (request.method !== 'POST' || request.path !== '/tts_to_audio/')
        return sendJson(response, 404, { detail: 'Not Found' });
      const body = request.json ?? {};
      if (
        !complainUnless(
          fake,
          typeof body.text === 'string' && typeof body.language === 'string',
          'text/language missing',
        )
      ) {
        return sendJson(response, 422, { detail: 'validation error' });
      }
      const speaker = String(body.speaker_wav ?? '');
      if (!speakers.includes(speaker)) {
        let sample: Buffer | null = null;
        try {
          sample = speaker.startsWith('/') ? await readFile(speaker) : null;
        } catch {
          sample = null;
        }
        if (!sample) return sendJson(response, 400, { detail: `Speaker ${speaker} not found` });
        if (!complainUnless(fake, isCloneSample(sample), 'reference is not a 24 kHz mono WAV'))
          return sendJson(response, 400, { detail: 'bad reference' });
      }
      return send(response, 200, 'audio/wav', encodeWav(tone(24000), 24000));
    },
    {
      unauthorized: { contentType: 'application/json', body: JSON.stringify({ detail: 'Not authenticated' }) },
      server_error: { contentType: 'text/plain', body: 'Internal Server Error' },
    },
  );
}

/** CosyVoice FastAPI server: `/inference_sft` and `/inference_cross_lingual` (multipart), raw PCM16 stream at 24 kHz. */
export function startCosyVoiceServerFake(options: { rate?: number } = {}): Promise<FakeUpstream> {
  const rate = options.rate ?? 24000;
  return startFake(
    async (request, response, fake) => {
      if (request.method === 'GET' && request.path === '/docs')
        return send(response, 200, 'text/html', '<html>Swagger UI</html>');
      if (request.method !== 'POST') return sendJson(response, 405, { detail: 'Method Not Allowed' });
      const form = request.form;
      if (!complainUnless(fake, !!form && typeof form.get('tts_text') === 'string', 'tts_text missing'))
        return sendJson(response, 422, { detail: 'tts_text required' });
      if (request.path === '/inference_sft') {
        if (!complainUnless(fake, typeof form!.get('spk_id') === 'string', 'spk_id missing'))
          return sendJson(response, 422, { detail: 'spk_id required' });
      } else if (request.path === '/inference_cross_lingual') {
        const prompt = form!.get('prompt_wav');
        const ok = prompt instanceof Blob && isCloneSample(new Uint8Array(await prompt.arrayBuffer()));
        if (!complainUnless(fake, ok, 'prompt_wav is not a 24 kHz mono WAV'))
          return sendJson(response, 422, { detail: 'prompt_wav invalid' });
      } else {
        return sendJson(response, 404, { detail: 'Not Found' });
      }
      return sendStreamed(response, 'application/octet-stream', pcmBytes(tone(rate)), 5);
    },
    {
      unauthorized: { contentType: 'application/json', body: JSON.stringify({ detail: 'Not authenticated' }) },
      server_error: { contentType: 'text/plain', body: 'Internal Server Error' },
    },
  );
}
