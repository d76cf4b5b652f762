/**
 * Turns per-frame speech probabilities into turn boundaries with hysteresis: speech starts when the
 * probability reaches `startThreshold` and then stays at or above `endThreshold` for `minSpeechSamples`
 * (a cough or a click is shorter and never becomes a turn); speech ends once the probability has stayed
 * below `endThreshold` for `minSilenceSamples` (a pause between words is shorter). Pure: positions in, events
 * out; the start is reported retroactively at the frame where the candidate began.
 *
 * With `pauseSamples`, a dip inside a turn (below `endThreshold`, then back at `startThreshold`) whose length lies
 * within those bounds is reported as `speech_pause` when the speech resumes: the user's pauses a listener nods at.
 */

export interface TurnThresholds {
  startThreshold: number;
  endThreshold: number;
  minSpeechSamples: number;
  minSilenceSamples: number;
  /** Dips inside a turn reported as `speech_pause`, shortest and longest (none without). */
  pauseSamples?: { min: number; max: number };
}

export type TurnEvent =
  | { type: 'speech_start'; sample: number }
  | { type: 'speech_end'; sample: number; startSample: number }
  | { type: 'speech_pause'; sample: number; endSample: number };

export class TurnTracker {
  private phase: 'silence' | 'candidate' | 'speech' = 'silence';
  /** Where the current candidate or turn began. */
  private startSample = 0;
  /** Where the current run of low probabilities inside a turn began, if one is running. */
  private silenceStart: number | undefined;

  constructor(private readonly thresholds: TurnThresholds) {
    if (!(thresholds.endThreshold <= thresholds.startThreshold))
      throw new RangeError('endThreshold must not exceed startThreshold');
  }

  get speaking(): boolean {
    return this.phase === 'speech';
  }

  /** One analysed frame [frameStart, frameEnd) with its speech probability. */
  next(frameStart: number, frameEnd: number, probability: number): TurnEvent[] {
    const { startThreshold, endThreshold, minSpeechSamples, minSilenceSamples } = this.thresholds;
    switch (this.phase) {
      case 'silence':
        if (probability < startThreshold) return [];
        this.phase = 'candidate';
        this.startSample = frameStart;
        return this.confirmIfLongEnough(frameEnd, minSpeechSamples);
      case 'candidate':
        if (probability < endThreshold) {
          this.phase = 'silence';
          return [];
        }
        return this.confirmIfLongEnough(frameEnd, minSpeechSamples);
      case 'speech':
        if (probability >= startThreshold) {
          const pause = this.pauseEnding(frameStart);
          this.silenceStart = undefined;
          if (pause) return [pause];
        } else if (probability < endThreshold) this.silenceStart ??= frameStart;
        if (this.silenceStart !== undefined && frameEnd - this.silenceStart >= minSilenceSamples)
          return [this.endTurn(this.silenceStart)];
        return [];
    }
  }

  /** End of the audio: an open turn ends where its trailing silence began, or at `position`. */
  finish(position: number): TurnEvent[] {
    const wasSpeaking = this.phase === 'speech';
    const end = this.silenceStart ?? position;
    this.phase = 'silence';
    return wasSpeaking ? [this.endTurn(end)] : [];
  }

  /** The dip that ends at `resumeSample`, if it is as long as a reported pause. */
  private pauseEnding(resumeSample: number): TurnEvent | null {
    const bounds = this.thresholds.pauseSamples;
    if (!bounds || this.silenceStart === undefined) return null;
    const length = resumeSample - this.silenceStart;
    if (length < bounds.min || length > bounds.max) return null;
    return { type: 'speech_pause', sample: this.silenceStart, endSample: resumeSample };
  }

  private confirmIfLongEnough(frameEnd: number, minSpeechSamples: number): TurnEvent[] {
    if (frameEnd - this.startSample < minSpeechSamples) return [];
    this.phase = 'speech';
    this.silenceStart = undefined;
    return [{ type: 'speech_start', sample: this.startSample }];
  }

  private endTurn(endSample: number): TurnEvent {
    this.phase = 'silence';
    this.silenceStart = undefined;
    return { type: 'speech_end', sample: endSample, startSample: this.startSample };
  }
}
