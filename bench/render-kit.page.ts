/**
 * The page side of `bench/render-kit.ts`, bundled for Chromium: loads a render kit as the face canvas does
 * (`client/render-kit.ts`) and times, per frame, the renderer alone and the two ways of putting its I420 frame on
 * screen: 2D (`i420ToRgba` into an ImageData, `putImageData`) and WebGL (`client/i420-webgl.ts`: three luminance
 * textures and a BT.601 shader, what `client/face-canvas.ts` uses where it can), each forced to finish
 * (`getImageData` / `gl.finish`) so the time is the frame's, not a queued command's.
 */
import { loadRenderKit } from '../client/render-kit.ts';
import { i420ToRgba } from '../actors/render/i420.ts';
import type { FrameRequest } from '../actors/render/types.ts';
import { i420WebGlDrawer } from '../client/i420-webgl.ts';

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[sorted.length >> 1];
}

/** Per-frame medians (ms) over `poses`, after a warm-up pass; and the kit's load time. */
export async function measure(kitUrl: string, poses: FrameRequest[]) {
  const loadStarted = performance.now();
  const kit = await loadRenderKit(kitUrl);
  const loadMs = performance.now() - loadStarted;
  const frames = poses.map((pose) => kit.renderer.render(pose));
  const render: number[] = [];
  for (const pose of poses) {
    const started = performance.now();
    kit.renderer.render(pose);
    render.push(performance.now() - started);
  }
  const canvas2d = document.createElement('canvas');
  canvas2d.width = kit.width;
  canvas2d.height = kit.height;
  const context = canvas2d.getContext('2d', { alpha: false })!;
  const image = context.createImageData(kit.width, kit.height);
  const rgba = new Uint8Array(image.data.buffer);
  const put2d: number[] = [];
  for (const frame of frames) {
    const started = performance.now();
    i420ToRgba(frame, rgba);
    context.putImageData(image, 0, 0);
    context.getImageData(0, 0, 1, 1);
    put2d.push(performance.now() - started);
  }
  const canvasGl = document.createElement('canvas');
  canvasGl.width = kit.width;
  canvasGl.height = kit.height;
  const drawGl = i420WebGlDrawer(canvasGl)!;
  const gl = canvasGl.getContext('webgl')!;
  const putGl: number[] = [];
  for (const frame of frames) {
    const started = performance.now();
    drawGl(frame);
    gl.finish();
    putGl.push(performance.now() - started);
  }
  return {
    kit_load_ms: Math.round(loadMs),
    render_ms_p50: median(render),
    put_2d_ms_p50: median(put2d),
    put_webgl_ms_p50: median(putGl),
    webgl_renderer: (() => {
      const info = gl.getExtension('WEBGL_debug_renderer_info');
      return info ? String(gl.getParameter(info.UNMASKED_RENDERER_WEBGL)) : 'unknown';
    })(),
  };
}
