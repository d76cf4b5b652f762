/** An error that maps to an HTTP status with a client-safe `detail`. */
export class HttpError extends Error {
  constructor(
    readonly statusCode: number,
    readonly detail: string,
    readonly headers: Record<string, string> = {},
  ) {
    super(detail);
    this.name = 'HttpError';
  }
}

export const badRequest = (detail: string) => new HttpError(400, detail);
export const notFound = (detail: string) => new HttpError(404, detail);
export const conflict = (detail: string) => new HttpError(409, detail);
export const forbidden = (detail: string) => new HttpError(403, detail);
export const badGateway = (detail: string) => new HttpError(502, detail);

/** Longest client-sent value an error detail repeats: enough to recognise it, never a 100 KB echo. */
export const ECHO_MAX_CHARS = 64;

/** A client-sent value as an error detail quotes it: JSON-quoted and cut to `ECHO_MAX_CHARS`. */
export function quoteClientValue(value: string): string {
  return JSON.stringify(value.length > ECHO_MAX_CHARS ? `${value.slice(0, ECHO_MAX_CHARS)}…` : value);
}

/** Retry-After of a descriptor shortage: idle connections time out within seconds (HEADERS_TIMEOUT_MS, KEEP_ALIVE_TIMEOUT_MS). */
export const OUT_OF_FILES_RETRY_AFTER_S = 5;
/** How deep `isOutOfFileDescriptors` follows `cause`: wrappers add a level or two, never more. */
const CAUSE_DEPTH = 5;
/** A process (EMFILE) or the system (ENFILE) out of file descriptors, as a code or, across a worker, in the message. */
const OUT_OF_FILES_TEXT = /\bE[MN]FILE\b/u;

/**
 * Whether an error, or one it wraps (`cause`), is a shortage of file descriptors: the service is overloaded,
 * the request was fine, so it answers 503 with Retry-After (`outOfFileDescriptors`), never 500 or 502.
 */
export function isOutOfFileDescriptors(error: unknown): boolean {
  for (let current = error, depth = 0; current instanceof Error && depth < CAUSE_DEPTH; current = current.cause, depth++) {
    const code = (current as NodeJS.ErrnoException).code;
    if (code === 'EMFILE' || code === 'ENFILE' || OUT_OF_FILES_TEXT.test(current.message)) return true;
  }
  return false;
}

export const outOfFileDescriptors = () =>
  new HttpError(503, 'the service has too many files and connections open right now; retry later', {
    'retry-after': String(OUT_OF_FILES_RETRY_AFTER_S),
  });
