/**
 * Turns uploaded audio bytes into mono 16-bit PCM at the rate the pipeline wants. The container is
 * detected from the bytes themselves (clients label uploads inconsistently): RIFF/WAVE, MP3 (ID3 tag
 * or two consecutive valid MPEG frame headers), and otherwise raw PCM16 little-endian mono.
 */
import { MPEGDecoder } from 'mpg123-decoder';
import { resamplePcm16 } from './resample.ts';
import {
  InvalidAudioError,
  decodeWavSamples,
  isWav,
  pcm16FromLittleEndian,
  readWavHeader,
  type WavHeader,
} from './wav.ts';

export { InvalidAudioError };

export type AudioFormat = 'wav' | 'mp3' | 'pcm';

export interface DecodeOptions {
  /** Rate of the returned PCM. */
  targetRate: number;
  /** Rate of headerless raw PCM input (the session sample rate); default 16000 Hz. */
  rawSampleRate?: number;
  /** Stricter acceptance for audio a client sent (`UPLOAD_AUDIO_RULES`); without it anything decodable is read. */
  rules?: AudioRules;
  /**
   * Longest audio, once decoded, that is read; anything longer throws `AudioTooLongError` as soon as that is
   * known (from the header of WAV and raw PCM, the Xing/Info frame count or the running decode of MP3), so
   * no more PCM than this is ever held. Unbounded without it (upstream TTS answers, bounded by their sentence).
   */
  maxDurationMs?: number;
  signal?: AbortSignal;
}

/** Audio that decodes to more than `DecodeOptions.maxDurationMs`: the bytes were small, what they decode to is not. */
export class AudioTooLongError extends Error {
  constructor(readonly maxDurationMs: number) {
    super(`audio decodes to more than ${describeDuration(maxDurationMs)}`);
    this.name = 'AudioTooLongError';
  }
}

/** `10 min`, `90 s`, `1.5 s`: how limits read in error details. */
export function describeDuration(ms: number): string {
  if (ms >= 60_000 && ms % 60_000 === 0) return `${ms / 60_000} min`;
  return `${Number((ms / 1000).toFixed(3))} s`;
}

/** What an audio input must be, checked from its header (WAV), its frames (MP3) or the declared rate (raw PCM). */
export interface AudioRules {
  minSampleRate: number;
  maxSampleRate: number;
  maxChannels: number;
  /** Integer PCM sample sizes a WAV may use. */
  wavBitsPerSample: readonly number[];
  /** Refuse a WAV whose data chunk claims more bytes than the file holds (a truncated upload). */
  wholeDataChunk: boolean;
}

/**
 * Audio a client uploads to the HTTP edge (transcribe, speak_audio, speak_rt_audio): 16-bit integer PCM
 * (the spec's format), mono or stereo (downmixed), 8-48 kHz, which spans every rate the pipeline runs at.
 * Anything else is refused with a 400 naming the field, rather than decoded into something the
 * client did not mean. The decoder itself reads more (8/24/32-bit and float WAV, more channels,
 * truncated data chunks) because upstream TTS servers send those.
 */
export const UPLOAD_AUDIO_RULES: AudioRules = {
  minSampleRate: 8_000,
  maxSampleRate: 48_000,
  maxChannels: 2,
  wavBitsPerSample: [16],
  wholeDataChunk: true,
};

export interface DecodedAudio {
  pcm: Int16Array;
  sampleRate: number;
  format: AudioFormat;
}

export const DEFAULT_RAW_SAMPLE_RATE = 16_000;
/** How many leading bytes the "this is text, not audio" check looks at. */
const TEXT_SNIFF_BYTES = 512;
/** Shorter inputs are too small to call text with confidence (8 samples of PCM could be anything). */
const MIN_TEXT_SNIFF_BYTES = 16;

export async function decodeAudioToPcm16(bytes: Buffer | Uint8Array, options: DecodeOptions): Promise<DecodedAudio> {
  options.signal?.throwIfAborted();
  if (bytes.length === 0) throw new InvalidAudioError('audio is empty');
  const { pcm, sampleRate, format } = await decodeAtSourceRate(
    bytes,
    options.rawSampleRate ?? DEFAULT_RAW_SAMPLE_RATE,
    options,
  );
  if (pcm.length === 0) throw new InvalidAudioError(`${format} audio contains no samples`);
  options.signal?.throwIfAborted();
  const resampled = await resamplePcm16(pcm, sampleRate, options.targetRate);
  return { pcm: resampled, sampleRate: options.targetRate, format };
}

async function decodeAtSourceRate(
  bytes: Uint8Array,
  rawSampleRate: number,
  { rules, maxDurationMs }: DecodeOptions,
): Promise<{ pcm: Int16Array; sampleRate: number; format: AudioFormat }> {
  if (isWav(bytes)) {
    const header = readWavHeader(bytes);
    if (rules) checkWavHeader(header, rules);
    checkDuration(Math.floor(header.dataBytes / Math.max(1, header.blockAlign)), header.sampleRate, maxDurationMs);
    return { pcm: decodeWavSamples(bytes, header), sampleRate: header.sampleRate, format: 'wav' };
  }
  if (looksLikeMp3(bytes)) {
    const declared = mp3DeclaredDuration(bytes);
    if (declared) checkDuration(declared.samples, declared.sampleRate, maxDurationMs);
    const mp3 = await decodeMp3(bytes, maxDurationMs);
    if (rules) checkRateAndChannels('MP3', mp3.sampleRate, mp3.channels, rules);
    return { pcm: mp3.pcm, sampleRate: mp3.sampleRate, format: 'mp3' };
  }
  const unsupported = recognizeUnsupportedFormat(bytes);
  if (unsupported) throw new InvalidAudioError(`${unsupported} is not supported; send WAV, MP3 or raw 16-bit PCM`);
  if (rules) checkRateAndChannels('raw PCM', rawSampleRate, 1, rules);
  checkDuration(Math.floor(bytes.length / 2), rawSampleRate, maxDurationMs);
  return { pcm: parseRawPcm16(bytes), sampleRate: rawSampleRate, format: 'pcm' };
}

/** Throws `AudioTooLongError` when `frames` at `sampleRate` last longer than the limit. */
function checkDuration(frames: number, sampleRate: number, maxDurationMs: number | undefined): void {
  if (maxDurationMs !== undefined && frames > maxFramesAt(sampleRate, maxDurationMs))
    throw new AudioTooLongError(maxDurationMs);
}

export function maxFramesAt(sampleRate: number, maxDurationMs: number): number {
  return Math.floor((maxDurationMs * sampleRate) / 1000);
}

function checkWavHeader(header: WavHeader, rules: AudioRules): void {
  if (header.encoding !== 'int' || !rules.wavBitsPerSample.includes(header.bitsPerSample)) {
    const got = `${header.bitsPerSample}-bit ${header.encoding === 'int' ? 'integer' : 'float'}`;
    throw new InvalidAudioError(`WAV must be ${rules.wavBitsPerSample.join('/')}-bit integer PCM; this one is ${got}`);
  }
  checkRateAndChannels('WAV', header.sampleRate, header.channels, rules);
  if (rules.wholeDataChunk && !header.dataComplete) {
    throw new InvalidAudioError(
      `WAV data chunk declares ${header.declaredDataBytes} bytes but the file holds ${header.dataBytes}; the file is truncated`,
    );
  }
}

function checkRateAndChannels(format: string, sampleRate: number, channels: number, rules: AudioRules): void {
  if (!Number.isInteger(sampleRate) || sampleRate < rules.minSampleRate || sampleRate > rules.maxSampleRate) {
    throw new InvalidAudioError(
      `${format} sample rate ${sampleRate} Hz is outside ${rules.minSampleRate}-${rules.maxSampleRate} Hz`,
    );
  }
  if (channels < 1 || channels > rules.maxChannels) {
    throw new InvalidAudioError(`${format} has ${channels} channels; at most ${rules.maxChannels} are accepted`);
  }
}

function parseRawPcm16(bytes: Uint8Array): Int16Array {
  if (bytes.length % 2 !== 0) {
    throw new InvalidAudioError(`raw PCM must be whole 16-bit samples; got an odd byte count (${bytes.length})`);
  }
  return pcm16FromLittleEndian(bytes);
}

/**
 * MP3 bytes fed to the decoder per step. The decoder keeps its state between steps, so the cut points do not
 * matter; the step bounds how far the decode can run past the duration limit before it stops: at the lowest
 * bitrate (8 kb/s) 64 KiB is ~65 s of audio, ~25 MB of float samples at 48 kHz stereo, freed at once.
 */
const MP3_FEED_BYTES = 64 * 1024;

/** Decodes step by step, downmixing each step, and stops as soon as the audio passes `maxDurationMs`. */
async function decodeMp3(
  bytes: Uint8Array,
  maxDurationMs: number | undefined,
): Promise<{ pcm: Int16Array; sampleRate: number; channels: number }> {
  const decoder = new MPEGDecoder();
  try {
    await decoder.ready;
    const pieces: Int16Array[] = [];
    let frames = 0;
    let sampleRate = 0;
    let channels = 0;
    for (let offset = 0; offset < bytes.length; offset += MP3_FEED_BYTES) {
      const decoded = decoder.decode(bytes.subarray(offset, offset + MP3_FEED_BYTES));
      if (decoded.samplesDecoded === 0 || decoded.channelData.length === 0) continue;
      if (sampleRate === 0) [sampleRate, channels] = [decoded.sampleRate, decoded.channelData.length];
      if (decoded.sampleRate !== sampleRate) throw new InvalidAudioError('MP3 changes its sample rate part-way');
      frames += decoded.samplesDecoded;
      checkDuration(frames, sampleRate, maxDurationMs);
      pieces.push(downmixFloatToPcm16(decoded.channelData, decoded.samplesDecoded));
    }
    if (frames === 0) throw new InvalidAudioError('MP3 data could not be decoded');
    return { pcm: concatPcm(pieces, frames), sampleRate, channels };
  } finally {
    decoder.free();
  }
}

/** The pieces one after another (`frames` = their total length); a single piece is returned as it is. */
export function concatPcm(pieces: readonly Int16Array[], frames: number): Int16Array {
  if (pieces.length === 1) return pieces[0];
  const pcm = new Int16Array(frames);
  let at = 0;
  for (const piece of pieces) {
    pcm.set(piece, at);
    at += piece.length;
  }
  return pcm;
}

function downmixFloatToPcm16(channels: Float32Array[], frames: number): Int16Array {
  const pcm = new Int16Array(frames);
  for (let i = 0; i < frames; i++) {
    let sum = 0;
    for (const channel of channels) sum += channel[i];
    const value = Math.round((sum / channels.length) * 32768);
    pcm[i] = value > 32767 ? 32767 : value < -32768 ? -32768 : value;
  }
  return pcm;
}

// ---- MP3 detection -------------------------------------------------------------------------

const ID3V2_HEADER_BYTES = 10;

export function looksLikeMp3(bytes: Uint8Array): boolean {
  if (bytes.length >= ID3V2_HEADER_BYTES && bytes[0] === 0x49 && bytes[1] === 0x44 && bytes[2] === 0x33) return true;
  const first = mpegFrameLength(bytes, 0);
  if (first === undefined) return false;
  // One valid-looking header is a 1-in-a-few-thousand accident in raw PCM; two in a row is not. So is one header whose
  // frame length happens to equal the input's (raw PCM of that many bytes): a lone frame (26 ms) is read as raw PCM.
  return mpegFrameLength(bytes, first) !== undefined;
}

const BITRATES_KBPS: Record<string, number[]> = {
  'v1-l1': [0, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448],
  'v1-l2': [0, 32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384],
  'v1-l3': [0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320],
  'v2-l1': [0, 32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256],
  'v2-l2': [0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160],
};
const SAMPLE_RATES: Record<number, number[]> = {
  3: [44100, 48000, 32000],
  2: [22050, 24000, 16000],
  0: [11025, 12000, 8000],
};
const RESERVED_VERSION = 1;
const RESERVED_LAYER = 0;
const FREE_FORMAT_BITRATE = 0;
const BAD_BITRATE = 15;
const RESERVED_SAMPLE_RATE = 3;
const RESERVED_EMPHASIS = 2;

/** Length in bytes of the MPEG audio frame whose header starts at `offset`, or undefined if none is there. */
export function mpegFrameLength(bytes: Uint8Array, offset: number): number | undefined {
  if (offset + 4 > bytes.length) return undefined;
  const [b0, b1, b2, b3] = [bytes[offset], bytes[offset + 1], bytes[offset + 2], bytes[offset + 3]];
  if (b0 !== 0xff || (b1 & 0xe0) !== 0xe0) return undefined;
  const version = (b1 >> 3) & 3;
  const layer = (b1 >> 1) & 3;
  const bitrateIndex = b2 >> 4;
  const sampleRateIndex = (b2 >> 2) & 3;
  const padding = (b2 >> 1) & 1;
  if (version === RESERVED_VERSION || layer === RESERVED_LAYER) return undefined;
  if (bitrateIndex === FREE_FORMAT_BITRATE || bitrateIndex === BAD_BITRATE) return undefined;
  if (sampleRateIndex === RESERVED_SAMPLE_RATE || (b3 & 3) === RESERVED_EMPHASIS) return undefined;
  const isVersion1 = version === 3;
  const layerNumber = 4 - layer;
  const table = isVersion1 ? `v1-l${layerNumber}` : layerNumber === 1 ? 'v2-l1' : 'v2-l2';
  const bitrate = BITRATES_KBPS[table][bitrateIndex] * 1000;
  const sampleRate = SAMPLE_RATES[version][sampleRateIndex];
  if (layerNumber === 1) return (Math.floor((12 * bitrate) / sampleRate) + padding) * 4;
  const samplesPerFrameOver8 = layerNumber === 3 && !isVersion1 ? 72 : 144;
  return Math.floor((samplesPerFrameOver8 * bitrate) / sampleRate) + padding;
}

/**
 * Sample rate and samples per frame of the MPEG audio frame whose header (already checked by `mpegFrameLength`)
 * starts at `offset`: every frame of a layer holds the same number of samples, whatever its bitrate.
 */
export function mpegFrameTiming(bytes: Uint8Array, offset: number): { sampleRate: number; samplesPerFrame: number } {
  const version = (bytes[offset + 1] >> 3) & 3;
  const layerNumber = 4 - ((bytes[offset + 1] >> 1) & 3);
  const sampleRate = SAMPLE_RATES[version][(bytes[offset + 2] >> 2) & 3];
  const samplesPerFrame = layerNumber === 1 ? 384 : layerNumber === 2 || version === 3 ? 1152 : 576;
  return { sampleRate, samplesPerFrame };
}

const XING_HAS_FRAME_COUNT = 1;

/**
 * The duration an MP3 declares in its Xing/Info (or VBRI) header, which encoders such as LAME write into the
 * first frame: its frame count times the samples per frame. Undefined without one; an MP3 may lie here, and
 * then the running decode's bound still holds, so this only refuses early what is declared too long.
 */
export function mp3DeclaredDuration(bytes: Uint8Array): { samples: number; sampleRate: number } | undefined {
  const start = afterId3v2(bytes);
  if (mpegFrameLength(bytes, start) === undefined) return undefined;
  const isVersion1 = ((bytes[start + 1] >> 3) & 3) === 3;
  const mono = bytes[start + 3] >> 6 === 3;
  const { sampleRate, samplesPerFrame } = mpegFrameTiming(bytes, start);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const sideInfoBytes = isVersion1 ? (mono ? 17 : 32) : mono ? 9 : 17;
  const xing = start + 4 + sideInfoBytes;
  const tag = xing + 12 <= bytes.length ? String.fromCharCode(...bytes.subarray(xing, xing + 4)) : '';
  if ((tag === 'Xing' || tag === 'Info') && view.getUint32(xing + 4) & XING_HAS_FRAME_COUNT) {
    return { samples: view.getUint32(xing + 8) * samplesPerFrame, sampleRate };
  }
  // VBRI (Fraunhofer) sits 32 bytes after the frame header; its frame count is at offset 14.
  const vbri = start + 4 + 32;
  if (vbri + 18 <= bytes.length && String.fromCharCode(...bytes.subarray(vbri, vbri + 4)) === 'VBRI') {
    return { samples: view.getUint32(vbri + 14) * samplesPerFrame, sampleRate };
  }
  return undefined;
}

/** Offset of the first byte after a leading ID3v2 tag (its size is four 7-bit bytes, plus a footer when flagged). */
export function afterId3v2(bytes: Uint8Array): number {
  if (bytes.length < ID3V2_HEADER_BYTES || bytes[0] !== 0x49 || bytes[1] !== 0x44 || bytes[2] !== 0x33) return 0;
  const size = ((bytes[6] & 0x7f) << 21) | ((bytes[7] & 0x7f) << 14) | ((bytes[8] & 0x7f) << 7) | (bytes[9] & 0x7f);
  const footer = bytes[5] & 0x10 ? ID3V2_HEADER_BYTES : 0;
  return ID3V2_HEADER_BYTES + size + footer;
}

// ---- recognizable non-audio or unsupported inputs ---------------------------------------------

function recognizeUnsupportedFormat(bytes: Uint8Array): string | undefined {
  const head = (offset: number, length: number) => String.fromCharCode(...bytes.subarray(offset, offset + length));
  if (head(0, 4) === 'OggS') return 'Ogg (Vorbis/Opus) audio';
  if (head(0, 4) === 'fLaC') return 'FLAC audio';
  if (head(4, 4) === 'ftyp') return 'MP4/M4A';
  if (bytes[0] === 0x1a && bytes[1] === 0x45 && bytes[2] === 0xdf && bytes[3] === 0xa3) return 'WebM/Matroska';
  if (head(0, 4) === 'RIFF') return 'a RIFF file that is not WAVE';
  if (head(0, 4) === 'FORM') return 'AIFF';
  if (head(0, 5) === '#!AMR') return 'AMR audio';
  if (looksLikeAdts(bytes)) return 'AAC (ADTS) audio';
  if (head(0, 8) === '\x89PNG\r\n\x1a\n') return 'a PNG image';
  if (bytes[0] === 0xff && bytes[1] === 0xd8 && bytes[2] === 0xff) return 'a JPEG image';
  if (head(0, 4) === 'GIF8') return 'a GIF image';
  if (head(0, 4) === '%PDF') return 'a PDF document';
  if (head(0, 4) === 'PK\x03\x04') return 'a ZIP archive';
  if (looksLikeText(bytes)) return 'text';
  return undefined;
}

/**
 * Two consecutive ADTS headers (sync 0xFFF, layer 00), for the same reason MP3 detection wants two: raw PCM starting
 * with the sample −3585 (bytes FF F1) whose frame-length bits equal its own length was refused as AAC (found by the
 * property test in test/audio.decode.test.ts).
 */
function looksLikeAdts(bytes: Uint8Array): boolean {
  const adtsFrameLength = (offset: number): number | undefined => {
    if (offset + 7 > bytes.length || bytes[offset] !== 0xff || (bytes[offset + 1] & 0xf6) !== 0xf0) return undefined;
    const length = ((bytes[offset + 3] & 3) << 11) | (bytes[offset + 4] << 3) | (bytes[offset + 5] >> 5);
    return length >= 7 ? length : undefined;
  };
  const first = adtsFrameLength(0);
  return first !== undefined && adtsFrameLength(first) !== undefined;
}

/**
 * Real PCM never has every byte printable ASCII: that needs every sample to sit between +8224
 * and +32382 (a loud DC offset) for hundreds of samples. A JSON or form body sent by mistake does.
 */
function looksLikeText(bytes: Uint8Array): boolean {
  if (bytes.length < MIN_TEXT_SNIFF_BYTES) return false;
  const end = Math.min(bytes.length, TEXT_SNIFF_BYTES);
  for (let i = 0; i < end; i++) {
    const byte = bytes[i];
    const printable = (byte >= 0x20 && byte <= 0x7e) || byte === 0x09 || byte === 0x0a || byte === 0x0d;
    if (!printable) return false;
  }
  return true;
}
