/**
 * A real loopback HTTP server (node:http, port 0) standing in for a customer's webhook tool endpoint: it records every
 * request (headers and the raw body, as a Standard Webhooks verifier needs it) and answers as the test scripts it:
 * JSON with a status, or never (a hanging tool), noting when the service gave up and closed the connection.
 */
import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface ReceivedToolRequest {
  path: string;
  headers: http.IncomingHttpHeaders;
  rawBody: string;
  body: Record<string, unknown>;
  /** Set when the client closed the connection before an answer was sent. */
  abandoned: boolean;
}

/**
 * How the receiver answers one request: JSON (`status` default 200, after `delayMs`), a JSON body given as `text`
 * (for values JSON.stringify cannot write), or `hang` (no answer until the client leaves).
 */
export type ToolAnswer =
  | { status?: number; json: unknown; delayMs?: number }
  | { status?: number; text: string; delayMs?: number }
  | 'hang';

export interface ToolReceiver {
  /** The receiver's URL for `path` (`http://127.0.0.1:<port><path>`). */
  url(path: string): string;
  requests: ReceivedToolRequest[];
  /** How requests are answered from now on. */
  answerWith(answer: (request: ReceivedToolRequest) => ToolAnswer): void;
  close(): Promise<void>;
}

export async function startToolReceiver(): Promise<ToolReceiver> {
  const requests: ReceivedToolRequest[] = [];
  let answer: (request: ReceivedToolRequest) => ToolAnswer = () => ({ json: { ok: true } });
  const server = http.createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on('data', (part: Buffer) => parts.push(part));
    req.on('end', () => {
      const rawBody = Buffer.concat(parts).toString('utf8');
      let body: Record<string, unknown> = {};
      try {
        body = JSON.parse(rawBody) as Record<string, unknown>;
      } catch {
        // Recorded as {}: the test's assertions on the body fail.
      }
      const recorded: ReceivedToolRequest = {
        path: req.url ?? '/',
        headers: req.headers,
        rawBody,
        body,
        abandoned: false,
      };
      requests.push(recorded);
      res.on('close', () => {
        if (!res.writableFinished) recorded.abandoned = true;
      });
      const reply = answer(recorded);
      if (reply === 'hang') return;
      setTimeout(() => {
        if (res.destroyed) return;
        res.writeHead(reply.status ?? 200, { 'content-type': 'application/json' });
        res.end('text' in reply ? reply.text : JSON.stringify(reply.json));
      }, reply.delayMs ?? 0);
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  return {
    url: (path) => `http://127.0.0.1:${port}${path}`,
    requests,
    answerWith: (next) => {
      answer = next;
    },
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
