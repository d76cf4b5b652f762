import fs from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closeFaceDetector } from '../actors/faces/detector.ts';
import { json, post, startTestApp, tempDir, type TestApp } from './helpers/app.ts';
import { landscapeMp4 } from './helpers/clips.ts';
import { ReceivingPeer, lumaDiff, type ReceivedFrame } from './helpers/peer.ts';
import { SseClient } from './helpers/sse.ts';

interface Face {
  mouth_center: { x: number; y: number };
  mouth_width: number;
}

/** A 2 s clip is a 50-frame loop: forwards and back in 98 frames, so 100 idle frames show every loop position. */
const CLIP_SECONDS = 2;
const IDLE_FRAMES = 100;
/**
 * Mean luma change in the mouth band between a speaking frame and the idle frame nearest to it (the same loop
 * position, up to the codec's noise, ~2–4): an opened mouth changes a good part of the band by ~100.
 */
const MOUTH_OPEN_DIFF = 8;

/** The band every loop frame's mouth lies in: the union of the tracked mouths, a little larger. */
function mouthBand(track: Face[]): { x: number; y: number; w: number; h: number } {
  const mw = Math.max(...track.map((f) => f.mouth_width));
  const x0 = Math.min(...track.map((f) => f.mouth_center.x)) - 0.5 * mw;
  const x1 = Math.max(...track.map((f) => f.mouth_center.x)) + 0.5 * mw;
  const y0 = Math.min(...track.map((f) => f.mouth_center.y)) - 0.2 * mw;
  const y1 = Math.max(...track.map((f) => f.mouth_center.y)) + 0.5 * mw;
  return { x: Math.round(x0), y: Math.round(y0), w: Math.round(x1 - x0), h: Math.round(y1 - y0) };
}

/** How far `frame` is, in the band, from the nearest idle frame: what speech changed beyond the loop's own motion. */
function beyondLoop(
  frame: ReceivedFrame,
  idle: ReceivedFrame[],
  band: { x: number; y: number; w: number; h: number },
): number {
  return Math.min(...idle.map((look) => lumaDiff(frame, look, band)));
}

describe('a lipsync session on a video avatar (real HTTP, real ffmpeg, real detector, real wrtc peer)', () => {
  let t: TestApp;
  let clips: string;
  let peer: ReceivingPeer | undefined;
  let sse: SseClient | undefined;

  beforeAll(async () => {
    t = await startTestApp();
    clips = await tempDir('clips-');
  }, 60_000);

  afterAll(async () => {
    peer?.close();
    sse?.close();
    await t?.close();
    await closeFaceDetector();
    if (clips) await fs.rm(clips, { recursive: true, force: true });
  });

  it('idle plays the clip (the face moves), speech opens the mouth on the moving face, and deleting the avatar mid-session keeps it speaking', async () => {
    const body = new FormData();
    body.append('name', 'clip talker');
    body.append('base_avatar_id', 'astronaut');
    body.append(
      'video',
      new Blob([new Uint8Array(await fs.readFile(await landscapeMp4(clips, CLIP_SECONDS)))], { type: 'video/mp4' }),
      'clip.mp4',
    );
    const created = await fetch(`${t.baseUrl}/avatars/custom`, { method: 'POST', body });
    const summary = await json(created);
    expect(created.status, JSON.stringify(summary)).toBe(200);
    const { id } = summary;
    const track: Face[] = JSON.parse(await fs.readFile(path.join(t.avatarsDir, id, 'face_track.json'), 'utf8'));
    const band = mouthBand(track);

    const session = await post(t.baseUrl, '/sessions', { avatar_id: id, model: 'lipsync' });
    expect(session.status).toBe(200);
    const sessionId = (await json(session)).session_id;
    sse = await SseClient.open(`${t.baseUrl}/sessions/${sessionId}/events`);
    peer = await ReceivingPeer.connect(t.baseUrl, sessionId);
    expect((await post(t.baseUrl, `/sessions/${sessionId}/start`)).status).toBe(200);
    await peer.until(() => peer!.frames.length >= IDLE_FRAMES, 60_000, 'idle video');
    const idle = peer.frames.slice(0, IDLE_FRAMES);
    expect([idle[0].width, idle[0].height]).toEqual([512, 512]);
    // The loop moves the head ≈ ±20 px: the face region changes far beyond codec noise (a still photo stays within ~1).
    const face = { x: band.x, y: Math.max(0, band.y - 80), w: band.w, h: band.h + 80 };
    const idleMotion = Math.max(...idle.map((frame) => lumaDiff(idle[0], frame, face)));
    expect(idleMotion).toBeGreaterThan(5);

    const before = peer.frames.length;
    const from = sse.events.length;
    expect(
      (
        await post(t.baseUrl, `/sessions/${sessionId}/speak`, {
          text: 'Hello, I am a video avatar. Watch my mouth open while I talk.',
        })
      ).status,
    ).toBe(200);
    await sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', 60_000, 'status idle', from);
    const speaking = peer.frames.slice(before);
    expect(speaking.length).toBeGreaterThan(20);
    // The warp opens the mouth on whichever loop frame is showing: far from every idle look.
    const beyond = speaking.map((frame) => beyondLoop(frame, idle, band));
    expect(beyond.filter((d) => d > MOUTH_OPEN_DIFF).length).toBeGreaterThanOrEqual(3);

    // Deleted mid-session: the session keeps its loop (read into shared memory at open) and keeps speaking.
    expect(await json(await fetch(`${t.baseUrl}/avatars/${id}`, { method: 'DELETE' }))).toEqual({ deleted: true });
    const afterDelete = peer.frames.length;
    const again = sse.events.length;
    expect(
      (await post(t.baseUrl, `/sessions/${sessionId}/speak`, { text: 'Still talking after my clip was deleted.' }))
        .status,
    ).toBe(200);
    await sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', 60_000, 'status idle after delete', again);
    expect(sse.events.slice(again).some((e) => e.type === 'error')).toBe(false);
    const later = peer.frames.slice(afterDelete);
    expect(later.length).toBeGreaterThan(20);
    expect(later.filter((frame) => beyondLoop(frame, idle, band) > MOUTH_OPEN_DIFF).length).toBeGreaterThanOrEqual(3);
  }, 240_000);
});
