import { WebSocket } from 'ws';
import { AsyncQueue } from '../../actors/async-queue.ts';
import type { Session } from '../../src/sessions/session.ts';
import { sessionParts } from '../../src/sessions/session.ts';

export interface ServerMessage {
  type: string;
  code?: string;
  message?: string;
  at: number;
}

/** A `ws` client of `/sessions/{id}/speak_audio_stream` that records every server message and the close. */
export class AudioStreamClient {
  readonly messages: ServerMessage[] = [];
  closed: { code: number; reason: string; at: number } | null = null;
  opened = false;

  private constructor(readonly socket: WebSocket) {
    socket.on('open', () => (this.opened = true));
    socket.on('message', (data, isBinary) => {
      if (isBinary) return;
      this.messages.push({ ...JSON.parse(data.toString()), at: performance.now() });
    });
    socket.on('close', (code, reason) => (this.closed = { code, reason: reason.toString(), at: performance.now() }));
    socket.on('error', () => undefined);
  }

  /** Any WebSocket URL with the same framing (e.g. `/sessions/{id}/listen`). */
  static connectTo(url: string): AudioStreamClient {
    return new AudioStreamClient(new WebSocket(url));
  }

  static connect(baseUrl: string, sessionId: string): AudioStreamClient {
    const url = `${baseUrl.replace(/^http/, 'ws')}/sessions/${sessionId}/speak_audio_stream`;
    return new AudioStreamClient(new WebSocket(url));
  }

  async waitOpen(timeoutMs = 5_000): Promise<void> {
    await this.until(() => this.opened || this.closed !== null, timeoutMs, 'socket open');
    if (!this.opened) throw new Error(`socket closed before opening: ${JSON.stringify(this.closed)}`);
  }

  sendJson(message: Record<string, unknown>): void {
    this.socket.send(JSON.stringify(message));
  }

  sendPcm(bytes: Buffer): void {
    this.socket.send(bytes, { binary: true });
  }

  /** A text frame sent as is (malformed control messages included). */
  sendText(text: string): void {
    this.socket.send(text, { binary: false });
  }

  errors(): ServerMessage[] {
    return this.messages.filter((m) => m.type === 'error');
  }

  /** Waits for the `count`-th error message (1-based) and returns it. */
  async waitErrorCount(count: number, timeoutMs: number): Promise<ServerMessage> {
    await this.until(() => this.errors().length >= count, timeoutMs, `error message #${count}`);
    return this.errors()[count - 1];
  }

  async waitMessage(type: string, timeoutMs: number): Promise<ServerMessage> {
    await this.until(() => this.messages.some((m) => m.type === type), timeoutMs, `message ${type}`);
    return this.messages.find((m) => m.type === type)!;
  }

  async waitClosed(timeoutMs: number): Promise<{ code: number; reason: string; at: number }> {
    await this.until(() => this.closed !== null, timeoutMs, 'server close');
    return this.closed!;
  }

  close(): void {
    if (this.socket.readyState === WebSocket.OPEN || this.socket.readyState === WebSocket.CONNECTING)
      this.socket.terminate();
  }

  private async until(predicate: () => boolean, timeoutMs: number, what: string): Promise<void> {
    const start = performance.now();
    while (!predicate()) {
      if (performance.now() - start > timeoutMs) {
        throw new Error(
          `timed out waiting for ${what}; messages ${JSON.stringify(this.messages)}, closed ${JSON.stringify(this.closed)}`,
        );
      }
      await new Promise((r) => setTimeout(r, 5));
    }
  }
}

/** Sends `pcm` as 20 ms frames paced at `speed`× real time; resolves after the last send. */
export async function streamPcm(
  client: AudioStreamClient,
  frames: Buffer[],
  options: { frameMs?: number; speed?: number; signal?: AbortSignal } = {},
): Promise<void> {
  const frameMs = options.frameMs ?? 20;
  const speed = options.speed ?? 1;
  const startedAt = performance.now();
  for (let i = 0; i < frames.length; i++) {
    if (options.signal?.aborted || client.closed) return;
    const due = startedAt + (i * frameMs) / speed;
    const wait = due - performance.now();
    if (wait > 1) await new Promise((r) => setTimeout(r, wait));
    client.sendPcm(frames[i]);
  }
}

/** Splits PCM16 bytes into frames of `frameBytes`. */
export function framesOf(bytes: Buffer, frameBytes: number): Buffer[] {
  const frames: Buffer[] = [];
  for (let offset = 0; offset < bytes.length; offset += frameBytes)
    frames.push(bytes.subarray(offset, offset + frameBytes));
  return frames;
}

/**
 * Bytes the kernel holds for established loopback TCP connections to `port` (Linux `/proc/net/tcp`):
 * the server side's unread receive queue and the client side's unsent send queue. When the server stops
 * reading, what the client wrote piles up here.
 */
export async function kernelQueuedBytes(port: number): Promise<{ unreadAtServer: number; unsentAtClient: number }> {
  const { readFile } = await import('node:fs/promises');
  let unreadAtServer = 0;
  let unsentAtClient = 0;
  for (const file of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text: string;
    try {
      text = await readFile(file, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const cols = line.trim().split(/\s+/);
      if (cols.length < 5 || cols[3] !== '01') continue;
      const localPort = parseInt(cols[1].split(':').at(-1)!, 16);
      const remotePort = parseInt(cols[2].split(':').at(-1)!, 16);
      const [tx, rx] = cols[4].split(':').map((hex) => parseInt(hex, 16));
      if (localPort === port) unreadAtServer += rx;
      if (remotePort === port) unsentAtClient += tx;
    }
  }
  return { unreadAtServer, unsentAtClient };
}

/** Audio the session's stream turn holds for the playout (the audio WebSocket's inbound queue), in ms. */
export function streamQueuedMs(session: Session): number {
  const audio = sessionParts(session).actor.getSnapshot().context.turn?.audio;
  if (audio?.kind !== 'stream' || !(audio.chunks instanceof AsyncQueue)) return 0;
  return (audio.chunks.weight * 1000) / sessionParts(session).stage.sampleRate;
}
