/**
 * HTTP/1.1 over a raw `net` socket, for what fetch hides: a malformed request body sent byte for byte,
 * and whether the same keep-alive connection still carries the next request (and how fast).
 */
import net from 'node:net';

export interface RawRequest {
  method: string;
  path: string;
  headers?: Record<string, string>;
  body?: Buffer;
}

export interface RawResponse {
  status: number;
  headers: Record<string, string>;
  body: string;
}

export interface KeepAliveExchange {
  first: RawResponse;
  /** The follow-up's answer on the same socket; null when the server closed the connection after `first`. */
  followUp: RawResponse | null;
  /** From writing the follow-up to its complete answer. */
  followUpMs: number | null;
  /** The server announced `Connection: close` on `first` and closed the socket. */
  closedAfterFirst: boolean;
}

/**
 * Sends `request` (with Content-Length from its body unless given), reads the answer, then sends
 * `followUp` on the same socket and reads that. Rejects when either answer takes longer than `timeoutMs`.
 */
export function keepAliveExchange(
  baseUrl: string,
  request: RawRequest,
  followUp: RawRequest,
  timeoutMs = 10_000,
): Promise<KeepAliveExchange> {
  const { hostname, port } = new URL(baseUrl);
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(port), hostname);
    let buffered = Buffer.alloc(0);
    let first: RawResponse | null = null;
    let followUpSentAt = 0;
    let socketClosed = false;
    let timer = setTimeout(
      () => fail(new Error(`no answer to ${request.method} ${request.path} within ${timeoutMs} ms`)),
      timeoutMs,
    );

    const fail = (error: Error) => {
      clearTimeout(timer);
      socket.destroy();
      reject(error);
    };
    const finish = (result: KeepAliveExchange) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(result);
    };
    const onProgress = () => {
      const parsed = parseResponse(buffered);
      if (!parsed) return;
      buffered = buffered.subarray(parsed.consumed);
      if (!first) {
        first = parsed.response;
        if (first.headers.connection?.toLowerCase() === 'close') {
          // The server promised to close: the follow-up belongs on a new connection.
          if (socketClosed) finish({ first, followUp: null, followUpMs: null, closedAfterFirst: true });
          return;
        }
        clearTimeout(timer);
        timer = setTimeout(
          () => fail(new Error(`the follow-up got no answer within ${timeoutMs} ms on the kept-alive socket`)),
          timeoutMs,
        );
        followUpSentAt = performance.now();
        socket.write(serialize(followUp));
        return;
      }
      finish({
        first,
        followUp: parsed.response,
        followUpMs: performance.now() - followUpSentAt,
        closedAfterFirst: false,
      });
    };

    socket.on('data', (chunk: Buffer) => {
      buffered = Buffer.concat([buffered, chunk]);
      onProgress();
    });
    // A server that refuses a body may reset the socket while the client is still writing; the answer may already be in.
    socket.on('error', () => undefined);
    socket.on('close', () => {
      socketClosed = true;
      if (first && first.headers.connection?.toLowerCase() === 'close') {
        finish({ first, followUp: null, followUpMs: null, closedAfterFirst: true });
      } else if (first) {
        fail(new Error('the server closed a keep-alive connection without announcing Connection: close'));
      } else {
        fail(new Error(`the server closed the connection without answering ${request.method} ${request.path}`));
      }
    });
    socket.write(serialize(request));
  });
}

function serialize(request: RawRequest): Buffer {
  const body = request.body ?? Buffer.alloc(0);
  const headers: Record<string, string> = { host: 'localhost', connection: 'keep-alive', ...request.headers };
  if (
    !Object.keys(headers).some((name) => name.toLowerCase() === 'content-length') &&
    (body.length > 0 || request.method !== 'GET')
  ) {
    headers['content-length'] = String(body.length);
  }
  const head = `${request.method} ${request.path} HTTP/1.1\r\n${Object.entries(headers)
    .map(([name, value]) => `${name}: ${value}\r\n`)
    .join('')}\r\n`;
  return Buffer.concat([Buffer.from(head, 'latin1'), body]);
}

/** One complete response at the start of `bytes` (Content-Length or chunked body), or null while incomplete. */
function parseResponse(bytes: Buffer): { response: RawResponse; consumed: number } | null {
  const headEnd = bytes.indexOf('\r\n\r\n');
  if (headEnd === -1) return null;
  const [statusLine, ...lines] = bytes.subarray(0, headEnd).toString('latin1').split('\r\n');
  const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(statusLine)?.[1]);
  const headers: Record<string, string> = {};
  for (const line of lines) {
    const colon = line.indexOf(':');
    headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
  const bodyStart = headEnd + 4;
  if (headers['transfer-encoding']?.toLowerCase() === 'chunked') {
    const chunks: Buffer[] = [];
    let offset = bodyStart;
    for (;;) {
      const lineEnd = bytes.indexOf('\r\n', offset);
      if (lineEnd === -1) return null;
      const size = parseInt(bytes.subarray(offset, lineEnd).toString('latin1'), 16);
      if (bytes.length < lineEnd + 2 + size + 2) return null;
      if (size === 0)
        return { response: { status, headers, body: Buffer.concat(chunks).toString('utf8') }, consumed: lineEnd + 4 };
      chunks.push(bytes.subarray(lineEnd + 2, lineEnd + 2 + size));
      offset = lineEnd + 2 + size + 2;
    }
  }
  const length = Number(headers['content-length'] ?? 0);
  if (bytes.length < bodyStart + length) return null;
  return {
    response: { status, headers, body: bytes.subarray(bodyStart, bodyStart + length).toString('utf8') },
    consumed: bodyStart + length,
  };
}

/**
 * One request over a fresh socket, sent byte for byte (headers of any size) in `chunkBytes` pieces a
 * `chunkGapMs` apart, as a client on a real link sends a large head, and the answer read until it is complete.
 * Like curl, the client must be able to send its whole request: rejects when the connection is reset while
 * sending, closed before a whole answer arrived, or after `timeoutMs`.
 */
export function exchangeOnce(
  baseUrl: string,
  request: RawRequest,
  options: { timeoutMs?: number; chunkBytes?: number; chunkGapMs?: number } = {},
): Promise<RawResponse> {
  const { timeoutMs = 10_000, chunkBytes = 16 * 1024, chunkGapMs = 5 } = options;
  const { hostname, port } = new URL(baseUrl);
  const bytes = serialize({ ...request, headers: { connection: 'close', ...request.headers } });
  return new Promise((resolve, reject) => {
    // Half-open: a server may answer and send its FIN before the whole request is out, and the client goes on sending.
    const socket = net.connect({ port: Number(port), host: hostname, allowHalfOpen: true });
    let buffered = Buffer.alloc(0);
    let response: RawResponse | null = null;
    let sent = false;
    let settled = false;
    const settle = (outcome: () => void) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      outcome();
    };
    const timer = setTimeout(
      () => settle(() => reject(new Error(`no answer to ${request.method} within ${timeoutMs} ms`))),
      timeoutMs,
    );
    const finishIfDone = () => {
      if (sent && response) settle(() => resolve(response!));
    };
    socket.on('data', (chunk: Buffer) => {
      buffered = Buffer.concat([buffered, chunk]);
      response ??= parseResponse(buffered)?.response ?? null;
      finishIfDone();
    });
    socket.on('error', (error) => settle(() => reject(error)));
    const closedEarly = () =>
      new Error(
        sent
          ? 'the server closed the connection without a complete answer'
          : 'the server closed the connection while the request was being sent',
      );
    // The server's FIN: an answer already in is kept while the rest of the request goes out; none is a refusal.
    socket.on('end', () => {
      if (!response) settle(() => reject(closedEarly()));
    });
    socket.on('close', () => settle(() => reject(closedEarly())));
    const sendFrom = (offset: number) => {
      if (settled) return;
      socket.write(bytes.subarray(offset, offset + chunkBytes), (error) => {
        if (error) return settle(() => reject(error));
        if (offset + chunkBytes >= bytes.length) {
          sent = true;
          finishIfDone();
          return;
        }
        setTimeout(() => sendFrom(offset + chunkBytes), chunkGapMs);
      });
    };
    socket.once('connect', () => sendFrom(0));
  });
}
