/**
 * A real loopback HTTP server (node:http, port 0) that answers every request with a body far larger than
 * any sane upstream sends: one endless SSE line, or plain bytes. The body is written as the client reads
 * it (64 KiB at a time, waiting for `drain`), so it is never held here whole and `bytesWritten()` shows
 * how much the client made it send before giving up.
 */
import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';

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
        if (!flushed && (await Promise.race([once(res, 'drain').then(() => 'drain'), once(res, 'close').then(() => 'close')])) === 'close') return;
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
