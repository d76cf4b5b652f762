/**
 * Real loopback servers (port 0) that answer with far more than any sane upstream sends: an HTTP body
 * (one endless SSE line, or plain bytes), or a CosyVoice-style WebSocket task streaming endless audio
 * frames. Data is written as the client reads it (waiting for `drain` / a small `bufferedAmount`), so it
 * is never held here whole and the byte counters show how much the client made the server send.
 */
import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { WebSocketServer } from 'ws';
import { drainOrClose } from './drain-or-close.ts';

export interface OversizedUpstreamOptions {
  status?: number;
  contentType: string;
  /** Sent before the endless part, e.g. `data: {"output":{"audio":{"data":"` for an SSE line that never ends. */
  prefix?: string;
  /** Bytes of filler after the prefix. */
  bodyBytes: number;
}

export interface OversizedUpstream {
  url: string;
  bytesWritten(): number;
  /** Responses whose connection is still open. */
  openResponses(): number;
  close(): Promise<void>;
}

export async function startOversizedUpstream(options: OversizedUpstreamOptions): Promise<OversizedUpstream> {
  let written = 0;
  let open = 0;
  const server = http.createServer((req, res) => {
    req.resume();
    open++;
    res.on('close', () => open--);
    res.writeHead(options.status ?? 200, { 'content-type': options.contentType });
    if (options.prefix) res.write(options.prefix);
    void (async () => {
      const piece = Buffer.alloc(64 * 1024, 'A');
      for (let sent = 0; sent < options.bodyBytes; ) {
        if (res.destroyed) return;
        const bytes = Math.min(piece.length, options.bodyBytes - sent);
        const flushed = res.write(bytes === piece.length ? piece : piece.subarray(0, bytes));
        sent += bytes;
        written += bytes;
        if (!flushed && (await drainOrClose(res)) === 'close') return;
      }
      if (!res.destroyed) res.end();
    })();
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    bytesWritten: () => written,
    openResponses: () => open,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

export interface EndlessSocketUpstream {
  url: string;
  /** Audio bytes handed to the socket so far. */
  bytesSent(): number;
  close(): Promise<void>;
}

/**
 * Speaks the CosyVoice duplex task protocol (`run-task` → `task-started`, `finish-task` → audio frames →
 * `task-finished`) with `totalBytes` of audio in frames of `frameBytes`, sent only while less than 256 KiB
 * wait in the server's own send buffer: what the client does not read stays in TCP.
 */
export async function startEndlessSocketUpstream(options: {
  frameBytes: number;
  totalBytes: number;
}): Promise<EndlessSocketUpstream> {
  let sent = 0;
  const server = http.createServer();
  const wss = new WebSocketServer({ server });
  wss.on('connection', (socket) => {
    socket.on('message', (data, isBinary) => {
      if (isBinary) return;
      const action = (JSON.parse(data.toString()) as { header?: { action?: string } }).header?.action;
      if (action === 'run-task') socket.send(JSON.stringify({ header: { event: 'task-started' } }));
      if (action !== 'finish-task') return;
      void (async () => {
        const frame = Buffer.alloc(options.frameBytes, 1);
        for (let total = 0; total < options.totalBytes; total += frame.length) {
          while (socket.readyState === socket.OPEN && socket.bufferedAmount > 256 * 1024)
            await new Promise((resolve) => setTimeout(resolve, 2));
          if (socket.readyState !== socket.OPEN) return;
          socket.send(frame, { binary: true });
          sent += frame.length;
        }
        socket.send(JSON.stringify({ header: { event: 'task-finished' } }));
      })();
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    bytesSent: () => sent,
    close: async () => {
      for (const client of wss.clients) client.terminate();
      wss.close();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
