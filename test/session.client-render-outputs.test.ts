import fs from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sessionParts } from '../src/sessions/session.ts';
import { json, post, startTestApp, tempDir, type TestApp } from './helpers/app.ts';
import { eventually, postAudio, sleep, tone, wavBytes } from './helpers/conversation.ts';
import { extractFrames, probeMp4 } from './helpers/mp4.ts';
import { connectWhepViewer } from './helpers/peer.ts';

/** demo-rt: a drawn 512² face, its mouth in the lower middle of the frame. */
const SIZE = 512;
const MOUTH_BOX = { x: 215, y: 268, w: 85, h: 50 };

function mouthLuma(frame: Uint8Array, width = SIZE): number {
  let sum = 0;
  for (let y = MOUTH_BOX.y; y < MOUTH_BOX.y + MOUTH_BOX.h; y++)
    for (let x = MOUTH_BOX.x; x < MOUTH_BOX.x + MOUTH_BOX.w; x++) sum += frame[y * width + x];
  return sum / (MOUTH_BOX.w * MOUTH_BOX.h);
}

/**
 * Server-side outputs of a client-rendered session (issue 47): the face is rendered on the server for them only, from
 * the same poses the data channel carries, from the first such output to the last.
 */
describe('a client-rendered session renders on the server only for its server-side outputs', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp();
  });
  afterAll(async () => t?.close());

  async function clientSession(): Promise<string> {
    const created = await json(
      await post(t.baseUrl, '/sessions', { avatar_id: 'demo-rt', model: 'rt', render: 'client' }),
    );
    expect((await post(t.baseUrl, `/sessions/${created.session_id}/start`)).status).toBe(200);
    return created.session_id;
  }

  function speak(id: string, ms: number): Promise<Response> {
    return postAudio(
      t.baseUrl,
      `/sessions/${id}/speak_audio`,
      wavBytes(tone(16_000, ms, 220, 14_000), 16_000),
      {},
      'a.wav',
    );
  }

  it('its recording shows the face speaking; the server renderer goes when the recording stops', async () => {
    const id = await clientSession();
    const media = sessionParts(t.services.supervisor.liveSession(id)!).media;
    expect(media.rendersOnServer).toBe(false);
    const started = await post(t.baseUrl, `/sessions/${id}/rt-recording/start`);
    expect(started.status).toBe(200);
    expect(await eventually(() => media.rendersOnServer, 10_000)).toBe(true);
    await sleep(600);
    expect((await speak(id, 1_500)).status).toBe(200);
    await sleep(2_000);
    const stopped = await json(await post(t.baseUrl, `/sessions/${id}/rt-recording/stop`));
    expect(stopped.state).toBe('complete');
    expect(await eventually(() => !media.rendersOnServer, 5_000), 'the last output gone, no server renderer').toBe(
      true,
    );

    const file = path.join(await tempDir('client-rec-'), 'r.mp4');
    await fs.writeFile(file, Buffer.from(await (await fetch(`${t.baseUrl}${stopped.artifact_url}`)).arrayBuffer()));
    const probe = await probeMp4(file);
    expect(probe.streams.map((s) => s.kind)).toEqual(['Video', 'Audio']);
    const frames = await extractFrames(file, SIZE, SIZE);
    expect(frames.length).toBeGreaterThan(50);
    // The mouth region at rest (the first frames) against the frames while the tone played: the mouth opens.
    const rest = mouthLuma(frames[2]);
    const moved = frames.map((f) => Math.abs(mouthLuma(f) - rest));
    expect(Math.max(...moved), 'the recorded mouth moves with the speech').toBeGreaterThan(3);
    const moving = moved.filter((d) => d > 1.5).length;
    expect(moving, 'for a good part of the 1.5 s of speech').toBeGreaterThan(10);
  }, 60_000);

  it('a WHEP viewer gets video rendered on the server, and the server renderer goes with the last viewer', async () => {
    const id = await clientSession();
    const media = sessionParts(t.services.supervisor.liveSession(id)!).media;
    const { viewer, location } = await connectWhepViewer(t.baseUrl, id);
    try {
      expect(await eventually(() => media.rendersOnServer, 10_000)).toBe(true);
      await viewer.until(() => viewer.frames.length > 5, 15_000, 'video at the WHEP viewer');
      expect(viewer.frames[0]).toMatchObject({ width: SIZE, height: SIZE });
      const before = viewer.frames.length;
      expect((await speak(id, 1_000)).status).toBe(200);
      await viewer.until(() => viewer.frames.length > before + 10, 15_000, 'speaking frames at the viewer');
    } finally {
      viewer.close();
    }
    expect((await fetch(`${t.baseUrl}${location}`, { method: 'DELETE' })).status).toBe(204);
    expect(await eventually(() => !media.rendersOnServer, 5_000)).toBe(true);
  }, 60_000);
});
