import { rmSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MouthHarvest, type HarvestedMouthFiles } from '../actors/faces/mouth-harvest.ts';
import { loopFrameIndex } from '../actors/render/clip-loop.ts';
import { i420ToRgba } from '../actors/render/i420.ts';
import { OWN_MOUTH_OPEN } from '../actors/render/harvested-mouths.ts';
import { WarpRenderer } from '../actors/render/renderers/warp.ts';
import { RenderPool } from '../actors/render/pool.ts';
import type { AvatarSource, I420Frame, MouthAnimation, Point } from '../actors/render/types.ts';
import { makeClipBundle } from './helpers/clip-bundle.ts';
import { ASTRONAUT_ANIMATION, lumaDiff, makePortraitBundle, request } from './render.fixtures.ts';

/** The openings the "clip" shows; its mouths are the photo renderer's, with the opening painted as bright teeth. */
const OPENINGS = [0, 0.2, 0.4, 0.6, 0.8, 1];
/** The "clip" was lit differently: every harvested pixel is this much brighter (RGB levels) than the loop frames. */
const CLIP_BRIGHTER = 30;
const { x: CX, y: CY } = ASTRONAUT_ANIMATION.mouth_center;
const MW = ASTRONAUT_ANIMATION.mouth_width;

/** iBUG inner lip (60 left corner, 61–63 upper, 64 right corner, 65–67 lower) parted by `gap` px. */
function innerLip(gap: number): Point[] {
  const half = gap / 2;
  return [
    { x: CX - 16, y: CY },
    { x: CX - 8, y: CY - half },
    { x: CX, y: CY - half },
    { x: CX + 8, y: CY - half },
    { x: CX + 16, y: CY },
    { x: CX + 8, y: CY + half },
    { x: CX, y: CY + half },
    { x: CX - 8, y: CY + half },
  ];
}

/** The resting gap of the fixture's hand-measured inner lip, so the loop's own mouth counts as closed. */
const REST_GAP = 0.114 * MW;

/** Frames of a speaking "clip" and the harvest made from them (the real `MouthHarvest`). */
async function harvestSpeakingFrames(): Promise<{ files: HarvestedMouthFiles; frames: Uint8Array[] }> {
  const photo = makePortraitBundle();
  try {
    const renderer = new WarpRenderer();
    await renderer.prepare(photo.source);
    const closed = i420ToRgba(renderer.render(request(0)));
    const harvest = new MouthHarvest();
    const frames: Uint8Array[] = [];
    OPENINGS.forEach((open, index) => {
      const rgba = i420ToRgba(renderer.render(request(0, { mouth: { open, wide: 0, round: 0 }, speaking: true })));
      for (let o = 0; o < rgba.length; o += 4) {
        const x = (o / 4) % 512;
        const y = Math.floor(o / 4 / 512);
        const inMouth = Math.abs(x - CX) < 0.6 * MW && Math.abs(y - CY) < 0.5 * MW;
        const change =
          Math.abs(rgba[o] - closed[o]) + Math.abs(rgba[o + 1] - closed[o + 1]) + Math.abs(rgba[o + 2] - closed[o + 2]);
        // The dark inside of the warped mouth becomes bright teeth: a mouth no warp draws.
        if (inMouth && change > 90 && rgba[o] < 120) rgba.fill(235, o, o + 3);
        for (let k = 0; k < 3; k++) rgba[o + k] = Math.min(255, rgba[o + k] + CLIP_BRIGHTER);
      }
      const face: MouthAnimation = { ...ASTRONAUT_ANIMATION, inner_lip: innerLip(REST_GAP + open * 0.4 * MW) };
      harvest.add(rgba, 512, 512, face, index);
      frames.push(rgba);
    });
    return { files: (await harvest.finish())!, frames };
  } finally {
    photo.cleanup();
  }
}

const speaking = (frameIdx: number, open: number) =>
  request(frameIdx, { mouth: { open, wide: 0, round: 0 }, level: open, speaking: true });

/** Mean absolute luma difference inside `box`, each side's own mean taken out (a colour shift does not count). */
function shapeDistance(
  frame: I420Frame,
  rgba: Uint8Array,
  box: { x0: number; y0: number; x1: number; y1: number },
  shiftX: number,
): number {
  const a: number[] = [];
  const b: number[] = [];
  for (let y = box.y0; y < box.y1; y++) {
    for (let x = box.x0; x < box.x1; x++) {
      a.push(frame.data[y * frame.width + x]);
      const o = (y * 512 + x - shiftX) * 4;
      b.push(16 + 0.2568 * rgba[o] + 0.5041 * rgba[o + 1] + 0.0979 * rgba[o + 2]);
    }
  }
  const mean = (v: number[]) => v.reduce((s, q) => s + q, 0) / v.length;
  const ma = mean(a);
  const mb = mean(b);
  return a.reduce((s, q, i) => s + Math.abs(q - ma - (b[i] - mb)), 0) / a.length;
}

describe('lipsync renderer on a video avatar with harvested mouths', () => {
  let harvested: { files: HarvestedMouthFiles; frames: Uint8Array[] };
  let withMouths: { source: AvatarSource; dir: string };
  let warpOnly: { source: AvatarSource; dir: string };
  beforeAll(async () => {
    harvested = await harvestSpeakingFrames();
    withMouths = await makeClipBundle({ mouths: harvested.files });
    warpOnly = await makeClipBundle();
  });
  afterAll(() => {
    rmSync(withMouths.dir, { recursive: true, force: true });
    rmSync(warpOnly.dir, { recursive: true, force: true });
  });

  it('the harvest keeps one sample per opening the clip shows, spread from closed to wide open', () => {
    const openings = harvested.files.index.samples.map((s) => s.open).sort((a, b) => a - b);
    expect(openings).toHaveLength(OPENINGS.length);
    expect(openings[0]).toBe(0);
    expect(openings.at(-1)).toBe(1);
  });

  it("a speaking frame shows the harvested mouth for that opening at the frame's tracked mouth (closer to it than to the warp), and nothing outside the mouth's box changes", async () => {
    const renderer = new WarpRenderer();
    await renderer.prepare(withMouths.source);
    const warp = new WarpRenderer();
    await warp.prepare(warpOnly.source);
    const widest = harvested.files.index.samples.reduce((a, b) => (b.open > a.open ? b : a));
    for (const frameIdx of [0, 9]) {
      const shift = loopFrameIndex(frameIdx, 12);
      const core = {
        x0: Math.round(CX + shift - 0.5 * MW),
        y0: Math.round(CY - 0.25 * MW),
        x1: Math.round(CX + shift + 0.5 * MW),
        y1: Math.round(CY + 0.5 * MW),
      };
      const frame = renderer.render(speaking(frameIdx, 1));
      const toSample = shapeDistance(frame, harvested.frames[widest.frame], core, shift);
      const warpToSample = shapeDistance(
        warp.render(speaking(frameIdx, 1)),
        harvested.frames[widest.frame],
        core,
        shift,
      );
      expect(toSample).toBeLessThan(warpToSample / 2);
      expect(toSample).toBeLessThan(6);
      const idle = renderer.render(request(frameIdx));
      const mouthBox = { x0: CX + shift - 2 * MW, y0: CY - 2 * MW, x1: CX + shift + 2 * MW, y1: CY + 2 * MW };
      expect(lumaDiff(idle, frame, core).inside).toBeGreaterThan(15);
      expect(lumaDiff(idle, frame, mouthBox).outside).toBe(0);
    }
  });

  it("the laid mouth takes the frame's skin colour and fades into it within the skin around the lips, though the clip was lit brighter", async () => {
    const renderer = new WarpRenderer();
    await renderer.prepare(withMouths.source);
    const warp = new WarpRenderer();
    await warp.prepare(warpOnly.source);
    // The widest sample's pose is the request's (open 1, neutral): both frames are the loop frame warped alike, and
    // differ only by the laid mouth.
    const frame = renderer.render(speaking(0, 1));
    const warped = warp.render(speaking(0, 1));
    // The fixture's outer lip: an ellipse of 21 × 8 px; the lower lip lowered by the opening (0.3 mouth widths).
    const beyondLips = (x: number, y: number) => {
      const down = y > CY ? 8 + 0.3 * MW : 8;
      return Math.hypot((x - CX) / 21, (y - CY) / down);
    };
    let bias = 0;
    let skin = 0;
    let farChanged = 0;
    for (let y = 0; y < 512; y++) {
      for (let x = 0; x < 512; x++) {
        const d = frame.data[y * 512 + x] - warped.data[y * 512 + x];
        const r = beyondLips(x, y);
        // Skin just outside the lips (the feather): the laid sample there is the frame's light, not the clip's.
        if (r > 1.3 && r < 1.8) {
          bias += d;
          skin++;
        }
        // Beyond the lips grown by margin and feather (0.27 mouth widths ≈ 11 px on every side) nothing was laid.
        if (Math.abs(x - CX) > 21 + 13 || y < CY - 8 - 13 || y > CY + 8 + 0.3 * MW + 13) farChanged += d === 0 ? 0 : 1;
      }
    }
    console.log(
      `feather bias ${(bias / skin).toFixed(2)} levels over ${skin} px (the clip ${CLIP_BRIGHTER} RGB levels brighter)`,
    );
    expect(Math.abs(bias / skin)).toBeLessThan(2.5);
    expect(farChanged).toBe(0);
  });

  it('a silent request on a loop frame whose own lips are closed shows the loop frame untouched', async () => {
    const renderer = new WarpRenderer();
    await renderer.prepare(withMouths.source);
    const warp = new WarpRenderer();
    await warp.prepare(warpOnly.source);
    const everything = { x0: 0, y0: 0, x1: 0, y1: 0 };
    for (const frameIdx of [0, 5])
      expect(lumaDiff(renderer.render(request(frameIdx)), warp.render(request(frameIdx)), everything).outside).toBe(0);
  });

  /** The speaking clip's source, its face track saying every loop frame's inner lips are apart by `gap`. */
  function withLipsApart(gap: number): AvatarSource {
    const track = (JSON.parse(Buffer.from(withMouths.source.clip!.trackJson).toString('utf8')) as MouthAnimation[]).map(
      (face) => ({
        ...face,
        inner_lip: innerLip(gap).map((p) => ({ x: p.x + face.mouth_center.x - CX, y: p.y })),
      }),
    );
    return {
      ...withMouths.source,
      clip: { ...withMouths.source.clip!, trackJson: new Uint8Array(Buffer.from(JSON.stringify(track))) },
    };
  }

  /** The harvested closed mouth, and where the mouth sits on loop frame 3 (its sway shift and the mouth's core box). */
  function closedMouthOnFrame3() {
    const closed = harvested.files.index.samples.reduce((a, b) => (b.open < a.open ? b : a));
    const shift = loopFrameIndex(3, 12);
    const core = {
      x0: Math.round(CX + shift - 0.5 * MW),
      y0: Math.round(CY - 0.25 * MW),
      x1: Math.round(CX + shift + 0.5 * MW),
      y1: Math.round(CY + 0.5 * MW),
    };
    return { closed, shift, core };
  }

  it("on a loop frame whose own lips are parted (the clip's speech), silence lays the person's closed mouth there", async () => {
    // The same loop, its track saying every frame's lips are apart as in mid-sentence.
    const talking = withLipsApart(REST_GAP + 0.3 * MW);
    const renderer = new WarpRenderer();
    await renderer.prepare(talking);
    const warp = new WarpRenderer();
    await warp.prepare(warpOnly.source);
    const { closed, shift, core } = closedMouthOnFrame3();
    const silent = renderer.render(request(3));
    const toClosed = shapeDistance(silent, harvested.frames[closed.frame], core, shift);
    const loopToClosed = shapeDistance(warp.render(request(3)), harvested.frames[closed.frame], core, shift);
    expect(toClosed).toBeLessThan(loopToClosed / 2);
    expect(toClosed).toBeLessThan(6);
    const mouthBox = { x0: CX + shift - 2 * MW, y0: CY - 2 * MW, x1: CX + shift + 2 * MW, y1: CY + 2 * MW };
    expect(lumaDiff(silent, warp.render(request(3)), mouthBox).outside).toBe(0);
  });
  it("while speaking, a closed pose lays the person's closed mouth even on a loop frame whose own lips are only slightly parted", async () => {
    // The clip's own lips apart by less than counts as talking while idle (OWN_MOUTH_OPEN): its idle loop shows them as they are.
    const murmuring = withLipsApart(REST_GAP + 0.5 * OWN_MOUTH_OPEN * MW);
    const renderer = new WarpRenderer();
    await renderer.prepare(murmuring);
    const warp = new WarpRenderer();
    await warp.prepare(warpOnly.source);
    const { closed, shift, core } = closedMouthOnFrame3();
    const loopFrame = warp.render(request(3));
    const everything = { x0: 0, y0: 0, x1: 0, y1: 0 };
    expect(lumaDiff(renderer.render(request(3)), loopFrame, everything).outside).toBe(0);
    const pause = renderer.render(request(3, { speaking: true, level: 0.1 }));
    const loopToClosed = shapeDistance(loopFrame, harvested.frames[closed.frame], core, shift);
    expect(shapeDistance(pause, harvested.frames[closed.frame], core, shift)).toBeLessThan(loopToClosed / 2);
  });

  it('through the render pool (tasks carry the shared loop, not the clip) the frames are the ones rendered with the harvested mouths', async () => {
    const pool = new RenderPool({ threads: 1 });
    try {
      const handle = await pool.open(withMouths.source, 'lipsync');
      const inline = new WarpRenderer();
      await inline.prepare(withMouths.source);
      const warp = new WarpRenderer();
      await warp.prepare(warpOnly.source);
      for (const frameIdx of [0, 9]) {
        const [pooled] = await handle.render([speaking(frameIdx, 1)]);
        expect(Buffer.from(pooled.data).equals(Buffer.from(inline.render(speaking(frameIdx, 1)).data))).toBe(true);
        expect(Buffer.from(pooled.data).equals(Buffer.from(warp.render(speaking(frameIdx, 1)).data))).toBe(false);
      }
      handle.close();
    } finally {
      await pool.close();
    }
  });
});
