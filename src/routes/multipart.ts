import type { FastifyRequest } from 'fastify';
import { HttpError, badRequest } from '../errors.ts';

export interface MultipartForm {
  fields: Record<string, string>;
  file: { field: string; filename: string; mimetype: string; data: Buffer } | null;
}

/**
 * Reads a multipart form with at most one file, refusing the file while it streams once it passes
 * `maxFileBytes` (413), so an oversized upload is never buffered whole.
 */
export async function readMultipart(
  request: FastifyRequest,
  opts: { fileField: string; maxFileBytes: number; tooLargeDetail: string },
): Promise<MultipartForm> {
  if (!request.isMultipart()) throw badRequest('expected multipart/form-data');
  const form: MultipartForm = { fields: {}, file: null };
  try {
    for await (const part of request.parts({ limits: { fileSize: opts.maxFileBytes } })) {
      if (part.type === 'file') {
        if (part.fieldname !== opts.fileField || form.file) {
          part.file.resume();
          continue;
        }
        const chunks: Buffer[] = [];
        let size = 0;
        for await (const chunk of part.file) {
          size += chunk.length;
          if (size > opts.maxFileBytes) throw new HttpError(413, opts.tooLargeDetail);
          chunks.push(chunk);
        }
        if (part.file.truncated) throw new HttpError(413, opts.tooLargeDetail);
        form.file = { field: part.fieldname, filename: part.filename, mimetype: part.mimetype, data: Buffer.concat(chunks) };
      } else {
        form.fields[part.fieldname] = String(part.value ?? '');
      }
    }
  } catch (error) {
    if (error instanceof HttpError) throw error;
    const code = (error as { code?: string }).code;
    if (code === 'FST_REQ_FILE_TOO_LARGE') throw new HttpError(413, opts.tooLargeDetail);
    if (typeof code === 'string' && code.startsWith('FST_')) throw badRequest(`malformed multipart body: ${(error as Error).message}`);
    throw error;
  }
  return form;
}

export function parseBooleanField(value: string | undefined, name: string): boolean {
  if (value === undefined || value === '') return false;
  if (/^(true|1|yes|on)$/i.test(value)) return true;
  if (/^(false|0|no|off)$/i.test(value)) return false;
  throw badRequest(`${name} must be a boolean`);
}

export function parseIntegerField(value: string | undefined, name: string, min: number, max: number): number | undefined {
  if (value === undefined || value === '') return undefined;
  const n = Number(value);
  if (!Number.isInteger(n) || n < min || n > max) throw badRequest(`${name} must be an integer between ${min} and ${max}`);
  return n;
}
