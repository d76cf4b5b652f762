import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { startServiceProcess, type ServiceProcess, type StartServiceOptions } from './service-process.ts';

/**
 * The service under fuzz: a child process (service-process.ts) plus the bookkeeping a fuzz run needs.
 * Every request is bounded by a timeout and classified; a crash is seen as the child's exit, recorded
 * with the requests that preceded it and the log tail, and the service is restarted on the same data and
 * avatar directories (so the run goes on and finds more than the first defect). All findings are kept
 * and reported together at the end.
 */

/** Longest answer a fuzzed request may take: previews of 1000 characters and clone conversions finish in a few seconds; 20 s is a hang. */
export const REQUEST_TIMEOUT_MS = 20_000;
/** Restarts after crashes before the run gives up (each costs ~4 s of start-up). */
const MAX_RESTARTS = 4;
/** Requests kept to explain a crash that surfaces on a later request (the turn a speak started may crash after its 200). */
const RECENT_REQUESTS = 6;
/** How long a refused/reset connection waits for the child's exit before calling it a crash or a dropped connection. */
const EXIT_GRACE_MS = 1_500;
/** Response text kept (enough for any JSON answer); the rest is read and counted, not kept. */
const KEPT_BODY_CHARS = 64 * 1024;
/** Response text shown in a report. */
const SHOWN_RESPONSE_CHARS = 600;
/** Request body bytes shown in a report. */
const SHOWN_BODY_CHARS = 400;

export interface FuzzRequest {
  /** Operation under fuzz, as in OpenAPI: `POST /voices/clone`. */
  op: string;
  /** What was fuzzed: `json`, `schema`, `path`, `query`, `multipart`, `wav`, … */
  kind: string;
  method: string;
  /** Path and query exactly as sent (already escaped). */
  path: string;
  headers: Record<string, string>;
  body?: Buffer;
}

export interface FuzzResponse {
  status: number;
  contentType: string;
  body: string;
  bytes: number;
  ms: number;
}

export interface Finding {
  what: string;
  op: string;
  request: string;
  response: string;
}

export interface FuzzFigures {
  requests: number;
  byStatus: Record<string, number>;
  /** Every 5xx answer, expected or not. */
  serverErrors: number;
  crashes: number;
  timeouts: number;
}

export class FuzzTarget {
  readonly findings: Finding[] = [];
  readonly figures: FuzzFigures = { requests: 0, byStatus: {}, serverErrors: 0, crashes: 0, timeouts: 0 };
  private readonly recent: FuzzRequest[] = [];
  private sequence = 0;
  private restarts = 0;
  gaveUp = false;

  private constructor(
    public service: ServiceProcess,
    private readonly options: StartServiceOptions,
    private readonly afterRestart: (service: ServiceProcess) => Promise<void>,
  ) {}

  /** Starts the service; `afterRestart` re-creates per-process state (live sessions) after a crash restart. */
  static async start(
    options: StartServiceOptions,
    afterRestart: (service: ServiceProcess) => Promise<void>,
  ): Promise<FuzzTarget> {
    const service = await startServiceProcess(options);
    return new FuzzTarget(
      service,
      { ...options, dataDir: service.dataDir, avatarsDir: service.avatarsDir },
      afterRestart,
    );
  }

  /** Strings that must never appear in a response: where the service keeps its files. */
  private secretPaths(): string[] {
    const repoRoot = path.resolve(import.meta.dirname, '..', '..');
    return [
      this.service.dataDir,
      this.service.avatarsDir,
      this.service.tmpDir,
      repoRoot,
      path.join(os.tmpdir(), 'svc-proc-'),
    ];
  }

  /** Records traffic sent outside `send` (a WebSocket run) so a crash report can show what preceded it. */
  noteActivity(request: FuzzRequest): void {
    this.recent.push(request);
    if (this.recent.length > RECENT_REQUESTS) this.recent.shift();
  }

  /** Strings no answer or server message may contain. */
  leaksPath(text: string): boolean {
    return this.secretPaths().some((p) => text.includes(p));
  }

  finding(what: string, request: FuzzRequest | null, response: string): void {
    this.findings.push({ what, op: request?.op ?? '-', request: request ? describeRequest(request) : '-', response });
  }

  /**
   * Sends one request and classifies the outcome. Returns the response, or null when there was none
   * (crash, timeout, dropped connection — each recorded as a finding).
   */
  async send(request: FuzzRequest, allowed5xx: ReadonlySet<number> = new Set()): Promise<FuzzResponse | null> {
    if (this.gaveUp) return null;
    this.noteActivity(request);
    this.figures.requests++;
    const requestId = `fuzz-${++this.sequence}`;
    const result = await this.exchange(request, requestId);
    if ('error' in result) {
      if (result.error.startsWith('unsendable')) {
        this.figures.requests--;
        this.recent.pop();
        return null;
      }
      if (result.error === 'timeout') {
        this.figures.timeouts++;
        this.finding(`no answer within ${REQUEST_TIMEOUT_MS} ms`, request, '-');
        return null;
      }
      await this.checkAlive(`${result.error} on this request`, { waitForExit: true });
      if (this.service.exitStatus() === null)
        this.finding(`connection dropped without an answer (${result.error})`, request, '-');
      return null;
    }
    const response = result;
    this.figures.byStatus[response.status] = (this.figures.byStatus[response.status] ?? 0) + 1;
    if (response.status >= 500) {
      this.figures.serverErrors++;
      if (!allowed5xx.has(response.status))
        this.finding(`HTTP ${response.status}`, request, `${shown(response.body)}${await this.loggedError(requestId)}`);
    }
    if (response.status >= 400 && !isDetailBody(response))
      this.finding(`HTTP ${response.status} without a {detail} body`, request, shown(response.body));
    if (this.leaksPath(response.body)) this.finding('filesystem path in the response', request, shown(response.body));
    return response;
  }

  /**
   * If the child has exited: records the crash with the recent requests and the log tail, and restarts
   * it. Call after anything that could have crashed the service (a WebSocket run, a refused request).
   */
  async checkAlive(context: string, options: { waitForExit?: boolean } = {}): Promise<boolean> {
    if (this.service.exitStatus() === null) {
      if (!options.waitForExit) return true;
      const exited = await Promise.race([this.service.exited.then(() => true), delay(EXIT_GRACE_MS).then(() => false)]);
      if (!exited) return true;
    }
    const status = this.service.exitStatus()!;
    this.figures.crashes++;
    this.findings.push({
      what: `process exited (code ${status.code}, signal ${status.signal}) — ${context}`,
      op: this.recent.at(-1)?.op ?? '-',
      request: this.recent.map(describeRequest).join('\n    then '),
      response: lastLogLines(this.service.logs()),
    });
    if (this.restarts >= MAX_RESTARTS) {
      this.gaveUp = true;
      return false;
    }
    this.restarts++;
    this.service = await startServiceProcess(this.options);
    await this.afterRestart(this.service);
    return false;
  }

  /** The error the service logged for this request (its request id is ours), which explains a 500. */
  private async loggedError(requestId: string): Promise<string> {
    await delay(50);
    const line = this.service
      .logs()
      .split('\n')
      .find((l) => l.includes(`"reqId":"${requestId}"`) && l.includes('"err"'));
    if (!line) return '';
    try {
      const { err } = JSON.parse(line);
      return `\n  logged: ${
        typeof err === 'string'
          ? err
          : `${err?.type ?? ''}: ${err?.message ?? ''} ${
              String(err?.stack ?? '')
                .split('\n')[1]
                ?.trim() ?? ''
            }`
      }`;
    } catch {
      return `\n  logged: ${line.slice(0, 300)}`;
    }
  }

  private exchange(request: FuzzRequest, requestId: string): Promise<FuzzResponse | { error: string }> {
    const started = performance.now();
    return new Promise((resolve) => {
      let settled = false;
      // Declared before anything can settle: a request Node refuses to build settles before the timer exists.
      let timer: NodeJS.Timeout | undefined = undefined;
      const settle = (value: FuzzResponse | { error: string }) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        resolve(value);
      };
      const headers = {
        ...request.headers,
        'x-request-id': requestId,
        ...(request.body ? { 'content-length': String(request.body.length) } : {}),
      };
      let req: http.ClientRequest;
      try {
        // A fresh connection per request (no keep-alive pool): a connection the server dropped after one
        // answer can never be blamed on the next request.
        req = http.request({
          host: '127.0.0.1',
          port: this.service.port,
          method: request.method,
          path: request.path,
          headers,
          agent: false,
        });
      } catch (error) {
        // Node refuses to send some paths (invalid characters): that input never reaches the service.
        settle({ error: `unsendable: ${(error as Error).message}` });
        return;
      }
      timer = setTimeout(() => {
        req.destroy();
        settle({ error: 'timeout' });
      }, REQUEST_TIMEOUT_MS);
      req.on('error', (error: NodeJS.ErrnoException) => settle({ error: error.code ?? error.message }));
      req.on('response', (res) => {
        const contentType = String(res.headers['content-type'] ?? '');
        const status = res.statusCode ?? 0;
        if (contentType.includes('text/event-stream')) {
          // A stream that stays open for the session's lifetime: the status and headers are the answer.
          res.destroy();
          settle({ status, contentType, body: '', bytes: 0, ms: performance.now() - started });
          return;
        }
        let body = '';
        let bytes = 0;
        res.on('data', (chunk: Buffer) => {
          bytes += chunk.length;
          if (body.length < KEPT_BODY_CHARS && !/^(audio|image|video)\//.test(contentType))
            body += chunk.toString('utf8');
        });
        res.on('end', () =>
          settle({ status, contentType, body: body.slice(0, KEPT_BODY_CHARS), bytes, ms: performance.now() - started }),
        );
        res.on('error', (error: NodeJS.ErrnoException) => settle({ error: error.code ?? error.message }));
      });
      req.end(request.body);
    });
  }
}

function shown(body: string): string {
  return body.length > SHOWN_RESPONSE_CHARS ? `${body.slice(0, SHOWN_RESPONSE_CHARS)}…` : body;
}

function isDetailBody(response: FuzzResponse): boolean {
  if (!response.contentType.includes('application/json')) return false;
  try {
    const parsed = JSON.parse(response.body);
    return typeof parsed?.detail === 'string';
  } catch {
    // Only the first KEPT_BODY_CHARS are kept: a detail echoing a huge input is cut, but starts like one.
    return response.bytes > KEPT_BODY_CHARS && response.body.startsWith('{"detail":"');
  }
}

export function describeRequest(request: FuzzRequest): string {
  const shownPath =
    request.path.length > 300 ? `${request.path.slice(0, 300)}…(${request.path.length} chars)` : request.path;
  let body = '';
  if (request.body) {
    // Text when it is valid UTF-8 without control bytes other than tab and line ends; hex otherwise.
    const text = request.body.toString('utf8');
    const printable =
      Buffer.from(text, 'utf8').equals(request.body) &&
      !request.body.some((b) => (b < 0x20 && b !== 0x09 && b !== 0x0a && b !== 0x0d) || b === 0x7f);
    const shown = printable
      ? JSON.stringify(text.slice(0, SHOWN_BODY_CHARS))
      : `hex ${request.body.subarray(0, SHOWN_BODY_CHARS / 2).toString('hex')}`;
    body = ` body(${request.body.length} B${request.headers['content-type'] ? `, ${request.headers['content-type']}` : ''}): ${shown}${request.body.length > SHOWN_BODY_CHARS ? '…' : ''}`;
  }
  return `[${request.kind}] ${request.method} ${shownPath}${body}`;
}

/** The last log lines of a crashed child: the fatal stack or the last pino records. */
function lastLogLines(logs: string): string {
  return logs.trim().split('\n').slice(-12).join('\n').slice(-3000);
}

/** Findings shown per group (same kind, operation and logged cause); the rest are counted. */
const EXAMPLES_PER_GROUP = 3;

/** All findings, grouped by what happened on which operation, each group with its first counterexamples. */
export function formatFindings(findings: Finding[]): string {
  const groups = new Map<string, Finding[]>();
  for (const f of findings) {
    const cause = /logged: (.*)/.exec(f.response)?.[1]?.split(' at ')[0] ?? '';
    const key = `${f.what}${cause ? ` — ${cause}` : ''}`;
    groups.set(key, [...(groups.get(key) ?? []), f]);
  }
  return [...groups.entries()]
    .map(([key, list]) => {
      const ops = [...new Set(list.map((f) => f.op))];
      const examples = list
        .slice(0, EXAMPLES_PER_GROUP)
        .map((f) => `    ${f.request}\n      → ${f.response.replace(/\n/g, '\n        ')}`);
      const more = list.length > EXAMPLES_PER_GROUP ? `\n    … and ${list.length - EXAMPLES_PER_GROUP} more` : '';
      return `${list.length}× ${key}\n  on ${ops.join(', ')}\n${examples.join('\n')}${more}`;
    })
    .join('\n\n');
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
