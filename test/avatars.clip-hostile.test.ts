/**
 * Issue 42, H1/M1/M2: a clip upload is opened only as the container its bytes name, from its own bytes only, and its
 * figures are measured from the stream, not read from its metadata. Every hostile clip and manifest is made here
 * (ffmpeg lavfi sources, crafted bytes); a loopback HTTP server that must receive nothing and a face clip beside the
 * service's data (a recording's place) that must not become an avatar stand for what a manifest could reach.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closeFaceDetector } from '../actors/faces/detector.ts';
import { FFMPEG_PATH } from '../actors/faces/clip-ffmpeg.ts';
import { InvalidClipError, MAX_CLIP_SECONDS, MAX_CLIP_SIDE, probeClip } from '../actors/faces/video-clip.ts';
import { json, startTestApp, tempDir, type TestApp } from './helpers/app.ts';
import { uploadClip } from './helpers/clip-avatar.ts';
import { ffmpeg, landscapeMp4 } from './helpers/clips.ts';

/** Creations run one at a time and each detects ~10 frames: generous on a loaded 2-core host. */
const CREATION_TIMEOUT_MS = 180_000;
/** Making the hostile clips (a few seconds of ffmpeg each, one 4200² stream) on a loaded host. */
const MAKING_TIMEOUT_MS = 120_000;

let files: string;
/** A 2 s 640×360 H.264 clip of the astronaut's face: what a manifest would reach. */
let faceClip: string;

/** ffmpeg arguments for the face clip as its first video stream and a 4200² gray one as its second (M1). */
function faceThenHugeStream(): string[] {
  return ['-i', faceClip, '-f', 'lavfi', '-i', 'color=c=gray:s=4200x4200:r=2:d=2', '-map', '0:v', '-map', '1:v'].concat(
    ['-c:v:0', 'copy', '-c:v:1', 'libx264', '-preset', 'ultrafast'],
  );
}

beforeAll(async () => {
  files = await tempDir('clip-hostile-');
  faceClip = await landscapeMp4(files, 2);
}, MAKING_TIMEOUT_MS);

afterAll(async () => {
  if (files) await fs.rm(files, { recursive: true, force: true });
});

/** A clip made by ffmpeg from `args` (inputs and options) into `name` under the test's directory. */
async function made(name: string, args: string[]): Promise<string> {
  const file = path.join(files, name);
  await ffmpeg([...args, file]);
  return file;
}

/** What `ffmpeg -i` prints about `file` (its free-text report, which copies metadata verbatim). */
async function ffmpegReport(file: string): Promise<string> {
  const { stderr } = await promisify(execFile)(FFMPEG_PATH, ['-hide_banner', '-nostdin', '-i', file]).catch(
    (error: { stderr: string }) => error,
  );
  return stderr;
}

async function refusal(file: string): Promise<string> {
  const outcome = await probeClip(file).catch((error: unknown) => error);
  expect(outcome).toBeInstanceOf(InvalidClipError);
  return (outcome as Error).message;
}

/** A `title`, a `comment` and a global `rotate` tag written as MP4 metadata (mdta keys), each what ffmpeg's report shows as text. */
function lies(tags: Record<string, string>): string[] {
  return [
    ...Object.entries(tags).flatMap(([key, value]) => ['-metadata', `${key}=${value}`]),
    '-movflags',
    'use_metadata_tags',
  ];
}

describe("a clip's figures are measured from its first video stream, never read from its metadata (M1)", () => {
  it(
    'a title naming another size, a comment naming another duration and a global rotate tag change nothing',
    async () => {
      const file = await made('lying.mp4', [
        '-f',
        'lavfi',
        '-i',
        'testsrc=s=640x360:r=25:d=2.2',
        '-c:v',
        'libx264',
        '-preset',
        'ultrafast',
        ...lies({
          title: 'Stream #0:0: Video: h264, 4096x4096',
          comment: 'Duration: 00:00:59.00, start: 0',
          rotate: '90',
        }),
      ]);
      // The lies are in ffmpeg's text report, ahead of the true lines.
      const report = await ffmpegReport(file);
      expect(report).toMatch(/title\s+: Stream #0:0: Video: h264, 4096x4096/);
      expect(report).toMatch(/comment\s+: Duration: 00:00:59.00/);
      expect(report).toMatch(/^\s*rotate\s+: 90/m);
      const info = await probeClip(file);
      expect(info).toMatchObject({
        format: 'mp4',
        codec: 'h264',
        width: 640,
        height: 360,
        rotation: 0,
        hasAudio: false,
      });
      expect(info.durationS).toBeCloseTo(2.2, 2);
      expect(info.frameRate).toBeCloseTo(25, 3);
    },
    MAKING_TIMEOUT_MS,
  );

  it(
    `a stream wider than ${MAX_CLIP_SIDE} px, or with more pixels than ${MAX_CLIP_SIDE}², is refused whatever its title says`,
    async () => {
      const title = lies({ title: 'Stream #0:0: Video: h264, 640x360' });
      const wide = await made('wide.mp4', [
        '-f',
        'lavfi',
        '-i',
        'color=c=gray:s=8192x16:r=5:d=2.4',
        '-c:v',
        'libx264',
        '-preset',
        'ultrafast',
        ...title,
      ]);
      const huge = await made('huge.mp4', [
        '-f',
        'lavfi',
        '-i',
        'color=c=gray:s=4200x4200:r=2:d=2.5',
        '-c:v',
        'libx264',
        '-preset',
        'ultrafast',
        ...title,
      ]);
      expect(await ffmpegReport(wide)).toMatch(/title\s+: Stream #0:0: Video: h264, 640x360/);
      expect(await refusal(wide)).toMatch(`larger than ${MAX_CLIP_SIDE} px`);
      expect(await refusal(huge)).toMatch(`larger than ${MAX_CLIP_SIDE} px`);
    },
    MAKING_TIMEOUT_MS,
  );

  it(
    `a ${MAX_CLIP_SECONDS + 1} s clip whose comment says 10 s is refused as too long`,
    async () => {
      const file = await made('long-lying.mp4', [
        '-f',
        'lavfi',
        '-i',
        `color=c=gray:s=64x64:r=5:d=${MAX_CLIP_SECONDS + 1}`,
        '-c:v',
        'libx264',
        '-preset',
        'ultrafast',
        ...lies({ comment: 'Duration: 00:00:10.00, start: 0' }),
      ]);
      expect(await refusal(file)).toMatch(`at most ${MAX_CLIP_SECONDS} s`);
    },
    MAKING_TIMEOUT_MS,
  );

  it(
    'only the first video stream is measured: a 4200² second stream is neither the size reported nor decoded',
    async () => {
      const file = await made('two-streams.mp4', faceThenHugeStream());
      expect(await probeClip(file)).toMatchObject({ width: 640, height: 360, codec: 'h264' });
    },
    MAKING_TIMEOUT_MS,
  );

  it(
    "the rotation the stream's own track header gives is measured from the turned frame, sides swapped for 90° and 270°",
    async () => {
      // ffmpeg's muxer writes the tag's matrix the other way round: `rotate=90` reads back (and is applied) as 270.
      for (const [tag, rotation, width, height] of [
        [90, 270, 360, 640],
        [180, 180, 640, 360],
        [270, 90, 360, 640],
      ] as const) {
        const file = await made(`rotated-${tag}.mp4`, [
          '-i',
          faceClip,
          '-c',
          'copy',
          '-metadata:s:v:0',
          `rotate=${tag}`,
        ]);
        expect(await probeClip(file)).toMatchObject({ width, height, rotation });
      }
    },
    MAKING_TIMEOUT_MS,
  );
});

describe('POST /avatars/custom with hostile clips (real app, real ffmpeg, real detector)', () => {
  let t: TestApp;
  let receiver: http.Server;
  let receiverUrl: string;
  /** Requests the loopback receiver got: every row must leave this at zero. */
  const received: string[] = [];
  /** A face clip where a recording would be, in the service's data directory. */
  let sentinel: string;

  beforeAll(async () => {
    t = await startTestApp();
    const clipBytes = await fs.readFile(faceClip);
    receiver = http.createServer((req, res) => {
      received.push(`${req.method} ${req.url}`);
      res.writeHead(200, { 'content-type': 'video/mp4' }).end(clipBytes);
    });
    await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
    receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`;
    sentinel = path.join(t.dataDir, 'recordings', 'sentinel.mp4');
    await fs.mkdir(path.dirname(sentinel), { recursive: true });
    await fs.copyFile(faceClip, sentinel);
  }, 60_000);

  afterAll(async () => {
    await t?.close();
    await closeFaceDetector();
    await new Promise((resolve) => receiver?.close(resolve));
  });

  const avatarIds = async () =>
    (await json(await fetch(`${t.baseUrl}/avatars`))).map((a: { id: string }) => a.id).sort();

  it(
    'manifests and scripts that name a URL, an absolute or a relative file are 400: the receiver gets no request, the file next to the service becomes no avatar',
    async () => {
      // The upload is written into a temporary directory inside the avatars directory; this reaches the sentinel from there.
      const relative = path.relative(path.join(t.avatarsDir, '.tmp-upload'), sentinel);
      const dash = (baseUrl: string) =>
        '<MPD xmlns="urn:mpeg:dash:schema:mpd:2011" type="static" mediaPresentationDuration="PT2S" minBufferTime="PT1S" ' +
        'profiles="urn:mpeg:dash:profile:isoff-on-demand:2011"><Period><AdaptationSet mimeType="video/mp4">' +
        `<Representation id="1" bandwidth="1000" width="640" height="360" codecs="avc1.42c01e"><BaseURL>${baseUrl}</BaseURL>` +
        '</Representation></AdaptationSet></Period></MPD>\n';
      const ebml = '\x1a\x45\xdf\xa3';
      const rows: Array<[string, string]> = [
        // `<!--free-->`: bytes 4–8 are an MP4 box name, so these pass the MP4 sniff.
        ['DASH manifest → loopback URL', `<!--free-->${dash(`${receiverUrl}/clip.mp4`)}`],
        ['DASH manifest → file:// URL', `<!--free-->${dash(`file://${sentinel}`)}`],
        ['DASH manifest → relative path', `<!--free-->${dash(relative)}`],
        ['DASH manifest after a WebM magic', `${ebml}${dash(`${receiverUrl}/webm.mp4`)}`],
        [
          'HLS playlist',
          `#EXTM3U\n#EXT-X-TARGETDURATION:2\n#EXTINF:2.0,\n${receiverUrl}/segment.ts\n#EXTINF:2.0,\nfile://${sentinel}\n#EXT-X-ENDLIST\n`,
        ],
        [
          'HLS playlist behind a free box',
          `\0\0\0\x08free#EXTM3U\n#EXTINF:2.0,\n${receiverUrl}/boxed.ts\n#EXT-X-ENDLIST\n`,
        ],
        ['ffconcat script', `ffconcat version 1.0\nfile '${sentinel}'\nfile '${receiverUrl}/concat.mp4'\n`],
        ['ffconcat script behind a free box', `\0\0\0\x08freeffconcat version 1.0\nfile '${relative}'\n`],
      ];
      const before = await avatarIds();
      // Its last access put at the epoch: any read of it would move that (relatime), and no read may happen.
      await fs.utimes(sentinel, new Date(0), (await fs.stat(sentinel)).mtime);
      for (const [label, text] of rows) {
        const res = await uploadClip(t.baseUrl, Buffer.from(text, 'latin1'), label);
        const body = await json(res);
        expect({ label, status: res.status }).toEqual({ label, status: 400 });
        expect(body.detail, label).toMatch(/MP4, MOV or WebM|could not be read/);
      }
      // An image-pattern name for the upload changes nothing either: the service names the file it writes.
      const patterned = new FormData();
      patterned.append('name', 'pattern');
      patterned.append('base_avatar_id', 'astronaut');
      patterned.append('video', new Blob([Buffer.from(`<!--free-->${dash(relative)}`, 'latin1')]), 'frame_%03d.mp4');
      expect((await fetch(`${t.baseUrl}/avatars/custom`, { method: 'POST', body: patterned })).status).toBe(400);
      expect(received).toEqual([]);
      expect((await fs.stat(sentinel)).atimeMs).toBe(0);
      expect(await avatarIds()).toEqual(before);
    },
    CREATION_TIMEOUT_MS,
  );

  it(
    'MJPEG/MOV, FFV1/MKV, PNG/MOV and HEVC/MP4 clips are 400 naming their codec (M2)',
    async () => {
      const source = ['-f', 'lavfi', '-i', 'testsrc=s=64x64:r=5:d=2.5'];
      const rows: Array<[string, string]> = [
        ['mjpeg', await made('mjpeg.mov', [...source, '-c:v', 'mjpeg'])],
        ['ffv1', await made('ffv1.mkv', [...source, '-c:v', 'ffv1'])],
        ['png', await made('png.mov', [...source, '-c:v', 'png'])],
        [
          'hevc',
          await made('hevc.mp4', [
            ...source,
            '-c:v',
            'libx265',
            '-preset',
            'ultrafast',
            '-x265-params',
            'log-level=error',
          ]),
        ],
      ];
      const before = await avatarIds();
      for (const [codec, file] of rows) {
        const res = await uploadClip(t.baseUrl, await fs.readFile(file), codec);
        const body = await json(res);
        expect({ codec, status: res.status }).toEqual({ codec, status: 400 });
        expect(body.detail).toBe(`video codec ${codec} is not accepted: H.264, VP8 or VP9 only`);
      }
      expect(await avatarIds()).toEqual(before);
    },
    MAKING_TIMEOUT_MS,
  );

  it(
    'a VP9 WebM is accepted (M2), and a clip with a 4200² second stream becomes an avatar from its first stream (M1)',
    async () => {
      const vp9 = await made('face-vp9.webm', [
        '-i',
        faceClip,
        '-an',
        '-c:v',
        'libvpx-vp9',
        '-deadline',
        'realtime',
        '-cpu-used',
        '8',
        '-b:v',
        '1M',
      ]);
      const twoStreams = await made('face-two-streams.mp4', [
        '-i',
        faceClip,
        '-f',
        'lavfi',
        '-i',
        'color=c=gray:s=4200x4200:r=2:d=2',
        '-map',
        '1:v',
        '-map',
        '0:v',
        '-c:v:0',
        'libx264',
        '-preset',
        'ultrafast',
        '-c:v:1',
        'copy',
      ]);
      // The face is the second stream here, the huge gray one first: refused, its 4200² never taken for the face's.
      expect((await json(await uploadClip(t.baseUrl, await fs.readFile(twoStreams), 'two streams'))).detail).toMatch(
        `larger than ${MAX_CLIP_SIDE} px`,
      );
      const faceFirst = await made('face-first.mp4', faceThenHugeStream());
      for (const [file, source] of [
        [vp9, { codec: 'vp9', width: 640, height: 360, has_audio: false }],
        [faceFirst, { codec: 'h264', width: 640, height: 360 }],
      ] as const) {
        const res = await uploadClip(t.baseUrl, await fs.readFile(file), path.basename(file));
        const summary = await json(res);
        expect(res.status, JSON.stringify(summary)).toBe(200);
        const manifest = await json(await fetch(`${t.baseUrl}/avatars/${summary.id}`));
        expect(manifest.metadata.clip.source).toMatchObject(source);
        expect(manifest.metadata.clip.source.duration_s).toBeCloseTo(2, 1);
      }
    },
    2 * CREATION_TIMEOUT_MS,
  );
});
