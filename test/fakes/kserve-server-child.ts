/**
 * Child-process entry of `KserveServerProcess`: runs a `FakeKserveServer` (the tiny Wav2Lip-shaped model) with the
 * options given as JSON in argv[2], tells the parent its URL over IPC and answers `stats` requests. It exits when the
 * parent goes (IPC disconnect), so no fake outlives the test that started it.
 */
import { FakeKserveServer, type FakeKserveOptions } from './kserve-server.ts';

const options = JSON.parse(process.argv[2] ?? '{}') as Omit<FakeKserveOptions, 'model'>;
const fake = await FakeKserveServer.start(options);
process.on('disconnect', () => process.exit(0));
process.on('message', (message: { type?: string; id?: number }) => {
  if (message?.type === 'stats') process.send?.({ type: 'stats', id: message.id, stats: fake.stats });
});
process.send?.({ type: 'ready', url: fake.url });
