/**
 * A built-in engine process, forked by `pool.ts`: flite and eSpeak run here, one sentence at a time, so a
 * fatal fault inside a WASM engine (V8 aborts the whole process, see docs/architecture.md) costs the
 * sentences in this process, never the service. It compiles both engines, says `ready`, then answers each
 * `sentence` message once. argv[2] is flite's work dir, made and removed by the supervisor.
 */
import { useFliteWorkDir } from './flite.ts';
import { pathFreeMessage, type EngineMessage, type SentenceMessage } from './protocol.ts';
import { synthesizeSentence, warmUpEngines } from './synthesize-sentence.ts';

function send(message: EngineMessage): void {
  // A closed channel means the supervisor is gone and 'disconnect' is about to end this process.
  if (process.connected) process.send!(message, undefined, {}, () => undefined);
}

// The supervisor is the only reason to exist: when it closes the channel, exits or is killed, so do we.
process.on('disconnect', () => process.exit(0));
// Ctrl-C signals the whole process group; the service decides when its engines stop (graceful shutdown).
process.on('SIGINT', () => undefined);

const workDir = process.argv[2];
if (workDir) useFliteWorkDir(workDir);

async function answer(message: SentenceMessage): Promise<void> {
  try {
    send({ type: 'result', id: message.id, audio: await synthesizeSentence(message.task) });
  } catch (error) {
    send({ type: 'failed', id: message.id, message: pathFreeMessage(error) });
  }
}

// eSpeak holds one current voice: sentences run strictly one after another even if several arrive.
let previous: Promise<void> = Promise.resolve();
process.on('message', (message: SentenceMessage) => {
  if (message?.type !== 'sentence') return;
  previous = previous.then(() => answer(message));
});

try {
  await warmUpEngines();
  send({ type: 'ready' });
} catch (error) {
  const failed: EngineMessage = { type: 'start-failed', message: pathFreeMessage(error) };
  if (process.connected) process.send!(failed, undefined, {}, () => process.exit(1));
  else process.exit(1);
}
