import { describe, expect, it } from 'vitest';
import { buildFaceTrack } from '../actors/faces/face-track.ts';
import { parseClipReport } from '../actors/faces/clip-ffmpeg.ts';
import { sniffClipFormat } from '../actors/faces/video-clip.ts';
import { transformAnimation } from '../actors/faces/landmarks.ts';
import { ASTRONAUT_ANIMATION } from './render.fixtures.ts';

const shifted = (dx: number) => transformAnimation(ASTRONAUT_ANIMATION, -dx, 0, 1);

describe('face track of a clip', () => {
  it('interpolates frames between detections, holds the ends, and keeps the animation shape', () => {
    const track = buildFaceTrack(11, new Map([[2, shifted(0)], [7, shifted(10)]]), 0);
    expect(track).toHaveLength(11);
    const x0 = ASTRONAUT_ANIMATION.mouth_center.x;
    expect(track.map((f) => Math.round((f.mouth_center.x - x0) * 10) / 10)).toEqual([0, 0, 0, 2, 4, 6, 8, 10, 10, 10, 10]);
    for (const frame of track) {
      expect(frame.outer_lip).toHaveLength(12);
      expect(frame.inner_lip).toHaveLength(8);
      expect(frame.left_eye_contour?.length).toBe(ASTRONAUT_ANIMATION.left_eye_contour?.length);
      expect(frame.detector).toBe(ASTRONAUT_ANIMATION.detector);
    }
  });

  it('smooths frame-to-frame jitter: alternating ±2 px detections become a steady line', () => {
    const detections = new Map(Array.from({ length: 30 }, (_, i) => [i, shifted(i % 2 === 0 ? 2 : -2)] as const));
    const track = buildFaceTrack(30, detections);
    const middle = track.slice(5, 25).map((f) => f.mouth_center.x - ASTRONAUT_ANIMATION.mouth_center.x);
    for (const dx of middle) expect(Math.abs(dx)).toBeLessThan(0.5);
  });

  it('refuses to track without any detection', () => {
    expect(() => buildFaceTrack(5, new Map())).toThrow(/no detections/);
  });
});

describe("reading ffmpeg's report of a clip", () => {
  const report = (streams: string, duration = '00:00:10.04') =>
    `Input #0, mov,mp4,m4a,3gp,3g2,mj2, from 'clip':\n  Duration: ${duration}, start: 0.000000, bitrate: 1859 kb/s\n${streams}\nAt least one output file must be specified\n`;

  it('takes the duration, codec, upright size, rotation and audio', () => {
    const video = '    Stream #0:0(und): Video: h264 (High) (avc1 / 0x31637661), yuv420p, 1920x1080, 5000 kb/s, 30 fps (default)\n    Metadata:\n      rotate          : 90\n';
    const audio = '    Stream #0:1(und): Audio: aac (LC) (mp4a / 0x6134706D), 48000 Hz, stereo, fltp, 128 kb/s (default)';
    expect(parseClipReport(report(video + audio))).toEqual({ durationS: 10.04, codec: 'h264', width: 1080, height: 1920, rotation: 90, hasAudio: true });
  });

  it('tells a file without video, without duration, and one ffmpeg cannot read', () => {
    expect(parseClipReport(report('    Stream #0:0(und): Audio: aac (LC), 44100 Hz, mono, fltp'))).toBe('no_video');
    expect(parseClipReport(report('    Stream #0:0: Video: vp8, yuv420p, 640x360', 'N/A'))).toBe('no_duration');
    expect(parseClipReport("[mov,mp4,m4a,3gp,3g2,mj2 @ 0x1] moov atom not found\nclip: Invalid data found when processing input\n")).toBe('unreadable');
  });

  it('knows MP4/MOV and WebM by their first bytes, nothing else', () => {
    expect(sniffClipFormat(Buffer.from('\0\0\0\x20ftypisom', 'latin1'))).toBe('mp4');
    expect(sniffClipFormat(Buffer.from('\0\0\0\x08wide', 'latin1'))).toBe('mp4');
    expect(sniffClipFormat(Buffer.from([0x1a, 0x45, 0xdf, 0xa3, 0x9f]))).toBe('webm');
    expect(sniffClipFormat(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]))).toBeNull();
    expect(sniffClipFormat(new Uint8Array(0))).toBeNull();
  });
});
