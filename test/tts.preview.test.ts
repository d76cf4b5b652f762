import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseWav } from '../actors/audio/wav.ts';
import { json, post, startTestApp, tempDir, makeAvatarBundle, type TestApp } from './helpers/app.ts';
import { startElevenLabsFake, startOpenAiSpeechFake, startXttsFake, type FakeUpstream } from './fakes/tts-upstreams.ts';
import { rms } from './helpers/mp4.ts';

const ELEVEN_KEY = 'eleven-test-key';

/** Reads the 44-byte canonical header the service writes, field by field. */
function wavHeader(bytes: Buffer) {
  return {
    riff: bytes.toString('ascii', 0, 4),
    wave: bytes.toString('ascii', 8, 12),
    format: bytes.readUInt16LE(20),
    channels: bytes.readUInt16LE(22),
    sampleRate: bytes.readUInt32LE(24),
    bitsPerSample: bytes.readUInt16LE(34),
    dataBytes: bytes.readUInt32LE(40),
  };
}

describe('POST /tts/preview (spec 4.9, 7, 8)', () => {
  let t: TestApp;
  let eleven: FakeUpstream;
  let openai: FakeUpstream;
  let xtts: FakeUpstream;

  beforeAll(async () => {
    [eleven, openai, xtts] = await Promise.all([
      startElevenLabsFake({ apiKey: ELEVEN_KEY }),
      startOpenAiSpeechFake(),
      startXttsFake(),
    ]);
    const avatarsDir = await tempDir('preview-avatars-');
    await makeAvatarBundle(avatarsDir, 'card');
    t = await startTestApp({
      avatarsDir,
      env: {
        SERVICE_TTS_CLOUD_C_API_KEY: ELEVEN_KEY,
        SERVICE_TTS_CLOUD_C_BASE_URL: eleven.url,
        SERVICE_TTS_COMPAT_HTTP_BASE_URL: openai.url,
        SERVICE_TTS_LOCAL_CLONE_A_BASE_URL: xtts.url,
      },
    });
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all([eleven?.close(), openai?.close(), xtts?.close()]);
  });

  const preview = (body: unknown) => post(t.baseUrl, '/tts/preview', body);

  it('answers a 16 kHz mono 16-bit RIFF WAV with audible builtin speech, all sentences concatenated', async () => {
    const one = await preview({ text: 'Hello there.' });
    expect(one.status).toBe(200);
    expect(one.headers.get('content-type')).toMatch(/^audio\/wav/);
    const oneBytes = Buffer.from(await one.arrayBuffer());
    const header = wavHeader(oneBytes);
    expect(header).toMatchObject({
      riff: 'RIFF',
      wave: 'WAVE',
      format: 1,
      channels: 1,
      sampleRate: 16000,
      bitsPerSample: 16,
    });
    expect(header.dataBytes).toBe(oneBytes.length - 44);
    const onePcm = parseWav(oneBytes).pcm;
    expect(onePcm.length / 16000).toBeGreaterThan(0.3);
    expect(rms(onePcm)).toBeGreaterThan(300);

    const two = await preview({
      text: 'Hello there. How are you doing today?',
      tts_provider: 'builtin',
      voice: 'en-US-JennyNeural',
    });
    expect(two.status).toBe(200);
    const twoPcm = parseWav(Buffer.from(await two.arrayBuffer())).pcm;
    // Both sentences are in the answer, not just the first chunk.
    expect(twoPcm.length).toBeGreaterThan(onePcm.length * 1.5);
  });

  it('accepts exactly 1000 characters (counted as code points) and refuses 1001 with 400', async () => {
    const before = openai.requests.length;
    const thousand = 'word '.repeat(200);
    expect(thousand.length).toBe(1000);
    const ok = await preview({ text: thousand, tts_provider: 'compat_http' });
    expect(ok.status).toBe(200);
    expect(parseWav(Buffer.from(await ok.arrayBuffer())).pcm.length).toBeGreaterThan(0);
    expect(openai.requests.length).toBeGreaterThan(before);

    // 1000 astral characters are 2000 UTF-16 units but still 1000 characters.
    const emoji = await preview({ text: '😀'.repeat(1000), tts_provider: 'compat_http' });
    expect(emoji.status).toBe(200);

    const tooLong = await preview({ text: `${thousand}x`, tts_provider: 'compat_http' });
    expect(tooLong.status).toBe(400);
    expect((await json(tooLong)).detail).toMatch(/1000/);
  });

  it.each([
    [{ text: '' }, /empty/],
    [{ text: '   \n\t ' }, /empty/],
    [{}, /text/],
    [{ text: 42 }, /text/],
    [{ text: 'hi', tts_provider: 'acme' }, /tts_provider "acme" is unknown/],
    [{ text: 'hi', provider: 'acme' }, /unknown/],
    [{ text: 'hi', tts_provider: 'builtin', provider: 'compat_http' }, /disagree/],
    [{ text: 'hi', tts_provider: 'cloud_e' }, /not configured.*SERVICE_TTS_CLOUD_E/],
    [{ text: 'hi', tts_provider: 'cloud_a' }, /not configured/],
    [{ text: 'hi', voice: 'xx-XX-NobodyNeural' }, /unknown builtin voice/],
    [{ text: 'hi', tts_provider: 'cloud_c', voice: 'not-an-elevenlabs-id' }, /voice/],
    [{ text: 'hi', tts_provider: 'local_clone_a', voice: 'clone-0123456789abcdef' }, /no reference sample/],
    [{ text: 'hi', extra: true }, /additional/i],
  ])('answers 400 with {detail} for %j', async (body, pattern) => {
    const res = await preview(body);
    expect(res.status).toBe(400);
    expect((await json(res)).detail).toMatch(pattern);
  });

  it('answers 502 with the upstream text for upstream auth and server failures', async () => {
    eleven.scenario = 'unauthorized';
    try {
      const res = await preview({ text: 'Hello.', tts_provider: 'cloud_c' });
      expect(res.status).toBe(502);
      const { detail } = await json(res);
      expect(detail).toMatch(/401/);
      expect(detail).toMatch(/invalid_api_key|Invalid API key/i);
    } finally {
      eleven.scenario = 'ok';
    }
    xtts.scenario = 'server_error';
    try {
      const res = await preview({ text: 'Hello.', tts_provider: 'local_clone_a' });
      expect(res.status).toBe(502);
      expect((await json(res)).detail).toMatch(/Internal Server Error/);
    } finally {
      xtts.scenario = 'ok';
    }
    const healthy = await preview({ text: 'Hello.', tts_provider: 'cloud_c' });
    expect(healthy.status).toBe(200);
    expect(wavHeader(Buffer.from(await healthy.arrayBuffer())).sampleRate).toBe(16000);
  });

  it('passes voice and model through and takes the default provider, voice and model from the persona defaults', async () => {
    const explicit = await preview({ text: 'One.', tts_provider: 'compat_http', voice: 'nova', tts_model: 'tts-1-hd' });
    expect(explicit.status).toBe(200);
    expect(openai.requests.at(-1)!.json).toMatchObject({ input: 'One.', voice: 'nova', model: 'tts-1-hd' });

    const customized = await post(t.baseUrl, '/customize', {
      tts_provider: 'compat_http',
      tts_voice: 'echo',
      tts_model: 'tts-1',
    });
    expect(customized.status).toBe(200);
    try {
      const before = openai.requests.length;
      const byDefault = await preview({ text: 'Two.' });
      expect(byDefault.status).toBe(200);
      expect(openai.requests.length).toBe(before + 1);
      expect(openai.requests.at(-1)!.json).toMatchObject({ input: 'Two.', voice: 'echo', model: 'tts-1' });
      // Another provider does not inherit the default provider's voice.
      const other = await preview({ text: 'Three.', tts_provider: 'builtin' });
      expect(other.status).toBe(200);
    } finally {
      await post(t.baseUrl, '/customize', { tts_provider: 'builtin', tts_voice: null, tts_model: null });
    }
  });

  it('stops synthesising when the client goes away', async () => {
    openai.scenario = 'slow';
    openai.slowMs = 300;
    const text = 'Abandoned one. Abandoned two. Abandoned three.';
    const sentFor = () =>
      openai.requests.filter((r) => typeof r.json?.input === 'string' && r.json.input.startsWith('Abandoned')).length;
    try {
      const controller = new AbortController();
      const pending = fetch(`${t.baseUrl}/tts/preview`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ text, tts_provider: 'compat_http' }),
        signal: controller.signal,
      }).catch((error: Error) => error);
      const deadline = Date.now() + 5_000;
      while (sentFor() === 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10));
      controller.abort();
      expect(await pending).toBeInstanceOf(Error);
      // Long enough for the remaining two sentences had the preview carried on.
      await new Promise((resolve) => setTimeout(resolve, 1_200));
      expect(sentFor()).toBe(1);
    } finally {
      openai.scenario = 'ok';
      openai.slowMs = 2000;
    }
  });

  it('documents the route in the OpenAPI document', async () => {
    const doc = await json(await fetch(`${t.baseUrl}/openapi.json`));
    const route = doc.paths['/tts/preview'].post;
    expect(Object.keys(route.responses)).toEqual(expect.arrayContaining(['200', '400', '502']));
    expect(Object.keys(route.responses['200'].content)).toContain('audio/wav');
  });
});
