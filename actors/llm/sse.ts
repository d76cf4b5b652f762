/**
 * Incremental server-sent-events decoder (the subset chat-completions servers use): feed decoded
 * text as it arrives, get back the `data` payload of each completed event. Comments (`: ping`)
 * and other fields are ignored; multi-line data is joined with '\n' as the SSE spec says.
 */
export class SseDataDecoder {
  private buffer = '';
  private dataLines: string[] = [];

  push(text: string): string[] {
    this.buffer += text;
    const payloads: string[] = [];
    let lineEnd: number;
    while ((lineEnd = this.nextLineEnd()) !== -1) {
      const line = this.buffer.slice(0, lineEnd);
      const separatorLength = this.buffer[lineEnd] === '\r' && this.buffer[lineEnd + 1] === '\n' ? 2 : 1;
      this.buffer = this.buffer.slice(lineEnd + separatorLength);
      this.consumeLine(line, payloads);
    }
    return payloads;
  }

  /** Emits an event left unterminated when the stream ended (some servers omit the final blank line). */
  flush(): string[] {
    const payloads: string[] = [];
    if (this.buffer.length > 0) this.consumeLine(this.buffer, payloads);
    this.buffer = '';
    this.consumeLine('', payloads);
    return payloads;
  }

  private nextLineEnd(): number {
    for (let i = 0; i < this.buffer.length; i++) {
      const char = this.buffer[i];
      if (char === '\n') return i;
      // A lone trailing '\r' may be the first half of '\r\n': wait for more text.
      if (char === '\r') return i + 1 < this.buffer.length ? i : -1;
    }
    return -1;
  }

  private consumeLine(line: string, payloads: string[]): void {
    if (line === '') {
      if (this.dataLines.length > 0) payloads.push(this.dataLines.join('\n'));
      this.dataLines = [];
      return;
    }
    if (line.startsWith(':')) return;
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    if (field !== 'data') return;
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    this.dataLines.push(value);
  }
}
