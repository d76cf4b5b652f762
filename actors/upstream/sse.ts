/**
 * Incremental server-sent-events decoder (the subset chat-completions and DashScope servers use): feed
 * the raw bytes as they arrive, get back the `data` payload of each completed event. Comments
 * (`: ping`) and other fields are ignored; multi-line data is joined with '\n' as the SSE spec says.
 *
 * Bounded and linear: an unterminated line is kept as a list of chunks (never re-concatenated while it
 * grows), only the newly arrived bytes are searched for line ends, and a line or an event larger than
 * its bound throws `SseTooLargeError` at once, so a server streaming one endless line costs at most the
 * bound in memory and never blocks the event loop on ever-longer rescans.
 */
import { UpstreamError } from './errors.ts';

/**
 * Longest line and longest event (its data lines together) accepted from an upstream. A chat-completions
 * chunk is a few hundred bytes and a DashScope TTS event (base64 PCM of a fraction of a second) tens of
 * KiB; 1 MiB leaves wide headroom for both.
 */
export const MAX_SSE_LINE_BYTES = 1024 * 1024;
export const MAX_SSE_EVENT_BYTES = 1024 * 1024;

const LF = 0x0a;
const CR = 0x0d;

/** An upstream sent an SSE line or event over its bound; the caller aborts the request. */
export class SseTooLargeError extends UpstreamError {
  constructor(label: string, what: 'line' | 'event', limit: number) {
    super(`${label} upstream sent an SSE ${what} over ${limit} bytes; the stream was aborted`);
  }
}

export interface SseDecoderOptions {
  /** Names the upstream in errors (`LLM`, `cloud_a`). */
  label?: string;
  maxLineBytes?: number;
  maxEventBytes?: number;
}

export class SseDataDecoder {
  private readonly label: string;
  private readonly maxLineBytes: number;
  private readonly maxEventBytes: number;
  /** The current line's bytes so far, as received (joined once, when its end arrives). */
  private partial: Buffer[] = [];
  private partialBytes = 0;
  /** The previous chunk ended with CR: an LF starting the next one belongs to the same line break. */
  private skipLeadingLf = false;
  private dataLines: string[] = [];
  private dataBytes = 0;

  constructor(options: SseDecoderOptions = {}) {
    this.label = options.label ?? 'upstream';
    this.maxLineBytes = options.maxLineBytes ?? MAX_SSE_LINE_BYTES;
    this.maxEventBytes = options.maxEventBytes ?? MAX_SSE_EVENT_BYTES;
  }

  /** Decodes one received chunk; a string is taken as its UTF-8 bytes. */
  push(chunk: Uint8Array | string): string[] {
    const bytes =
      typeof chunk === 'string'
        ? Buffer.from(chunk, 'utf8')
        : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    const payloads: string[] = [];
    let start = 0;
    if (this.skipLeadingLf && bytes.length > 0) {
      if (bytes[0] === LF) start = 1;
      this.skipLeadingLf = false;
    }
    // Each terminator position is found once: indexOf restarts only past the line just consumed.
    let nextLf = bytes.indexOf(LF, start);
    let nextCr = bytes.indexOf(CR, start);
    while (nextLf !== -1 || nextCr !== -1) {
      const end = nextCr !== -1 && (nextLf === -1 || nextCr < nextLf) ? nextCr : nextLf;
      let separator = 1;
      if (bytes[end] === CR) {
        if (end + 1 < bytes.length) separator = bytes[end + 1] === LF ? 2 : 1;
        else this.skipLeadingLf = true;
      }
      this.completeLine(bytes.subarray(start, end), payloads);
      start = end + separator;
      if (nextLf !== -1 && nextLf < start) nextLf = bytes.indexOf(LF, start);
      if (nextCr !== -1 && nextCr < start) nextCr = bytes.indexOf(CR, start);
    }
    if (start < bytes.length) this.appendPartial(bytes.subarray(start));
    return payloads;
  }

  /** Emits an event left unterminated when the stream ended (some servers omit the final blank line). */
  flush(): string[] {
    const payloads: string[] = [];
    if (this.partialBytes > 0) this.completeLine(Buffer.alloc(0), payloads);
    this.skipLeadingLf = false;
    this.consumeLine('', payloads);
    return payloads;
  }

  private appendPartial(bytes: Buffer): void {
    if (this.partialBytes + bytes.length > this.maxLineBytes)
      throw new SseTooLargeError(this.label, 'line', this.maxLineBytes);
    this.partial.push(bytes);
    this.partialBytes += bytes.length;
  }

  private completeLine(tail: Buffer, payloads: string[]): void {
    if (this.partialBytes + tail.length > this.maxLineBytes)
      throw new SseTooLargeError(this.label, 'line', this.maxLineBytes);
    const line = this.partial.length === 0 ? tail : Buffer.concat([...this.partial, tail]);
    this.partial = [];
    this.partialBytes = 0;
    this.consumeLine(line.toString('utf8'), payloads);
  }

  private consumeLine(line: string, payloads: string[]): void {
    if (line === '') {
      if (this.dataLines.length > 0) payloads.push(this.dataLines.join('\n'));
      this.dataLines = [];
      this.dataBytes = 0;
      return;
    }
    if (line.startsWith(':')) return;
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    if (field !== 'data') return;
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    this.dataBytes += Buffer.byteLength(value, 'utf8') + 1;
    if (this.dataBytes > this.maxEventBytes) throw new SseTooLargeError(this.label, 'event', this.maxEventBytes);
    this.dataLines.push(value);
  }
}

/** Yields the data payload of each SSE event of a byte stream, bounded as `SseDataDecoder` is. */
export async function* sseDataPayloads(
  body: AsyncIterable<Uint8Array>,
  options: SseDecoderOptions = {},
): AsyncGenerator<string> {
  const decoder = new SseDataDecoder(options);
  for await (const chunk of body) yield* decoder.push(chunk);
  yield* decoder.flush();
}
