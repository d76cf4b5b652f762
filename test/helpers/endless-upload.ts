/**
 * A multipart upload whose file part starts and never ends (a client on a stalled link, or a hostile one): any
 * answer it gets was decided without reading more than `firstBytes` of the file. For routes that must decide
 * admission before they read a body.
 */
import http from 'node:http';

/** A refusal that does not read the body comes back at once; this only absorbs a loaded 2-core host. */
export const ANSWER_WITHOUT_BODY_MS = 5_000;

export interface EndlessUpload {
  /** The headers and the first part of the body are on the wire. */
  sent: Promise<void>;
  /** The answer; rejects when none came within ANSWER_WITHOUT_BODY_MS. */
  answer: Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }>;
  abort(): void;
}

/**
 * Starts the upload: `fields` as text parts, then the `fileField` part (`audio`, `a.wav` unless given) with
 * `firstBytes` (64 KB of zeros unless given), and nothing more — or, with `trickleBytesPerS`, that many zeros
 * more every second until aborted (a client on a very slow link).
 */
export function endlessUpload(
  baseUrl: string,
  route: string,
  firstBytes: Buffer = Buffer.alloc(64 * 1024),
  options: { fileField?: string; filename?: string; fields?: Record<string, string>; trickleBytesPerS?: number } = {},
): EndlessUpload {
  const url = new URL(route, baseUrl);
  const boundary = 'endless-upload-boundary';
  const request = http.request({
    host: url.hostname,
    port: url.port,
    method: 'POST',
    path: url.pathname,
    headers: { 'content-type': `multipart/form-data; boundary=${boundary}`, 'transfer-encoding': 'chunked' },
  });
  const fields = Object.entries(options.fields ?? {}).map(
    ([name, value]) => `--${boundary}\r\ncontent-disposition: form-data; name="${name}"\r\n\r\n${value}\r\n`,
  );
  const head =
    fields.join('') +
    `--${boundary}\r\ncontent-disposition: form-data; name="${options.fileField ?? 'audio'}"; filename="${options.filename ?? 'a.wav'}"\r\ncontent-type: application/octet-stream\r\n\r\n`;
  const sent = new Promise<void>((resolve, reject) => {
    request.once('error', reject);
    request.write(Buffer.concat([Buffer.from(head), firstBytes]), () => resolve());
  });
  sent.catch(() => undefined);
  const trickle = options.trickleBytesPerS
    ? setInterval(() => request.write(Buffer.alloc(options.trickleBytesPerS!)), 1_000)
    : undefined;
  request.once('close', () => clearInterval(trickle));
  const answer = new Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`no answer within ${ANSWER_WITHOUT_BODY_MS} ms`)),
      ANSWER_WITHOUT_BODY_MS,
    );
    request.once('response', (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.once('end', () => {
        clearTimeout(timer);
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body });
      });
      res.once('error', reject);
    });
    request.once('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
  });
  answer.catch(() => undefined);
  return {
    sent,
    answer,
    abort: () => {
      clearInterval(trickle);
      request.destroy();
    },
  };
}
