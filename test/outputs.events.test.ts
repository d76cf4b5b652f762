import { describe, expect, it } from 'vitest';
import { SessionBus } from '../src/sessions/session-bus.ts';
import { SessionEventHub, type SessionEventRecord } from '../src/sessions/event-hub.ts';
import { TurnPlayout } from '../actors/media/turn-playout.ts';

/** An output's failure (`output_failed`) belongs to no turn: a turn in flight does not lend it its `turn_id`. */
describe('output_failed on the SSE hub', () => {
  it('an output error published during a turn carries its output_id and no turn_id; a turn error still carries the turn', () => {
    const bus = new SessionBus((error) => {
      throw error;
    });
    const hub = new SessionEventHub(bus);
    const seen: SessionEventRecord[] = [];
    hub.listen((record) => seen.push(record));
    bus.emit('turn.started', { turnId: 'turn-1', kind: 'speak', playout: new TurnPlayout() });
    bus.publish('error', { code: 'output_failed', message: 'rtmp output failed', output_id: 'out-1' });
    bus.publish('error', { code: 'tts_failed', message: 'tts failed' });
    expect(seen.map((record) => record.data)).toEqual([
      { code: 'output_failed', message: 'rtmp output failed', output_id: 'out-1' },
      { code: 'tts_failed', message: 'tts failed', turn_id: 'turn-1' },
    ]);
    hub.close();
    bus.close();
  });
});
