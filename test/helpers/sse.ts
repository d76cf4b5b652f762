export interface SseEvent {
  type: string;
  data: any;
  at: number;
}

/** A real SSE client over fetch: parses `event:`/`data:` framing and records every event with its arrival time. */
export class SseClient {
  readonly events: SseEvent[] = [];
  private readonly controller = new AbortController();
  closed = false;
  raw = '';

  static async open(url: string): Promise<SseClient> {
    const client = new SseClient();
    const res = await fetch(url, { signal: client.controller.signal, headers: { accept: 'text/event-stream' } });
    if (!res.ok || !res.body) throw new Error(`SSE failed: ${res.status}`);
    client.contentType = res.headers.get('content-type');
    void client.read(res.body);
    return client;
  }

  contentType: string | null = null;

  private async read(body: ReadableStream<Uint8Array>): Promise<void> {
    const decoder = new TextDecoder();
    let buffer = '';
    try {
      for await (const chunk of body) {
        const text = decoder.decode(chunk, { stream: true });
        this.raw += text;
        buffer += text;
        let idx: number;
        while ((idx = buffer.indexOf('\n\n')) >= 0) {
          const block = buffer.slice(0, idx);
          buffer = buffer.slice(idx + 2);
          let type = 'message';
          let data = '';
          for (const line of block.split('\n')) {
            if (line.startsWith('event: ')) type = line.slice(7);
            else if (line.startsWith('data: ')) data += line.slice(6);
          }
          if (data) this.events.push({ type, data: JSON.parse(data), at: performance.now() });
        }
      }
    } catch {
      // aborted or reset
    } finally {
      this.closed = true;
    }
  }

  of(type: string): SseEvent[] {
    return this.events.filter((e) => e.type === type);
  }

  async waitFor(predicate: (e: SseEvent) => boolean, timeoutMs: number, what: string, from = 0): Promise<SseEvent> {
    const start = performance.now();
    for (;;) {
      const found = this.events.slice(from).find(predicate);
      if (found) return found;
      if (performance.now() - start > timeoutMs)
        throw new Error(
          `timed out waiting for ${what}; got ${this.events.map((e) => e.type + (e.data?.stage ? ':' + e.data.stage : '')).join(',')}`,
        );
      await new Promise((r) => setTimeout(r, 5));
    }
  }

  close(): void {
    this.controller.abort();
  }
}
