import { Piscina } from 'piscina';
import { createRenderer } from './renderers/index.ts';
import type { AvatarSource, FrameRequest, ModelType, Renderer } from './types.ts';

export interface RenderTask {
  /** Identifies a prepared avatar: id, manifest version, model and bundle mtime. */
  key: string;
  avatar: AvatarSource;
  model: ModelType;
  requests: FrameRequest[];
}

/** Prepared renderers kept per worker; a handful of avatars at most are live on one machine. */
const MAX_PREPARED = 16;
const prepared = new Map<string, Promise<Renderer>>();

function rendererFor(task: RenderTask): Promise<Renderer> {
  let renderer = prepared.get(task.key);
  if (!renderer) {
    renderer = (async () => {
      const r = createRenderer(task.model);
      await r.prepare(task.avatar);
      return r;
    })();
    renderer.catch(() => prepared.delete(task.key));
    if (prepared.size >= MAX_PREPARED) prepared.delete(prepared.keys().next().value!);
    prepared.set(task.key, renderer);
  }
  return renderer;
}

/** Renders a batch of frames; all frames go back in one transferred buffer (no copies). */
export default async function render(task: RenderTask) {
  const renderer = await rendererFor(task);
  if (task.requests.length === 0) return { buffer: new ArrayBuffer(0), width: 0, height: 0, count: 0 };
  const frames = task.requests.map((request) => renderer.render(request));
  const { width, height } = frames[0];
  const size = frames[0].data.length;
  const out = new Uint8Array(size * frames.length);
  frames.forEach((frame, i) => out.set(frame.data, i * size));
  return Piscina.move(new FrameBatch({ buffer: out.buffer, width, height, count: frames.length }) as never);
}

/** Lets piscina transfer the pixel buffer instead of cloning it. */
class FrameBatch {
  constructor(private readonly value: { buffer: ArrayBuffer; width: number; height: number; count: number }) {}
  get [Piscina.transferableSymbol]() {
    return [this.value.buffer];
  }
  get [Piscina.valueSymbol]() {
    return this.value;
  }
}
