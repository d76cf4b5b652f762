/**
 * Clone-sample uploads on a real temp directory with an injected clock: token format, lookups,
 * expiry (also across a "restart" = new instance), sweeping removes files, malformed tokens never
 * touch the disk, and the periodic sweep runs on fake timers.
 */
import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { UPLOAD_TOKEN_PATTERN, VoiceUploads } from '../src/voices/uploads.ts';

const dirs: string[] = [];
async function tempDir(): Promise<string> {
  const dir = await mkdtemp(path.join(tmpdir(), 'voice-uploads-'));
  dirs.push(dir);
  return dir;
}
afterEach(async () => {
  vi.useRealTimers();
  await Promise.all(dirs.splice(0).map((dir) => rm(dir, { recursive: true, force: true })));
});

const SAMPLE = Buffer.from('RIFF....WAVEfmt sample bytes');

describe('VoiceUploads', () => {
  it('stores a sample under a fresh 32-hex token and finds it again', async () => {
    const dir = await tempDir();
    let now = 1_000_000;
    const uploads = new VoiceUploads({ dir, now: () => now });
    const token = await uploads.store(SAMPLE);
    const other = await uploads.store(SAMPLE);
    expect(token).toMatch(UPLOAD_TOKEN_PATTERN);
    expect(other).not.toBe(token);
    const file = await uploads.path(token);
    expect(file && path.dirname(file)).toBe(dir);
    now += 299_000;
    expect(await uploads.path(token)).toBe(file);
  });

  it('malformed and unknown tokens give null', async () => {
    const dir = await tempDir();
    const uploads = new VoiceUploads({ dir });
    const token = await uploads.store(SAMPLE);
    for (const bad of [
      '',
      'abc',
      token.toUpperCase(),
      `${token}0`,
      '../../etc/passwd',
      `${token.slice(0, 31)}g`,
      `${token.slice(0, 16)}/${token.slice(17)}`,
    ]) {
      expect(await uploads.path(bad)).toBeNull();
    }
    expect(await uploads.path('0'.repeat(32))).toBeNull();
  });

  it('an expired sample gives null, also for a new instance after a restart, and sweep deletes it', async () => {
    const dir = await tempDir();
    let now = 5_000_000;
    const uploads = new VoiceUploads({ dir, ttlMs: 300_000, now: () => now });
    const expiring = await uploads.store(SAMPLE);
    now += 200_000;
    const fresh = await uploads.store(SAMPLE);
    now += 100_001;
    const restarted = new VoiceUploads({ dir, ttlMs: 300_000, now: () => now });
    expect(await restarted.path(expiring)).toBeNull();
    expect(await restarted.path(fresh)).not.toBeNull();
    await writeFile(path.join(dir, `${'a'.repeat(32)}.${now - 1}.wav`), SAMPLE);
    await restarted.sweep();
    const left = await readdir(dir);
    expect(left).toHaveLength(1);
    expect(left[0].startsWith(fresh)).toBe(true);
  });

  it('remove deletes a sample at once', async () => {
    const dir = await tempDir();
    const uploads = new VoiceUploads({ dir });
    const token = await uploads.store(SAMPLE);
    await uploads.remove(token);
    expect(await uploads.path(token)).toBeNull();
    expect(await readdir(dir)).toEqual([]);
  });

  it('recover() at start-up keeps committed unexpired samples only: pending (clone never recorded), half-written and expired ones go', async () => {
    const dir = await tempDir();
    const now = 1_000_000;
    const uploads = new VoiceUploads({ dir, ttlMs: 300_000, now: () => now });
    const committed = await uploads.store(SAMPLE);
    await uploads.commit(committed);
    const pending = await uploads.store(SAMPLE);
    // Served while its clone runs: the provider downloads it before the catalog record exists.
    expect(await uploads.path(pending)).not.toBeNull();
    await writeFile(path.join(dir, `${'c'.repeat(32)}.${now + 1000}.wav.tmp-0123456789ab`), SAMPLE);
    await writeFile(path.join(dir, `${'d'.repeat(32)}.${now - 1}.wav`), SAMPLE);
    const restarted = new VoiceUploads({ dir, ttlMs: 300_000, now: () => now });
    expect(await restarted.recover()).toBe(3);
    expect(await restarted.path(committed)).not.toBeNull();
    expect(await restarted.path(pending)).toBeNull();
    expect(await readdir(dir)).toEqual([`${committed}.${now + 300_000}.wav`]);
  });

  it('start() sweeps periodically on an unref’d timer; close() stops it', async () => {
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval', 'Date'] });
    const dir = await tempDir();
    const uploads = new VoiceUploads({ dir, ttlMs: 1000 });
    await uploads.store(SAMPLE);
    uploads.start();
    expect(await readdir(dir)).toHaveLength(1);
    vi.advanceTimersByTime(60_000);
    await vi.waitFor(async () => expect(await readdir(dir)).toEqual([]), { timeout: 2000, interval: 20 });
    uploads.close();
    uploads.close();
    expect(vi.getTimerCount()).toBe(0);
  });
});
