/**
 * A session's media (clock + WebRTC output) without the rest of a session, started, with a real wrtc receiver
 * connected to it: the setup of the media-level scenario tests. Teardown goes onto the caller's cleanup list.
 */
import pino from 'pino';
import { SessionMedia, type SessionMediaOptions } from '../../src/sessions/media.ts';
import { SessionBus } from '../../src/sessions/session-bus.ts';
import { ReceivingPeer } from './peer.ts';

export async function startMediaWithPeer(
  options: { renderer: SessionMediaOptions['renderer']; sampleRate: number; videoDelayMs: number },
  cleanups: Array<() => unknown>,
): Promise<{ media: SessionMedia; peer: ReceivingPeer; bus: SessionBus }> {
  const bus = new SessionBus();
  const media = new SessionMedia({
    ...options,
    iceServers: [],
    bus,
    logger: pino({ level: 'silent' }),
  });
  cleanups.push(
    () => media.playout.close(),
    () => media.output.close(),
  );
  const peer = await ReceivingPeer.connectWith((offer) => media.output.answer(offer.sdp));
  cleanups.push(() => peer.close());
  media.start();
  return { media, peer, bus };
}
