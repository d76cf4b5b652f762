import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import { createRequire } from 'node:module';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json, post, startTestApp, tempDir, type TestApp } from './helpers/app.ts';
import {
  AUDIBLE_RMS,
  labels,
  openSession,
  pcmBytes,
  postAudio,
  recordSentAudio,
  tone,
  wavBytes,
  type LiveSession,
} from './helpers/conversation.ts';
import type { SseEvent } from './helpers/sse.ts';

const ffmpegPath: string = createRequire(import.meta.url)('@ffmpeg-installer/ffmpeg').path;
const run = promisify(execFile);

/** Each clip is this long; long enough to measure its played duration, short enough for a fast file. */
const CLIP_MS = 800;
/** Clip playout plus receiver jitter buffer and scheduling slack on 2 shared cores. */
const CLIP_TURN_MS = 10_000;
/**
 * The played duration is read as the service sends it (`recordSentAudio`), in 10 ms chunks: a chunk at each edge may
 * be partly silent, and resampling rings for a few ms. A clip played at the wrong rate (e.g. 8 kHz read as 16 kHz)
 * is off by 50 % (400 ms) or more. At a receiver, NetEq's stretching and concealment moved it by up to 460 ms on a
 * host at half speed, so the receiver is asked only to hear it.
 */
const DURATION_TOLERANCE_MS = 30;

describe('speak_audio / speak_rt_audio: WAV, raw PCM at 8/16/48 kHz and MP3 become audible speech', () => {
  let t: TestApp;
  let s: LiveSession;
  let mp3: Buffer;

  beforeAll(async () => {
    t = await startTestApp();
    s = await openSession(t);
    const dir = await tempDir('speak-audio-mp3-');
    const source = path.join(dir, 'tone.wav');
    const target = path.join(dir, 'tone.mp3');
    await fs.writeFile(source, wavBytes(tone(44_100, CLIP_MS, 440), 44_100));
    await run(ffmpegPath, [
      '-hide_banner',
      '-loglevel',
      'error',
      '-y',
      '-i',
      source,
      '-codec:a',
      'libmp3lame',
      '-b:a',
      '96k',
      target,
    ]);
    mp3 = await fs.readFile(target);
    await fs.rm(dir, { recursive: true, force: true });
  });

  afterAll(async () => {
    s?.close();
    await t?.close();
  });

  /** Plays one upload, heard at the receiver; returns how long the service played it audibly. */
  async function playAndMeasure(
    route: 'speak_audio' | 'speak_rt_audio',
    audio: Buffer,
    fields: Record<string, string> = {},
  ) {
    const from = s.sse.events.length;
    const sentAt = performance.now();
    const sent = recordSentAudio(t, s.sessionId);
    let idle: SseEvent;
    try {
      const res = await postAudio(t.baseUrl, `/sessions/${s.sessionId}/${route}`, audio, fields);
      expect(res.status, await res.clone().text()).toBe(200);
      expect(await res.text()).toBe('');
      await s.peer.until(
        () => s.peer.firstAudible(sentAt, AUDIBLE_RMS) !== undefined,
        CLIP_TURN_MS,
        `audible ${route}`,
      );
      idle = await s.sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', CLIP_TURN_MS, 'idle', from);
    } finally {
      sent.stop();
    }
    const audibleMs = sent.audibleMs();
    const kinds = labels(s.sse.events.slice(from));
    expect(kinds.indexOf('status:speaking')).toBeLessThan(kinds.indexOf('frame'));
    expect(kinds.at(-1)).toBe('status:idle');
    // No synthesis stage: direct audio skips TTS.
    expect(kinds.some((k) => k.startsWith('tts:'))).toBe(false);
    expect(kinds).not.toContain('error');
    return { audibleMs, idleAt: idle.at };
  }

  it('WAV (22.05 kHz)', async () => {
    const { audibleMs } = await playAndMeasure('speak_audio', wavBytes(tone(22_050, CLIP_MS), 22_050));
    expect(Math.abs(audibleMs - CLIP_MS)).toBeLessThanOrEqual(DURATION_TOLERANCE_MS);
  });

  for (const rate of [8_000, 16_000, 48_000]) {
    it(`raw PCM at ${rate} Hz with sample_rate`, async () => {
      const { audibleMs } = await playAndMeasure('speak_audio', pcmBytes(tone(rate, CLIP_MS)), {
        sample_rate: String(rate),
      });
      expect(Math.abs(audibleMs - CLIP_MS)).toBeLessThanOrEqual(DURATION_TOLERANCE_MS);
    });
  }

  it('raw PCM without sample_rate is read as 16 kHz', async () => {
    const { audibleMs } = await playAndMeasure('speak_audio', pcmBytes(tone(16_000, CLIP_MS)));
    expect(Math.abs(audibleMs - CLIP_MS)).toBeLessThanOrEqual(DURATION_TOLERANCE_MS);
  });

  it('MP3 made by ffmpeg from a tone', async () => {
    expect(mp3.length).toBeGreaterThan(1000);
    const { audibleMs } = await playAndMeasure('speak_audio', mp3);
    // MP3 encoders pad with priming samples; the decoded clip may be a frame or two longer.
    expect(Math.abs(audibleMs - CLIP_MS)).toBeLessThanOrEqual(DURATION_TOLERANCE_MS + 60);
  });

  it('speak_rt_audio with WAV and with raw 48 kHz PCM', async () => {
    const wav = await playAndMeasure('speak_rt_audio', wavBytes(tone(16_000, CLIP_MS), 16_000));
    expect(Math.abs(wav.audibleMs - CLIP_MS)).toBeLessThanOrEqual(DURATION_TOLERANCE_MS);
    const raw = await playAndMeasure('speak_rt_audio', pcmBytes(tone(48_000, CLIP_MS)), { sample_rate: '48000' });
    expect(Math.abs(raw.audibleMs - CLIP_MS)).toBeLessThanOrEqual(DURATION_TOLERANCE_MS);
  });

  it('409 while a clip plays; interrupt silences it', async () => {
    const from = s.sse.events.length;
    const res = await postAudio(t.baseUrl, `/sessions/${s.sessionId}/speak_audio`, pcmBytes(tone(16_000, 3_000)));
    expect(res.status).toBe(200);
    const overlap = await postAudio(t.baseUrl, `/sessions/${s.sessionId}/speak_audio`, pcmBytes(tone(16_000, 100)));
    expect(overlap.status).toBe(409);
    expect((await post(t.baseUrl, `/sessions/${s.sessionId}/speak`, { text: 'x' })).status).toBe(409);
    await s.sse.waitFor((e) => e.type === 'status' && e.data.stage === 'speaking', CLIP_TURN_MS, 'speaking', from);
    await post(t.baseUrl, `/sessions/${s.sessionId}/interrupt`);
    await s.sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', 1_500, 'idle after interrupt', from);
    expect(labels(s.sse.events.slice(from))).toContain('status:interrupted');
  });

  it('rejects bad audio with 400 {detail}', async () => {
    const url = `/sessions/${s.sessionId}/speak_audio`;
    const cases: Array<[string, Buffer, Record<string, string>]> = [
      ['text', Buffer.from('this is certainly not audio, it is a text file with words in it\n'.repeat(20)), {}],
      ['png', Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), Buffer.alloc(600, 7)]), {}],
      ['broken wav', Buffer.concat([wavBytes(tone(16_000, 100), 16_000).subarray(0, 20), Buffer.alloc(10)]), {}],
      ['odd-length raw PCM', Buffer.concat([pcmBytes(tone(16_000, 100)), Buffer.from([1])]), {}],
      ['empty', Buffer.alloc(0), {}],
      ['sample_rate out of range', pcmBytes(tone(16_000, 100)), { sample_rate: '7000' }],
      ['sample_rate not an integer', pcmBytes(tone(16_000, 100)), { sample_rate: 'fast' }],
    ];
    for (const [name, audio, fields] of cases) {
      const res = await postAudio(t.baseUrl, url, audio, fields);
      expect(res.status, name).toBe(400);
      const body = await json(res);
      expect(typeof body.detail, name).toBe('string');
      expect(body.detail.length, name).toBeGreaterThan(0);
    }
    const noFile = await fetch(`${t.baseUrl}${url}`, { method: 'POST', body: new FormData() });
    expect(noFile.status).toBe(400);
    const notMultipart = await post(t.baseUrl, url, { audio: 'x' });
    expect(notMultipart.status).toBe(400);
  });

  it('413 over 25 MB, and the session is still idle and usable afterwards', async () => {
    const big = Buffer.alloc(25 * 1024 * 1024 + 2, 0);
    const res = await postAudio(t.baseUrl, `/sessions/${s.sessionId}/speak_audio`, big);
    expect(res.status).toBe(413);
    expect((await json(res)).detail).toMatch(/25 MB/);
    const { audibleMs } = await playAndMeasure('speak_audio', pcmBytes(tone(16_000, 400)));
    expect(audibleMs).toBeGreaterThan(200);
  });

  it('409 before start, 404 for an unknown session', async () => {
    const fresh = await openSession(t, { start: false });
    try {
      expect(
        (await postAudio(t.baseUrl, `/sessions/${fresh.sessionId}/speak_audio`, pcmBytes(tone(16_000, 100)))).status,
      ).toBe(409);
    } finally {
      fresh.close();
      await fetch(`${t.baseUrl}/sessions/${fresh.sessionId}`, { method: 'DELETE' });
    }
    const missing = await postAudio(
      t.baseUrl,
      '/sessions/00000000-0000-4000-8000-000000000000/speak_rt_audio',
      pcmBytes(tone(16_000, 100)),
    );
    expect(missing.status).toBe(404);
  });
});
