import { speechOnset, type CaptionCue } from '../../actors/media/playout.ts';
import type { RecordableClock } from './clock-recorder.ts';
import type { TimelinePiece } from './offline-render.ts';
import { writeFileAtomic } from '../files/atomic-file.ts';

/**
 * Cues one recording keeps. A sentence is at least ~1 s of speech, so this covers hours of talk; past it the
 * rest of a recording goes uncaptioned rather than growing memory without bound.
 */
export const MAX_RECORDED_CUES = 10_000;

export interface RecordedCue {
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

/**
 * The captions of an offline bundle, by the rule the live clock captions by (`PlayoutClock`'s `caption`): one cue per
 * sentence, from its speech onset (`speechOnset`, past the sentence's leading near-silence) to the end of its audio,
 * on the bundle's timeline (the pieces laid end to end from 0, as `renderOfflineMp4` lays them).
 */
export function offlineCaptions(pieces: readonly TimelinePiece[], sampleRate: number): RecordedCue[] {
  const cues: RecordedCue[] = [];
  const ms = (samples: number) => Math.round((samples * 1000) / sampleRate);
  let at = 0;
  let open: { text: string; start: number; onset: number | null; end: number } | null = null;
  const close = () => {
    if (open?.text.trim() && cues.length < MAX_RECORDED_CUES) {
      const fromMs = ms(open.onset ?? open.start);
      if (ms(open.end) > fromMs) cues.push({ fromMs, toMs: ms(open.end), text: open.text.trim() });
    }
    open = null;
  };
  for (const piece of pieces) {
    // A pause (no mouth) ends the sentence before it; a captioned piece starts the next.
    if (piece.caption !== undefined || piece.mouth === null) close();
    if (piece.caption !== undefined) open = { text: piece.caption, start: at, onset: null, end: at };
    if (open && piece.mouth !== null) {
      if (open.onset === null) {
        const loud = speechOnset(piece.pcm);
        if (loud >= 0) open.onset = at + loud;
      }
      open.end = at + piece.pcm.length;
    }
    at += piece.pcm.length;
  }
  close();
  return cues;
}

/** Writes an offline bundle's captions (`offlineCaptions`) as WebVTT to `file`, atomically (before its MP4 is renamed into place). */
export function writeBundleCaptions(file: string, pieces: readonly TimelinePiece[], sampleRate: number): Promise<void> {
  return writeFileAtomic(file, toWebVtt(offlineCaptions(pieces, sampleRate)));
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
