/**
 * A recording (and a WHEP viewer) on a client-rendered session begins with the face (issue 47): the server renderer
 * such an output needs is opened, and its first picture awaited, before the output is reported started
 * (`ClientRendering.holdPictures`). Before, the recording missed everything that played while the renderer opened
 * (0.1–2 s): its file started at the first picture and the audio before it was cut.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closeFaceDetector, detectMouth } from '../actors/faces/detector.ts';
import { faceHint } from '../actors/faces/landmarks.ts';
import { i420ToRgba } from '../actors/render/i420.ts';
import type { MouthAnimation } from '../actors/render/types.ts';
import { FFMPEG_PATH } from '../src/recording/encoder.ts';
import { sessionParts } from '../src/sessions/session.ts';
import { json, post, REPO_AVATARS, startTestApp, tempDir, type TestApp } from './helpers/app.ts';
import { eventually, postAudio, sleep, tone, wavBytes } from './helpers/conversation.ts';
import { extractAudio, extractFrames, probeMp4, rms } from './helpers/mp4.ts';
import { postWhepOffer, ReceivingPeer } from './helpers/peer.ts';

const SIZE = 512;
const FPS = 25;
const FRAME_MS = 1000 / FPS;
const RATE = 16_000;
/** Received audio louder than this is the tone (a 14 000-amplitude sine); AAC's silence is near 0. */
const AUDIBLE_RMS = 2_000;

/** Presentation times (ms) of a stream's packets, in order, read from ffmpeg's packet dump (no ffprobe is bundled). */
async function packetTimesMs(file: string, stream: 'v' | 'a'): Promise<number[]> {
  const stdout = await new Promise<string>((resolve, reject) => {
    const child = spawn(
      FFMPEG_PATH,
      ['-hide_banner', '-i', file, '-map', `0:${stream}:0`, '-c', 'copy', '-f', 'framecrc', '-'],
      {
        stdio: ['ignore', 'pipe', 'ignore'],
      },
    );
    let out = '';
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (text: string) => (out += text));
    child.once('error', reject);
    child.once('close', () => resolve(out));
  });
  // framecrc lines: stream, dts, pts, duration, size, crc — in the stream's timebase, given in the header.
  const timebase = /#tb 0: (\d+)\/(\d+)/.exec(stdout);
  const [num, den] = timebase ? [Number(timebase[1]), Number(timebase[2])] : [1, 1000];
  return stdout
    .split('\n')
    .filter((line) => /^\d+,/.test(line))
    .map((line) => (Number(line.split(',')[2]) * num * 1000) / den)
    .sort((a, b) => a - b);
}

/** 10 ms windows of `pcm` louder than `AUDIBLE_RMS`, in ms. */
function audibleMs(pcm: Int16Array): number {
  const win = RATE / 100;
  let loud = 0;
  for (let at = 0; at + win <= pcm.length; at += win) if (rms(pcm, at, at + win) > AUDIBLE_RMS) loud += 10;
  return loud;
}

/** Mean and spread of the luma plane: a blank or black frame has almost no spread. */
function lumaSpread(frame: Uint8Array): number {
  let sum = 0;
  let squares = 0;
  const n = SIZE * SIZE;
  for (let i = 0; i < n; i++) {
    sum += frame[i];
    squares += frame[i] * frame[i];
  }
  const mean = sum / n;
  return Math.sqrt(squares / n - mean * mean);
}

describe('a client-rendered session’s recording begins with the face', () => {
  let t: TestApp;
  let near: ReturnType<typeof faceHint>;

  beforeAll(async () => {
    t = await startTestApp();
    const manifest = JSON.parse(await fs.readFile(path.join(REPO_AVATARS, 'astronaut', 'manifest.json'), 'utf8'));
    near = faceHint(manifest.metadata.animation as MouthAnimation);
  });
  afterAll(async () => {
    await t?.close();
    await closeFaceDetector();
  });

  async function clientSession(): Promise<string> {
    const created = await json(
      await post(t.baseUrl, '/sessions', { avatar_id: 'astronaut', model: 'lipsync', render: 'client' }),
    );
    expect(created.session_id, JSON.stringify(created)).toBeTruthy();
    expect((await post(t.baseUrl, `/sessions/${created.session_id}/start`)).status).toBe(200);
    return created.session_id;
  }

  const speak = (id: string, ms: number) =>
    postAudio(t.baseUrl, `/sessions/${id}/speak_audio`, wavBytes(tone(RATE, ms, 220, 14_000), RATE), {}, 'a.wav');

  async function download(id: string, artifactUrl: string): Promise<string> {
    const file = path.join(await tempDir('client-rec-start-'), `${id}.mp4`);
    await fs.writeFile(file, Buffer.from(await (await fetch(`${t.baseUrl}${artifactUrl}`)).arrayBuffer()));
    return file;
  }

  async function hasFace(frame: Uint8Array): Promise<boolean> {
    const rgba = i420ToRgba({ width: SIZE, height: SIZE, data: frame });
    return (await detectMouth({ rgba, width: SIZE, height: SIZE, near })).ok;
  }

  it('started while it speaks: the first frame is the face, at the audio’s first sample, and the first audio is the speech', async () => {
    const id = await clientSession();
    const media = sessionParts(t.services.supervisor.liveSession(id)!).media;
    expect(media.rendersOnServer).toBe(false);
    expect((await speak(id, 4_000)).status).toBe(200);
    await sleep(800);
    const started = await post(t.baseUrl, `/sessions/${id}/rt-recording/start`);
    expect(started.status).toBe(200);
    // Reported started only once the server renderer draws.
    expect(media.rendersOnServer).toBe(true);
    await sleep(1_200);
    const stopped = await json(await post(t.baseUrl, `/sessions/${id}/rt-recording/stop`));
    expect(stopped.state).toBe('complete');

    const file = await download(id, stopped.artifact_url);
    expect((await probeMp4(file)).streams.map((s) => s.kind)).toEqual(['Video', 'Audio']);
    const [video, audio] = [await packetTimesMs(file, 'v'), await packetTimesMs(file, 'a')];
    expect(Math.abs(video[0] - audio[0]), 'first picture and first sound at the same time').toBeLessThanOrEqual(
      FRAME_MS,
    );
    const frames = await extractFrames(file, SIZE, SIZE);
    const pcm = await extractAudio(file, RATE);
    expect(frames.length).toBeGreaterThan(20);
    // The first frame (and the next) show the face, not a blank picture.
    for (const frame of frames.slice(0, 2)) {
      expect(lumaSpread(frame)).toBeGreaterThan(20);
      expect(await hasFace(frame)).toBe(true);
    }
    // The speech was playing as the recording began: its first 100 ms are audible.
    expect(rms(pcm, 0, RATE / 10)).toBeGreaterThan(AUDIBLE_RMS);
    await post(t.baseUrl, `/sessions/${id}/interrupt`);
    await fetch(`${t.baseUrl}/sessions/${id}`, { method: 'DELETE' });
  }, 90_000);

  it('speech sent as soon as the start is answered is in the recording whole, with pictures from its first sound', async () => {
    const id = await clientSession();
    const toneMs = 1_000;
    expect((await post(t.baseUrl, `/sessions/${id}/rt-recording/start`)).status).toBe(200);
    expect((await speak(id, toneMs)).status).toBe(200);
    const media = sessionParts(t.services.supervisor.liveSession(id)!).media;
    expect(await eventually(() => media.playout.queuedMs === 0, 15_000)).toBe(true);
    await sleep(600);
    const stopped = await json(await post(t.baseUrl, `/sessions/${id}/rt-recording/stop`));
    const file = await download(id, stopped.artifact_url);
    const pcm = await extractAudio(file, RATE);
    // All of the tone: AAC's edges and the 10 ms windows cost at most a window or two at each end.
    expect(audibleMs(pcm)).toBeGreaterThanOrEqual(toneMs - 40);
    const frames = await extractFrames(file, SIZE, SIZE);
    expect(await hasFace(frames[0])).toBe(true);
    await fetch(`${t.baseUrl}/sessions/${id}`, { method: 'DELETE' });
  }, 90_000);

  it('a WHEP viewer is answered once the server renderer draws, and its first frames are the face', async () => {
    const id = await clientSession();
    const media = sessionParts(t.services.supervisor.liveSession(id)!).media;
    expect(media.rendersOnServer).toBe(false);
    const viewer = await ReceivingPeer.connectWith(async (offer) => {
      const res = await postWhepOffer(t.baseUrl, id, offer.sdp);
      expect(res.status).toBe(201);
      expect(media.rendersOnServer, 'pictures ready before the viewer connects').toBe(true);
      return { type: 'answer', sdp: await res.text() };
    });
    try {
      await viewer.until(() => viewer.frames.length > 2, 15_000, 'video at the WHEP viewer');
      const first = viewer.frames[0];
      expect(first).toMatchObject({ width: SIZE, height: SIZE });
      expect(lumaSpread(first.data)).toBeGreaterThan(20);
      expect(await hasFace(first.data)).toBe(true);
    } finally {
      viewer.close();
      await fetch(`${t.baseUrl}/sessions/${id}`, { method: 'DELETE' });
    }
  }, 60_000);
});
