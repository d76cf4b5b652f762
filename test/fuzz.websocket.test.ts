/**
 * Fuzzes the audio WebSocket (`/sessions/{id}/speak_audio_stream`, spec 6.2) of the real service, run as
 * a child process: sequences of random binary frames (odd lengths included), valid PCM, arbitrary JSON
 * and garbage text frames, control messages with hostile fields, invalid UTF-8, fragmented frames, pings
 * and pauses, ended by eos, a close or a dropped connection — mostly on a started session, sometimes on
 * one not started, terminated or unknown. Fixed seed, bounded run.
 *
 * Asserts: the process never exits, every server message is `{type: 'ack'}` or `{type: 'error', code,
 * message}` without a filesystem path, eos and client closes are answered with a close, and the live
 * session and /healthz are fine at the end. All findings are reported together.
 */
import fc from 'fast-check';
import { WebSocket } from 'ws';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tonePcm16 } from './helpers/fuzz-inputs.ts';
import { FuzzTarget, formatFindings, type FuzzRequest } from './helpers/fuzz-target.ts';
import type { ServiceProcess } from './helpers/service-process.ts';

/** Fixed: a CI failure replays exactly. */
const SEED = 0x5eed_0602;
/**
 * Frame sequences (connections): ~400 frames of every kind, on every kind of session and with every ending, in
 * ~17 s on 2 shared cores (240 took ~30 s). With this seed they include floods of 3–4 s of audio at once on the
 * live session (#123, #127), which meet the inbound bound (`audio_overflow`).
 */
const SEQUENCES = 140;
/** Session sample rate (the service default). */
const SESSION_RATE = 16_000;
/** Opening a socket on loopback takes milliseconds; 5 s means the upgrade hangs. */
const OPEN_TIMEOUT_MS = 5_000;
/** After eos the server flushes what was sent (at most ~1.5 s of audio here, played in real time) and closes; 2.5 s of slack on loopback. */
const EOS_CLOSE_SLACK_MS = 2_500;
/** A close handshake on loopback is immediate; 3 s means the server is not reading the socket. */
const CLOSE_HANDSHAKE_TIMEOUT_MS = 3_000;
/** Time for the server to answer the last frames before the sequence ends. */
const SETTLE_MS = 30;
const FILE_TIMEOUT_MS = 180_000;

type WsFrame =
  | { kind: 'pcm'; ms: number; hz: number }
  | { kind: 'bytes'; data: Uint8Array }
  | { kind: 'text'; text: string }
  | { kind: 'invalid-utf8'; data: Uint8Array }
  | { kind: 'fragmented'; text: string; cut: number }
  | { kind: 'ping'; data: Uint8Array }
  | { kind: 'pause'; ms: number };

interface Sequence {
  session: 'live' | 'created' | 'terminated' | 'unknown' | 'not-a-uuid';
  frames: WsFrame[];
  ending: 'eos' | 'close' | 'terminate';
  closeCode: number;
  interruptAfter: boolean;
}

const sampleRate = fc.oneof(
  fc.constantFrom(8000, 16000, 22050, 44100, 48000, 7999, 48001, 0, -1, 16000.5, 1e308, 2 ** 53),
  fc.integer(),
  fc.string({ maxLength: 6 }),
  fc.constant(null),
);

/** Control messages as a client might get them wrong, arbitrary JSON, and text that is not JSON at all. */
const textFrame: fc.Arbitrary<string> = fc.oneof(
  {
    weight: 3,
    arbitrary: fc.constantFrom(
      'null',
      'true',
      '0',
      '""',
      '[]',
      '{}',
      '{"type":null}',
      '{"type":{}}',
      '{"type":"config"}',
      '{"type":"eos"}',
      '{"type":"interrupt"}',
      '{"type":"ack"}',
      '{"__proto__":{"type":"eos"}}',
      '[{"type":"eos"}]',
    ),
  },
  {
    weight: 4,
    arbitrary: fc
      .record({
        type: fc.constantFrom('config', 'config', 'eos', 'interrupt', 'error', 'CONFIG', ''),
        sample_rate: fc.option(sampleRate, { nil: undefined }),
        extra: fc.option(fc.jsonValue({ maxDepth: 2 }), { nil: undefined }),
      })
      .map((m) => JSON.stringify(m)),
  },
  { weight: 3, arbitrary: fc.jsonValue({ maxDepth: 3 }).map((v) => JSON.stringify(v)) },
  { weight: 1, arbitrary: fc.string({ unit: 'grapheme', maxLength: 80 }) },
  {
    weight: 1,
    arbitrary: fc
      .integer({ min: 4000, max: 70_000 })
      .map((n) => JSON.stringify({ type: 'config', pad: 'x'.repeat(n) })),
  },
);

const frame: fc.Arbitrary<WsFrame> = fc.oneof(
  {
    weight: 5,
    arbitrary: fc.record({
      kind: fc.constant('pcm' as const),
      ms: fc.constantFrom(10, 20, 20, 20, 40, 100),
      hz: fc.integer({ min: 80, max: 3000 }),
    }),
  },
  {
    weight: 3,
    arbitrary: fc.record({
      kind: fc.constant('bytes' as const),
      data: fc.oneof(
        fc.uint8Array({ maxLength: 2048 }),
        fc.integer({ min: 0, max: 70_000 }).map((n) => new Uint8Array(n)),
      ),
    }),
  },
  { weight: 4, arbitrary: fc.record({ kind: fc.constant('text' as const), text: textFrame }) },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('invalid-utf8' as const),
      data: fc.constantFrom(
        new Uint8Array([0xff, 0xfe]),
        new Uint8Array([0x7b, 0xc0, 0xaf, 0x7d]),
        new Uint8Array([0xed, 0xa0, 0x80]),
      ),
    }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('fragmented' as const), text: textFrame, cut: fc.nat() }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('ping' as const), data: fc.uint8Array({ maxLength: 125 }) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('pause' as const), ms: fc.integer({ min: 0, max: 60 }) }) },
);

const sequence: fc.Arbitrary<Sequence> = fc.record({
  session: fc.constantFrom(
    'live',
    'live',
    'live',
    'live',
    'live',
    'live',
    'created',
    'terminated',
    'unknown',
    'not-a-uuid',
  ),
  frames: fc.array(frame, { minLength: 0, maxLength: 14 }),
  ending: fc.constantFrom('eos', 'eos', 'close', 'terminate'),
  closeCode: fc.constantFrom(1000, 1001, 3000, 4999),
  interruptAfter: fc.boolean(),
});

function describeFrame(f: WsFrame): string {
  switch (f.kind) {
    case 'pcm':
      return `pcm(${f.ms} ms)`;
    case 'bytes':
      return `bytes(${f.data.length} B${f.data.length ? ` ${Buffer.from(f.data.subarray(0, 8)).toString('hex')}…` : ''})`;
    case 'text':
    case 'fragmented':
      return `${f.kind}(${JSON.stringify(f.text.length > 80 ? `${f.text.slice(0, 80)}…(${f.text.length})` : f.text)})`;
    case 'invalid-utf8':
    case 'ping':
      return `${f.kind}(${Buffer.from(f.data).toString('hex').slice(0, 16)})`;
    case 'pause':
      return `pause(${f.ms} ms)`;
  }
}

function until(predicate: () => boolean, timeoutMs: number): Promise<boolean> {
  const deadline = performance.now() + timeoutMs;
  return new Promise((resolve) => {
    const poll = () => {
      if (predicate()) return resolve(true);
      if (performance.now() > deadline) return resolve(false);
      setTimeout(poll, 5);
    };
    poll();
  });
}

describe('fuzzing the audio WebSocket of the running service', () => {
  let target: FuzzTarget;
  const sessions = { live: '', created: '', terminated: '' };

  async function makeSessions(service: ServiceProcess): Promise<void> {
    const create = async () => {
      const res = await fetch(`${service.baseUrl}/sessions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ avatar_id: 'demo-rt', model: 'mock' }),
      });
      expect(res.status).toBe(200);
      return ((await res.json()) as { session_id: string }).session_id;
    };
    sessions.live = await create();
    expect((await fetch(`${service.baseUrl}/sessions/${sessions.live}/start`, { method: 'POST' })).status).toBe(200);
    sessions.created = await create();
    sessions.terminated = await create();
    expect((await fetch(`${service.baseUrl}/sessions/${sessions.terminated}`, { method: 'DELETE' })).status).toBe(200);
  }

  beforeAll(async () => {
    target = await FuzzTarget.start({}, makeSessions);
    await makeSessions(target.service);
  }, FILE_TIMEOUT_MS);

  afterAll(async () => {
    await target?.service.stop();
  });

  it(
    'survives every fuzzed frame sequence with well-formed answers and closes',
    async () => {
      const started = performance.now();
      const sequences = fc.sample(sequence, { seed: SEED, numRuns: SEQUENCES });
      const framesByKind: Record<string, number> = {};
      const errorCodes: Record<string, number> = {};
      const closeCodes: Record<string, number> = {};
      let serverMessages = 0;

      for (const [index, seq] of sequences.entries()) {
        if (target.gaveUp) break;
        const sessionId = {
          live: sessions.live,
          created: sessions.created,
          terminated: sessions.terminated,
          unknown: crypto.randomUUID(),
          'not-a-uuid': 'x..%00',
        }[seq.session];
        const path = `/sessions/${sessionId}/speak_audio_stream`;
        const record: FuzzRequest = {
          op: 'WS /sessions/{session_id}/speak_audio_stream',
          kind: `ws#${index} ${seq.session}`,
          method: 'WS',
          path: `${path} frames [${seq.frames.map(describeFrame).join(', ')}] then ${seq.ending}`,
          headers: {},
        };
        target.noteActivity(record);

        const socket = new WebSocket(`${target.service.baseUrl.replace(/^http/, 'ws')}${path}`);
        const received: string[] = [];
        let closed: { code: number; reason: string } | null = null;
        let opened = false;
        socket.on('open', () => (opened = true));
        socket.on('message', (data, isBinary) =>
          received.push(isBinary ? `<binary ${(data as Buffer).length} B>` : data.toString()),
        );
        socket.on('close', (code, reason) => (closed = { code, reason: reason.toString() }));
        socket.on('error', () => undefined);
        // The upgrade is refused (4xx) for ids that are not UUIDs: ws reports that as an error and a close.
        socket.on('unexpected-response', (_req, res) => {
          closed = { code: res.statusCode ?? 0, reason: 'http' };
          res.resume();
        });

        if (!(await until(() => opened || closed !== null, OPEN_TIMEOUT_MS)))
          target.finding('WebSocket upgrade not answered', record, '-');
        let audioMs = 0;
        for (const f of seq.frames) {
          if (socket.readyState !== WebSocket.OPEN) break;
          framesByKind[f.kind] = (framesByKind[f.kind] ?? 0) + 1;
          const ignore = () => undefined;
          if (f.kind === 'pcm') {
            audioMs += f.ms;
            socket.send(tonePcm16((f.ms * SESSION_RATE) / 1000, SESSION_RATE, f.hz), { binary: true }, ignore);
          } else if (f.kind === 'bytes') socket.send(f.data, { binary: true }, ignore);
          else if (f.kind === 'text') socket.send(f.text, { binary: false }, ignore);
          else if (f.kind === 'invalid-utf8') socket.send(Buffer.from(f.data), { binary: false }, ignore);
          else if (f.kind === 'fragmented') {
            const cut = f.cut % (f.text.length + 1);
            socket.send(f.text.slice(0, cut), { binary: false, fin: false }, ignore);
            socket.send(f.text.slice(cut), { binary: false, fin: true }, ignore);
          } else if (f.kind === 'ping') socket.ping(Buffer.from(f.data), undefined, ignore);
          else await new Promise((r) => setTimeout(r, f.ms));
        }
        await new Promise((r) => setTimeout(r, SETTLE_MS));

        if (socket.readyState === WebSocket.OPEN) {
          if (seq.ending === 'eos') {
            socket.send('{"type":"eos"}');
            if (!(await until(() => closed !== null, audioMs + EOS_CLOSE_SLACK_MS)))
              target.finding(
                `no close within ${audioMs + EOS_CLOSE_SLACK_MS} ms after eos`,
                record,
                received.join(' '),
              );
          } else if (seq.ending === 'close') {
            socket.close(seq.closeCode);
            if (!(await until(() => closed !== null, CLOSE_HANDSHAKE_TIMEOUT_MS)))
              target.finding('client close not answered', record, received.join(' '));
          }
        }
        socket.terminate();
        const closedWith = closed as { code: number } | null;
        if (closedWith) closeCodes[closedWith.code] = (closeCodes[closedWith.code] ?? 0) + 1;

        for (const text of received) {
          serverMessages++;
          let message: { type?: unknown; code?: unknown; message?: unknown } | null = null;
          try {
            message = JSON.parse(text);
          } catch {}
          const wellFormed =
            message !== null &&
            typeof message === 'object' &&
            (message.type === 'ack' ||
              (message.type === 'error' && typeof message.code === 'string' && typeof message.message === 'string'));
          if (!wellFormed)
            target.finding(
              'server message is not {type: ack} or {type: error, code, message}',
              record,
              text.slice(0, 300),
            );
          else if (message!.type === 'error')
            errorCodes[String(message!.code)] = (errorCodes[String(message!.code)] ?? 0) + 1;
          if (target.leaksPath(text)) target.finding('filesystem path in a server message', record, text.slice(0, 300));
        }

        if (process.env.FUZZ_VERBOSE)
          console.log(
            `${record.kind} ${record.path.slice(0, 400)} → closed ${JSON.stringify(closedWith)} ${received.join(' ').slice(0, 300)}`,
          );
        if (seq.interruptAfter && seq.session === 'live') {
          await fetch(`${target.service.baseUrl}/sessions/${sessions.live}/interrupt`, {
            method: 'POST',
            signal: AbortSignal.timeout(5_000),
          }).catch(() => undefined);
        }
        await target.checkAlive(`after WebSocket sequence #${index}`, { waitForExit: closedWith?.code === 1006 });
      }

      await target.checkAlive('after the run', { waitForExit: true });
      const health = await fetch(`${target.service.baseUrl}/healthz`, { signal: AbortSignal.timeout(5_000) });
      expect(health.status).toBe(200);
      const live = await fetch(`${target.service.baseUrl}/sessions/${sessions.live}`, {
        signal: AbortSignal.timeout(5_000),
      });
      const liveState = ((await live.json()) as { state: string }).state;
      if (liveState !== 'running') target.finding(`live session is ${liveState} after the run`, null, '-');

      const figures = {
        seed: SEED,
        sequences: sequences.length,
        framesByKind,
        frames: Object.values(framesByKind).reduce((a, b) => a + b, 0),
        serverMessages,
        errorCodes,
        closeCodes,
        crashes: target.figures.crashes,
        findings: target.findings.length,
        fuzzSeconds: Number(((performance.now() - started) / 1000).toFixed(1)),
      };
      console.log(`fuzz.websocket figures ${JSON.stringify(figures)}`);
      if (target.findings.length) console.log(`fuzz.websocket findings:\n${formatFindings(target.findings)}`);

      const exit = await target.service.stop();
      if (exit.code !== 0)
        target.finding(
          `shutdown after the run exited ${JSON.stringify(exit)}`,
          null,
          target.service.logs().slice(-2000),
        );
      expect(target.findings, formatFindings(target.findings)).toEqual([]);
    },
    FILE_TIMEOUT_MS,
  );
});
