import type { CaptionCue } from '../../actors/media/playout.ts';
import type { RecordableClock } from './clock-recorder.ts';

/**
 * Cues one recording keeps. A sentence is at least ~1 s of speech, so this covers hours of talk; past it the
 * rest of a recording goes uncaptioned rather than growing memory without bound.
 */
export const MAX_RECORDED_CUES = 10_000;

interface RecordedCue {
  fromMs: number;
  toMs: number;
  text: string;
}

/**
 * The captions of one recording: the clock's `caption` events (the same the SSE `caption` carries), placed on the
 * file's timeline (media clock ms minus the file's origin) and written as WebVTT beside the MP4.
 */
export class CaptionTrack {
  private readonly cues: Array<{ clockMs: number; durationMs: number; text: string }> = [];
  private readonly onCaption = (cue: CaptionCue) => {
    if (this.cues.length < MAX_RECORDED_CUES)
      this.cues.push({ clockMs: cue.clockMs, durationMs: Math.max(0, cue.endMs - cue.startMs), text: cue.text });
  };
  private detached = false;

  constructor(private readonly clock: Pick<RecordableClock, 'on' | 'off'>) {
    clock.on('caption', this.onCaption);
  }

  detach(): void {
    if (this.detached) return;
    this.detached = true;
    this.clock.off('caption', this.onCaption);
  }

  /** The cues within the file (`originMs` on the media clock, `durationMs` long), cut to its end. */
  recorded(originMs: number, durationMs: number): RecordedCue[] {
    const out: RecordedCue[] = [];
    for (const cue of this.cues) {
      const fromMs = Math.max(0, Math.round(cue.clockMs - originMs));
      const toMs = Math.min(durationMs, Math.round(cue.clockMs - originMs + cue.durationMs));
      if (fromMs < durationMs && toMs > fromMs) out.push({ fromMs, toMs, text: cue.text });
    }
    return out;
  }
}

/** WebVTT (W3C) of timed texts: one cue per caption, `HH:MM:SS.mmm` times. */
export function toWebVtt(cues: RecordedCue[]): string {
  const blocks = cues.map(
    (cue, i) => `${i + 1}\n${vttTime(cue.fromMs)} --> ${vttTime(cue.toMs)}\n${cueText(cue.text)}`,
  );
  return ['WEBVTT', ...blocks].join('\n\n') + '\n';
}

function vttTime(ms: number): string {
  const pad = (n: number, width = 2) => String(n).padStart(width, '0');
  const h = Math.floor(ms / 3_600_000);
  const m = Math.floor((ms % 3_600_000) / 60_000);
  const s = Math.floor((ms % 60_000) / 1000);
  return `${pad(h)}:${pad(m)}:${pad(s)}.${pad(ms % 1000, 3)}`;
}

/** Cue text may not hold a blank line or `-->`, and `<`/`&` start markup: escaped, on one line. */
function cueText(text: string): string {
  return text.replace(/\s+/g, ' ').replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}
