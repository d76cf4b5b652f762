/**
 * WAV encode (16-bit mono PCM) and a hand-written parser that accepts what real uploads contain:
 * 8/16/24/32-bit integer and 32/64-bit float samples, WAVE_FORMAT_EXTENSIBLE headers, extra chunks
 * (LIST, fact, bext…) in any order, odd-sized chunks with their pad byte, and streamed files whose
 * data size field is 0 or too large (`readWavHeader` reports the latter, so callers holding a client's
 * upload to stricter rules can refuse it). Every channel count is downmixed to mono Int16.
 */

/** Raised for bytes that cannot be turned into audio; the HTTP layer maps it to 400. */
export class InvalidAudioError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'InvalidAudioError';
  }
}

const WAVE_FORMAT_PCM = 0x0001;
const WAVE_FORMAT_IEEE_FLOAT = 0x0003;
const WAVE_FORMAT_EXTENSIBLE = 0xfffe;
const RIFF_HEADER_BYTES = 12;
const CHUNK_HEADER_BYTES = 8;
const PCM16_HEADER_BYTES = 44;
/** Beyond this, a "channel count" is a corrupt header rather than a real multichannel file. */
const MAX_CHANNELS = 32;

const HOST_IS_LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/** Little-endian 16-bit samples as an Int16Array of its own; a trailing odd byte is ignored. */
export function pcm16FromLittleEndian(bytes: Uint8Array): Int16Array {
  const pcm = new Int16Array(bytes.byteLength >> 1);
  if (HOST_IS_LITTLE_ENDIAN) {
    // One copy instead of a per-sample loop: this runs on every streamed TTS and WebSocket chunk.
    new Uint8Array(pcm.buffer).set(bytes.subarray(0, pcm.length * 2));
    return pcm;
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  for (let i = 0; i < pcm.length; i++) pcm[i] = view.getInt16(i * 2, true);
  return pcm;
}

export function isWav(bytes: Uint8Array): boolean {
  return bytes.length >= RIFF_HEADER_BYTES && ascii(bytes, 0, 4) === 'RIFF' && ascii(bytes, 8, 4) === 'WAVE';
}

export function encodeWav(pcm: Int16Array, sampleRate: number): Buffer {
  const dataBytes = pcm.length * 2;
  const out = Buffer.alloc(PCM16_HEADER_BYTES + dataBytes);
  out.write('RIFF', 0, 'ascii');
  out.writeUInt32LE(36 + dataBytes, 4);
  out.write('WAVE', 8, 'ascii');
  out.write('fmt ', 12, 'ascii');
  out.writeUInt32LE(16, 16);
  out.writeUInt16LE(WAVE_FORMAT_PCM, 20);
  out.writeUInt16LE(1, 22);
  out.writeUInt32LE(sampleRate, 24);
  out.writeUInt32LE(sampleRate * 2, 28);
  out.writeUInt16LE(2, 32);
  out.writeUInt16LE(16, 34);
  out.write('data', 36, 'ascii');
  out.writeUInt32LE(dataBytes, 40);
  for (let i = 0; i < pcm.length; i++) out.writeInt16LE(pcm[i], PCM16_HEADER_BYTES + i * 2);
  return out;
}

interface WavFormat {
  encoding: 'int' | 'float';
  channels: number;
  sampleRate: number;
  bitsPerSample: number;
  blockAlign: number;
}

/** What a WAV file says about itself, read without decoding a sample. */
export interface WavHeader extends WavFormat {
  /** Where the samples start. */
  dataOffset: number;
  /** Bytes of samples that will be decoded: the declared size, or what the file holds when that is unknown. */
  dataBytes: number;
  /** The data chunk's size field as written. */
  declaredDataBytes: number;
  /** False when the size field promises more than the file holds (a truncated file). */
  dataComplete: boolean;
}

export interface ParsedWav {
  /** Mono (downmixed) 16-bit samples. */
  pcm: Int16Array;
  sampleRate: number;
  /** Channel count of the file before downmixing. */
  channels: number;
}

/**
 * Sample rates the decoder reads. Below 4 kHz no recorder or TTS server writes speech, and converting
 * from there to 48 kHz would pass libsamplerate's 1:256 ratio limit for rates near 1 Hz (a corrupt
 * header); 192 kHz is the resampler's ceiling. What clients may upload is narrower (`UPLOAD_AUDIO_RULES`).
 */
export const MIN_WAV_SAMPLE_RATE = 4_000;
export const MAX_WAV_SAMPLE_RATE = 192_000;

/** Streamed recorders write 0 or 0xFFFFFFFF in the size field before they know the length. */
const UNKNOWN_DATA_SIZES = new Set([0, 0xffffffff]);

export function parseWav(bytes: Uint8Array): ParsedWav {
  const header = readWavHeader(bytes);
  return { pcm: decodeWavSamples(bytes, header), sampleRate: header.sampleRate, channels: header.channels };
}

/** Reads the RIFF chunks up to the data chunk; throws `InvalidAudioError` for anything that cannot be decoded. */
export function readWavHeader(bytes: Uint8Array): WavHeader {
  if (!isWav(bytes)) throw new InvalidAudioError('not a RIFF/WAVE file');
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let format: WavFormat | undefined;
  let offset = RIFF_HEADER_BYTES;
  while (offset + CHUNK_HEADER_BYTES <= bytes.length) {
    const id = ascii(bytes, offset, 4);
    const declaredSize = view.getUint32(offset + 4, true);
    const bodyStart = offset + CHUNK_HEADER_BYTES;
    if (id === 'fmt ') {
      format = parseFormat(view, bodyStart, Math.min(declaredSize, bytes.length - bodyStart));
    } else if (id === 'data') {
      if (!format) throw new InvalidAudioError('WAV data chunk comes before its fmt chunk');
      const available = bytes.length - bodyStart;
      const unknownLength = UNKNOWN_DATA_SIZES.has(declaredSize);
      return {
        ...format,
        dataOffset: bodyStart,
        dataBytes: unknownLength || declaredSize > available ? available : declaredSize,
        declaredDataBytes: declaredSize,
        dataComplete: unknownLength || declaredSize <= available,
      };
    }
    offset = bodyStart + declaredSize + (declaredSize % 2);
  }
  throw new InvalidAudioError(format ? 'WAV file has no data chunk' : 'WAV file has no fmt chunk');
}

/** Decodes the samples `readWavHeader` located, downmixed to mono Int16. */
export function decodeWavSamples(bytes: Uint8Array, header: WavHeader): Int16Array {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  return decodeSamples(view, header.dataOffset, header.dataBytes, header);
}

function parseFormat(view: DataView, start: number, size: number): WavFormat {
  if (size < 16) throw new InvalidAudioError('WAV fmt chunk is truncated');
  let tag = view.getUint16(start, true);
  const channels = view.getUint16(start + 2, true);
  const sampleRate = view.getUint32(start + 4, true);
  const blockAlign = view.getUint16(start + 12, true);
  const bitsPerSample = view.getUint16(start + 14, true);
  if (tag === WAVE_FORMAT_EXTENSIBLE) {
    // The real format tag is the first two bytes of the SubFormat GUID at offset 24.
    if (size < 26) throw new InvalidAudioError('WAV extensible fmt chunk is truncated');
    tag = view.getUint16(start + 24, true);
  }
  if (channels < 1 || channels > MAX_CHANNELS) throw new InvalidAudioError(`WAV channel count ${channels} is invalid`);
  if (sampleRate < MIN_WAV_SAMPLE_RATE || sampleRate > MAX_WAV_SAMPLE_RATE) {
    throw new InvalidAudioError(
      `WAV sample rate ${sampleRate} Hz is outside ${MIN_WAV_SAMPLE_RATE}-${MAX_WAV_SAMPLE_RATE} Hz`,
    );
  }
  const bytesPerSample = bitsPerSample / 8;
  if (tag === WAVE_FORMAT_PCM && ![8, 16, 24, 32].includes(bitsPerSample)) {
    throw new InvalidAudioError(`WAV integer PCM with ${bitsPerSample} bits per sample is not supported`);
  }
  if (tag === WAVE_FORMAT_IEEE_FLOAT && ![32, 64].includes(bitsPerSample)) {
    throw new InvalidAudioError(`WAV float PCM with ${bitsPerSample} bits per sample is not supported`);
  }
  if (tag !== WAVE_FORMAT_PCM && tag !== WAVE_FORMAT_IEEE_FLOAT) {
    throw new InvalidAudioError(`WAV encoding 0x${tag.toString(16)} is not supported (use PCM or float)`);
  }
  // Some writers leave blockAlign 0; the frame size follows from the other fields anyway.
  const frameBytes = channels * bytesPerSample;
  return {
    encoding: tag === WAVE_FORMAT_PCM ? 'int' : 'float',
    channels,
    sampleRate,
    bitsPerSample,
    blockAlign: blockAlign >= frameBytes ? blockAlign : frameBytes,
  };
}

function decodeSamples(view: DataView, start: number, size: number, format: WavFormat): Int16Array {
  const frames = Math.floor(size / format.blockAlign);
  const bytesPerSample = format.bitsPerSample / 8;
  const readSample = sampleReader(view, format);
  const mono = new Int16Array(frames);
  for (let frame = 0; frame < frames; frame++) {
    const frameStart = start + frame * format.blockAlign;
    let sum = 0;
    for (let channel = 0; channel < format.channels; channel++)
      sum += readSample(frameStart + channel * bytesPerSample);
    const value = Math.round((sum / format.channels) * 32768);
    mono[frame] = value > 32767 ? 32767 : value < -32768 ? -32768 : value;
  }
  return mono;
}

/** Returns a reader giving each sample as a float in [-1, 1). */
function sampleReader(view: DataView, format: WavFormat): (offset: number) => number {
  if (format.encoding === 'float') {
    return format.bitsPerSample === 32
      ? (offset) => clampUnit(view.getFloat32(offset, true))
      : (offset) => clampUnit(view.getFloat64(offset, true));
  }
  switch (format.bitsPerSample) {
    case 8:
      return (offset) => (view.getUint8(offset) - 128) / 128;
    case 16:
      return (offset) => view.getInt16(offset, true) / 32768;
    case 24:
      return (offset) => {
        const unsigned = view.getUint8(offset) | (view.getUint8(offset + 1) << 8) | (view.getUint8(offset + 2) << 16);
        return (unsigned & 0x800000 ? unsigned - 0x1000000 : unsigned) / 8388608;
      };
    default:
      return (offset) => view.getInt32(offset, true) / 2147483648;
  }
}

function clampUnit(value: number): number {
  if (Number.isNaN(value)) return 0;
  return value > 1 ? 1 : value < -1 ? -1 : value;
}

function ascii(bytes: Uint8Array, offset: number, length: number): string {
  return String.fromCharCode(...bytes.subarray(offset, offset + length));
}
