/**
 * Sample-rate conversion for 16-bit mono PCM, the one door every whole piece of audio goes through: a whole-factor
 * upsample (16 or 8 kHz to 48 kHz) by the fixed polyphase filter of upsample.ts, every other ratio by libsamplerate's
 * sinc converter (WASM). The WASM module loads asynchronously, so the API is async; converters are cached per rate
 * pair because creating one compiles/instantiates the module and allocates its transfer buffers.
 */
import libsamplerate from '@alexanderolsen/libsamplerate-js';
import { isWholeUpsample, upsamplePcm16 } from './upsample.ts';

// The package is a UMD bundle: Node's ESM loader only exposes its default export.
const { create, ConverterType } = libsamplerate;

type SampleRateConverter = Awaited<ReturnType<typeof create>>;

const MONO = 1;
/** Fastest sinc: still band-limited (~97 dB SNR), ~3x cheaper than medium, which matters on 2 cores. */
const CONVERTER_QUALITY = ConverterType.SRC_SINC_FASTEST;

const convertersByRatePair = new Map<string, Promise<SampleRateConverter>>();

function converterFor(fromRate: number, toRate: number): Promise<SampleRateConverter> {
  const key = `${fromRate}->${toRate}`;
  let converter = convertersByRatePair.get(key);
  if (!converter) {
    converter = create(MONO, fromRate, toRate, { converterType: CONVERTER_QUALITY });
    // A failed load must not poison the cache for later callers.
    converter.catch(() => convertersByRatePair.delete(key));
    convertersByRatePair.set(key, converter);
  }
  return converter;
}

function assertRate(rate: number, label: string): void {
  if (!Number.isInteger(rate) || rate < 1 || rate > 192_000) {
    throw new RangeError(`${label} must be an integer between 1 and 192000 Hz, got ${rate}`);
  }
}

export function pcm16ToFloat32(pcm: Int16Array): Float32Array {
  const floats = new Float32Array(pcm.length);
  for (let i = 0; i < pcm.length; i++) floats[i] = pcm[i] / 32768;
  return floats;
}

export function float32ToPcm16(samples: Float32Array): Int16Array {
  const pcm = new Int16Array(samples.length);
  for (let i = 0; i < samples.length; i++) {
    const scaled = Math.round(samples[i] * 32768);
    pcm[i] = scaled > 32767 ? 32767 : scaled < -32768 ? -32768 : scaled;
  }
  return pcm;
}

/**
 * Resamples a whole, self-contained piece of audio (one sentence of TTS, one upload).
 * Equal rates return a copy without touching the WASM module; a whole-factor upsample never touches it either
 * (the same pass band and image rejection for a third of the CPU, actors/audio/upsample.ts).
 */
export async function resamplePcm16(pcm: Int16Array, fromRate: number, toRate: number): Promise<Int16Array> {
  assertRate(fromRate, 'fromRate');
  assertRate(toRate, 'toRate');
  if (fromRate === toRate) return pcm.slice();
  if (pcm.length === 0) return new Int16Array(0);
  if (isWholeUpsample(fromRate, toRate)) return upsamplePcm16(pcm, toRate / fromRate);
  const converter = await converterFor(fromRate, toRate);
  const resampled = converter.simple(pcm16ToFloat32(pcm));
  return float32ToPcm16(resampled);
}

/** Loads the converter for a rate pair ahead of time so the first real call pays no WASM start-up. */
export async function warmUpResampler(fromRate: number, toRate: number): Promise<void> {
  if (fromRate !== toRate && !isWholeUpsample(fromRate, toRate)) await converterFor(fromRate, toRate);
}
