import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import wavefile from 'wavefile';
import { decodeAudioToPcm16, InvalidAudioError } from '../actors/audio/decode.ts';
import { encodeWav, parseWav } from '../actors/audio/wav.ts';

const ffmpegPath: string = createRequire(import.meta.url)('@ffmpeg-installer/ffmpeg').path;
const run = promisify(execFile);

function sine(frequencyHz: number, sampleRate: number, seconds: number, amplitude = 12_000): Int16Array {
  const pcm = new Int16Array(Math.round(sampleRate * seconds));
  for (let i = 0; i < pcm.length; i++)
    pcm[i] = Math.round(amplitude * Math.sin((2 * Math.PI * frequencyHz * i) / sampleRate));
  return pcm;
}

/** Frequency from rising zero crossings, skipping the edges where filters and codecs ramp. */
function estimateFrequency(pcm: Int16Array, sampleRate: number): number {
  const margin = Math.floor(pcm.length * 0.1);
  const crossings: number[] = [];
  for (let i = margin + 1; i < pcm.length - margin; i++) {
    if (pcm[i - 1] < 0 && pcm[i] >= 0) crossings.push(i - pcm[i] / (pcm[i] - pcm[i - 1]));
  }
  return ((crossings.length - 1) * sampleRate) / (crossings[crossings.length - 1] - crossings[0]);
}

function rms(pcm: Int16Array): number {
  let sum = 0;
  for (const sample of pcm) sum += sample * sample;
  return Math.sqrt(sum / pcm.length);
}

function pcmBytes(pcm: Int16Array): Buffer {
  return Buffer.from(pcm.buffer, pcm.byteOffset, pcm.byteLength);
}

async function rejection(promise: Promise<unknown>): Promise<Error> {
  try {
    await promise;
  } catch (error) {
    return error as Error;
  }
  throw new Error('expected a rejection');
}

let workDir: string;
beforeAll(async () => {
  workDir = await mkdtemp(path.join(tmpdir(), 'decode-test-'));
});
afterAll(async () => {
  await rm(workDir, { recursive: true, force: true });
});

/** Encodes a 440 Hz stereo sine to MP3 with the real ffmpeg binary. */
async function makeMp3(name: string, extraArgs: string[]): Promise<Buffer> {
  const wavPath = path.join(workDir, `${name}.wav`);
  const mp3Path = path.join(workDir, `${name}.mp3`);
  const source = new wavefile.WaveFile();
  const tone = Array.from(sine(440, 44_100, 1));
  source.fromScratch(2, 44_100, '16', [tone, tone]);
  await import('node:fs/promises').then((fs) => fs.writeFile(wavPath, source.toBuffer()));
  await run(ffmpegPath, [
    '-y',
    '-loglevel',
    'error',
    '-i',
    wavPath,
    '-codec:a',
    'libmp3lame',
    '-b:a',
    '96k',
    ...extraArgs,
    mp3Path,
  ]);
  return readFile(mp3Path);
}

describe('decodeAudioToPcm16', () => {
  it('decodes a 16-bit mono WAV at its own rate sample-exactly', async () => {
    const pcm = sine(440, 16_000, 0.5);
    const decoded = await decodeAudioToPcm16(encodeWav(pcm, 16_000), { targetRate: 16_000 });
    expect(decoded.format).toBe('wav');
    expect(decoded.sampleRate).toBe(16_000);
    expect(Array.from(decoded.pcm)).toEqual(Array.from(pcm));
  });

  it.each([
    ['8-bit stereo', '8', 2],
    ['24-bit stereo', '24', 2],
    ['32-bit int mono', '32', 1],
    ['32-bit float stereo', '32f', 2],
  ] as const)(
    'decodes a %s WAV written by wavefile, downmixed to mono and resampled',
    async (_label, depth, channels) => {
      const tone = sine(440, 22_050, 1);
      const scale = depth === '8' ? 1 / 256 : depth === '24' ? 256 : depth === '32' ? 65_536 : 1 / 32_768;
      const samples = Array.from(tone, (value) => (depth === '8' ? Math.round(value * scale) + 128 : value * scale));
      const file = new wavefile.WaveFile();
      file.fromScratch(channels, 22_050, depth, channels === 2 ? [samples, samples] : samples);

      const decoded = await decodeAudioToPcm16(Buffer.from(file.toBuffer()), { targetRate: 16_000 });

      expect(decoded.format).toBe('wav');
      expect(Math.abs(decoded.pcm.length - 16_000)).toBeLessThanOrEqual(2);
      expect(estimateFrequency(decoded.pcm, 16_000)).toBeCloseTo(440, 0);
      expect(rms(decoded.pcm) / rms(tone)).toBeGreaterThan(0.95);
      expect(rms(decoded.pcm) / rms(tone)).toBeLessThan(1.05);
    },
  );

  it('skips extra chunks (odd-sized, padded) before the data chunk and honours a 0 data size', () => {
    const pcm = sine(1_000, 8_000, 0.1);
    const plain = encodeWav(pcm, 8_000);
    const listChunk = Buffer.concat([
      Buffer.from('LIST'),
      Buffer.from([3, 0, 0, 0]),
      Buffer.from('abc'),
      Buffer.from([0]),
    ]);
    const data = Buffer.from(plain.subarray(36));
    data.writeUInt32LE(0, 4); // streamed writer that never patched the size
    const withExtras = Buffer.concat([plain.subarray(0, 36), listChunk, data]);
    const parsed = parseWav(withExtras);
    expect(parsed.sampleRate).toBe(8_000);
    expect(parsed.channels).toBe(1);
    expect(Array.from(parsed.pcm)).toEqual(Array.from(pcm));
  });

  it.each([8_000, 16_000, 48_000])('decodes raw PCM16 LE at %i Hz and resamples to 16 kHz', async (rate) => {
    const pcm = sine(440, rate, 1);
    const decoded = await decodeAudioToPcm16(pcmBytes(pcm), { targetRate: 16_000, rawSampleRate: rate });
    expect(decoded.format).toBe('pcm');
    expect(decoded.sampleRate).toBe(16_000);
    expect(Math.abs(decoded.pcm.length - 16_000)).toBeLessThanOrEqual(2);
    expect(estimateFrequency(decoded.pcm, 16_000)).toBeCloseTo(440, 0);
    expect(rms(decoded.pcm) / rms(pcm)).toBeGreaterThan(0.95);
  });

  it('treats headerless input as 16 kHz raw PCM by default', async () => {
    const pcm = sine(440, 16_000, 0.25);
    const decoded = await decodeAudioToPcm16(pcmBytes(pcm), { targetRate: 16_000 });
    expect(Array.from(decoded.pcm)).toEqual(Array.from(pcm));
  });

  it('decodes an MP3 (with ID3 tag) made by ffmpeg, downmixed and resampled', async () => {
    const mp3 = await makeMp3('tagged', []);
    expect(mp3.subarray(0, 3).toString('latin1')).toBe('ID3');
    const decoded = await decodeAudioToPcm16(mp3, { targetRate: 16_000 });
    expect(decoded.format).toBe('mp3');
    expect(decoded.sampleRate).toBe(16_000);
    expect(decoded.pcm.length).toBeGreaterThan(15_500);
    expect(decoded.pcm.length).toBeLessThan(17_000);
    expect(estimateFrequency(decoded.pcm, 16_000)).toBeCloseTo(440, 0);
    expect(rms(decoded.pcm)).toBeGreaterThan(12_000 * 0.707 * 0.9);
  });

  it('detects an MP3 without ID3 tag from its frame headers', async () => {
    const mp3 = await makeMp3('untagged', ['-id3v2_version', '0', '-write_xing', '0']);
    expect(mp3[0]).toBe(0xff);
    const decoded = await decodeAudioToPcm16(mp3, { targetRate: 16_000 });
    expect(decoded.format).toBe('mp3');
    expect(estimateFrequency(decoded.pcm, 16_000)).toBeCloseTo(440, 0);
  });

  it('rejects empty input and odd-length raw PCM with InvalidAudioError', async () => {
    expect(await rejection(decodeAudioToPcm16(Buffer.alloc(0), { targetRate: 16_000 }))).toBeInstanceOf(
      InvalidAudioError,
    );
    const odd = await rejection(decodeAudioToPcm16(Buffer.alloc(641, 1), { targetRate: 16_000 }));
    expect(odd).toBeInstanceOf(InvalidAudioError);
    expect(odd.message).toMatch(/odd byte count/);
  });

  it.each([
    [
      'truncated WAV header',
      Buffer.concat([Buffer.from('RIFF'), Buffer.alloc(4), Buffer.from('WAVEfmt '), Buffer.from([4, 0, 0, 0, 1, 0])]),
    ],
    [
      'ID3 tag followed by garbage',
      Buffer.concat([Buffer.from('ID3'), Buffer.from([3, 0, 0, 0, 0, 0, 10]), Buffer.alloc(4_000, 0x55)]),
    ],
    ['a JSON body', Buffer.from(JSON.stringify({ audio: 'not really audio, just some text sent by mistake' }))],
    ['an Ogg stream', Buffer.concat([Buffer.from('OggS'), Buffer.alloc(200)])],
    ['a PNG image', Buffer.concat([Buffer.from('\x89PNG\r\n\x1a\n', 'latin1'), Buffer.alloc(200)])],
    [
      'a WAV with an unsupported codec',
      (() => {
        const wav = encodeWav(sine(440, 8_000, 0.1), 8_000);
        wav.writeUInt16LE(0x0011, 20); // IMA ADPCM
        return wav;
      })(),
    ],
  ])('rejects %s with InvalidAudioError', async (_label, bytes) => {
    expect(await rejection(decodeAudioToPcm16(bytes, { targetRate: 16_000 }))).toBeInstanceOf(InvalidAudioError);
  });

  it('reads raw PCM whose first sample looks like a lone AAC or MP3 frame exactly as long as the input as raw PCM', async () => {
    // −3585 is FF F1 (an ADTS sync); its frame-length bits (3, then 0) say 24 bytes, the input's length (the
    // counterexample fast-check found). −7169 then 16 is FF E3 10 00: an MPEG-2.5 layer III header at 8 kbps and
    // 11025 Hz, whose frame is 52 bytes, the input's length.
    const adtsLike = Int16Array.from([-3585, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    const mp3Like = new Int16Array(26);
    mp3Like.set([-7169, 16]);
    for (const pcm of [adtsLike, mp3Like]) {
      const decoded = await decodeAudioToPcm16(pcmBytes(pcm), { targetRate: 16_000 });
      expect(decoded.format).toBe('pcm');
      expect(Array.from(decoded.pcm)).toEqual(Array.from(pcm));
    }
  });

  it('never mistakes real-looking raw PCM for MP3, even when it starts with frame-sync bytes', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.integer({ min: -32_768, max: 32_767 }), { minLength: 1, maxLength: 400 }),
        fc.constantFrom(-1, -7_169, -3_585, 0),
        async (samples, firstSample) => {
          const pcm = Int16Array.from([firstSample, ...samples]);
          const decoded = await decodeAudioToPcm16(pcmBytes(pcm), { targetRate: 16_000 });
          expect(decoded.format).toBe('pcm');
          expect(Array.from(decoded.pcm)).toEqual(Array.from(pcm));
        },
      ),
      { numRuns: 200 },
    );
  });

  it('honours an already-aborted signal', async () => {
    const controller = new AbortController();
    controller.abort();
    const error = await rejection(
      decodeAudioToPcm16(pcmBytes(sine(440, 16_000, 0.1)), { targetRate: 16_000, signal: controller.signal }),
    );
    expect(error.name).toBe('AbortError');
  });
});
