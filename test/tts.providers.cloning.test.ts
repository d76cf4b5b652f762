/**
 * `cloneVoice` end to end against the loopback upstreams: real ffmpeg conversion, real LevelDB
 * catalog, real upload directory served over HTTP for cloud_b. Each cloning provider gets its sample
 * the way its service takes it, the resulting voice_id synthesises through the registry, and failed
 * clones leave neither catalog entries nor files behind.
 */
import { once } from 'node:events';
import { createReadStream } from 'node:fs';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Level } from 'level';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { encodeWav, parseWav } from '../actors/audio/wav.ts';
import { createTtsRegistry, type TtsRegistry } from '../actors/tts/registry.ts';
import type { TtsChunk, TtsProvider, TtsProviderId } from '../actors/tts/types.ts';
import { ProviderNotConfiguredError, UpstreamError } from '../actors/upstream/errors.ts';
import { VoiceCatalog } from '../src/voices/catalog.ts';
import {
  catalogVoiceLookup,
  CloneValidationError,
  cloneVoice,
  deleteClonedVoice,
  type CloneVoiceInput,
} from '../src/voices/clone.ts';
import { VoiceUploads } from '../src/voices/uploads.ts';
import {
  startCosyVoiceServerFake,
  startDashscopeFake,
  startFalFake,
  startXttsFake,
  tone,
  type DashscopeFake,
  type FakeUpstream,
} from './fakes/tts-upstreams.ts';

const KEY = 'clone-key';
const ffmpegPath = (createRequire(import.meta.url)('@ffmpeg-installer/ffmpeg') as { path: string }).path;
/** 1 s of 44.1 kHz stereo WAV: the service must convert it to 24 kHz mono before any provider sees it. */
function stereo44kSample(): Buffer {
  const mono = tone(44100, 1, 300);
  const header = encodeWav(new Int16Array(0), 44100);
  const data = Buffer.alloc(mono.length * 4);
  for (let i = 0; i < mono.length; i++) {
    data.writeInt16LE(mono[i], i * 4);
    data.writeInt16LE(mono[i], i * 4 + 2);
  }
  header.writeUInt16LE(2, 22);
  header.writeUInt32LE(44100 * 4, 28);
  header.writeUInt16LE(4, 32);
  header.writeUInt32LE(data.length, 40);
  header.writeUInt32LE(36 + data.length, 4);
  return Buffer.concat([header, data]);
}

let root: string;
let voiceDir: string;
let uploadDir: string;
let db: Level<string, unknown>;
let catalog: VoiceCatalog;
let uploads: VoiceUploads;
let registry: TtsRegistry;
let dashscope: DashscopeFake;
let fal: FakeUpstream;
let xtts: FakeUpstream;
let cosy: FakeUpstream;
let publicServer: http.Server;
let publicBaseUrl: string;

beforeAll(async () => {
  root = await mkdtemp(path.join(tmpdir(), 'clone-'));
  voiceDir = path.join(root, 'voices');
  uploadDir = path.join(root, 'uploads');
  db = new Level<string, unknown>(path.join(root, 'db'), { valueEncoding: 'json' });
  await db.open();
  catalog = new VoiceCatalog(db.sublevel<string, unknown>('voices', { valueEncoding: 'json' }));
  uploads = new VoiceUploads({ dir: uploadDir });
  [dashscope, fal, xtts, cosy] = await Promise.all([
    startDashscopeFake({ apiKey: KEY }),
    startFalFake({ apiKey: KEY }),
    startXttsFake(),
    startCosyVoiceServerFake(),
  ]);
  // Stand-in for the service's `GET /voice-uploads/{token}` route.
  publicServer = http.createServer(async (req, res) => {
    const token = /^\/voice-uploads\/([^/]+)$/.exec(req.url ?? '')?.[1] ?? '';
    const file = await uploads.path(token);
    if (!file) return res.writeHead(404).end('not found');
    res.writeHead(200, { 'content-type': 'audio/wav' });
    createReadStream(file).pipe(res);
  });
  publicServer.listen(0, '127.0.0.1');
  await once(publicServer, 'listening');
  publicBaseUrl = `http://127.0.0.1:${(publicServer.address() as AddressInfo).port}`;
  const builtinStub: TtsProvider = {
    id: 'builtin',
    status: () => ({ configured: true }),
    synthesize: async function* () {},
  };
  registry = createTtsRegistry(
    {
      providers: {
        cloud_a: { baseUrl: dashscope.url, apiKey: KEY },
        cloud_b: { baseUrl: dashscope.url, apiKey: KEY },
        cloud_d: { baseUrl: fal.url, apiKey: KEY },
        local_clone_a: { baseUrl: xtts.url },
        local_clone_b: { baseUrl: cosy.url },
      },
      voiceDir,
      publicBaseUrl,
    },
    { voiceLookup: catalogVoiceLookup(catalog), builtin: builtinStub },
  );
});

afterAll(async () => {
  publicServer.close();
  await Promise.all([dashscope, fal, xtts, cosy].map((fake) => fake.close()));
  await db.close();
  await rm(root, { recursive: true, force: true });
});

beforeEach(() => {
  for (const fake of [dashscope, fal, xtts, cosy]) {
    fake.scenario = 'ok';
    fake.complaints.length = 0;
  }
});

const input = (overrides: Partial<CloneVoiceInput>): CloneVoiceInput => ({
  provider: 'cloud_a',
  targetModel: 'model-x',
  displayLabel: 'Narrator',
  audio: stereo44kSample(),
  registry,
  catalog,
  uploads,
  voiceDir,
  publicBaseUrl,
  signal: AbortSignal.timeout(20_000),
  ...overrides,
});

async function speak(provider: TtsProviderId, voice: string): Promise<number> {
  let samples = 0;
  for await (const chunk of registry.get(provider).synthesize({
    text: 'Testing the cloned voice now.',
    voice,
    sampleRate: 16000,
    signal: AbortSignal.timeout(10_000),
  }) as AsyncIterable<TtsChunk>) {
    samples += chunk.pcm.length;
  }
  return samples;
}

const filesIn = async (dir: string) => readdir(dir).catch(() => [] as string[]);

describe('cloneVoice', () => {
  it('cloud_a: sends the sample inline as a base64 data URI with preferred_name, then the voice speaks', async () => {
    const result = await cloneVoice(
      input({ provider: 'cloud_a', targetModel: 'qwen3-tts-vc-realtime', preferredName: 'anna_1' }),
    );
    expect(dashscope.complaints).toEqual([]);
    const request = dashscope.requests.at(-1)!;
    expect(request.json.model).toBe('qwen-voice-enrollment');
    expect(request.json.input).toMatchObject({
      action: 'create',
      target_model: 'qwen3-tts-vc-realtime',
      preferred_name: 'anna_1',
    });
    expect(result).toMatchObject({
      ok: true,
      provider: 'cloud_a',
      target_model: 'qwen3-tts-vc-realtime',
      display_label: 'Narrator',
    });
    expect(result.voice_id).toContain('anna_1');
    expect((await catalog.get(result.entry_id))?.voice_id).toBe(result.voice_id);
    expect(await speak('cloud_a', result.voice_id)).toBeGreaterThan(7000);
    // Without an explicit model, the cloned voice is used with the model it was enrolled for.
    expect(dashscope.requests.at(-1)!.json.model).toBe('qwen3-tts-vc-realtime');
  });

  it('cloud_b: stores the sample, the provider fetches it by public URL with the prefix, then the voice speaks', async () => {
    const before = new Set(await filesIn(uploadDir));
    const result = await cloneVoice(
      input({ provider: 'cloud_b', targetModel: 'cosyvoice-v2', prefix: 'myvoice', displayLabel: 'Narrator' }),
    );
    expect(dashscope.complaints).toEqual([]);
    const request = dashscope.requests.find((r) => r.json?.model === 'voice-enrollment')!;
    expect(request.json.input.url).toMatch(new RegExp(`^${publicBaseUrl}/voice-uploads/[0-9a-f]{32}$`));
    expect(request.json.input.prefix).toBe('myvoice');
    expect(result.voice_id).toMatch(/^cosyvoice-v2-myvoice-/);
    // Label de-dup: "Narrator" is taken by the cloud_a clone.
    expect(result.display_label).toMatch(/^Narrator \(\d{8}-\d{6}\)$/);
    // The sample stays available (for ~300 s) after an accepted clone.
    expect((await filesIn(uploadDir)).filter((f) => !before.has(f))).toHaveLength(1);
    expect(await speak('cloud_b', result.voice_id)).toBeGreaterThan(7000);
    const runTask = dashscope.socketMessages.at(-1)![0];
    expect(runTask.payload.parameters.voice).toBe(result.voice_id);
    expect(runTask.payload.model).toBe('cosyvoice-v2');
  });

  it('cloud_d: keeps the sample as a data URI in the catalog and sends it at synthesis time', async () => {
    const result = await cloneVoice(
      input({ provider: 'cloud_d', targetModel: 'fal-ai/f5-tts', displayLabel: 'Fal voice' }),
    );
    const entry = await catalog.get(result.entry_id);
    expect(entry?.reference_data_uri).toMatch(/^data:audio\/wav;base64,/);
    expect(fal.requests).toHaveLength(0);
    expect(await speak('cloud_d', result.voice_id)).toBeGreaterThan(7000);
    expect(fal.complaints).toEqual([]);
    expect(fal.requests[0].json.ref_audio_url).toBe(entry?.reference_data_uri);
  });

  for (const [provider, fake] of [
    ['local_clone_a', () => xtts],
    ['local_clone_b', () => cosy],
  ] as const) {
    it(`${provider}: writes the reference WAV into the voice directory and synthesises with it`, async () => {
      const result = await cloneVoice(input({ provider, targetModel: 'default', displayLabel: `${provider} voice` }));
      const entry = await catalog.get(result.entry_id);
      expect(entry?.reference_path).toBe(path.join(voiceDir, provider, `${result.voice_id}.wav`));
      expect(await filesIn(path.join(voiceDir, provider))).toContain(`${result.voice_id}.wav`);
      expect(await speak(provider, result.voice_id)).toBeGreaterThan(7000);
      expect(fake().complaints).toEqual([]);
      expect(await deleteClonedVoice({ id: result.entry_id, catalog, voiceDir })).toBe(true);
      expect(await filesIn(path.join(voiceDir, provider))).not.toContain(`${result.voice_id}.wav`);
      expect(await deleteClonedVoice({ id: result.entry_id, catalog, voiceDir })).toBe(false);
    });
  }

  it('accepts an M4A whose index sits at the end (the kind Safari records), via the temp-file retry', async () => {
    const m4a = await new Promise<Buffer>((resolve, reject) => {
      const ffmpeg = spawn(ffmpegPath, [
        '-hide_banner',
        '-loglevel',
        'error',
        '-f',
        'lavfi',
        '-i',
        'sine=frequency=300:duration=30',
        '-c:a',
        'aac',
        '-f',
        'mp4',
        path.join(root, 'sample.m4a'),
      ]);
      ffmpeg.on('close', (code) =>
        code === 0
          ? readFile(path.join(root, 'sample.m4a')).then(resolve, reject)
          : reject(new Error(`ffmpeg ${code}`)),
      );
    });
    expect(m4a.indexOf('moov')).toBeGreaterThan(m4a.indexOf('mdat'));
    const result = await cloneVoice(
      input({ provider: 'cloud_d', targetModel: 'fal-ai/f5-tts', displayLabel: 'M4A voice', audio: m4a }),
    );
    const uri = (await catalog.get(result.entry_id))!.reference_data_uri!;
    const wav = parseWav(Buffer.from(uri.split(',')[1], 'base64'));
    expect(wav.sampleRate).toBe(24000);
    expect(wav.pcm.length).toBeGreaterThan(29 * 24000);
  });

  it('upstream rejections become UpstreamError and leave no entry, upload or reference behind', async () => {
    const entriesBefore = (await catalog.list()).length;
    const uploadsBefore = await filesIn(uploadDir);
    dashscope.scenario = 'unauthorized';
    const a = await cloneVoice(input({ provider: 'cloud_a' })).catch((e) => e);
    expect(a).toBeInstanceOf(UpstreamError);
    expect(a.message).toContain('Invalid API-key');
    const b = await cloneVoice(input({ provider: 'cloud_b', targetModel: 'cosyvoice-v2' })).catch((e) => e);
    expect(b).toBeInstanceOf(UpstreamError);
    expect(await filesIn(uploadDir)).toEqual(uploadsBefore);
    xtts.scenario = 'server_error';
    const refsBefore = await filesIn(path.join(voiceDir, 'local_clone_a'));
    expect(await cloneVoice(input({ provider: 'local_clone_a' })).catch((e) => e)).toBeInstanceOf(UpstreamError);
    expect(await filesIn(path.join(voiceDir, 'local_clone_a'))).toEqual(refsBefore);
    expect((await catalog.list()).length).toBe(entriesBefore);
  });

  it('rejects bad requests with CloneValidationError before any upstream call', async () => {
    const calls = dashscope.requests.length;
    const cases: Array<Partial<CloneVoiceInput>> = [
      { provider: 'cloud_c' },
      { provider: 'builtin' },
      { audio: Buffer.alloc(255, 1) },
      { audio: Buffer.alloc(12 * 1024 * 1024 + 1, 1) },
      { audio: Buffer.from('this is definitely not audio at all, just some text '.repeat(20)) },
      { displayLabel: '  ' },
      { targetModel: '' },
      { provider: 'cloud_b', prefix: 'Has-Caps!' },
      { provider: 'cloud_a', prefix: 'abc' },
      { provider: 'cloud_a', preferredName: 'way-too-long-and-dashed-name' },
    ];
    for (const overrides of cases) {
      const error = await cloneVoice(input(overrides)).catch((e) => e);
      expect(error, JSON.stringify({ ...overrides, audio: undefined })).toBeInstanceOf(CloneValidationError);
    }
    expect(dashscope.requests.length).toBe(calls);
  });

  it('an unconfigured provider is refused with ProviderNotConfiguredError', async () => {
    const bare = createTtsRegistry({ providers: {}, voiceDir, publicBaseUrl });
    const error = await cloneVoice(input({ provider: 'cloud_a', registry: bare })).catch((e) => e);
    expect(error).toBeInstanceOf(ProviderNotConfiguredError);
    expect(error.message).toContain('SERVICE_TTS_CLOUD_A_API_KEY');
  });
});
