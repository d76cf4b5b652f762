import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { SessionEventHub } from '../src/sessions/event-hub.ts';

/**
 * A value JSON.stringify cannot write (here 100,000 levels deep: its recursion overflows the stack) costs the SSE
 * event that carries it, never the stream: the events before and after it reach the client. The tool path bounds
 * depth before such a value gets this far (`MAX_JSON_DEPTH`, test/tools.calling.test.ts); this is the hub's own guard.
 */
describe('an SSE event that cannot be serialised', () => {
  it('is dropped alone: the stream stays open and the next event arrives', async () => {
    const hub = new SessionEventHub();
    const out = new PassThrough();
    let text = '';
    out.setEncoding('utf8').on('data', (chunk: string) => (text += chunk));
    let closed = false;
    hub.attach(out, () => (closed = true));
    const listened: string[] = [];
    hub.listen((event) => listened.push(event.type));

    const deep = JSON.parse(`${'{"a":'.repeat(100_000)}{}${'}'.repeat(100_000)}`) as Record<string, unknown>;
    hub.publish('tts', { stage: 'start', ms_elapsed: 0 });
    expect(() =>
      hub.publish('tool_call', { turn_id: 't', call_id: 'deep', name: 'show_map', arguments: deep }),
    ).not.toThrow();
    hub.publish('tts', { stage: 'complete', ms_elapsed: 5 });
    await new Promise((resolve) => setImmediate(resolve));

    expect(text.match(/^event: .*$/gmu)).toEqual(['event: tts', 'event: tts']);
    expect(text).toContain('"stage":"complete"');
    expect(closed).toBe(false);
    // In-process listeners still saw it: only its serialisation for clients failed.
    expect(listened).toEqual(['tts', 'tool_call', 'tts']);
    hub.close();
  });
});
