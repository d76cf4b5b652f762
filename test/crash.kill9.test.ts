/**
 * kill -9 at the worst moments, then a restart on the same directories. The real service runs as a child
 * process (test/helpers/service-process.ts) and is SIGKILLed while (a) a voice clone is in flight, (b) a
 * custom avatar upload is in flight (a photo; a clip while ffmpeg decodes it and its face is tracked), (c) an
 * offline bundle job (and a recording) is running. After each
 * restart the catalogs must be consistent (every record's files exist, no file without a record), no temp
 * file or directory may be left, and the interrupted job must be `failed` with `interrupted by restart`
 * with a progress that never went backwards for a client polling across the restart.
 *
 * "In flight" is hit deterministically: the kill is sent when the temp file of the step under test appears
 * (a reference WAV whose catalog record is not written yet, a `.tmp-*` bundle, a conversion temp dir), or
 * after a short delay; each scenario loops over a few such moments.
 */
import { execFile, spawn } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { encodeWav } from '../actors/audio/wav.ts';
import { FFMPEG_PATH } from '../src/recording/encoder.ts';
import { startDashscopeFake, startXttsFake, tone, type FakeUpstream } from './fakes/tts-upstreams.ts';
import { uploadClip } from './helpers/clip-avatar.ts';
import { landscapeMp4 } from './helpers/clips.ts';
import { PORTRAIT_FIXTURE } from './helpers/fixtures.ts';
import { startServiceProcess, type ServiceProcess } from './helpers/service-process.ts';

const LOCAL_CLONE_PROVIDERS = ['local_clone_a', 'local_clone_b'];
/** How often the test looks for the temp file that marks "in flight"; the windows are tens of ms wide. */
const PROBE_EVERY_MS = 2;
/** A step that never reaches its temp file within this is a broken scenario, not a slow machine. */
const TRIGGER_TIMEOUT_MS = 20_000;
/**
 * A clip's steps come after the face detector's start in a fresh service (its models load, then a full search:
 * seconds idle, tens of seconds on a loaded half-speed host).
 */
const CLIP_STEP_TIMEOUT_MS = 120_000;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const run = promisify(execFile);

async function listDir(dir: string): Promise<string[]> {
  try {
    return (await fs.readdir(dir)).sort();
  } catch {
    return [];
  }
}

async function exists(file: string): Promise<boolean> {
  return fs.access(file).then(
    () => true,
    () => false,
  );
}

/** Resolves once `probe` is truthy; polls fast so short windows are hit. */
async function when(probe: () => Promise<boolean>, what: string, timeoutMs = TRIGGER_TIMEOUT_MS): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await probe())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(PROBE_EVERY_MS);
  }
}

/** A trigger armed when the request is fired: true once `ms` have passed. */
function after(ms: number): () => () => Promise<boolean> {
  return () => {
    const at = Date.now() + ms;
    return async () => Date.now() >= at;
  };
}

async function getJson(base: string, route: string): Promise<any> {
  const res = await fetch(`${base}${route}`);
  expect(res.status, `GET ${route}`).toBe(200);
  return res.json();
}

function postJson(base: string, route: string, body?: unknown): Promise<Response> {
  return fetch(`${base}${route}`, {
    method: 'POST',
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
}

/** Fires a request whose answer may never come (the service is killed under it); errors are expected. */
function fireAndForget(request: Promise<Response>): void {
  request.then((res) => res.body?.cancel()).catch(() => undefined);
}

interface Dirs {
  dataDir: string;
  avatarsDir: string;
  /** TMPDIR of every incarnation, so temp dirs a killed one left are visible to the next. */
  tmpDir: string;
}

const madeDirs: string[] = [];
async function freshDirs(): Promise<Dirs> {
  const mk = (prefix: string) => fs.mkdtemp(path.join(os.tmpdir(), prefix));
  const [dataDir, avatarsDir, tmpDir] = await Promise.all([mk('kill9-data-'), mk('kill9-avatars-'), mk('kill9-tmp-')]);
  madeDirs.push(dataDir, avatarsDir, tmpDir);
  const repoAvatars = path.resolve(import.meta.dirname, '..', 'avatars');
  await fs.cp(repoAvatars, avatarsDir, {
    recursive: true,
    filter: (src) => src === repoAvatars || !path.basename(src).startsWith('.'),
  });
  return { dataDir, avatarsDir, tmpDir };
}

const running: ServiceProcess[] = [];
async function start(dirs: Dirs, env: Record<string, string> = {}): Promise<ServiceProcess> {
  // info level: the start-up sweep reports what it removed in one line.
  const service = await startServiceProcess({
    dataDir: dirs.dataDir,
    avatarsDir: dirs.avatarsDir,
    env: { TMPDIR: dirs.tmpDir, SERVICE_LOG_LEVEL: 'info', ...env },
  });
  running.push(service);
  return service;
}

/** The counts of the start-up sweep's log line: proof that the restart removed the leftovers, not that none were made. */
function sweepReport(service: ServiceProcess): Record<string, number> {
  const line = service
    .logs()
    .split('\n')
    .find((text) => text.includes('"start-up sweep complete"'));
  if (!line) throw new Error(`no start-up sweep line in the logs:\n${service.logs()}`);
  return JSON.parse(line);
}

afterAll(async () => {
  await Promise.all(running.map((service) => service.kill()));
  await Promise.all(madeDirs.map((dir) => fs.rm(dir, { recursive: true, force: true })));
});

/**
 * The invariants a restart must restore, checked against what the restarted service reports:
 * voice catalog ↔ reference WAVs, avatar list ↔ bundle directories, complete jobs ↔ MP4s and their captions,
 * nothing temporary.
 */
async function expectConsistent(service: ServiceProcess, dirs: Dirs, completeJobIds: string[] = []): Promise<void> {
  const { items } = await getJson(service.baseUrl, '/voices');
  for (const provider of LOCAL_CLONE_PROVIDERS) {
    const expected = items
      .filter((entry: any) => entry.provider === provider)
      .map((entry: any) => `${entry.voice_id}.wav`)
      .sort();
    expect(await listDir(path.join(dirs.dataDir, 'voices', provider)), `${provider} reference WAVs`).toEqual(expected);
  }
  // Clone samples for cloud_b: only committed ones (`<token>.<expiry>.wav`) may survive a restart.
  for (const name of await listDir(path.join(dirs.dataDir, 'voice-uploads')))
    expect(name).toMatch(/^[0-9a-f]{32}\.\d+\.wav$/);

  const listed: string[] = (await getJson(service.baseUrl, '/avatars')).map((avatar: any) => avatar.id).sort();
  expect(await listDir(dirs.avatarsDir), 'avatar directories').toEqual(listed);
  for (const id of listed) {
    for (const file of ['manifest.json', 'preview.png', path.join('frames', 'frame_00000.png')]) {
      expect(await exists(path.join(dirs.avatarsDir, id, file)), `${id}/${file}`).toBe(true);
    }
  }

  expect(await listDir(path.join(dirs.dataDir, 'bundles')), 'offline bundle files').toEqual(
    // A complete job keeps its MP4 and the WebVTT captions written beside it; an interrupted job keeps neither.
    completeJobIds.flatMap((id) => [`${id}.mp4`, `${id}.vtt`]).sort(),
  );
  for (const session of await listDir(path.join(dirs.dataDir, 'recordings'))) {
    expect((await listDir(path.join(dirs.dataDir, 'recordings', session))).sort(), 'a kept recording').toEqual([
      'recording.json',
      'recording.mp4',
    ]);
  }
  expect(
    (await listDir(dirs.tmpDir)).filter((name) => name.startsWith('clone-sample-')),
    'conversion temp dirs',
  ).toEqual([]);
}

/** A 5 s AAC-in-MP4 sample with its index at the end: ffmpeg cannot read it from a pipe, so the service converts it from a temp file. */
async function m4aSample(dir: string): Promise<Buffer> {
  const file = path.join(dir, 'sample.m4a');
  await new Promise<void>((resolve, reject) => {
    const child = spawn(FFMPEG_PATH, [
      '-hide_banner',
      '-loglevel',
      'error',
      '-y',
      '-f',
      'lavfi',
      '-i',
      'sine=frequency=220:duration=5',
      '-c:a',
      'aac',
      '-f',
      'mp4',
      file,
    ]);
    child.on('error', reject);
    child.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`ffmpeg exit ${code}`))));
  });
  return fs.readFile(file);
}

function cloneForm(audio: Buffer, label: string, filename = 'sample.wav', provider = 'local_clone_a'): FormData {
  const form = new FormData();
  form.append('provider', provider);
  form.append('target_model', provider === 'cloud_b' ? 'cosyvoice-v2' : 'en');
  form.append('display_label', label);
  if (provider === 'cloud_b') form.append('prefix', 'crash');
  form.append('audio', new Blob([new Uint8Array(audio)]), filename);
  return form;
}

describe('kill -9 during a voice clone', () => {
  const fakes: FakeUpstream[] = [];
  afterAll(async () => {
    await Promise.all(fakes.map((fake) => fake.close()));
  });

  it('leaves no orphan reference WAV, clone sample, temp WAV or conversion temp dir after a restart; finished clones survive', async () => {
    const [xtts, dashscope, dirs] = await Promise.all([
      startXttsFake(),
      startDashscopeFake({ apiKey: 'crash-key' }),
      freshDirs(),
    ]);
    fakes.push(xtts, dashscope);
    // cloud_b fetches its sample from the service (SERVICE_PUBLIC_BASE_URL defaults to the service's own port).
    const env = {
      SERVICE_TTS_LOCAL_CLONE_A_BASE_URL: xtts.url,
      SERVICE_TTS_CLOUD_B_BASE_URL: dashscope.url,
      SERVICE_TTS_CLOUD_B_API_KEY: 'crash-key',
    };
    const wav = encodeWav(tone(16000, 1, 200), 16000);
    const referenceDir = path.join(dirs.dataDir, 'voices', 'local_clone_a');
    const uploadsDir = path.join(dirs.dataDir, 'voice-uploads');

    // The m4a sample is made (ffmpeg) while the service starts.
    const [first, m4a] = await Promise.all([start(dirs, env), m4aSample(dirs.dataDir)]);
    let service = first;
    const kept = await fetch(`${service.baseUrl}/voices/clone`, { method: 'POST', body: cloneForm(wav, 'Kept') });
    expect(kept.status).toBe(200);
    const keptEntry = await kept.json();
    const keptCloud = await fetch(`${service.baseUrl}/voices/clone`, {
      method: 'POST',
      body: cloneForm(wav, 'Kept cloud', 'k.wav', 'cloud_b'),
    });
    expect(keptCloud.status).toBe(200);
    const keptCloudEntry = await keptCloud.json();
    // The accepted clone's sample stays downloadable until it expires, restarts included.
    const keptSamples = await listDir(uploadsDir);
    expect(keptSamples).toHaveLength(1);

    // The engines never answer: the reference WAV (or the clone sample) is on disk, the catalog record not yet.
    for (const fake of [xtts, dashscope]) {
      fake.scenario = 'slow';
      fake.slowMs = 600_000;
    }
    type Report = Record<string, number>;
    const moments: Array<{
      what: string;
      audio: Buffer;
      filename: string;
      provider?: string;
      arm: () => () => Promise<boolean>;
      swept: (report: Report) => boolean;
    }> = [
      {
        what: 'reference WAV written, catalog record not',
        audio: wav,
        filename: 'a.wav',
        arm: () => async () => (await listDir(referenceDir)).length > 1,
        swept: (report) => report.orphanReferenceWavs + report.temporaryReferenceWavs === 1,
      },
      {
        what: 'conversion temp dir present',
        audio: m4a,
        filename: 'a.m4a',
        arm: () => async () => (await listDir(dirs.tmpDir)).some((name) => name.startsWith('clone-sample-')),
        swept: (report) => report.conversionDirs === 1,
      },
      {
        what: 'cloud_b sample stored, catalog record not',
        audio: wav,
        filename: 'b.wav',
        provider: 'cloud_b',
        arm: () => async () => (await listDir(uploadsDir)).some((name) => name.includes('.pending.')),
        swept: (report) => report.uploadSamples === 1,
      },
      { what: '30 ms after the request', audio: wav, filename: 'a.wav', arm: after(30), swept: () => true },
    ];
    for (const moment of moments) {
      fireAndForget(
        fetch(`${service.baseUrl}/voices/clone`, {
          method: 'POST',
          body: cloneForm(moment.audio, 'Doomed', moment.filename, moment.provider),
        }),
      );
      await when(moment.arm(), moment.what);
      await service.kill();
      service = await start(dirs, env);
      expect(moment.swept(sweepReport(service)), `${moment.what}: ${JSON.stringify(sweepReport(service))}`).toBe(true);
      await expectConsistent(service, dirs);
      const { items } = await getJson(service.baseUrl, '/voices');
      expect(
        items.map((entry: any) => entry.id),
        moment.what,
      ).toEqual([keptEntry.entry_id, keptCloudEntry.entry_id]);
      expect(await listDir(uploadsDir), moment.what).toEqual(keptSamples);
    }
    expect(await exists(path.join(referenceDir, `${keptEntry.voice_id}.wav`))).toBe(true);
    await service.stop();
  }, 240_000);
});

describe('kill -9 during a custom avatar upload', () => {
  it('leaves no .tmp-* or .trash-* bundle directory after a restart; finished avatars survive', async () => {
    const dirs = await freshDirs();
    const portrait = await fs.readFile(PORTRAIT_FIXTURE);
    const upload = (base: string, name: string) => {
      const form = new FormData();
      form.append('name', name);
      form.append('base_avatar_id', 'astronaut');
      form.append('image', new Blob([new Uint8Array(portrait)], { type: 'image/png' }), 'portrait.png');
      return fetch(`${base}/avatars/custom`, { method: 'POST', body: form });
    };

    let service = await start(dirs);
    const kept = await upload(service.baseUrl, 'Kept');
    expect(kept.status).toBe(200);
    const keptId = (await kept.json()).id;

    const hidden = async () => (await listDir(dirs.avatarsDir)).some((name) => name.startsWith('.tmp-'));
    const moments: Array<{ what: string; arm: () => () => Promise<boolean> }> = [
      { what: '.tmp-* bundle directory present', arm: () => hidden },
      { what: '.tmp-* bundle present for 100 ms', arm: () => async () => (await hidden()) && (await sleep(100), true) },
      { what: '20 ms after the request', arm: after(20) },
    ];
    for (const moment of moments) {
      fireAndForget(upload(service.baseUrl, 'Doomed'));
      await when(moment.arm(), moment.what);
      await service.kill();
      // A delete that a crash cut between its rename and its removal leaves a `.trash-*` directory behind.
      await fs.cp(path.join(dirs.avatarsDir, keptId), path.join(dirs.avatarsDir, `.trash-${keptId}-0badf00d`), {
        recursive: true,
      });
      const hiddenLeftovers = (await listDir(dirs.avatarsDir)).filter((name) => name.startsWith('.')).length;
      service = await start(dirs);
      expect(sweepReport(service).avatarDirs, moment.what).toBe(hiddenLeftovers);
      await expectConsistent(service, dirs);
      const customs = (await getJson(service.baseUrl, '/avatars'))
        .filter((avatar: any) => avatar.is_custom)
        .map((avatar: any) => avatar.id);
      // The doomed upload either finished just before the kill (a complete bundle) or left nothing.
      expect(customs, moment.what).toContain(keptId);
      for (const id of customs.filter((id: string) => id !== keptId)) {
        expect((await fetch(`${service.baseUrl}/avatars/${id}`, { method: 'DELETE' })).status).toBe(200);
      }
    }
    await service.stop();
  }, 240_000);
});

describe('kill -9 while a clip is being made into a video avatar', () => {
  it(
    'leaves no .tmp-* bundle, half avatar or running ffmpeg after a restart, at any step of the decode and the face track; a finished video avatar survives whole',
    async () => {
      const dirs = await freshDirs();
      // The clip is encoded (ffmpeg) while the service starts.
      const [first, clip] = await Promise.all([
        start(dirs),
        landscapeMp4(dirs.dataDir, 3).then((file) => fs.readFile(file)),
      ]);
      let service = first;
      const kept = await uploadClip(service.baseUrl, clip, 'Kept clip');
      expect(kept.status).toBe(200);
      const keptId = (await kept.json()).id;

      const building = async () => (await listDir(dirs.avatarsDir)).filter((name) => name.startsWith('.tmp-'));
      const inBuilding = async (...parts: string[]): Promise<string[]> => {
        const [dir] = await building();
        return dir ? listDir(path.join(dirs.avatarsDir, dir, ...parts)) : [];
      };
      const framesBuilt = async () => (await inBuilding('frames')).length;
      const moments: Array<{ what: string; arm: () => () => Promise<boolean> }> = [
        {
          what: 'the clip written, its header or first face being read',
          arm: () => async () => (await inBuilding()).includes('upload.video') && (await framesBuilt()) === 0,
        },
        { what: 'ffmpeg decoding, the first faces being tracked', arm: () => async () => (await framesBuilt()) >= 5 },
        { what: 'most loop frames written, the track not yet', arm: () => async () => (await framesBuilt()) >= 60 },
      ];
      for (const moment of moments) {
        fireAndForget(uploadClip(service.baseUrl, clip, 'Doomed clip'));
        await when(moment.arm(), moment.what, CLIP_STEP_TIMEOUT_MS);
        await service.kill();
        const hiddenLeftovers = (await listDir(dirs.avatarsDir)).filter((name) => name.startsWith('.')).length;
        service = await start(dirs);
        expect(sweepReport(service).avatarDirs, moment.what).toBe(hiddenLeftovers);
        await expectConsistent(service, dirs);
        // No decoder outlived the service (it would go on writing frames into a directory the sweep removed).
        expect(await ffmpegsWorkingIn(dirs.avatarsDir), moment.what).toEqual([]);
        const customs = (await getJson(service.baseUrl, '/avatars'))
          .filter((avatar: any) => avatar.is_custom)
          .map((avatar: any) => avatar.id);
        expect(customs, moment.what).toContain(keptId);
        // Every video avatar listed is whole: each loop frame and the face track (the doomed one, had it finished).
        for (const id of customs) await expectWholeVideoAvatar(path.join(dirs.avatarsDir, id));
        for (const id of customs.filter((id: string) => id !== keptId)) {
          expect((await fetch(`${service.baseUrl}/avatars/${id}`, { method: 'DELETE' })).status).toBe(200);
        }
      }
      await service.stop();
    },
    4 * CLIP_STEP_TIMEOUT_MS + 240_000,
  );
});

/** ffmpeg processes (anyone's children) whose command line names a path under `dir`. */
async function ffmpegsWorkingIn(dir: string): Promise<string[]> {
  const { stdout } = await run('ps', ['-eo', 'args=']);
  return stdout.split('\n').filter((line) => line.includes('ffmpeg') && line.includes(dir));
}

/** A video avatar's bundle holds every loop frame its manifest counts, and its face track. */
async function expectWholeVideoAvatar(bundle: string): Promise<void> {
  const clip = JSON.parse(await fs.readFile(path.join(bundle, 'manifest.json'), 'utf8')).metadata.clip;
  expect(clip, bundle).toBeDefined();
  const frames = await listDir(path.join(bundle, 'frames'));
  expect(frames).toHaveLength(clip.frame_count);
  expect(JSON.parse(await fs.readFile(path.join(bundle, clip.track_file), 'utf8'))).toHaveLength(clip.frame_count);
}

describe('kill -9 while an offline job and a recording are running', () => {
  it('fails the job with "interrupted by restart", its progress never going backwards for a poller; no partial file is left', async () => {
    const dirs = await freshDirs();
    let service = await start(dirs);
    const created = await postJson(service.baseUrl, '/sessions', { avatar_id: 'astronaut', model: 'mock' });
    expect(created.status).toBe(200);
    const sessionId = (await created.json()).session_id;
    const bundle = `/sessions/${sessionId}/rt-offline-bundle`;
    const pcm = (ms: number) => Buffer.from(tone(16000, ms / 1000, 300).buffer).toString('base64');

    const short = await (await postJson(service.baseUrl, bundle, { segments: [{ audio_base64: pcm(400) }] })).json();
    await when(
      async () => (await getJson(service.baseUrl, `${bundle}/${short.job_id}`)).status === 'complete',
      'the short job to complete',
      60_000,
    );

    expect((await postJson(service.baseUrl, `/sessions/${sessionId}/start`)).status).toBe(200);
    expect((await postJson(service.baseUrl, `/sessions/${sessionId}/rt-recording/start`)).status).toBe(200);
    // Long enough (≈ 60 s of video) that the kill lands mid-render.
    const segments = Array.from({ length: 6 }, () => ({ audio_base64: pcm(1000), pause_after_ms: 9000 }));
    const long = await (await postJson(service.baseUrl, bundle, { segments })).json();

    // A client polling the job across the crash and the restart.
    const seen: Array<{ status: string; progress: number; error: string | null }> = [];
    let base: string | null = service.baseUrl;
    let polling = true;
    const poller = (async () => {
      while (polling) {
        const at = base;
        if (at) {
          try {
            const res = await fetch(`${at}${bundle}/${long.job_id}`, { signal: AbortSignal.timeout(2_000) });
            if (res.ok) seen.push(await res.json());
            else await res.body?.cancel();
          } catch {
            // the service is down between kill and restart
          }
        }
        await sleep(25);
      }
    })();

    await when(
      async () => seen.some((job) => job.status === 'running' && job.progress >= 0.2),
      'the long job to be well under way',
      60_000,
    );
    const partialRecording = path.join(dirs.dataDir, 'recordings', sessionId, 'recording.partial.mp4');
    await when(
      async () => ((await fs.stat(partialRecording).catch(() => null))?.size ?? 0) > 0,
      'recording bytes on disk',
    );
    const beforeKill = seen.length;
    await service.kill();
    base = null;
    service = await start(dirs);
    base = service.baseUrl;
    // The job's partial MP4 and the recording's partial MP4 were on disk at the kill.
    expect(sweepReport(service)).toMatchObject({ interruptedJobs: 1, bundleFiles: 1, recordingFiles: 1 });
    await when(async () => seen.length > beforeKill + 2, 'polls after the restart');
    polling = false;
    await poller;

    for (let i = 1; i < seen.length; i++) {
      expect(seen[i].progress, `poll ${i}: ${seen[i - 1].progress} → ${seen[i].progress}`).toBeGreaterThanOrEqual(
        seen[i - 1].progress,
      );
    }
    expect(seen[seen.length - 1]).toMatchObject({ status: 'failed', error: 'interrupted by restart' });
    expect(seen[beforeKill - 1].progress).toBeGreaterThanOrEqual(0.2);
    expect(await getJson(service.baseUrl, `${bundle}/${short.job_id}`)).toMatchObject({
      status: 'complete',
      progress: 1,
    });
    expect((await fetch(`${service.baseUrl}${bundle}/${short.job_id}/download`)).status).toBe(200);
    expect((await fetch(`${service.baseUrl}${bundle}/${long.job_id}/download`)).status).toBe(409);
    expect(await getJson(service.baseUrl, `/sessions/${sessionId}/rt-recording`)).toMatchObject({ state: 'idle' });
    await expectConsistent(service, dirs, [short.job_id]);
    expect(await listDir(path.join(dirs.dataDir, 'recordings'))).toEqual([]);
    await service.stop();
  }, 240_000);
});
