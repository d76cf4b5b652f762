import type http from 'node:http';
import { WebSocket } from 'ws';

export type UpgradeOutcome = { opened: true } | { opened: false; status: number; body: string };

/** Opens a real WebSocket (optionally with an Origin, as a browser sends it): `open`, or the status and body it was refused with. */
export function upgrade(url: string, origin?: string): Promise<UpgradeOutcome> {
  return new Promise((resolve, reject) => {
    const socket = new WebSocket(url, origin === undefined ? {} : { origin });
    socket.on('open', () => {
      socket.close();
      resolve({ opened: true });
    });
    socket.on('unexpected-response', (_req, res: http.IncomingMessage) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk) => (body += chunk));
      res.on('end', () => resolve({ opened: false, status: res.statusCode ?? 0, body }));
    });
    socket.on('error', reject);
  });
}
