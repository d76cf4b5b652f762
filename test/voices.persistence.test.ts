import { existsSync } from 'node:fs';
import { mkdir, readdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { encodeWav, parseWav } from '../actors/audio/wav.ts';
import { json, post, startTestApp, tempDir, type TestApp } from './helpers/app.ts';
import { startFalFake, startXttsFake, tone, type FakeUpstream } from './fakes/tts-upstreams.ts';

const FAL_KEY = 'fal-test-key';
const SAMPLE = encodeWav(tone(16000, 1, 200), 16000);

describe('voice catalog persistence across a restart (spec 2.4)', () => {
  const running: TestApp[] = [];
  const fakes: FakeUpstream[] = [];
  afterAll(async () => {
    for (const app of running) await app.close();
    await Promise.all(fakes.map((fake) => fake.close()));
  });

  it('keeps entries with the same ids, keeps them usable, never reuses ids and sweeps expired uploads at start', async () => {
    const [xtts, fal] = await Promise.all([startXttsFake(), startFalFake({ apiKey: FAL_KEY })]);
    fakes.push(xtts, fal);
    const dataDir = await tempDir('voices-persist-data-');
    const avatarsDir = await tempDir('voices-persist-avatars-');
    const env = {
      SERVICE_TTS_LOCAL_CLONE_A_BASE_URL: xtts.url,
      SERVICE_TTS_CLOUD_D_API_KEY: FAL_KEY,
      SERVICE_TTS_CLOUD_D_BASE_URL: fal.url,
    };
    const clone = (app: TestApp, fields: Record<string, string>) => {
      const form = new FormData();
      for (const [name, value] of Object.entries(fields)) form.append(name, value);
      form.append('audio', new Blob([new Uint8Array(SAMPLE)], { type: 'audio/wav' }), 'sample.wav');
      return fetch(`${app.baseUrl}/voices/clone`, { method: 'POST', body: form });
    };

    const first = await startTestApp({ dataDir, avatarsDir, env });
    running.push(first);
    const local = await json(
      await clone(first, { provider: 'local_clone_a', target_model: 'en', display_label: 'Local' }),
    );
    const cloud = await json(
      await clone(first, { provider: 'cloud_d', target_model: 'fal-ai/f5-tts', display_label: 'Cloud' }),
    );
    const doomed = await json(
      await clone(first, { provider: 'local_clone_a', target_model: 'en', display_label: 'Doomed' }),
    );
    expect([local.ok, cloud.ok, doomed.ok]).toEqual([true, true, true]);
    expect((await fetch(`${first.baseUrl}/voices/${doomed.entry_id}`, { method: 'DELETE' })).status).toBe(200);
    const before = await json(await fetch(`${first.baseUrl}/voices`));
    expect(before.items.map((item: { id: number }) => item.id)).toEqual([local.entry_id, cloud.entry_id]);
    await first.close();

    // A sample that expired while the service was down, and one still live.
    const uploadsDir = path.join(dataDir, 'voice-uploads');
    await mkdir(uploadsDir, { recursive: true });
    const expiredName = `${'a'.repeat(32)}.${Date.now() - 1000}.wav`;
    const liveToken = 'b'.repeat(32);
    await writeFile(path.join(uploadsDir, expiredName), encodeWav(tone(24000, 0.1), 24000));
    await writeFile(
      path.join(uploadsDir, `${liveToken}.${Date.now() + 300_000}.wav`),
      encodeWav(tone(24000, 0.1), 24000),
    );

    const second = await startTestApp({ dataDir, avatarsDir, env });
    running.push(second);
    const after = await json(await fetch(`${second.baseUrl}/voices`));
    expect(after).toEqual(before);
    expect(existsSync(path.join(uploadsDir, expiredName))).toBe(false);
    expect((await fetch(`${second.baseUrl}/voice-uploads/${'a'.repeat(32)}`)).status).toBe(404);
    expect((await fetch(`${second.baseUrl}/voice-uploads/${liveToken}`)).status).toBe(200);
    expect(await readdir(uploadsDir)).toHaveLength(1);

    // Both voices still synthesise after the restart: the reference WAV and the data URI survived.
    for (const [provider, voice] of [
      ['local_clone_a', local.voice_id],
      ['cloud_d', cloud.voice_id],
    ]) {
      const res = await post(second.baseUrl, '/tts/preview', { text: 'Still here.', tts_provider: provider, voice });
      expect(res.status, `${provider}: ${res.status}`).toBe(200);
      expect(parseWav(Buffer.from(await res.arrayBuffer())).pcm.length).toBeGreaterThan(0);
    }
    expect(xtts.complaints).toEqual([]);
    expect(fal.complaints).toEqual([]);

    // Ids are never reused, not even the deleted one.
    const next = await json(
      await clone(second, { provider: 'local_clone_a', target_model: 'en', display_label: 'Next' }),
    );
    expect(next.entry_id).toBe(doomed.entry_id + 1);
  }, 30_000);
});
