import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { InvalidInput } from '../src/domain-errors.ts';
import { SessionBus } from '../src/sessions/session-bus.ts';
import {
  SessionTranscripts,
  TRANSCRIPT_MAX_TURNS,
  TRANSCRIPT_TEXT_MAX_BYTES,
  TRANSCRIPT_TURN_MAX_BYTES,
  budgetedTurn,
  type TranscriptBudgets,
  type TranscriptTurn,
} from '../src/sessions/transcript.ts';
import { Store } from '../src/store/db.ts';
import { TranscriptStore } from '../src/store/transcripts.ts';
import { tempDir } from './helpers/app.ts';
import { TurnPlayout } from '../actors/media/turn-playout.ts';

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => undefined);
});

function turn(id: string, text: string, extra: Partial<TranscriptTurn> = {}): TranscriptTurn {
  const at = new Date().toISOString();
  return {
    turn_id: id,
    kind: 'speak',
    user_text: null,
    assistant_text: text,
    heard_text: text,
    tool_calls: [],
    outcome: 'completed',
    started_at: at,
    ended_at: at,
    ...extra,
  };
}

/** SessionTranscripts over a real LevelDB in `dir`, with every root write recorded (sublevel name, value bytes). */
async function open(dir: string, budgets: TranscriptBudgets = {}) {
  const store = await Store.open(dir);
  const writes: Array<{ sublevel: string; bytes: number }> = [];
  store.db.on('write', (operations: Array<{ type: string; key: string; value?: unknown }>) => {
    for (const op of operations) {
      if (op.type === 'put')
        writes.push({
          sublevel: String(op.key).split('!')[1],
          bytes: String(typeof op.value === 'string' ? op.value : JSON.stringify(op.value)).length,
        });
    }
  });
  const transcripts = new SessionTranscripts(new TranscriptStore(store), pino({ level: 'silent' }), budgets);
  await transcripts.load();
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    await store.close();
  };
  cleanups.push(close);
  return { store, transcripts, writes, close };
}

/** A live session recorded through its bus; `say` finishes one speak turn of `text`. */
function follow(transcripts: SessionTranscripts, sessionId: string) {
  const bus = new SessionBus();
  const heard: TranscriptTurn[] = [];
  transcripts.follow(sessionId, bus, { playedMsOf: () => 0 }, (t) => heard.push(t));
  let n = 0;
  const say = (text: string): string => {
    const turnId = `${sessionId}-t${n++}`;
    bus.emit('turn.started', { turnId, kind: 'speak', text, playout: new TurnPlayout() });
    bus.emit('turn.finished', { turnId, kind: 'speak', outcome: 'completed' });
    return turnId;
  };
  return { say, heard };
}

const parse = (body: Buffer | undefined) =>
  JSON.parse(body!.toString()) as { session_id: string; turns: TranscriptTurn[] };

describe('a turn within its byte budget', () => {
  it('keeps a 10,000-character ASCII text whole, cuts a longer (multi-byte) one at a character boundary ending with …', () => {
    const ascii = 'a'.repeat(10_000);
    expect(budgetedTurn(turn('t', ascii)).turn.assistant_text).toBe(ascii);
    const cjk = '语'.repeat(10_000) + '🚀'.repeat(100);
    const { turn: cut, json } = budgetedTurn(turn('t', cjk, { user_text: `x${'🚀'.repeat(5_000)}` }));
    for (const text of [cut.assistant_text!, cut.heard_text!, cut.user_text!]) {
      expect(Buffer.byteLength(text)).toBeLessThanOrEqual(TRANSCRIPT_TEXT_MAX_BYTES);
      expect(text.endsWith('…')).toBe(true);
      expect(text).not.toContain('\uFFFD');
    }
    expect(cjk.startsWith(cut.assistant_text!.slice(0, -1))).toBe(true);
    expect(cut.user_text!.slice(0, -1)).toMatch(/^x(🚀)+$/u);
    expect(Buffer.byteLength(json)).toBeLessThanOrEqual(TRANSCRIPT_TURN_MAX_BYTES);
    expect(JSON.parse(json)).toEqual(cut);
  });

  it('a turn whose tool arguments are too big or too deep to serialise keeps its calls with empty arguments', () => {
    const calls = Array.from({ length: 64 }, (_, i) => ({
      call_id: `c${i}`,
      name: 'lookup',
      arguments: { blob: 'z'.repeat(5_000) },
      ok: true,
    }));
    const big = budgetedTurn(turn('t', 'Hi.', { tool_calls: calls }));
    expect(Buffer.byteLength(big.json)).toBeLessThanOrEqual(TRANSCRIPT_TURN_MAX_BYTES);
    expect(big.turn.tool_calls.map((c) => c.call_id)).toEqual(calls.map((c) => c.call_id));
    expect(big.turn.tool_calls.every((c) => Object.keys(c.arguments).length === 0)).toBe(true);

    let deep: Record<string, unknown> = {};
    for (let i = 0; i < 20_000; i++) deep = { d: deep };
    const unserialisable = budgetedTurn(
      turn('t', 'Hi.', { tool_calls: [{ call_id: 'c', name: 'n', arguments: deep, ok: null }] }),
    );
    expect(JSON.parse(unserialisable.json).tool_calls).toEqual([{ call_id: 'c', name: 'n', arguments: {}, ok: null }]);
  });
});

describe('transcripts in LevelDB', () => {
  it('appends one small record per turn (never the whole transcript) and drops the oldest past the per-transcript budget', async () => {
    const dir = await tempDir('transcript-append-');
    const { transcripts, writes } = await open(dir, { maxBytes: 100_000 });
    const { say, heard } = follow(transcripts, 's1');
    const ids = Array.from({ length: 30 }, () => say('b'.repeat(10_000)));
    await transcripts.retain('s1', new Date(Date.now() + 60_000).toISOString());
    const turnWrites = writes.filter((w) => w.sublevel === 'transcript-turns');
    expect(turnWrites).toHaveLength(30);
    // Every write is one turn (~20 KB) or an index (~200 B), however long the transcript got.
    expect(Math.max(...writes.map((w) => w.bytes))).toBeLessThan(21_000);
    expect(Math.max(...writes.filter((w) => w.sublevel === 'transcript-index').map((w) => w.bytes))).toBeLessThan(300);
    const kept = parse(await transcripts.read('s1')).turns;
    expect(kept.map((t) => t.turn_id)).toEqual(ids.slice(-kept.length));
    expect(kept.length).toBe(4); // 4 × ~20 KB within 100,000 bytes, a fifth would not fit
    expect(heard).toHaveLength(30);
  });

  it('the turn handed on (the turn.completed webhook) is the budgeted one the transcript keeps', async () => {
    const dir = await tempDir('transcript-handed-');
    const { transcripts } = await open(dir);
    const { say, heard } = follow(transcripts, 's1');
    say('语'.repeat(10_000));
    expect(heard[0].assistant_text!.endsWith('…')).toBe(true);
    expect(Buffer.byteLength(JSON.stringify(heard[0]))).toBeLessThanOrEqual(TRANSCRIPT_TURN_MAX_BYTES);
    expect(parse(await transcripts.read('s1')).turns).toEqual([heard[0]]);
  });

  it(`keeps at most ${TRANSCRIPT_MAX_TURNS} turns, oldest dropped, and pages through them live and after a reopen`, async () => {
    const dir = await tempDir('transcript-pages-');
    const first = await open(dir);
    const { say } = follow(first.transcripts, 's1');
    const ids = Array.from({ length: TRANSCRIPT_MAX_TURNS + 5 }, (_, i) => say(`line ${i}`));
    const kept = ids.slice(5);
    const pageIds = async (transcripts: SessionTranscripts, after?: string, limit?: number) =>
      parse(await transcripts.read('s1', { after, limit })).turns.map((t) => t.turn_id);
    expect(await pageIds(first.transcripts)).toEqual(kept);
    expect(await pageIds(first.transcripts, undefined, 3)).toEqual(kept.slice(0, 3));
    expect(await pageIds(first.transcripts, kept[2], 3)).toEqual(kept.slice(3, 6));
    expect(await pageIds(first.transcripts, kept.at(-1))).toEqual([]);
    await expect(first.transcripts.read('s1', { after: ids[0] })).rejects.toBeInstanceOf(InvalidInput);
    await first.transcripts.retain('s1', undefined);
    await first.close();

    const again = await open(dir);
    expect(await pageIds(again.transcripts)).toEqual(kept);
    expect(await pageIds(again.transcripts, kept[196], 10)).toEqual(kept.slice(197));
    await expect(again.transcripts.read('s1', { after: ids[0] })).rejects.toBeInstanceOf(InvalidInput);
    expect(await again.transcripts.read('unknown')).toBeUndefined();
  });

  it('past the global bound the least recently written ended transcripts go first; a live one stays', async () => {
    const dir = await tempDir('transcript-global-');
    const { transcripts, store } = await open(dir, { maxTotalBytes: 130_000 });
    // Three ended sessions of ~40 KB each, oldest first, then a live one.
    for (const id of ['old', 'middle', 'young']) {
      const { say } = follow(transcripts, id);
      say('c'.repeat(10_000));
      say('c'.repeat(10_000));
      await transcripts.retain(id, undefined);
    }
    const live = follow(transcripts, 'live');
    live.say('d'.repeat(10_000));
    live.say('d'.repeat(10_000));
    await transcripts.read('live');
    // 4 × ~40 KB > 130,000: the oldest ended one went, whole.
    expect(await transcripts.read('old')).toBeUndefined();
    for (const id of ['middle', 'young', 'live']) expect(parse(await transcripts.read(id)).turns, id).toHaveLength(2);
    // Its records leave the disk too (the removal runs beside the turns): poll, bounded.
    const oldKeys = async () => {
      let n = 0;
      for await (const key of store.db.sublevel<string, string>('transcript-turns', { valueEncoding: 'utf8' }).keys())
        if (key.startsWith('old!')) n++;
      return n;
    };
    for (let i = 0; i < 100 && (await oldKeys()) > 0; i++) await new Promise((resolve) => setTimeout(resolve, 20));
    expect(await oldKeys()).toBe(0);
    // More live turns push the next oldest ended one out, never the live session.
    for (let i = 0; i < 3; i++) live.say('d'.repeat(10_000));
    expect(await transcripts.read('middle')).toBeUndefined();
    expect(parse(await transcripts.read('live')).turns).toHaveLength(5);
  });

  it('moves a whole transcript an earlier version stored into per-turn records, with its expiry', async () => {
    const dir = await tempDir('transcript-legacy-');
    const store = await Store.open(dir);
    const turns = [turn('a', 'First.'), turn('b', 'Second.')];
    const expires = new Date(Date.now() + 60_000).toISOString();
    await store.sublevel('transcripts').put('s1', { session_id: 's1', turns, expires_at: expires });
    await store.close();
    const { transcripts, store: reopened } = await open(dir);
    expect(parse(await transcripts.read('s1')).turns).toEqual(turns);
    expect(await reopened.sublevel('transcripts').get('s1')).toBeUndefined();
    expect(await reopened.sublevel('transcript-index').get('s1')).toMatchObject({
      session_id: 's1',
      expires_at: expires,
    });
  });
});
