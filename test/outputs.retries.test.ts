/**
 * An output's life without media (the connector is a test double; the real RTMP and WHIP pushes are in
 * outputs.rtmp/whip tests): reconnects with backoff, `output_failed` reported on a failure and on giving up but not on
 * every silent retry, back to live when a reconnect holds, a session's end stops without a failure, stop closes the link.
 */
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { SessionOutputs, type OutputConnector, type OutputLink } from '../src/streaming/outputs.ts';

const FAST = { initialMs: 10, maxDelayMs: 40, giveUpMs: 300 };
const logger = pino({ level: 'silent' });
const RTMP = { type: 'rtmp' as const, url: 'rtmp://127.0.0.1:1935/live/secret-key' };

async function until(predicate: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!predicate()) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

/** A link that stays up until `end(reason)`; `closed` counts its closes (a WHIP DELETE, ffmpeg killed). */
function controllableLink(): OutputLink & { end(reason: string): void; closes: number } {
  let end!: (reason: string) => void;
  const ended = new Promise<string>((resolve) => (end = resolve));
  const link = {
    ended,
    closes: 0,
    end,
    async close() {
      link.closes++;
      end('stopped');
    },
  };
  return link;
}

/** Outputs whose every connection is a fresh controllable link; what they report to SSE is collected. */
function outputsOverControllableLinks() {
  const links: Array<ReturnType<typeof controllableLink>> = [];
  const reports: string[] = [];
  const outputs = new SessionOutputs(
    async () => {
      const link = controllableLink();
      links.push(link);
      return link;
    },
    (_id, message) => reports.push(message),
    logger,
    FAST,
  );
  return { outputs, links, reports };
}

describe('output retries', () => {
  it('a server that never answers: one output_failed, silent retries with backoff, then failed with a second report', async () => {
    const attempts: number[] = [];
    const reports: string[] = [];
    const connect: OutputConnector = async () => {
      attempts.push(performance.now());
      throw new Error('connection refused');
    };
    const outputs = new SessionOutputs(connect, (_id, message) => reports.push(message), logger, FAST);
    const { output_id } = outputs.add(RTMP);
    await until(() => outputs.list()[0].state === 'retrying', 'retrying');
    expect(outputs.active).toBe(1);
    expect(reports).toHaveLength(1);
    expect(reports[0]).toMatch(/retrying/);
    await until(() => outputs.list()[0].state === 'failed', 'failed');
    expect(reports).toHaveLength(2);
    expect(reports[1]).toMatch(/given up/);
    expect(reports.join(' ')).not.toContain('secret-key');
    // Waits double from 10 ms to the 40 ms cap: within 300 ms that is a handful of attempts, not hundreds.
    expect(attempts.length).toBeGreaterThan(3);
    expect(attempts.length).toBeLessThan(20);
    expect(outputs.list()[0]).toEqual({ output_id, type: 'rtmp', url: 'rtmp://127.0.0.1:1935/live', state: 'failed' });
    // A given-up output no longer counts as a consumer of its session (orphan reaping).
    expect(outputs.active).toBe(0);
  });

  it('a dropped live output is reported, reconnects and is live again; DELETE closes the live link', async () => {
    const { outputs, links, reports } = outputsOverControllableLinks();
    const { output_id } = outputs.add(RTMP);
    await until(() => outputs.list()[0].state === 'live', 'live');
    links[0].end('the RTMP server stopped reading');
    await until(() => links.length === 2 && outputs.list()[0].state === 'live', 'live again');
    expect(reports).toHaveLength(1);
    expect(links[0].closes).toBe(1);
    await outputs.remove(output_id);
    expect(links[1].closes).toBeGreaterThanOrEqual(1);
    expect(outputs.list()).toEqual([]);
    await expect(outputs.remove(output_id)).rejects.toThrow(/not found/);
  });

  it("the session's media gone ends an output as stopped, without output_failed; closeAll is idempotent and closes live links", async () => {
    const { outputs, links, reports } = outputsOverControllableLinks();
    outputs.add(RTMP);
    outputs.add({ type: 'whip', url: 'https://whip.example/endpoint/token-in-path' });
    await until(() => outputs.list().every((o) => o.state === 'live'), 'both live');
    links[0].end('media output closed');
    await until(() => outputs.list()[0].state === 'stopped', 'stopped');
    expect(outputs.list()[1]).toMatchObject({ state: 'live', url: 'https://whip.example/endpoint' });
    await Promise.all([outputs.closeAll(), outputs.closeAll()]);
    expect(links[1].closes).toBeGreaterThanOrEqual(1);
    expect(outputs.list().map((o) => o.state)).toEqual(['stopped', 'stopped']);
    expect(reports).toEqual([]);
  });
});
