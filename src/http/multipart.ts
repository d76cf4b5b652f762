import type { IncomingMessage } from 'node:http';
import type { FastifyRequest } from 'fastify';
import { HttpError, badRequest } from '../errors.ts';
import { serializeErrorForLog } from '../logger.ts';
import { MULTIPART_LIMITS } from '../plugins/external/index.ts';

export interface MultipartForm {
  fields: Record<string, string>;
  file: { field: string; filename: string; mimetype: string; data: Buffer } | null;
}

/**
 * When a form is refused part-way, the rest of its body is read and dropped, up to these bounds, before
 * the answer goes out, so the keep-alive connection is free for the next request. Past either bound the
 * answer carries `Connection: close` instead (the remaining bytes keep flowing away until the socket
 * closes). 8 MiB and 2 s cover what a client has in flight when it is refused on any link worth keeping
 * alive, and dropping bytes costs the server only the copy from the socket. A form refused by its `watchFile`
 * is answered first and drained after, within the same bounds.
 */
export const UNREAD_BODY_DRAIN_BYTES = 8 * 1024 * 1024;
export const UNREAD_BODY_DRAIN_MS = 2_000;

/** RFC 2046: a boundary is 1 to 70 characters. Longer ones also break busboy's delimiter search. */
const MAX_BOUNDARY_LENGTH = 70;

/**
 * Reads a multipart form with at most one file, refusing the file while it streams once it passes
 * `maxFileBytes` (413), so an oversized upload is never buffered whole. Every way a body can be
 * malformed (no boundary, a truncated part, no closing boundary, too many parts) is a 400 with a
 * `detail` that names the problem, and a refused body never holds up its keep-alive connection.
 */
export async function readMultipart(
  request: FastifyRequest,
  opts: {
    fileField: string;
    maxFileBytes: number;
    tooLargeDetail: string;
    /** Other file fields the form may carry instead of `fileField`, each with its own limit (the first file part wins). */
    alternativeFileFields?: Record<string, { maxFileBytes: number; tooLargeDetail: string }>;
    /**
     * Sees each chunk of the file as it streams (it must stay cheap: it runs on the event loop). An HttpError it
     * throws is answered at once; the rest of the body is dropped unparsed after the answer (`dropBodyAfterAnswer`).
     */
    watchFile?: (chunk: Buffer) => void;
  },
): Promise<MultipartForm> {
  if (!request.isMultipart()) throw badRequest('expected multipart/form-data');
  const boundary = multipartBoundary(request.headers['content-type']);
  // Nothing has been read yet: Node drains an untouched body by itself after the answer.
  if (!boundary)
    throw badRequest(`multipart/form-data needs a boundary parameter of 1 to ${MAX_BOUNDARY_LENGTH} characters`);

  const form: MultipartForm = { fields: {}, file: null };
  const closing = new ClosingDelimiterWatch(boundary);
  // Attached in the same tick as the parser's pipe, before any data flows, so it sees every chunk.
  request.raw.on('data', closing.scan);
  try {
    const fileLimits = {
      [opts.fileField]: { maxFileBytes: opts.maxFileBytes, tooLargeDetail: opts.tooLargeDetail },
      ...opts.alternativeFileFields,
    };
    const largestFile = Math.max(...Object.values(fileLimits).map((limit) => limit.maxFileBytes));
    for await (const part of request.parts({ limits: { fileSize: largestFile } })) {
      if (part.type === 'file') {
        const limit = Object.hasOwn(fileLimits, part.fieldname) ? fileLimits[part.fieldname] : undefined;
        if (!limit || form.file) {
          part.file.resume();
          continue;
        }
        const chunks: Buffer[] = [];
        let size = 0;
        for await (const chunk of part.file) {
          size += chunk.length;
          if (size > limit.maxFileBytes) throw new HttpError(413, limit.tooLargeDetail);
          watchFile(opts.watchFile, chunk);
          chunks.push(chunk);
        }
        if (part.file.truncated) throw new HttpError(413, limit.tooLargeDetail);
        form.file = {
          field: part.fieldname,
          filename: part.filename,
          mimetype: part.mimetype,
          data: Buffer.concat(chunks),
        };
      } else {
        if (part.fieldnameTruncated) throw badRequest('a multipart field name is too long');
        if (part.valueTruncated) {
          throw new HttpError(413, `field ${part.fieldname} is larger than ${MULTIPART_LIMITS.fieldSize / 1024} KiB`);
        }
        form.fields[part.fieldname] = typeof part.value === 'string' ? part.value : JSON.stringify(part.value ?? '');
      }
    }
    if (!closing.seen) throw malformed('the body ended before its closing boundary');
  } catch (error) {
    request.raw.off('data', closing.scan);
    if (error instanceof RefusedWhileStreaming) {
      dropBodyAfterAnswer(request.raw);
      throw error.refusal;
    }
    const refusal = error instanceof HttpError ? error : refusalFor(error, opts);
    if (!(error instanceof HttpError))
      request.log.debug({ err: serializeErrorForLog(error) }, 'multipart body refused');
    throw await afterReleasingBody(request.raw, refusal);
  }
  request.raw.off('data', closing.scan);
  // busboy may finish at the closing boundary; an epilogue after it is dropped so the connection stays usable.
  if (!(await drainUnreadBody(request.raw))) {
    throw new HttpError(400, 'malformed multipart body: too much data after the closing boundary', {
      connection: 'close',
    });
  }
  return form;
}

export function parseBooleanField(value: string | undefined, name: string): boolean {
  if (value === undefined || value === '') return false;
  if (/^(true|1|yes|on)$/i.test(value)) return true;
  if (/^(false|0|no|off)$/i.test(value)) return false;
  throw badRequest(`${name} must be a boolean`);
}

export function parseIntegerField(
  value: string | undefined,
  name: string,
  min: number,
  max: number,
): number | undefined {
  if (value === undefined || value === '') return undefined;
  const n = /^\s*\d{1,15}\s*$/.test(value) ? Number(value) : NaN;
  if (!Number.isInteger(n) || n < min || n > max)
    throw badRequest(`${name} must be an integer between ${min} and ${max}`);
  return n;
}

/** The `boundary` parameter of a multipart Content-Type, quoted or not; null when missing or out of bounds. */
export function multipartBoundary(contentType: string | undefined): string | null {
  const match = /;\s*boundary\s*=\s*(?:"((?:[^"\\\r\n]|\\.)*)"|([^;\s"]+))/i.exec(contentType ?? '');
  const boundary = match ? (match[1]?.replace(/\\(.)/g, '$1') ?? match[2]) : undefined;
  if (!boundary || boundary.length > MAX_BOUNDARY_LENGTH) return null;
  return boundary;
}

/**
 * busboy treats a body that simply stops as a complete form, so a truncated upload would pass as a
 * shorter one. This watches the raw bytes for the closing delimiter (`CRLF--boundary--`, or
 * `--boundary--` as the very first bytes of a form with no parts) across chunk seams.
 */
class ClosingDelimiterWatch {
  seen = false;
  private readonly needle: Buffer;
  /** The last `needle.length - 1` bytes, seeded with CRLF so a delimiter at the start of the body matches too. */
  private carry = Buffer.from('\r\n');

  constructor(boundary: string) {
    this.needle = Buffer.from(`\r\n--${boundary}--`, 'latin1');
  }

  readonly scan = (chunk: Buffer): void => {
    if (this.seen) return;
    const keep = this.needle.length - 1;
    const seam = Buffer.concat([this.carry, chunk.subarray(0, keep)]);
    if (seam.includes(this.needle) || chunk.includes(this.needle)) {
      this.seen = true;
      return;
    }
    const tail =
      chunk.length >= keep ? chunk.subarray(chunk.length - keep) : seam.subarray(Math.max(0, seam.length - keep));
    this.carry = Buffer.from(tail);
  };
}

/** A refusal from `watchFile`: answered before the rest of the body is read. */
class RefusedWhileStreaming extends Error {
  constructor(readonly refusal: HttpError) {
    super(refusal.detail);
  }
}

function watchFile(watch: ((chunk: Buffer) => void) | undefined, chunk: Buffer): void {
  try {
    watch?.(chunk);
  } catch (error) {
    throw error instanceof HttpError ? new RefusedWhileStreaming(error) : error;
  }
}

/**
 * Detaches the parser and answers at once: the refusal goes out as soon as it is known, not after the client has
 * uploaded everything, while the rest of the body is dropped unparsed (the bounds of `drainUnreadBody`; past them
 * the connection is closed, the answer having had UNREAD_BODY_DRAIN_MS to reach the client). A client that reads its
 * answer while sending (undici does) stops sending then. Not reading at all was tried: clients blocked on a
 * full socket then missed the answer; closing at once resets a connection with unread bytes, and the answer with it.
 */
function dropBodyAfterAnswer(raw: IncomingMessage): void {
  raw.unpipe();
  void drainUnreadBody(raw).then((ended) => {
    if (!ended) raw.socket?.destroy();
  });
}

function malformed(reason: string): HttpError {
  return badRequest(`malformed multipart body: ${reason}`);
}

/** The 4xx for an error out of the parser; its own messages are mapped, never passed through. */
function refusalFor(error: unknown, opts: { tooLargeDetail: string }): HttpError {
  switch ((error as { code?: unknown }).code) {
    case 'FST_REQ_FILE_TOO_LARGE':
      return new HttpError(413, opts.tooLargeDetail);
    case 'FST_FILES_LIMIT':
      return badRequest(`multipart form has too many files: at most ${MULTIPART_LIMITS.files}`);
    case 'FST_FIELDS_LIMIT':
      return badRequest(`multipart form has too many fields: at most ${MULTIPART_LIMITS.fields}`);
    case 'FST_PARTS_LIMIT':
      return badRequest(`multipart form has too many parts: at most ${MULTIPART_LIMITS.parts}`);
    case 'FST_PROTO_VIOLATION':
      return badRequest('a multipart field name is not allowed');
    case 'FST_INVALID_JSON_FIELD_ERROR':
      return badRequest('a multipart field declared as JSON is not valid JSON');
  }
  const message = error instanceof Error ? error.message : '';
  if (/terminated early|unexpected end/i.test(message)) return malformed('the body ended before its closing boundary');
  if (/aborted|ECONNRESET/i.test(`${message} ${(error as { code?: unknown }).code}`))
    return malformed('the upload was aborted');
  return malformed('the body could not be parsed');
}

/**
 * Detaches the parser and drops the rest of the body (bounded); when it cannot be read to its end in
 * time the refusal closes the connection, because a half-read body would stall the next request.
 */
async function afterReleasingBody(raw: IncomingMessage, refusal: HttpError): Promise<HttpError> {
  raw.unpipe();
  if (await drainUnreadBody(raw)) return refusal;
  return new HttpError(refusal.statusCode, refusal.detail, { ...refusal.headers, connection: 'close' });
}

/** Reads and drops what is left of the body; true once it ended, false past the drain bounds or on a dropped socket. */
function drainUnreadBody(raw: IncomingMessage): Promise<boolean> {
  if (raw.complete) return Promise.resolve(true);
  if (raw.destroyed) return Promise.resolve(false);
  return new Promise((resolve) => {
    let dropped = 0;
    const settle = (ended: boolean) => {
      clearTimeout(timer);
      raw.off('data', onData);
      raw.off('end', onEnd);
      raw.off('close', onClose);
      // Left flowing: whatever still arrives is dropped until the socket closes.
      resolve(ended);
    };
    const onData = (chunk: Buffer) => {
      dropped += chunk.length;
      if (dropped > UNREAD_BODY_DRAIN_BYTES) settle(false);
    };
    const onEnd = () => settle(true);
    const onClose = () => settle(raw.complete);
    const timer = setTimeout(() => settle(false), UNREAD_BODY_DRAIN_MS);
    raw.on('data', onData);
    raw.on('end', onEnd);
    raw.on('close', onClose);
    raw.resume();
  });
}
