import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';

/** One request the receiver got, with what it answered. */
export interface ReceivedWebhook {
  headers: http.IncomingHttpHeaders;
  body: string;
  /** The status answered; null while the request is held (`hang`). */
  status: number | null;
}

/**
 * A loopback webhook receiver: records every request and answers with the next scripted status (then `fallback`),
 * or holds it unanswered (`'hang'`), as a receiver that never answers does. `verified()` checks every request it
 * answered with the `standardwebhooks` library, as a customer's receiver would.
 */
export interface WebhookReceiver {
  url: string;
  port: number;
  received: ReceivedWebhook[];
  /** Statuses answered in order before `fallback` applies. */
  script: Array<number | 'hang'>;
  fallback: number | 'hang';
  /** The events answered 2xx, parsed: `{type, timestamp, data}`, verified with the secret first. */
  delivered(secret: string): Array<{ id: string; type: string; timestamp: string; data: any }>;
  /** Resolves once `predicate` holds over the received requests. */
  until(predicate: (received: ReceivedWebhook[]) => boolean, timeoutMs: number, what: string): Promise<void>;
  /** Answers every held request with `status` (a receiver coming back). */
  release(status: number): void;
  close(): Promise<void>;
}

export async function startWebhookReceiver(
  options: { port?: number; fallback?: number | 'hang'; script?: Array<number | 'hang'> } = {},
): Promise<WebhookReceiver> {
  const held = new Set<{ res: http.ServerResponse; entry: ReceivedWebhook }>();
  const receiver: Omit<WebhookReceiver, 'url' | 'port'> = {
    received: [],
    script: options.script ?? [],
    fallback: options.fallback ?? 204,
    delivered(secret) {
      const webhook = new Webhook(secret);
      return receiver.received
        .filter((r) => r.status !== null && r.status >= 200 && r.status < 300)
        .map((r) => {
          const payload = webhook.verify(r.body, r.headers as Record<string, string>) as {
            type: string;
            timestamp: string;
            data: unknown;
          };
          return { id: String(r.headers['webhook-id']), ...payload } as {
            id: string;
            type: string;
            timestamp: string;
            data: any;
          };
        });
    },
    async until(predicate, timeoutMs, what) {
      const deadline = performance.now() + timeoutMs;
      while (!predicate(receiver.received)) {
        if (performance.now() > deadline)
          throw new Error(`webhook receiver: timed out waiting for ${what} (got ${receiver.received.length} requests)`);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    },
    release(status) {
      for (const request of held) {
        request.entry.status = status;
        request.res.writeHead(status).end();
      }
      held.clear();
    },
    async close() {
      for (const request of held) request.res.destroy();
      held.clear();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const entry: ReceivedWebhook = {
        headers: req.headers,
        body: Buffer.concat(chunks).toString('utf8'),
        status: null,
      };
      receiver.received.push(entry);
      const answer = receiver.script.length > 0 ? receiver.script.shift()! : receiver.fallback;
      if (answer === 'hang') {
        held.add({ res, entry });
        return;
      }
      entry.status = answer;
      res.writeHead(answer).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(options.port ?? 0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return Object.assign(receiver, { url: `http://127.0.0.1:${port}/hooks`, port });
}
