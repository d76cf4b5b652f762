import type { AttentionCue } from '../../actors/media/playout.ts';
import type { SessionBus } from './session-bus.ts';

/**
 * When the avatar listens and thinks (`actors/attention.ts`), from what the session's bus tells: the voice input's
 * speech start and end (listening), the user's pauses (a nod each), the end of the user's turn or a chat request
 * (thinking, shown by the clock after `THINK_DELAY_MS` without audio; the clock itself releases it at the first
 * audio), and a turn that ends without audio (an interrupt, an error: thinking released). Speech the voice input
 * judged to be the avatar's own voice is not listened to.
 */
export function followAttention(bus: SessionBus, media: { attend(cue: AttentionCue): void }): void {
  bus.on('voice.speech', ({ stage }) => media.attend(stage === 'start' ? 'listen' : 'stop-listening'));
  bus.on('voice.echoIgnored', () => media.attend('stop-listening'));
  bus.on('voice.pause', () => media.attend('nod'));
  bus.on('voice.turn', () => media.attend('think'));
  bus.on('turn.started', ({ kind }) => {
    if (kind === 'chat') media.attend('think');
  });
  bus.on('turn.finished', () => media.attend('stop-thinking'));
}
