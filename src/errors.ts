/**
 * An error that maps to an HTTP status with a client-safe `detail`: the HTTP edge's own refusals (a malformed
 * body, a missing field). The domain throws `DomainError`s (`src/domain-errors.ts`) instead.
 */
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
