/**
 * Uploaded audio is held to UPLOAD_AUDIO_RULES at the edge: 16-bit integer WAV, one or two channels,
 * 8000-48000 Hz, a data chunk the file really holds, and a raw-PCM `sample_rate` in the same range.
 * Everything else is a 400 `{detail}` from speak_audio and transcribe, never a 5xx, and the decoder
 * itself turns an absurd header rate into InvalidAudioError rather than a resampler RangeError.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeAudioToPcm16, InvalidAudioError, UPLOAD_AUDIO_RULES } from '../actors/audio/decode.ts';
import { json, post, startTestApp, type TestApp } from './helpers/app.ts';
import { openSession, pcmBytes, postAudio, tone, type LiveSession } from './helpers/conversation.ts';

interface WavSpec {
  rate: number;
  bits?: number;
  channels?: number;
  /** Written into the data chunk's size field instead of the real size. */
  declaredDataBytes?: number;
  /** 1 = integer PCM, 3 = IEEE float. */
  formatTag?: number;
}

/** A WAV of 100 ms of a quiet ramp, header written field by field so any field can be wrong. */
function wav({ rate, bits = 16, channels = 1, declaredDataBytes, formatTag = 1 }: WavSpec): Buffer {
  const bytesPerSample = bits / 8;
  const frames = 1_600;
  const data = Buffer.alloc(frames * channels * bytesPerSample);
  for (let frame = 0; frame < frames; frame++) {
    for (let channel = 0; channel < channels; channel++) {
      const offset = (frame * channels + channel) * bytesPerSample;
      if (bits === 8) data.writeUInt8(128 + (frame % 64), offset);
      else if (bits === 24) data.writeIntLE((frame % 64) * 256, offset, 3);
      else if (bits === 32 && formatTag === 3) data.writeFloatLE((frame % 64) / 1024, offset);
      else data.writeInt16LE((frame % 64) * 16, offset);
    }
  }
  const header = Buffer.alloc(44);
  header.write('RIFF', 0, 'ascii');
  header.writeUInt32LE(36 + data.length, 4);
  header.write('WAVE', 8, 'ascii');
  header.write('fmt ', 12, 'ascii');
  header.writeUInt32LE(16, 16);
  header.writeUInt16LE(formatTag, 20);
  header.writeUInt16LE(channels, 22);
  header.writeUInt32LE(rate >>> 0, 24);
  header.writeUInt32LE(((rate >>> 0) * channels * bytesPerSample) >>> 0, 28);
  header.writeUInt16LE(channels * bytesPerSample, 32);
  header.writeUInt16LE(bits, 34);
  header.write('data', 36, 'ascii');
  header.writeUInt32LE(declaredDataBytes ?? data.length, 40);
  return Buffer.concat([header, data]);
}

const BAD_WAVS: Array<[string, Buffer, RegExp]> = [
  ['sample rate 0', wav({ rate: 0 }), /sample rate 0 Hz/],
  ['sample rate 1', wav({ rate: 1 }), /sample rate 1 Hz/],
  ['sample rate 7999', wav({ rate: 7_999 }), /sample rate 7999 Hz is outside 8000-48000/],
  ['sample rate 48001', wav({ rate: 48_001 }), /sample rate 48001 Hz is outside 8000-48000/],
  ['sample rate 2^32-1', wav({ rate: 2 ** 32 - 1 }), /sample rate 4294967295 Hz/],
  ['8-bit samples', wav({ rate: 16_000, bits: 8 }), /16-bit integer PCM; this one is 8-bit/],
  ['24-bit samples', wav({ rate: 16_000, bits: 24 }), /16-bit integer PCM; this one is 24-bit/],
  [
    '32-bit float samples',
    wav({ rate: 16_000, bits: 32, formatTag: 3 }),
    /16-bit integer PCM; this one is 32-bit float/,
  ],
  ['3 channels', wav({ rate: 16_000, channels: 3 }), /3 channels; at most 2/],
  ['a header cut off inside the fmt chunk', wav({ rate: 16_000 }).subarray(0, 30), /fmt chunk is truncated/],
  [
    'a data chunk longer than the file',
    wav({ rate: 16_000, declaredDataBytes: 1_000_000 }),
    /declares 1000000 bytes .* truncated/,
  ],
];

async function rejection(promise: Promise<unknown>): Promise<Error> {
  try {
    await promise;
  } catch (error) {
    return error as Error;
  }
  throw new Error('expected a rejection');
}

describe('decodeAudioToPcm16 with UPLOAD_AUDIO_RULES', () => {
  it.each(BAD_WAVS)('refuses a WAV with %s as InvalidAudioError naming the field', async (_label, bytes, message) => {
    const error = await rejection(decodeAudioToPcm16(bytes, { targetRate: 16_000, rules: UPLOAD_AUDIO_RULES }));
    expect(error).toBeInstanceOf(InvalidAudioError);
    expect(error.message).toMatch(message);
  });

  it('refuses raw PCM declared outside 8000-48000 Hz', async () => {
    const pcm = pcmBytes(tone(16_000, 50));
    for (const rawSampleRate of [7_999, 48_001]) {
      const error = await rejection(
        decodeAudioToPcm16(pcm, { targetRate: 16_000, rawSampleRate, rules: UPLOAD_AUDIO_RULES }),
      );
      expect(error).toBeInstanceOf(InvalidAudioError);
    }
  });

  it('accepts a 16-bit stereo WAV at 8 and 48 kHz and a streamed one whose data size is unknown (0 or 0xFFFFFFFF)', async () => {
    for (const spec of [
      { rate: 8_000, channels: 2 },
      { rate: 48_000 },
      { rate: 16_000, declaredDataBytes: 0 },
      { rate: 16_000, declaredDataBytes: 0xffffffff },
    ]) {
      const decoded = await decodeAudioToPcm16(wav(spec), { targetRate: 16_000, rules: UPLOAD_AUDIO_RULES });
      expect(decoded.format).toBe('wav');
      expect(Math.abs(decoded.pcm.length - Math.round((1_600 * 16_000) / spec.rate))).toBeLessThanOrEqual(2);
    }
  });

  it('without rules, a header rate of 1 Hz or 2^32-1 Hz is InvalidAudioError, never a resampler RangeError', async () => {
    for (const rate of [1, 2, 2 ** 32 - 1]) {
      const error = await rejection(decodeAudioToPcm16(wav({ rate }), { targetRate: 16_000 }));
      expect(error, `rate ${rate}`).toBeInstanceOf(InvalidAudioError);
    }
  });
});

describe('speak_audio and transcribe refuse audio outside the upload rules with 400 {detail}', () => {
  let t: TestApp;
  let s: LiveSession;

  beforeAll(async () => {
    // transcribe checks that a recognizer is configured before it decodes; refused audio never reaches it.
    t = await startTestApp({ env: { SERVICE_ASR_BASE_URL: 'http://127.0.0.1:9/v1' } });
    s = await openSession(t);
  });

  afterAll(async () => {
    s?.close();
    await t?.close();
  });

  it.each(['speak_audio', 'speak_rt_audio', 'transcribe'])(
    '%s: every bad WAV header → 400 naming the problem',
    async (route) => {
      for (const [label, bytes, message] of BAD_WAVS) {
        const res = await postAudio(t.baseUrl, `/sessions/${s.sessionId}/${route}`, bytes, {}, 'clip.wav');
        expect(res.status, label).toBe(400);
        expect((await json(res)).detail, label).toMatch(message);
      }
    },
  );

  it('speak_audio: a sample_rate field that is not a plain integer in 8000-48000 → 400', async () => {
    const pcm = pcmBytes(tone(16_000, 100));
    for (const sampleRate of ['0', '7999', '48001', '4294967295', '-16000', '16000.5', '1e4', '0x3e80', 'fast']) {
      const res = await postAudio(t.baseUrl, `/sessions/${s.sessionId}/speak_audio`, pcm, { sample_rate: sampleRate });
      expect(res.status, sampleRate).toBe(400);
      expect((await json(res)).detail, sampleRate).toMatch(/sample_rate must be an integer between 8000 and 48000/);
    }
  });

  it('speak_audio still plays a 16-bit stereo WAV at 44.1 kHz (200), and the session is idle again after interrupt', async () => {
    const from = s.sse.events.length;
    const res = await postAudio(
      t.baseUrl,
      `/sessions/${s.sessionId}/speak_audio`,
      wav({ rate: 44_100, channels: 2 }),
      {},
      'clip.wav',
    );
    expect(res.status, await res.clone().text()).toBe(200);
    await s.sse.waitFor((e) => e.type === 'status' && e.data.stage === 'speaking', 5_000, 'speaking', from);
    await post(t.baseUrl, `/sessions/${s.sessionId}/interrupt`);
    await s.sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', 5_000, 'idle after interrupt', from);
  });
});
