/**
 * Child process for the crash test: opens the catalog and creates (and now and then deletes)
 * entries as fast as it can until it is SIGKILLed. Prints each committed id so the parent knows
 * which ids must have survived.
 */
import { Level } from 'level';
import { VoiceCatalog } from '../../src/voices/catalog.ts';

const location = process.argv[2];
const db = new Level<string, unknown>(location, { valueEncoding: 'json' });
await db.open();
const catalog = new VoiceCatalog(db.sublevel<string, unknown>('voices', { valueEncoding: 'json' }));
process.stdout.write('ready\n');
for (let i = 0; ; i++) {
  // Concurrent creates exercise the in-process mutex as well as crash atomicity.
  const created = await Promise.all(
    [0, 1, 2].map((k) =>
      catalog.create({
        user_id: null,
        provider: 'local_clone_a',
        voice_id: `clone-${i}-${k}`,
        display_label: `voice ${i % 5}`,
        target_model: 'xtts',
        source: 'clone',
      }),
    ),
  );
  process.stdout.write(`created ${created.map((entry) => entry.id).join(' ')}\n`);
  if (i % 7 === 3) {
    // Announced before, so a kill between commit and print cannot look like a lost entry.
    process.stdout.write(`deleting ${created[0].id}\n`);
    await catalog.delete(created[0].id);
  }
}
