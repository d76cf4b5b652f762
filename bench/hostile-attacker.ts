/**
 * The attacker of `bench/hostile.ts`, in a process of its own: building and sending megabytes of uploads from
 * the bench process would delay the bench's own `/healthz` probes and charge the attacker's work to the service's
 * figure. Forked with an IPC channel: it gets `AttackOrder` once, attacks until it gets `'stop'`, answers with what
 * its requests were answered (status → count) and exits.
 */
import fs from 'node:fs/promises';

export type AttackName = 'mp3' | 'png' | 'preview';

export interface AttackOrder {
  name: AttackName;
  baseUrl: string;
  /** The attacker's own started session (speak_audio is admitted only there). */
  targetSessionId: string;
  /** Files the bench made once: the hour-long MP3 and the 1×49,000,000 PNG. */
  mp3File: string;
  pngFile: string;
  previewText: string;
}

/** Parallel requests per attack (as the rows saw them). */
const WORKERS: Record<AttackName, number> = { mp3: 2, png: 4, preview: 20 };
/** A refused request is retried after a beat, as a persistent attacker would. */
const RETRY_PAUSE_MS = 100;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function multipart(
  field: string,
  file: Buffer,
  filename: string,
  type: string,
  fields: Record<string, string> = {},
): FormData {
  const form = new FormData();
  for (const [name, value] of Object.entries(fields)) form.append(name, value);
  form.append(field, new Blob([new Uint8Array(file)], { type }), filename);
  return form;
}

async function requestOf(order: AttackOrder): Promise<(signal: AbortSignal) => Promise<Response>> {
  const { baseUrl } = order;
  switch (order.name) {
    case 'mp3': {
      const mp3 = await fs.readFile(order.mp3File);
      return (signal) =>
        fetch(`${baseUrl}/sessions/${order.targetSessionId}/speak_audio`, {
          method: 'POST',
          body: multipart('audio', mp3, 'long.mp3', 'audio/mpeg'),
          signal,
        });
    }
    case 'png': {
      const png = await fs.readFile(order.pngFile);
      return (signal) =>
        fetch(`${baseUrl}/avatars/custom`, {
          method: 'POST',
          body: multipart('image', png, 'tall.png', 'image/png', { name: 'tall', base_avatar_id: 'astronaut' }),
          signal,
        });
    }
    case 'preview':
      return (signal) =>
        fetch(`${baseUrl}/tts/preview`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ text: order.previewText }),
          signal,
        });
  }
}

async function attack(order: AttackOrder, signal: AbortSignal): Promise<Record<string, number>> {
  const request = await requestOf(order);
  const answers: Record<string, number> = {};
  await Promise.all(
    Array.from({ length: WORKERS[order.name] }, async () => {
      while (!signal.aborted) {
        try {
          const res = await request(signal);
          await res.arrayBuffer();
          answers[res.status] = (answers[res.status] ?? 0) + 1;
          if (res.status >= 400) await sleep(RETRY_PAUSE_MS);
        } catch {
          if (signal.aborted) break;
          answers.error = (answers.error ?? 0) + 1;
          await sleep(RETRY_PAUSE_MS);
        }
      }
    }),
  );
  return answers;
}

if (process.send) {
  const stop = new AbortController();
  // The bench died: no orphan attacker.
  process.on('disconnect', () => process.exit(0));
  process.on('message', (message: AttackOrder | 'stop') => {
    if (message === 'stop') {
      stop.abort();
      return;
    }
    void attack(message, stop.signal).then(
      (answers) => process.send!({ answers }, () => process.exit(0)),
      (error: Error) => process.send!({ error: error.message }, () => process.exit(1)),
    );
  });
}
