/**
 * Shared pieces of the conversation/audio-input end-to-end tests: a started session with a real wrtc
 * receiver and SSE client attached, tone generators, and SSE turn summaries.
 */
import { expect } from 'vitest';
import { sessionParts } from '../../src/sessions/session.ts';
import { json, post, type TestApp } from './app.ts';
import { AUDIO_CHUNK_MS } from '../../actors/media/playout.ts';
import { ReceivingPeer } from './peer.ts';
import { SseClient, type SseEvent } from './sse.ts';
import { recordSentAudioChunks } from './sent-audio.ts';

/** Receiver-side RMS above this is speech; WebRTC comfort noise and silence stay far below. */
export const AUDIBLE_RMS = 300;
/** Generous on 2 shared cores: ICE + first idle frames usually take ~1 s. */
const IDLE_MEDIA_WAIT_MS = 15_000;

/**
 * Audible audio as the service sends it: the playout's 'audio' emissions (10 ms chunks on its media clock), from now
 * until `stop()`. How long a clip plays is read here, exactly, whatever the host's speed: at a receiver on a host at
 * half speed the jitter buffer stretched or concealed an 800 ms clip by up to 460 ms (issue 25, row 9), while a clip
 * read at the wrong sample rate is off by 400 ms or more either way.
 */
export function recordSentAudio(t: TestApp, sessionId: string): { audibleMs(): number; stop(): void } {
  const session = t.services.supervisor.liveSession(sessionId);
  if (!session) throw new Error('no live session to record');
  const sent = recordSentAudioChunks(sessionParts(session).media.playout);
  return {
    // Every chunk the playout sends is exactly AUDIO_CHUNK_MS long.
    audibleMs: () => sent.chunks.filter((chunk) => chunk.rms > AUDIBLE_RMS).length * AUDIO_CHUNK_MS,
    stop: () => sent.stop(),
  };
}

export interface LiveSession {
  sessionId: string;
  sse: SseClient;
  peer: ReceivingPeer;
  close(): void;
}

/** Creates an `rt` session, attaches SSE and a wrtc receiver, optionally starts it and waits for idle media. */
export async function openSession(t: TestApp, options: { start?: boolean } = {}): Promise<LiveSession> {
  const avatars = await json(await fetch(`${t.baseUrl}/avatars`));
  const avatar = avatars.find((a: { model_type: string }) => a.model_type === 'rt');
  if (!avatar) throw new Error('no rt avatar in the catalog');
  const created = await post(t.baseUrl, '/sessions', { avatar_id: avatar.id, model: 'rt' });
  if (created.status !== 200) throw new Error(`create failed: ${created.status} ${await created.text()}`);
  const sessionId = (await json(created)).session_id as string;
  const sse = await SseClient.open(`${t.baseUrl}/sessions/${sessionId}/events`);
  const peer = await ReceivingPeer.connect(t.baseUrl, sessionId);
  peer.keepFrames = false;
  if (options.start !== false) {
    const started = await post(t.baseUrl, `/sessions/${sessionId}/start`);
    if (started.status !== 200) throw new Error(`start failed: ${started.status}`);
    await peer.until(() => peer.frames.length >= 5 && peer.audio.length >= 20, IDLE_MEDIA_WAIT_MS, 'idle media');
  }
  return {
    sessionId,
    sse,
    peer,
    close() {
      peer.close();
      sse.close();
    },
  };
}

/** `status:idle`, `tts:start`, `llm`, `frame`… — one label per event, for order assertions. */
export function labels(events: SseEvent[]): string[] {
  return events.map((e) => (e.type === 'tts' || e.type === 'status' ? `${e.type}:${e.data.stage}` : e.type));
}

/** Mono PCM16 sine at `rate`, amplitude well above the audible threshold. */
export function tone(rate: number, ms: number, freq = 440, amplitude = 9000): Int16Array {
  const n = Math.round((rate * ms) / 1000);
  const pcm = new Int16Array(n);
  for (let i = 0; i < n; i++) pcm[i] = Math.round(amplitude * Math.sin((2 * Math.PI * freq * i) / rate));
  return pcm;
}

export function pcmBytes(pcm: Int16Array): Buffer {
  const out = Buffer.alloc(pcm.length * 2);
  for (let i = 0; i < pcm.length; i++) out.writeInt16LE(pcm[i], i * 2);
  return out;
}

/** A canonical 44-byte-header PCM16 mono WAV. */
export function wavBytes(pcm: Int16Array, rate: number): Buffer {
  const data = pcmBytes(pcm);
  const header = Buffer.alloc(44);
  header.write('RIFF', 0, 'ascii');
  header.writeUInt32LE(36 + data.length, 4);
  header.write('WAVE', 8, 'ascii');
  header.write('fmt ', 12, 'ascii');
  header.writeUInt32LE(16, 16);
  header.writeUInt16LE(1, 20);
  header.writeUInt16LE(1, 22);
  header.writeUInt32LE(rate, 24);
  header.writeUInt32LE(rate * 2, 28);
  header.writeUInt16LE(2, 32);
  header.writeUInt16LE(16, 34);
  header.write('data', 36, 'ascii');
  header.writeUInt32LE(data.length, 40);
  return Buffer.concat([header, data]);
}

/** POSTs multipart form data: `audio` file plus string fields. */
export async function postAudio(
  baseUrl: string,
  path: string,
  audio: Buffer,
  fields: Record<string, string> = {},
  fileName = 'audio.bin',
): Promise<Response> {
  const form = new FormData();
  form.append('audio', new Blob([new Uint8Array(audio)]), fileName);
  for (const [name, value] of Object.entries(fields)) form.append(name, value);
  return fetch(`${baseUrl}${path}`, { method: 'POST', body: form });
}

/** Resolves once the receiver heard a sustained run of silence that began after `since`. */
export async function waitForSilence(
  peer: ReceivingPeer,
  since: number,
  timeoutMs: number,
  runLength = 10,
): Promise<void> {
  await peer.until(
    () => {
      const after = peer.audio.filter((a) => a.at > since);
      for (let i = 0; i + runLength <= after.length; i++)
        if (after.slice(i, i + runLength).every((a) => a.rms < AUDIBLE_RMS)) return true;
      return false;
    },
    timeoutMs,
    'silence at the receiver',
  );
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Polls `predicate` until it holds or `timeoutMs` passes; returns whether it held. */
export async function eventually(predicate: () => boolean, timeoutMs: number, stepMs = 10): Promise<boolean> {
  const start = performance.now();
  while (!predicate()) {
    if (performance.now() - start > timeoutMs) return false;
    await sleep(stepMs);
  }
  return true;
}

/**
 * Spec 6.1 rule 1 on a turn's event labels (see `labels`): each stage of `chain` first appears before the
 * next one does, the last frame precedes the final idle, and the turn ends with `status:idle`.
 */
export function expectCausalOrder(kinds: string[], chain: string[]): void {
  for (let i = 1; i < chain.length; i++) {
    expect(kinds.indexOf(chain[i - 1]), `${chain[i - 1]} present`).toBeGreaterThanOrEqual(0);
    expect(kinds.indexOf(chain[i - 1]), `${chain[i - 1]} before ${chain[i]}`).toBeLessThan(kinds.indexOf(chain[i]));
  }
  expect(kinds.lastIndexOf('frame')).toBeLessThan(kinds.lastIndexOf('status:idle'));
  expect(kinds.at(-1)).toBe('status:idle');
}
