import { describe, expect, it } from 'vitest';
import { buildFaceTrack } from '../actors/faces/face-track.ts';
import { parseFrameReport } from '../actors/faces/clip-ffmpeg.ts';
import { sniffClipFormat } from '../actors/faces/video-clip.ts';
import { transformAnimation } from '../actors/faces/landmarks.ts';
import { ASTRONAUT_ANIMATION } from './render.fixtures.ts';

const shifted = (dx: number) => transformAnimation(ASTRONAUT_ANIMATION, -dx, 0, 1);

describe('face track of a clip', () => {
  it('interpolates frames between detections, holds the ends, and keeps the animation shape', () => {
    const track = buildFaceTrack(
      11,
      new Map([
        [2, shifted(0)],
        [7, shifted(10)],
      ]),
      0,
    );
    expect(track).toHaveLength(11);
    const x0 = ASTRONAUT_ANIMATION.mouth_center.x;
    expect(track.map((f) => Math.round((f.mouth_center.x - x0) * 10) / 10)).toEqual([
      0, 0, 0, 2, 4, 6, 8, 10, 10, 10, 10,
    ]);
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

describe("reading ffmpeg's framecrc report of a clip", () => {
  it("takes each stream's media type, codec, size, time base and timed lines, skipping lines without a timestamp", () => {
    const report = [
      '#extradata 0:       41, 0x34980d21',
      '#software: Lavf58.24.100',
      '#tb 0: 1/12800',
      '#media_type 0: video',
      '#codec_id 0: h264',
      '#dimensions 0: 640x360',
      '#sar 0: 1/1',
      '#tb 1: 1/44100',
      '#media_type 1: audio',
      '#codec_id 1: aac',
      '0,          0,          0,      512,    10529, 0x20d8417c',
      '1,      -1024,      -1024,     1024,        6, 0x03f000f3',
      '0,        512,        512,      512,      583, 0x01872a66, F=0x0',
      '0, -9223372036854775808, -9223372036854775808, 512, 1, 0x00000001',
    ].join('\n');
    const streams = parseFrameReport(report);
    expect(streams.get(0)).toEqual({
      mediaType: 'video',
      codec: 'h264',
      width: 640,
      height: 360,
      timeBase: 1 / 12800,
      lines: [
        { pts: 0, duration: 512, hash: '0x20d8417c' },
        { pts: 512, duration: 512, hash: '0x01872a66' },
      ],
    });
    expect(streams.get(1)).toMatchObject({
      mediaType: 'audio',
      codec: 'aac',
      width: 0,
      height: 0,
      lines: [{ pts: -1024, duration: 1024 }],
    });
    expect(parseFrameReport('')).toEqual(new Map());
  });

  it('knows MP4/MOV and WebM by their first bytes, nothing else', () => {
    expect(sniffClipFormat(Buffer.from('\0\0\0\x20ftypisom', 'latin1'))).toBe('mp4');
    expect(sniffClipFormat(Buffer.from('\0\0\0\x08wide', 'latin1'))).toBe('mp4');
    expect(sniffClipFormat(Buffer.from([0x1a, 0x45, 0xdf, 0xa3, 0x9f]))).toBe('webm');
    expect(sniffClipFormat(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]))).toBeNull();
    expect(sniffClipFormat(new Uint8Array(0))).toBeNull();
  });
});
