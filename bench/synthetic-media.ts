/**
 * Media shaped like a session's output, for the steps that measure WebRTC without the service
 * (stage_costs, transport_floor): 512×512 I420 frames at 25 fps and 10 ms PCM chunks.
 */
export const WIDTH = 512;
export const HEIGHT = 512;
export const FPS = 25;
export const I420_BYTES = (WIDTH * HEIGHT * 3) / 2;

/** A frame that changes every time (moving gradient), so the encoder has real work like a talking face. */
export function frameAt(i: number, reuse?: Uint8Array): Uint8Array {
  const data = reuse ?? new Uint8Array(I420_BYTES);
  const shift = i * 3;
  for (let y = 0; y < HEIGHT; y += 2) {
    const row = y * WIDTH;
    const v = (y + shift) & 0xff;
    for (let x = 0; x < WIDTH; x += 64) data.fill(v ^ x, row + x, row + x + 64);
    data.copyWithin(row + WIDTH, row, row + WIDTH);
  }
  data.fill(128, WIDTH * HEIGHT);
  return data;
}

/** 10 ms of a 220 Hz tone at `sampleRate`: speech-level audio for the Opus encoder. */
export function toneChunk(sampleRate: number): Int16Array {
  const samples = sampleRate / 100;
  const pcm = new Int16Array(samples);
  for (let i = 0; i < samples; i++) pcm[i] = Math.round(3000 * Math.sin((2 * Math.PI * 220 * i) / sampleRate));
  return pcm;
}
