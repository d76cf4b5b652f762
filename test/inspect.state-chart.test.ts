import fs from 'node:fs';
import { describe, expect, it } from 'vitest';
import { sessionMachine } from '../machines/session.machine.ts';
import { activeChartIds, chartId, machineToMermaid } from '../src/inspect/state-chart.ts';
import { ARCHITECTURE_DOC, withSessionChart } from '../tools/session-chart.ts';

function allStateIds(node: { id: string; states: Record<string, unknown> }): string[] {
  return [node.id, ...Object.values(node.states).flatMap((child) => allStateIds(child as typeof node))];
}

describe('session state chart generated from the machine definition', () => {
  const chart = machineToMermaid(sessionMachine);

  it('declares every state of the machine, with the parallel regions of a turn', () => {
    for (const id of allStateIds(sessionMachine.root as never).slice(1)) expect(chart).toContain(` as ${chartId(id)}`);
    expect(chart).toMatch(/state "turn \(parallel\)" as session_running_turn \{[\s\S]*--[\s\S]*\}/u);
  });

  it('draws the transitions a client causes, guarded and delayed ones labelled', () => {
    expect(chart).toContain('session_created --> session_running : START');
    expect(chart).toContain('session_running --> session_paused : PAUSE');
    expect(chart).toContain('session_paused --> session_running : RESUME');
    expect(chart).toContain('session_running_interrupted --> session_running_idle : after 150 ms');
    expect(chart).toMatch(/session_any --> session_terminated : TERMINATE \(from any state\)/u);
    expect(chart).toMatch(/session_running_listening --> session_running_turn : ASR\.DONE \[\w+\]/u);
  });

  it('highlights every active node of a nested state value', () => {
    const ids = activeChartIds('session', { running: { turn: { text: 'generating', phase: 'speaking' } } });
    expect(ids).toEqual(
      expect.arrayContaining([
        'session_running',
        'session_running_turn',
        'session_running_turn_phase_speaking',
        'session_running_turn_text_generating',
      ]),
    );
  });

  it('is the chart shown in docs/architecture.md (regenerate with npx tsx tools/session-chart.ts)', () => {
    const doc = fs.readFileSync(ARCHITECTURE_DOC, 'utf8');
    expect(withSessionChart(doc)).toBe(doc);
  });
});
