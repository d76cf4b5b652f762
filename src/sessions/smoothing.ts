/** Fade length at segment edges: long enough to remove clicks, short enough to keep consonant onsets. */
const FADE_MS = 8;
/** DC-blocking high-pass pole: removes offsets some PCM sources carry that the mouth would read as energy. */
const DC_POLE = 0.995;

/**
 * `speak_rt_audio`: the rt family animates from audio energy, so direct audio is cleaned first: DC
 * removed and edges faded, so the mouth does not twitch on clicks or offsets.
 */
export function smoothForRt(pcm: Int16Array, sampleRate: number): Int16Array {
  const out = new Int16Array(pcm.length);
  let prevIn = 0;
  let prevOut = 0;
  for (let i = 0; i < pcm.length; i++) {
    const x = pcm[i];
    const y = x - prevIn + DC_POLE * prevOut;
    prevIn = x;
    prevOut = y;
    out[i] = Math.max(-32768, Math.min(32767, Math.round(y)));
  }
  const fade = Math.min(Math.floor((sampleRate * FADE_MS) / 1000), Math.floor(out.length / 2));
  for (let i = 0; i < fade; i++) {
    const gain = i / fade;
    out[i] = Math.round(out[i] * gain);
    out[out.length - 1 - i] = Math.round(out[out.length - 1 - i] * gain);
  }
  return out;
}
