/**
 * The render pool's piscina worker: one handler per task kind (`RenderTask`, `actors/render/tasks.ts`). Renderer
 * tasks come from `render/`, the neural lip-sync renderer's CPU stages from `lipsync/`; this entry stands above
 * both, so neither folder imports the other to share the workers.
 */
import { threadId } from 'node:worker_threads';
import { move, transferableSymbol, valueSymbol } from 'piscina';
import type { RenderTask, RenderTaskResult, TaskOutcome } from '../render/tasks.ts';
import { decodeLoopTask, prepareRendererTask, renderFramesTask } from '../render/renderer-tasks.ts';
import { loopFramesDecodedInThisThread } from '../render/clip-loop.ts';
import { mouthPosesBuiltInThisThread } from '../render/renderers/warp.ts';
import { runNeuralStage } from '../lipsync/neural-stages.ts';

type Handlers = { [Op in RenderTask['op']]: (task: Extract<RenderTask, { op: Op }>) => Promise<TaskOutcome> };

const HANDLERS: Handlers = {
  prepare: prepareRendererTask,
  render: renderFramesTask,
  decode_loop: decodeLoopTask,
  neural_prepare: runNeuralStage,
  neural_mel: runNeuralStage,
  neural_compose: runNeuralStage,
};

export default async function runRenderTask(task: RenderTask) {
  const handler = HANDLERS[task.op] as (task: RenderTask) => Promise<TaskOutcome>;
  const { frames, mels, transfer } = await handler(task);
  const result: RenderTaskResult = {
    threadId,
    frames,
    ...(mels ? { mels } : {}),
    loopFramesDecoded: loopFramesDecodedInThisThread(),
    mouthPosesBuilt: mouthPosesBuiltInThisThread(),
  };
  // A Transferable wrapper marked movable: the buffers the handler names go back in the transfer list, uncopied.
  return move({ [transferableSymbol]: transfer, [valueSymbol]: result });
}
