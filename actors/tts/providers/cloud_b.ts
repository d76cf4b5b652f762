/**
 * `cloud_b`: Alibaba Cloud Model Studio (DashScope) CosyVoice — the same platform as `cloud_a`.
 *  - cloning: `POST /api/v1/services/audio/tts/customization`, model `voice-enrollment`, action
 *    `create_voice` with `target_model`, `prefix` and the sample's public `url`: DashScope downloads
 *    the sample from this service (`GET /voice-uploads/{token}`).
 *  - synthesis: the CosyVoice duplex WebSocket `wss://<host>/api-ws/v1/inference/` (`run-task`,
 *    `continue-task`, `finish-task`; audio arrives as binary frames; `task-finished` / `task-failed`).
 *  - voices: the cloned `voice_id` (`cosyvoice-v2-<prefix>-<hash>`) or a system voice (`longxiaochun_v2`).
 * The key falls back to cloud_a's because both live on one DashScope account.
 */
import { randomBytes } from 'node:crypto';
import WebSocket from 'ws';
import { abortReason } from '../../upstream/abort.ts';
import type { FetchLike } from '../../upstream/http.ts';
import type { CloneRequest, CloneResult, TtsChunk, TtsProvider, TtsRequest } from '../types.ts';
import { UpstreamError } from '../../upstream/errors.ts';
import { rawPcmBySentence } from './audio-output.ts';
import {
  assertConfigured,
  clonedVoiceModel,
  randomAlphanumeric,
  statusFromRequired,
  type CloningProviderConfig,
} from './common.ts';
import { createDashscopeVoice, dashscopeBase } from './dashscope.ts';

const ID = 'cloud_b' as const;
const DEFAULT_MODEL = 'cosyvoice-v2';
const DEFAULT_VOICE = 'longxiaochun_v2';
const ENROLLMENT_MODEL = 'voice-enrollment';
/** CosyVoice PCM output rates. */
const PCM_RATES = [8000, 16000, 22050, 24000, 44100, 48000];
const FALLBACK_RATE = 24000;
/** DashScope allows lower-case letters and digits, fewer than 10 characters. */
export const CLOUD_B_PREFIX_PATTERN = /^[a-z0-9]{1,9}$/;
/** Opening the socket plus `task-started`: a handshake, not synthesis. */
const WS_HANDSHAKE_TIMEOUT_MS = 15_000;
/** Whole sentence over the socket; long sentences take a few seconds at most on CosyVoice. */
const WS_SENTENCE_TIMEOUT_MS = 60_000;
/**
 * CosyVoice sends audio frames of a few KiB and JSON events of a few hundred bytes; a larger message is a
 * broken upstream (ws closes the socket with 1009 and the sentence fails) rather than ws's 100 MiB default.
 */
const MAX_SOCKET_MESSAGE_BYTES = 1024 * 1024;
/**
 * Audio received but not yet taken by the consumer, who waits for playout room: beyond this (~10 s at
 * 48 kHz) the socket stops reading until half of it is taken, so TCP holds the rest, not this process.
 */
const MAX_QUEUED_AUDIO_BYTES = 1024 * 1024;
/** Of an HTTP error answer to the upgrade only the start is kept for the error text. */
const MAX_ERROR_BODY_BYTES = 64 * 1024;

export function inferenceSocketUrl(baseUrl: string): string {
  return `${baseUrl.replace(/^http/, 'ws')}/api-ws/v1/inference/`;
}

type SocketItem = { kind: 'audio'; data: Buffer } | { kind: 'done' } | { kind: 'error'; error: unknown };

/** Runs one CosyVoice task for one sentence and yields its audio frames as they arrive. */
async function* runSentenceTask(options: {
  url: string;
  apiKey: string;
  model: string;
  voice: string;
  text: string;
  rate: number;
  signal: AbortSignal;
}): AsyncGenerator<Buffer> {
  const taskId = randomBytes(16).toString('hex');
  const socket = new WebSocket(options.url, {
    headers: { authorization: `bearer ${options.apiKey}`, 'X-DashScope-DataInspection': 'enable' },
    handshakeTimeout: WS_HANDSHAKE_TIMEOUT_MS,
    maxPayload: MAX_SOCKET_MESSAGE_BYTES,
  });
  const queue: SocketItem[] = [];
  let queuedAudioBytes = 0;
  let readingPaused = false;
  let wake: (() => void) | null = null;
  const push = (item: SocketItem) => {
    queue.push(item);
    if (item.kind === 'audio') {
      queuedAudioBytes += item.data.length;
      if (queuedAudioBytes > MAX_QUEUED_AUDIO_BYTES && !readingPaused) {
        readingPaused = true;
        socket.pause();
      }
    }
    wake?.();
  };
  const header = (action: string) => ({ action, task_id: taskId, streaming: 'duplex' });
  let started = false;

  socket.on('unexpected-response', (_request, response) => {
    const chunks: Buffer[] = [];
    let kept = 0;
    response.on('data', (chunk: Buffer) => {
      if (kept >= MAX_ERROR_BODY_BYTES) return;
      chunks.push(chunk);
      kept += chunk.length;
    });
    response.on('end', () =>
      push({
        kind: 'error',
        error: new UpstreamError(
          `${ID}: upstream returned ${response.statusCode}: ${Buffer.concat(chunks).toString('utf8').slice(0, 500)}`,
          response.statusCode,
        ),
      }),
    );
  });
  socket.on('open', () => {
    socket.send(
      JSON.stringify({
        header: header('run-task'),
        payload: {
          task_group: 'audio',
          task: 'tts',
          function: 'SpeechSynthesizer',
          model: options.model,
          parameters: { text_type: 'PlainText', voice: options.voice, format: 'pcm', sample_rate: options.rate },
          input: {},
        },
      }),
    );
  });
  socket.on('message', (data: Buffer, isBinary: boolean) => {
    if (isBinary) return push({ kind: 'audio', data });
    let message: { header?: { event?: string; error_code?: string; error_message?: string } };
    try {
      message = JSON.parse(data.toString('utf8'));
    } catch {
      return push({ kind: 'error', error: new UpstreamError(`${ID}: malformed socket message`) });
    }
    const event = message.header?.event;
    if (event === 'task-started' && !started) {
      started = true;
      socket.send(JSON.stringify({ header: header('continue-task'), payload: { input: { text: options.text } } }));
      socket.send(JSON.stringify({ header: header('finish-task'), payload: { input: {} } }));
    } else if (event === 'task-finished') {
      push({ kind: 'done' });
    } else if (event === 'task-failed') {
      push({
        kind: 'error',
        error: new UpstreamError(
          `${ID}: ${message.header?.error_code ?? 'task-failed'}: ${message.header?.error_message ?? ''}`,
        ),
      });
    }
  });
  socket.on('error', (error) =>
    push({ kind: 'error', error: new UpstreamError(`${ID}: socket error: ${error.message}`) }),
  );
  socket.on('close', () =>
    push({ kind: 'error', error: new UpstreamError(`${ID}: socket closed before the task finished`) }),
  );

  const timer = setTimeout(
    () =>
      push({
        kind: 'error',
        error: new UpstreamError(`${ID}: sentence not finished within ${WS_SENTENCE_TIMEOUT_MS} ms`),
      }),
    WS_SENTENCE_TIMEOUT_MS,
  );
  const onAbort = () => push({ kind: 'error', error: abortReason(options.signal) });
  options.signal.addEventListener('abort', onAbort, { once: true });
  try {
    options.signal.throwIfAborted();
    while (true) {
      const item = queue.shift();
      if (!item) {
        await new Promise<void>((resolve) => (wake = resolve));
        wake = null;
        continue;
      }
      if (item.kind === 'audio') {
        queuedAudioBytes -= item.data.length;
        if (readingPaused && queuedAudioBytes <= MAX_QUEUED_AUDIO_BYTES / 2) {
          readingPaused = false;
          socket.resume();
        }
        yield item.data;
      } else if (item.kind === 'done') return;
      else throw item.error;
    }
  } finally {
    clearTimeout(timer);
    options.signal.removeEventListener('abort', onAbort);
    socket.removeAllListeners('close');
    socket.on('error', () => {});
    socket.terminate();
  }
}

export function createCloudBProvider(config: CloningProviderConfig = {}): TtsProvider {
  const fetchImpl: FetchLike = config.fetch ?? fetch;
  const baseUrl = dashscopeBase(config.baseUrl);
  const status = () => statusFromRequired(ID, [{ value: config.apiKey, suffix: 'API_KEY' }]);

  async function* synthesize(request: TtsRequest): AsyncGenerator<TtsChunk> {
    assertConfigured(ID, status());
    const voice = request.voice || DEFAULT_VOICE;
    const model = (await clonedVoiceModel(config, ID, request)) || DEFAULT_MODEL;
    const upstreamRate = PCM_RATES.includes(request.sampleRate) ? request.sampleRate : FALLBACK_RATE;
    yield* rawPcmBySentence(request, { upstreamRate, provider: ID }, (sentence) =>
      runSentenceTask({
        url: inferenceSocketUrl(baseUrl),
        apiKey: config.apiKey!,
        model,
        voice,
        text: sentence,
        rate: upstreamRate,
        signal: request.signal,
      }),
    );
  }

  async function clone(request: CloneRequest): Promise<CloneResult> {
    assertConfigured(ID, status());
    if (!request.sampleUrl)
      throw new UpstreamError(`${ID}: cloning needs a public sample URL (SERVICE_PUBLIC_BASE_URL)`);
    const prefix = request.prefix || randomAlphanumeric(8);
    if (!CLOUD_B_PREFIX_PATTERN.test(prefix)) {
      throw new RangeError('cloud_b prefix must be 1-9 lower-case letters or digits');
    }
    const voiceId = await createDashscopeVoice({
      fetchImpl,
      baseUrl,
      apiKey: config.apiKey!,
      provider: ID,
      signal: request.signal,
      body: {
        model: ENROLLMENT_MODEL,
        input: { action: 'create_voice', target_model: request.targetModel, prefix, url: request.sampleUrl },
      },
    });
    return {
      voiceId,
      message: `cloud_b enrolled voice ${voiceId} for ${request.targetModel} from the uploaded sample`,
    };
  }

  return { id: ID, defaultVoice: DEFAULT_VOICE, defaultCloneModel: DEFAULT_MODEL, status, synthesize, clone };
}
