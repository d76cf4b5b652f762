/**
 * lipsync_c under overload (issue 25 row 9): a backend that is up but cannot take a frame now costs that frame
 * only. A frame past the bounded backlog (`MAX_FRAMES_WAITING`) and the frames of a request that timed out once
 * render on the fallback; the turn stays on the server (no `backendError`, so no `render_backend_failed` for the
 * client), and the next frames go to the server again. Only `MAX_TIMEOUTS_IN_A_ROW` timeouts in a row (a stalled
 * server), or a server that fails outright, hand the turn to the fallback. Against the in-process KServe fake
 * (test/fakes/kserve-server.ts) with a stub fallback whose frames are recognisable.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import {
  BackendOverloadedError,
  type FallbackRenderer,
  type NeuralLipsyncRenderer,
} from '../actors/lipsync/neural-renderer.ts';
import {
  MAX_FRAMES_WAITING,
  MAX_TIMEOUTS_IN_A_ROW,
  REMOTE_MAX_BATCH,
  RemoteLipsyncModel,
} from '../actors/lipsync/remote-model.ts';
import type { AvatarSource, FrameRequest, I420Frame } from '../actors/render/types.ts';
import { CLOSED_MOUTH } from '../actors/render/types.ts';
import { FakeKserveServer } from './fakes/kserve-server.ts';

const ASTRONAUT_DIR = path.resolve(import.meta.dirname, '..', 'avatars', 'astronaut');
const astronaut: AvatarSource = {
  id: 'astronaut',
  dir: ASTRONAUT_DIR,
  manifest: JSON.parse(readFileSync(path.join(ASTRONAUT_DIR, 'manifest.json'), 'utf8')),
};
/** A fallback frame: every byte this value, which no rendered photo is. */
const FALLBACK_BYTE = 7;

function speech(frameIdx: number): FrameRequest {
  const pcm = Int16Array.from({ length: 4000 }, (_, i) => Math.round(8000 * Math.sin(i / 3)));
  return {
    frameIdx,
    ptsMs: frameIdx * 40,
    mouth: CLOSED_MOUTH,
    level: 0,
    speaking: true,
    audio: { sampleRate: 16_000, pcm, leadSamples: 500 },
  };
}
const speechFrames = (count: number, from = 0) => Array.from({ length: count }, (_, i) => speech(from + i));
const isFallback = (frame: I420Frame) => frame.data.every((byte) => byte === FALLBACK_BYTE);

const servers: FakeKserveServer[] = [];
const renderers: NeuralLipsyncRenderer[] = [];
afterEach(async () => {
  for (const renderer of renderers.splice(0)) renderer.close();
  await Promise.all(servers.splice(0).map((server) => server.close()));
});

/** A live lipsync_c renderer on the fake, its fallback a stub; records the renderer's backend events. */
async function openRenderer(inferTimeoutMs?: number) {
  const server = await FakeKserveServer.start();
  servers.push(server);
  const fallback = async (): Promise<FallbackRenderer> => ({
    width: 0,
    height: 0,
    fps: 25,
    render: async (requests) =>
      requests.map(() => ({ width: 2, height: 2, data: new Uint8Array(6).fill(FALLBACK_BYTE) })),
    close: () => undefined,
  });
  const model = new RemoteLipsyncModel({ baseUrl: server.url, model: server.modelName, fallback, inferTimeoutMs });
  const renderer = await model.open(astronaut, undefined, { warmUp: false });
  renderers.push(renderer);
  const events = { errors: [] as unknown[], overloaded: [] as unknown[] };
  renderer.on('backendError', (error) => events.errors.push(error));
  renderer.on('backendOverloaded', (error) => events.overloaded.push(error));
  return { server, renderer, events };
}

describe('lipsync_c renderer when the inference server is overloaded', () => {
  it('a frame past the backlog renders on the fallback for that frame only; the turn stays on the server and the next frames use it', async () => {
    // A deadline no loaded host reaches: this case is about the backlog bound only.
    const { server, renderer, events } = await openRenderer(30_000);
    server.behaviour.inferDelayMs = 200;
    // Asked in one tick: MAX_FRAMES_WAITING wait for the first requests, the rest find the backlog full.
    const overflow = 3;
    const frames = await renderer.render(speechFrames(MAX_FRAMES_WAITING + overflow));
    expect(frames.filter(isFallback)).toHaveLength(overflow);
    expect(frames.slice(0, MAX_FRAMES_WAITING).some(isFallback)).toBe(false);
    expect(events.errors).toEqual([]);
    expect(renderer.isDegraded).toBe(false);
    expect(events.overloaded).toHaveLength(1);
    expect(events.overloaded[0]).toBeInstanceOf(BackendOverloadedError);
    expect(renderer.counts).toMatchObject({ neural: MAX_FRAMES_WAITING, fallback: overflow, overloaded: overflow });

    // The backlog has drained: the next frames are the model's again.
    const next = await renderer.render(speechFrames(4, 100));
    expect(next.some(isFallback)).toBe(false);
    expect(renderer.counts.neural).toBe(MAX_FRAMES_WAITING + 4);
    expect(server.stats.batches.every((size) => size <= REMOTE_MAX_BATCH)).toBe(true);
  });

  it(`a request that times out costs its frames only; ${MAX_TIMEOUTS_IN_A_ROW} timeouts in a row hand the turn to the fallback`, async () => {
    // Deadlines of 1 s: generous for the fake's answer on a loaded host, short for the test.
    const { server, renderer, events } = await openRenderer(1_000);
    server.behaviour.inferDelayMs = 3_000;
    const late = await renderer.render(speechFrames(4));
    expect(late.every(isFallback)).toBe(true);
    expect(events.errors).toEqual([]);
    expect(events.overloaded).toHaveLength(1);
    expect(renderer.isDegraded).toBe(false);

    server.behaviour.inferDelayMs = 0;
    expect((await renderer.render(speechFrames(4, 10))).some(isFallback)).toBe(false);

    // The server stops answering: every request times out, one after another.
    server.behaviour.inferDelayMs = 3_000;
    for (let k = 1; k < MAX_TIMEOUTS_IN_A_ROW; k++) {
      expect((await renderer.render(speechFrames(2, 20 + 2 * k))).every(isFallback)).toBe(true);
      expect(renderer.isDegraded).toBe(false);
    }
    await renderer.render(speechFrames(2, 40));
    expect(events.errors).toHaveLength(1);
    expect(events.errors[0]).toMatchObject({ kind: 'timeout' });
    expect(renderer.isDegraded).toBe(true);
  });

  it('a server that fails outright hands the turn to the fallback at the first failure', async () => {
    const { server, renderer, events } = await openRenderer();
    server.behaviour.inferFailStatus = 500;
    expect((await renderer.render(speechFrames(4))).every(isFallback)).toBe(true);
    expect(events.errors).toHaveLength(1);
    expect(events.overloaded).toEqual([]);
    expect(renderer.isDegraded).toBe(true);
  });
});
