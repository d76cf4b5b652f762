/**
 * ASR provider for servers speaking OpenAI's transcription protocol (`POST /audio/transcriptions`,
 * multipart `file` + `model`): speaches / faster-whisper-server, whisper.cpp's server with its
 * OpenAI route, LocalAI, vLLM, OpenAI itself. Audio is sent as 16 kHz mono 16-bit WAV because
 * that is the one input every whisper server accepts without its own conversion step.
 */
import { resamplePcm16 } from '../../audio/resample.ts';
import { encodeWav } from '../../audio/wav.ts';
import { abortError } from '../../upstream/abort.ts';
import { ProviderNotConfiguredError, UpstreamError, type ProviderStatus } from '../../upstream/errors.ts';
import {
  RequestDeadline,
  authHeaders,
  endpointStatus,
  joinUrl,
  MAX_JSON_REPLY_BYTES,
  readBoundedText,
  upstreamErrorFromResponse,
  type OpenAiEndpointConfig,
} from '../../upstream/http.ts';
import type { AsrProvider, TranscribeRequest, TranscribeResult } from '../types.ts';

const LABEL = 'ASR';
export const ASR_NOT_CONFIGURED_REASON = 'set SERVICE_ASR_BASE_URL';
/** Whisper models work at 16 kHz; servers would resample anything else themselves (or reject it). */
export const ASR_UPLOAD_SAMPLE_RATE = 16_000;
/** Model name faster-whisper servers and OpenAI both accept; whisper.cpp ignores the field. */
export const DEFAULT_ASR_MODEL = 'whisper-1';
/**
 * The reply comes only after the whole upload is transcribed: a CPU whisper server takes a few
 * seconds for a 30 s utterance, plus model load on its first request.
 */
export const DEFAULT_ASR_RESPONSE_TIMEOUT_MS = 120_000;
/** Once the JSON reply has started, it is tiny: a gap this long means the connection is dead. */
export const DEFAULT_ASR_IDLE_TIMEOUT_MS = 15_000;

export interface OpenAiAsrConfig extends OpenAiEndpointConfig {
  /** From sending the upload to the response headers. */
  responseTimeoutMs?: number;
  /** Longest gap while reading the response body. */
  idleTimeoutMs?: number;
}

export function createOpenAiAsr(config: OpenAiAsrConfig): AsrProvider {
  return new OpenAiTranscriptionProvider(config);
}

class OpenAiTranscriptionProvider implements AsrProvider {
  readonly id = 'openai';

  constructor(private readonly config: OpenAiAsrConfig) {}

  status(): ProviderStatus {
    return endpointStatus(this.config, ASR_NOT_CONFIGURED_REASON);
  }

  async transcribe(request: TranscribeRequest): Promise<TranscribeResult> {
    const baseUrl = this.config.baseUrl;
    if (!baseUrl) throw new ProviderNotConfiguredError(`ASR is not configured: ${ASR_NOT_CONFIGURED_REASON}`);
    if (request.signal.aborted) throw abortError(request.signal);
    // Whisper servers reject or hallucinate on empty input; there is nothing to recognise.
    if (request.pcm.length === 0) return { text: '' };

    const pcm16k = await resamplePcm16(request.pcm, request.sampleRate, ASR_UPLOAD_SAMPLE_RATE);
    if (request.signal.aborted) throw abortError(request.signal);
    const form = new FormData();
    // Buffer.alloc memory is a plain ArrayBuffer; the cast only narrows Buffer's generic for Blob.
    const wav = encodeWav(pcm16k, ASR_UPLOAD_SAMPLE_RATE) as Uint8Array<ArrayBuffer>;
    form.append('file', new Blob([wav], { type: 'audio/wav' }), 'audio.wav');
    form.append('model', this.config.model ?? DEFAULT_ASR_MODEL);
    form.append('response_format', 'json');
    if (request.language) form.append('language', request.language);

    const deadline = new RequestDeadline(request.signal);
    deadline.arm(this.config.responseTimeoutMs ?? DEFAULT_ASR_RESPONSE_TIMEOUT_MS, 'transcription response');
    try {
      const response = await fetch(joinUrl(baseUrl, 'audio/transcriptions'), {
        method: 'POST',
        headers: { accept: 'application/json', ...authHeaders(this.config.apiKey) },
        body: form,
        signal: deadline.signal,
      });
      if (!response.ok) throw await upstreamErrorFromResponse(response, LABEL);
      deadline.arm(this.config.idleTimeoutMs ?? DEFAULT_ASR_IDLE_TIMEOUT_MS, 'transcription body');
      const body = await readBoundedText(response, LABEL, MAX_JSON_REPLY_BYTES);
      return { text: parseTranscript(body, response.headers.get('content-type') ?? '') };
    } catch (error) {
      throw deadline.translate(error, LABEL);
    } finally {
      deadline.dispose();
    }
  }
}

/** `{text}` JSON as asked; a server that ignores `response_format` and answers plain text is accepted too. */
function parseTranscript(body: string, contentType: string): string {
  const trimmed = body.trim();
  if (contentType.includes('json') || trimmed.startsWith('{')) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(trimmed);
    } catch {
      throw new UpstreamError(`${LABEL} upstream sent malformed JSON`);
    }
    const text = (parsed as { text?: unknown } | null)?.text;
    if (typeof text !== 'string') throw new UpstreamError(`${LABEL} upstream reply has no "text" field`);
    return text.trim();
  }
  return trimmed;
}
