/**
 * The browser side of the render kit (`actors/render/render-kit.ts`): fetches it, gunzips it, rebuilds the server's
 * prepared renderer from it (`unpackState`: the same classes, the same cached pieces) and decodes a video avatar's
 * loop (VP9) into the I420 frames the renderer shows, with WebCodecs. The result renders `FrameRequest → I420`
 * with the server's own code.
 */
import { unpackState } from '../actors/render/kit-state.ts';
import type { I420Frame, Renderer } from '../actors/render/types.ts';
import type { KitLoopVideo, RenderKitHeader } from '../actors/render/render-kit.ts';

/** The kit format this client reads (`RENDER_KIT_FORMAT` on the server). */
const KIT_FORMAT = 1;
/**
 * Largest kit accepted, gunzipped. The budgets are 2 MB (photo) and 6 MB (clip) compressed; a drawn avatar's kit
 * gunzips to ~4 MB and a photo's to ~3 MB. Past this the server sent something else, and it is not kept.
 */
const MAX_KIT_BYTES = 64 * 1024 * 1024;
/** Loop frames decoded at most (`MAX_LOOP_FRAMES` on the server is 150): bounds what the video may make us hold. */
const MAX_LOOP_FRAMES = 600;

export interface LoadedKit extends RenderKitHeader {
  renderer: Renderer;
}

/** The response body gunzipped, refused past `MAX_KIT_BYTES`. */
async function gunzipBounded(body: ReadableStream<BufferSource>, signal?: AbortSignal): Promise<Uint8Array> {
  const reader = body.pipeThrough<Uint8Array>(new DecompressionStream('gzip')).getReader();
  const chunks: Uint8Array[] = [];
  let length = 0;
  for (;;) {
    signal?.throwIfAborted();
    const { done, value } = await reader.read();
    if (done) break;
    length += value.length;
    if (length > MAX_KIT_BYTES) {
      await reader.cancel();
      throw new Error('render kit: larger than a kit can be');
    }
    chunks.push(value);
  }
  // One 8-byte-aligned buffer: the kit's typed arrays are views of it.
  const bytes = new Uint8Array(length);
  let at = 0;
  for (const chunk of chunks) {
    bytes.set(chunk, at);
    at += chunk.length;
  }
  return bytes;
}

/** The frames of an IVF file (32-byte header, then a 12-byte header before each frame). */
function ivfFrames(ivf: Uint8Array): Uint8Array[] {
  const view = new DataView(ivf.buffer, ivf.byteOffset, ivf.byteLength);
  if (ivf.length < 32 || String.fromCharCode(...ivf.subarray(0, 4)) !== 'DKIF')
    throw new Error('render kit: loop video is not IVF');
  const frames: Uint8Array[] = [];
  let at = view.getUint16(6, true);
  while (at + 12 <= ivf.length && frames.length < MAX_LOOP_FRAMES) {
    const size = view.getUint32(at, true);
    frames.push(ivf.subarray(at + 12, at + 12 + size));
    at += 12 + size;
  }
  return frames;
}

/** Decodes the loop video into I420 frames (`into`, in order), exactly the planes the VP9 stream holds. */
async function decodeLoop(video: KitLoopVideo['$loopVideo'], into: I420Frame[], signal?: AbortSignal): Promise<void> {
  const { width, height } = video;
  const cw = (width + 1) >> 1;
  const ch = (height + 1) >> 1;
  const layout = [
    { offset: 0, stride: width },
    { offset: width * height, stride: cw },
    { offset: width * height + cw * ch, stride: cw },
  ];
  const copies: Array<Promise<unknown>> = [];
  let failure: Error | null = null;
  const decoder = new VideoDecoder({
    output: (frame) => {
      const data = new Uint8Array(width * height + 2 * cw * ch);
      into.push({ width, height, data });
      if (frame.format !== 'I420') failure ??= new Error(`render kit: loop decoded as ${frame.format}, not I420`);
      else copies.push(frame.copyTo(data, { layout }));
      copies.push(Promise.resolve().then(() => frame.close()));
    },
    error: (error) => {
      failure ??= error instanceof Error ? error : new Error(String(error));
    },
  });
  try {
    decoder.configure({ codec: video.codec, codedWidth: width, codedHeight: height });
    ivfFrames(video.ivf).forEach((data, i) =>
      decoder.decode(new EncodedVideoChunk({ type: i === 0 ? 'key' : 'delta', timestamp: i * 40_000, data })),
    );
    await decoder.flush();
    await Promise.all(copies);
  } finally {
    if (decoder.state !== 'closed') decoder.close();
  }
  signal?.throwIfAborted();
  if (failure) throw failure;
  if (into.length !== video.frames) throw new Error('render kit: loop video is missing frames');
}

/** Fetches the kit at `url` and rebuilds its renderer. */
export async function loadRenderKit(url: string, signal?: AbortSignal): Promise<LoadedKit> {
  const response = await fetch(url, { signal });
  if (!response.ok || !response.body) throw new Error(`render kit: HTTP ${response.status}`);
  const bytes = await gunzipBounded(response.body as ReadableStream<BufferSource>, signal);
  const loops: Array<{ video: KitLoopVideo['$loopVideo']; into: I420Frame[] }> = [];
  const kit = unpackState(bytes, (value, read) => {
    if (!value.$loopVideo) return undefined;
    const into: I420Frame[] = [];
    loops.push({ video: read(value.$loopVideo) as KitLoopVideo['$loopVideo'], into });
    return into;
  }) as LoadedKit;
  if (kit.format !== KIT_FORMAT) throw new Error(`render kit: format ${kit.format}, this client reads ${KIT_FORMAT}`);
  for (const { video, into } of loops) await decodeLoop(video, into, signal);
  return kit;
}
