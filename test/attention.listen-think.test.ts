/**
 * The avatar listens and thinks, measured as the issue asks: at a real wrtc viewer, with the service's face landmarks
 * (the nose tip, landmark 30) on the frames it decodes. The astronaut photo; the user's speech is the VAD fixture's
 * synthesised utterances with pauses of ~300 ms between them (VAD dips the listener nods at), sent over `WS /listen`
 * in real time; recognition and a slow chat answer come from a loopback OpenAI-compatible server.
 *
 * - Listening: while the user speaks, the nose tip moves vertically at least twice as much as in the same avatar's
 *   quiet idle, and the mouth stays closed (its inner-lip opening no wider than idle's).
 * - Thinking: for the first `THINK_DELAY_MS` after the end of the user's turn nothing turns; while the slow answer is
 *   awaited the head glances aside or up; once the answer has played the head is back where it idles.
 * - `motion: 0`: idle nose-tip motion ≤ 0.3 px at the viewer, and the blinks remain.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { THINK_DELAY_MS } from '../actors/attention.ts';
import { STEADY_START_MS } from '../actors/media/frame-send-policy.ts';
import { closeFaceDetector } from '../actors/faces/detector.ts';
import { i420ToRgba } from '../actors/render/i420.ts';
import type { MouthAnimation, Point } from '../actors/render/types.ts';
import { mouthOpening } from '../bench/avatar-fidelity.ts';
import { detectMouth } from '../actors/faces/detector.ts';
import { faceHint } from '../actors/faces/landmarks.ts';
import { REPO_AVATARS, json, post, startTestApp, type TestApp } from './helpers/app.ts';
import { AUDIBLE_RMS, pcmBytes } from './helpers/conversation.ts';
import { ReceivingPeer, type ReceivedFrame } from './helpers/peer.ts';
import { SseClient } from './helpers/sse.ts';
import { loadVadFixture } from './helpers/vad-fixture.ts';
import { sessionParts } from '../src/sessions/session.ts';
import { AudioStreamClient, framesOf, streamPcm } from './helpers/ws-audio.ts';
import { startOpenAiUpstream, type OpenAiUpstream } from './fakes/openai-upstream.ts';

/** Landmarks on a few hundred frames, WebRTC set-up and a voice turn on 2 shared cores. */
const TEST_MS = 300_000;
/** The chat's first token this late: thinking has seconds to show (the design shows it after 400 ms). */
const ANSWER_DELAY_MS = 3_000;
/** Quiet idle looked at: 6 s at 25 fps. */
const IDLE_FRAMES = 150;

const fixture = loadVadFixture();

/**
 * ~9 s of the user speaking: four of the fixture's utterances, three pauses of 290–320 ms between them (dips the VAD
 * reports as pauses of 150–400 ms), with its own background noise before and after.
 */
function userSpeech(): Int16Array {
  const at = (fromMs: number, toMs: number) => fixture.pcm.slice(fromMs * 16, toMs * 16);
  const parts = [
    at(0, 600),
    at(3440, 6180),
    at(6180, 6480),
    at(6480, 8750),
    at(8750, 9050),
    at(1000, 2740),
    at(8750, 9050),
    at(9950, 11490),
    at(11490, 13490),
  ];
  return Int16Array.from(parts.flatMap((part) => Array.from(part)));
}

/**
 * The face on each frame, every frame refitted in one and the same box (the astronaut's face found in its bundle
 * frame): refitted in the previous frame's box instead (`followFaces`, the bench's way), the same picture gave landmarks
 * up to 0.6 px apart depending on the frames before it, which is more than the bound measured here.
 */
async function facesOf(frames: readonly ReceivedFrame[]): Promise<Array<MouthAnimation | null>> {
  const near = faceHint(await astronautFace());
  const faces: Array<MouthAnimation | null> = [];
  for (const frame of frames) {
    const rgba = i420ToRgba({ width: frame.width, height: frame.height, data: frame.data });
    const found = await detectMouth({ rgba, width: frame.width, height: frame.height, near });
    faces.push(found.ok ? found.animation : null);
  }
  return faces;
}

let astronaut: Promise<MouthAnimation> | undefined;
function astronautFace(): Promise<MouthAnimation> {
  return (astronaut ??= (async () => {
    const manifest = JSON.parse(await fs.readFile(path.join(REPO_AVATARS, 'astronaut', 'manifest.json'), 'utf8'));
    return manifest.metadata.animation as MouthAnimation;
  })());
}

function noseTips(faces: Array<MouthAnimation | null>): Point[] {
  return faces.flatMap((face) => (face?.nose_tip ? [face.nose_tip] : []));
}

function percentile(values: number[], share: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * share))] ?? 0;
}

/** How far the nose tip travels up and down: the spread of its y between the 2nd and 98th percentiles, px. */
function verticalTravel(points: Point[]): number {
  const ys = points.map((p) => p.y);
  return percentile(ys, 0.98) - percentile(ys, 0.02);
}

function median(values: number[]): number {
  return percentile(values, 0.5);
}

/** p95 distance of `points` from their median point (the bench's idle-motion figure, `avatar-fidelity.ts`). */
function motionP95(points: Point[]): number {
  const centre = { x: median(points.map((p) => p.x)), y: median(points.map((p) => p.y)) };
  return percentile(
    points.map((p) => Math.hypot(p.x - centre.x, p.y - centre.y)),
    0.95,
  );
}

function framesBetween(peer: ReceivingPeer, from: number, to: number): ReceivedFrame[] {
  return peer.frames.filter((frame) => frame.at >= from && frame.at <= to);
}

async function openSession(t: TestApp, options: Record<string, unknown> = {}) {
  const created = await post(t.baseUrl, '/sessions', { avatar_id: 'astronaut', model: 'lipsync', ...options });
  expect(created.status).toBe(200);
  const sessionId = (await json(created)).session_id as string;
  const sse = await SseClient.open(`${t.baseUrl}/sessions/${sessionId}/events`);
  const peer = await ReceivingPeer.connect(t.baseUrl, sessionId);
  expect((await post(t.baseUrl, `/sessions/${sessionId}/start`)).status).toBe(200);
  await peer.until(() => peer.frames.length >= 25, 20_000, 'frames flowing');
  return {
    sessionId,
    sse,
    peer,
    close: async () => {
      peer.close();
      sse.close();
      await fetch(`${t.baseUrl}/sessions/${sessionId}`, { method: 'DELETE' });
    },
  };
}

/** The frames the viewer receives over the next `ms`. */
async function framesFor(peer: ReceivingPeer, ms: number): Promise<ReceivedFrame[]> {
  const from = performance.now();
  await new Promise((resolve) => setTimeout(resolve, ms));
  return framesBetween(peer, from, from + ms);
}

/** The next `count` frames the viewer receives. */
async function nextFrames(peer: ReceivingPeer, count: number): Promise<ReceivedFrame[]> {
  const from = peer.frames.length;
  await peer.until(() => peer.frames.length >= from + count, 60_000, `${count} frames`);
  return peer.frames.slice(from, from + count);
}

describe('the avatar listens and thinks (astronaut photo, at a wrtc viewer)', () => {
  let upstream: OpenAiUpstream;
  let t: TestApp;

  beforeAll(async () => {
    upstream = await startOpenAiUpstream({
      transcription: { transcript: 'Tell me about the weather.' },
      chat: { replyTokens: ['It will be sunny.'], firstTokenDelayMs: ANSWER_DELAY_MS, tokenDelayMs: 0 },
    });
    t = await startTestApp({ env: { SERVICE_LLM_BASE_URL: upstream.baseUrl, SERVICE_ASR_BASE_URL: upstream.baseUrl } });
  });

  afterAll(async () => {
    await t?.close();
    await upstream?.close();
    await closeFaceDetector();
  });

  it(
    'while the user speaks over /listen the nose tip moves vertically ≥ 2× its quiet idle and the mouth stays closed; thinking turns the head after 400 ms without audio and lets go once the answer plays',
    async () => {
      const session = await openSession(t);
      try {
        const { peer, sse } = session;
        const idle = await nextFrames(peer, IDLE_FRAMES);

        const listen = AudioStreamClient.connectTo(
          `${t.baseUrl.replace(/^http/, 'ws')}/sessions/${session.sessionId}/listen`,
        );
        await listen.waitOpen();
        const from = sse.events.length;
        const pauses: number[] = [];
        sessionParts(t.services.supervisor.liveSession(session.sessionId)!).bus.on('voice.pause', ({ pauseMs }) =>
          pauses.push(pauseMs),
        );
        await streamPcm(listen, framesOf(pcmBytes(userSpeech()), 640));
        const started = await listen.waitMessage('speech_start', 5_000);
        const ended = await listen.waitMessage('speech_end', 5_000);
        await sse.waitFor((e) => e.type === 'status' && e.data.stage === 'speaking', 60_000, 'the answer', from);
        await peer.until(() => peer.firstAudible(ended.at, AUDIBLE_RMS) !== undefined, 20_000, 'the answer heard');
        const answerHeard = peer.firstAudible(ended.at, AUDIBLE_RMS)!.at;
        await sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', 60_000, 'answer played', from);
        const after = await nextFrames(peer, 75);
        listen.sendJson({ type: 'eos' });

        // Listening: from once listening has blended in (300 ms) to the end of the user's turn.
        const listening = framesBetween(peer, started.at + 300, ended.at);
        console.log(
          `listening ${Math.round(ended.at - started.at)} ms, ${listening.length} frames; pauses nodded at: ${pauses.join(', ')} ms`,
        );
        expect(pauses.length).toBeGreaterThanOrEqual(2);
        expect(listening.length).toBeGreaterThan(20);
        const idleFaces = await facesOf(idle);
        const listeningFaces = await facesOf(listening);
        const idleNoses = noseTips(idleFaces);
        const listeningNoses = noseTips(listeningFaces);
        expect(idleNoses.length).toBeGreaterThan(0.9 * idle.length);
        expect(listeningNoses.length).toBeGreaterThan(0.9 * listening.length);
        const idleTravel = verticalTravel(idleNoses);
        const listeningTravel = verticalTravel(listeningNoses);
        console.log(
          `nose-tip vertical travel: quiet idle ${idleTravel.toFixed(2)} px, listening ${listeningTravel.toFixed(2)} px`,
        );
        expect(listeningTravel).toBeGreaterThanOrEqual(2 * idleTravel);

        // The mouth stays closed while listening: no wider than it ever is in quiet idle (the detector's own jitter).
        const opening = (faces: Array<MouthAnimation | null>) =>
          faces.flatMap((face) => (face ? [mouthOpening(face)] : []));
        const idleOpen = Math.max(...opening(idleFaces));
        const listeningOpen = Math.max(...opening(listeningFaces));
        console.log(`inner-lip opening: idle ≤ ${idleOpen.toFixed(3)}, listening ≤ ${listeningOpen.toFixed(3)}`);
        expect(listeningOpen).toBeLessThanOrEqual(idleOpen + 0.02);

        // Thinking: nothing within THINK_DELAY_MS of the end of the user's turn (the cue starts that late on the
        // clock, and frames reach the viewer later still); while the answer is awaited the head has turned.
        const home = {
          x: median(idleNoses.map((p) => p.x)),
          y: median(idleNoses.map((p) => p.y)),
        };
        const idleReach = motionP95(idleNoses);
        const away = (points: Point[]) => points.map((p) => Math.hypot(p.x - home.x, p.y - home.y));
        const early = noseTips(await facesOf(framesBetween(peer, ended.at, ended.at + THINK_DELAY_MS)));
        const waiting = noseTips(await facesOf(framesBetween(peer, ended.at + 1_200, answerHeard - 200)));
        const released = noseTips(await facesOf(after.slice(25)));
        const waitingAway = median(away(waiting));
        console.log(
          `nose tip from its idle place: idle p95 ${idleReach.toFixed(2)} px, first ${THINK_DELAY_MS} ms after the turn ≤ ${Math.max(...away(early)).toFixed(2)} px, awaiting the answer (median) ${waitingAway.toFixed(2)} px, after the answer ≤ ${Math.max(...away(released)).toFixed(2)} px`,
        );
        // A turn runs from the end of the user's speech: every frame leaves (`FrameSendPolicy`), a still head's too
        // (25 a second): ten in 400 ms, at least one on a starved host.
        expect(early.length).toBeGreaterThanOrEqual(1);
        expect(waiting.length).toBeGreaterThan(10);
        expect(Math.max(...away(early))).toBeLessThanOrEqual(idleReach + 0.5);
        expect(waitingAway).toBeGreaterThanOrEqual(Math.max(1, 2 * idleReach));
        expect(percentile(away(released), 0.9)).toBeLessThanOrEqual(idleReach + 0.5);
      } finally {
        await session.close();
      }
    },
    TEST_MS,
  );

  it(
    'motion 0: idle nose-tip motion ≤ 0.3 px at the viewer; blinks remain',
    async () => {
      const session = await openSession(t, { motion: 0 });
      try {
        // 8 s of idle: the blink schedule closes the eyes at least once in any 8 s (one slot every 4.5 s). A still
        // picture leaves the service at 4 frames a second (`IDLE_REPEAT_MS`), a blink at 25; a viewer's first
        // seconds get every frame (`STEADY_START_MS`), and those, the VP8 encoder still ramping up and each frame
        // coded on a 25 fps budget, moved the detector's nose tip 0.24–0.35 px (p95) where the face did not move
        // (0.05 px on the idle frames after them): the window starts after them.
        await new Promise((resolve) => setTimeout(resolve, STEADY_START_MS));
        const idle = await framesFor(session.peer, 8_000);

        // Blinks: the eye region darkens on a few frames (the lid over the eye) while the rest of the face holds.
        const { left_eye, right_eye } = await astronautFace();
        const eyeLuma = (frame: ReceivedFrame) => {
          let sum = 0;
          let count = 0;
          for (const eye of [left_eye, right_eye])
            for (let y = Math.round(eye.y - 4); y <= eye.y + 4; y++)
              for (let x = Math.round(eye.x - 6); x <= eye.x + 6; x++) {
                sum += frame.data[y * frame.width + x];
                count++;
              }
          return sum / count;
        };
        const lumas = idle.map(eyeLuma);
        const open = median(lumas);
        const lidDown = lumas.map((luma) => Math.abs(luma - open) > 2);
        const blinks = lidDown.filter((down, i) => down && !lidDown[i - 1]).length;
        console.log(
          `motion 0: ${blinks} blinks, ${lidDown.filter(Boolean).length} of ${idle.length} frames with the lids lowered`,
        );
        expect(blinks).toBeGreaterThanOrEqual(1);

        // The nose tip while the eyes are open (frames with the lids lowered left out: the detector fits all 68 points
        // together, so a lid pulls landmark 30 on frames where nothing else changed).
        const eyesOpen = idle.filter((_, i) => !lidDown[i]);
        const noses = noseTips(await facesOf(eyesOpen));
        expect(eyesOpen.length).toBeGreaterThan(15);
        expect(noses.length).toBeGreaterThan(0.9 * eyesOpen.length);
        const motion = motionP95(noses);
        console.log(
          `motion 0: idle nose-tip motion (p95) ${motion.toFixed(2)} px at the viewer (${noses.length} frames, eyes open)`,
        );
        expect(motion).toBeLessThanOrEqual(0.3);
      } finally {
        await session.close();
      }
    },
    TEST_MS,
  );
});
