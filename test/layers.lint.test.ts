import path from 'node:path';
import { ESLint } from 'eslint';
import { describe, expect, it } from 'vitest';
import { importGraphProblems } from '../tools/import-graph.ts';

/**
 * The layer rule (tools/layer-rules.js, applied by eslint.config.js): src → actors → machines, routes through
 * src/ only. Each case lints a small source text as if it stood at a path of the tree, with the project's own
 * configuration, so the test fails when the rule stops catching a crossing — and when it starts refusing an
 * import the layering allows.
 */
const ROOT = path.resolve(import.meta.dirname, '..');
const eslint = new ESLint({ cwd: ROOT });

async function layerErrors(file: string, code: string): Promise<string[]> {
  const [result] = await eslint.lintText(code, { filePath: path.join(ROOT, file) });
  return result.messages.filter((m) => m.ruleId?.endsWith('no-restricted-imports')).map((m) => m.message);
}

describe('imports point down only (src → actors → machines)', () => {
  it('an actor importing the service (src/) fails lint', async () => {
    const errors = await layerErrors(
      'actors/tts/example.ts',
      "import { SessionBus } from '../../src/sessions/session-bus.ts';\nexport const x = SessionBus;\n",
    );
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatch(/never import src/);
  });

  it('an actor importing a type from src/ fails lint too (ports are declared in actors/)', async () => {
    const errors = await layerErrors(
      'actors/media/example.ts',
      "import type { SessionMedia } from '../../src/sessions/media.ts';\nexport type X = SessionMedia;\n",
    );
    expect(errors).toHaveLength(1);
  });

  it('an actor importing another actor or a machine passes', async () => {
    const code =
      "import { untilAborted } from '../upstream/abort.ts';\nimport { sessionMachine } from '../../machines/session.machine.ts';\nexport const x = [untilAborted, sessionMachine];\n";
    expect(await layerErrors('actors/tts/example.ts', code)).toEqual([]);
  });

  it('a machine importing a value from anywhere but xstate fails lint', async () => {
    const fromActors = await layerErrors(
      'machines/example.ts',
      "import { isTtsProviderId } from '../actors/tts/types.ts';\nexport const x = isTtsProviderId;\n",
    );
    expect(fromActors).toHaveLength(1);
    expect(fromActors[0]).toMatch(/pure/);
    const fromNode = await layerErrors('machines/example.ts', "import fs from 'node:fs';\nexport const x = fs;\n");
    expect(fromNode).toHaveLength(1);
    const fromSrc = await layerErrors(
      'machines/example.ts',
      "import type { Services } from '../src/services.ts';\nexport type X = Services;\n",
    );
    expect(fromSrc.length).toBeGreaterThanOrEqual(1);
  });

  it('a machine importing xstate and stage types passes', async () => {
    const code =
      "import { setup } from 'xstate';\nimport type { TtsSelection } from '../actors/tts/types.ts';\nexport const x = setup;\nexport type Y = TtsSelection;\n";
    expect(await layerErrors('machines/example.ts', code)).toEqual([]);
  });

  it('a route importing actors/ or machines/ directly fails lint; through src/sessions it passes', async () => {
    expect(
      await layerErrors(
        'src/routes/example.ts',
        "import { MODEL_TYPES } from '../../actors/render/types.ts';\nexport const x = MODEL_TYPES;\n",
      ),
    ).toHaveLength(1);
    expect(
      await layerErrors(
        'src/routes/example.ts',
        "import { sessionMachine } from '../../machines/session.machine.ts';\nexport const x = sessionMachine;\n",
      ),
    ).toHaveLength(1);
    expect(
      await layerErrors(
        'src/routes/example.ts',
        "import { SessionSupervisor } from '../sessions/index.ts';\nexport const x = SessionSupervisor;\n",
      ),
    ).toEqual([]);
  });

  it('the service (src/ outside routes) may import actors and machines', async () => {
    const code =
      "import { sessionMachine } from '../../machines/session.machine.ts';\nimport { untilAborted } from '../../actors/upstream/abort.ts';\nexport const x = [sessionMachine, untilAborted];\n";
    expect(await layerErrors('src/sessions/example.ts', code)).toEqual([]);
  });
});

describe('actors/ folders import only floors below their own (no circles between folders)', () => {
  it('a folder importing one on a higher floor fails lint, the circle render → lipsync → render included', async () => {
    const upward = await layerErrors(
      'actors/mouth/example.ts',
      "import type { PhoneTiming } from '../tts/types.ts';\nexport type X = PhoneTiming;\n",
    );
    expect(upward).toHaveLength(1);
    expect(upward[0]).toMatch(/floors below/);
    const nested = await layerErrors(
      'actors/render/renderers/example.ts',
      "import { runNeuralStage } from '../../lipsync/neural-stages.ts';\nexport const x = runNeuralStage;\n",
    );
    expect(nested).toHaveLength(1);
    expect(
      await layerErrors(
        'actors/stage/example.ts',
        "import { createStageActors } from '../session-actors.ts';\nexport const x = createStageActors;\n",
      ),
    ).toHaveLength(1);
  });

  it('a folder importing one on its own floor fails lint', async () => {
    expect(
      await layerErrors('actors/tts/example.ts', "import { x } from '../lipsync/mel.ts';\nexport const y = x;\n"),
    ).toHaveLength(1);
  });

  it('a folder importing lower floors and its own files passes, and the src/ ban still holds', async () => {
    const code =
      "import { Admission } from '../admission.ts';\nimport type { PhoneTiming } from '../mouth/visemes.ts';\nimport { x } from './types.ts';\nexport const y = [Admission, x];\nexport type Z = PhoneTiming;\n";
    expect(await layerErrors('actors/tts/example.ts', code)).toEqual([]);
    const fromSrc = await layerErrors(
      'actors/render/example.ts',
      "import { Overloaded } from '../../src/domain-errors.ts';\nexport const x = Overloaded;\n",
    );
    expect(fromSrc).toHaveLength(1);
    expect(fromSrc[0]).toMatch(/never import src/);
  });
});

describe('src/ folders import only floors below their own (no circles inside the service)', () => {
  it('a folder importing one on a higher floor fails lint, types included: the store reaching into the API schemas', async () => {
    const errors = await layerErrors(
      'src/store/example.ts',
      "import type { TranscriptTurn } from '../schemas/sessions.ts';\nexport type X = TranscriptTurn;\n",
    );
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatch(/SRC_FLOORS/);
  });

  it('the sessions importing their observers (inspector, metrics) fails lint: those reach the sessions through ports', async () => {
    const code =
      "import type { InspectionHub } from '../inspect/inspection-hub.ts';\nimport { ServiceMetrics } from '../metrics/service-metrics.ts';\nexport type X = InspectionHub;\nexport const y = ServiceMetrics;\n";
    expect(await layerErrors('src/sessions/example.ts', code)).toHaveLength(2);
  });

  it('a folder importing one on its own floor fails lint, and so does a top-level file importing one above it', async () => {
    expect(
      await layerErrors(
        'src/inspect/example.ts',
        "import { ServiceMetrics } from '../metrics/service-metrics.ts';\nexport const x = ServiceMetrics;\n",
      ),
    ).toHaveLength(1);
    const fromLogger = await layerErrors(
      'src/logger.ts',
      "import type { Services } from './services.ts';\nexport type X = Services;\n",
    );
    expect(fromLogger).toHaveLength(1);
    expect(fromLogger[0]).toMatch(/SRC_FLOORS/);
  });

  it('routes are the top floor of folders: importing the app that registers them fails lint', async () => {
    const errors = await layerErrors(
      'src/routes/example.ts',
      "import { buildApp } from '../app.ts';\nexport const x = buildApp;\n",
    );
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatch(/SRC_FLOORS/);
  });

  it('imports of lower floors pass: observers reaching the sessions, the sessions the store, the assembly everything', async () => {
    const observer =
      "import type { SessionBus } from '../sessions/session-bus.ts';\nimport type { Store } from '../store/db.ts';\nimport { createLogger } from '../logger.ts';\nimport { x } from './own.ts';\nexport type Y = [SessionBus, Store];\nexport const z = [createLogger, x];\n";
    expect(await layerErrors('src/metrics/example.ts', observer)).toEqual([]);
    expect(
      await layerErrors(
        'src/sessions/example.ts',
        "import { TranscriptStore } from '../store/transcripts.ts';\nimport { SessionOutputs } from '../streaming/outputs.ts';\nexport const x = [TranscriptStore, SessionOutputs];\n",
      ),
    ).toEqual([]);
    expect(
      await layerErrors(
        'src/services.ts',
        "import { SessionSupervisor } from './sessions/supervisor.ts';\nimport { ServiceMetrics } from './metrics/service-metrics.ts';\nexport const x = [SessionSupervisor, ServiceMetrics];\n",
      ),
    ).toEqual([]);
    expect(
      await layerErrors(
        'src/routes/example.ts',
        "import { errors } from '../schemas/common.ts';\nimport { closedSignal } from '../http/closed-signal.ts';\nexport const x = [errors, closedSignal];\n",
      ),
    ).toEqual([]);
  });
});

describe('the import graph read from the sources (tools/import-graph.ts)', () => {
  it('has no circle between folders of actors/ or src/, no import up a floor, none against the layers', () => {
    const { problems, summary } = importGraphProblems(ROOT);
    expect(problems).toEqual([]);
    // It read the tree: both layers have folders that import.
    expect(summary[0]).toMatch(/^actors\/: [1-9]\d* folders/);
    expect(summary[1]).toMatch(/^src\/: [1-9]\d* folders/);
  });
});
