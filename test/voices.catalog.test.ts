/**
 * The voice catalog on a real LevelDB in a temp dir: public shape, filters, label de-duplication,
 * ids that are unique under concurrency, survive reopening, and stay consistent when the writing
 * process is SIGKILLed at random moments.
 */
import { fork } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import fc from 'fast-check';
import { Level } from 'level';
import { afterEach, describe, expect, it } from 'vitest';
import { toPublicEntry, VoiceCatalog, type NewVoiceEntry } from '../src/voices/catalog.ts';

const here = path.dirname(fileURLToPath(import.meta.url));
const dirs: string[] = [];

async function openCatalog(dir?: string, now?: () => Date) {
  const location = dir ?? (await mkdtemp(path.join(tmpdir(), 'voice-catalog-')));
  if (!dir) dirs.push(location);
  const db = new Level<string, unknown>(location, { valueEncoding: 'json' });
  await db.open();
  const catalog = new VoiceCatalog(db.sublevel<string, unknown>('voices', { valueEncoding: 'json' }), now);
  return { location, db, catalog };
}

const entry = (overrides: Partial<NewVoiceEntry> = {}): NewVoiceEntry => ({
  user_id: null,
  provider: 'cloud_a',
  voice_id: 'v1',
  display_label: 'Anna',
  target_model: 'qwen3-tts-vc',
  source: 'clone',
  ...overrides,
});

afterEach(async () => {
  await Promise.all(dirs.splice(0).map((dir) => rm(dir, { recursive: true, force: true })));
});

describe('VoiceCatalog', () => {
  it('creates, lists, filters, gets and deletes; the public shape holds exactly the spec fields', async () => {
    const { db, catalog } = await openCatalog();
    const a = await catalog.create(entry({ reference_data_uri: 'data:audio/wav;base64,AAAA' }));
    const b = await catalog.create(entry({ provider: 'cloud_d', voice_id: 'cloud_d-1', display_label: 'Ben' }));
    expect([a.id, b.id]).toEqual([1, 2]);
    expect(Object.keys(toPublicEntry(a)).sort()).toEqual([
      'display_label',
      'id',
      'provider',
      'source',
      'target_model',
      'user_id',
      'voice_id',
    ]);
    expect((await catalog.list()).map((e) => e.id)).toEqual([1, 2]);
    expect((await catalog.list({ provider: 'cloud_d' })).map((e) => e.voice_id)).toEqual(['cloud_d-1']);
    expect((await catalog.get(1))?.reference_data_uri).toBe('data:audio/wav;base64,AAAA');
    expect((await catalog.findByVoiceId('cloud_d', 'cloud_d-1'))?.id).toBe(2);
    expect(await catalog.delete(1)).toBe(true);
    expect(await catalog.delete(1)).toBe(false);
    expect(await catalog.get(1)).toBeNull();
    // Deleted ids are never handed out again.
    expect((await catalog.create(entry())).id).toBe(3);
    await db.close();
  });

  it('appends a timestamp suffix to a label that is taken', async () => {
    const { db, catalog } = await openCatalog(undefined, () => new Date('2025-03-04T05:06:07Z'));
    const first = await catalog.create(entry());
    const second = await catalog.create(entry());
    const third = await catalog.create(entry());
    expect(first.display_label).toBe('Anna');
    expect(second.display_label).toBe('Anna (20250304-050607)');
    expect(third.display_label).toBe('Anna (20250304-050607-2)');
    expect(await catalog.resolveLabel('Zoe')).toBe('Zoe');
    await db.close();
  });

  it('concurrent creates get unique consecutive ids and unique labels (property)', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(fc.constantFrom('a', 'b', 'c'), { minLength: 1, maxLength: 12 }), async (labels) => {
        const { db, catalog } = await openCatalog();
        const created = await Promise.all(labels.map((label) => catalog.create(entry({ display_label: label }))));
        const ids = created.map((e) => e.id).sort((x, y) => x - y);
        expect(ids).toEqual(labels.map((_, i) => i + 1));
        expect(new Set(created.map((e) => e.display_label)).size).toBe(labels.length);
        expect(await catalog.lastAllocatedId()).toBe(labels.length);
        await db.close();
      }),
      { numRuns: 8 },
    );
  });

  it('entries and the counter survive a restart', async () => {
    const { location, db, catalog } = await openCatalog();
    await catalog.create(entry());
    await catalog.create(entry({ voice_id: 'v2' }));
    await db.close();
    const reopened = await openCatalog(location);
    expect((await reopened.catalog.list()).map((e) => e.voice_id)).toEqual(['v1', 'v2']);
    expect((await reopened.catalog.create(entry())).id).toBe(3);
    await reopened.db.close();
  });

  it('stays consistent when the writer is SIGKILLed at random moments', async () => {
    const location = await mkdtemp(path.join(tmpdir(), 'voice-catalog-crash-'));
    dirs.push(location);
    const committed = new Set<number>();
    const deleted = new Set<number>();
    const ROUNDS = 4;
    for (let round = 0; round < ROUNDS; round++) {
      const child = fork(path.join(here, 'fakes', 'voice-catalog-writer.ts'), [location], {
        execArgv: ['--import', 'tsx'],
        stdio: ['ignore', 'pipe', 'inherit', 'ipc'],
      });
      let output = '';
      child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
      await new Promise<void>((resolve, reject) => {
        const check = setInterval(() => output.includes('ready') && (clearInterval(check), resolve()), 5);
        child.once('exit', (code) => reject(new Error(`writer exited early with ${code}`)));
      });
      await new Promise((resolve) => setTimeout(resolve, 30 + Math.random() * 150));
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGKILL');
      await exited;
      for (const line of output.split('\n')) {
        if (line.startsWith('created '))
          line
            .slice(8)
            .split(' ')
            .forEach((id) => committed.add(Number(id)));
        if (line.startsWith('deleting ')) deleted.add(Number(line.slice(9)));
      }
    }
    expect(committed.size).toBeGreaterThan(0);

    const { db, catalog } = await openCatalog(location);
    const entries = await catalog.list();
    const counter = await catalog.lastAllocatedId();
    const ids = entries.map((e) => e.id);
    expect(new Set(ids).size).toBe(ids.length);
    expect(ids.every((id) => Number.isInteger(id) && id >= 1 && id <= counter)).toBe(true);
    // Every create the writer saw committed is still there, unless it announced deleting it.
    expect(Math.max(...committed)).toBeLessThanOrEqual(counter);
    const present = new Set(ids);
    expect([...committed].filter((id) => !deleted.has(id) && !present.has(id))).toEqual([]);
    expect(
      entries.every(
        (e) => e.voice_id.startsWith('clone-') && e.provider === 'local_clone_a' && typeof e.created_at === 'string',
      ),
    ).toBe(true);
    expect(new Set(entries.map((e) => e.display_label)).size).toBe(entries.length);
    const next = await catalog.create(entry());
    expect(next.id).toBe(counter + 1);
    await db.close();
  }, 30_000);
});
