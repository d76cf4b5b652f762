/**
 * The offer as the service applies it tells its Opus encoder the session's audio band (`maxplaybackrate` at the
 * session's rate): a real wrtc receiver of a 16 kHz session then gets fewer bits and hears the same speech band.
 */
import wrtc from '@roamhq/wrtc';
import { afterEach, describe, expect, it } from 'vitest';
import { WebRtcOutput, offerAsApplied, withOpusBandwidth } from '../actors/media/webrtc.ts';
import { opusOffer } from './helpers/opus-offer.ts';
import { ReceivingPeer } from './helpers/peer.ts';

const { nonstandard } = wrtc;

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const offer = opusOffer;

describe("withOpusBandwidth: the offer tells our Opus encoder the session's audio band", () => {
  it('adds maxplaybackrate at the session rate to the Opus fmtp line only, keeping line endings', () => {
    const out = withOpusBandwidth(offer('minptime=10;useinbandfec=1'), 16_000);
    expect(out).toBe(offer('minptime=10;useinbandfec=1;maxplaybackrate=16000'));
    expect(withOpusBandwidth(offer(null), 24_000)).toBe(
      offer(null).replace('opus/48000/2\r\n', 'opus/48000/2\r\na=fmtp:111 maxplaybackrate=24000\r\n'),
    );
    expect(withOpusBandwidth(offer('x=1').replaceAll('\r\n', '\n'), 16_000)).toBe(
      offer('x=1;maxplaybackrate=16000').replaceAll('\r\n', '\n'),
    );
  });

  it('lowers a higher stated rate, keeps a lower one, and leaves a 48 kHz session or an offer without Opus alone', () => {
    expect(withOpusBandwidth(offer('maxplaybackrate=48000;usedtx=1'), 16_000)).toBe(
      offer('maxplaybackrate=16000;usedtx=1'),
    );
    expect(withOpusBandwidth(offer('maxplaybackrate=8000'), 16_000)).toBe(offer('maxplaybackrate=8000'));
    expect(withOpusBandwidth(offer('minptime=10'), 48_000)).toBe(offer('minptime=10'));
    const noOpus = offer('x=1').replace('opus/48000/2', 'ISAC/16000');
    expect(withOpusBandwidth(noOpus, 16_000)).toBe(noOpus);
  });

  it('is part of the offer as applied, after DTX; without a rate the band stays full', () => {
    expect(offerAsApplied(offer('minptime=10'), 16_000)).toContain(
      'a=fmtp:111 minptime=10;usedtx=1;maxplaybackrate=16000',
    );
    expect(offerAsApplied(offer('minptime=10'))).toContain('a=fmtp:111 minptime=10;usedtx=1\r\n');
  });
});

/** 440 Hz and 3 kHz at equal amplitude, 16 kHz, as 10 ms chunks: a low and a high speech band. */
function twoToneChunk(index: number): Int16Array {
  const rate = 16_000;
  return Int16Array.from({ length: rate / 100 }, (_, i) => {
    const t = (index * (rate / 100) + i) / rate;
    return Math.round(4_000 * (Math.sin(2 * Math.PI * 440 * t) + Math.sin(2 * Math.PI * 3_000 * t)));
  });
}

function amplitudeAt(pcm: Int16Array, hz: number, rate: number): number {
  let sine = 0;
  let cosine = 0;
  for (let i = 0; i < pcm.length; i++) {
    sine += pcm[i]! * Math.sin((2 * Math.PI * hz * i) / rate);
    cosine += pcm[i]! * Math.cos((2 * Math.PI * hz * i) / rate);
  }
  return (Math.hypot(sine, cosine) * 2) / pcm.length;
}

/** A wrtc receiver of a `WebRtcOutput`'s audio fed at `audioRate`, recording what it plays. */
async function listen(audioRate?: number) {
  const output = new WebRtcOutput([], { video: false, audioRate });
  cleanups.push(() => output.close());
  const peer = await ReceivingPeer.connectWith((o) => output.answer(o.sdp));
  cleanups.push(() => peer.close());
  const track = peer.pc.getReceivers().find((r: { track: MediaStreamTrack }) => r.track.kind === 'audio')!.track;
  const played: Int16Array[] = [];
  let playedRate = 0;
  const sink = new nonstandard.RTCAudioSink(track);
  cleanups.push(() => sink.stop());
  sink.ondata = (data: { samples: Int16Array; sampleRate: number; channelCount?: number }) => {
    playedRate = data.sampleRate;
    const channels = data.channelCount ?? 1;
    played.push(Int16Array.from({ length: data.samples.length / channels }, (_, i) => data.samples[i * channels]!));
  };
  return {
    output,
    peer,
    played,
    rate: () => playedRate,
    bytesReceived: async () => {
      let bytes = 0;
      (await peer.pc.getStats()).forEach((stat: { type: string; kind?: string; bytesReceived?: number }) => {
        if (stat.type === 'inbound-rtp' && stat.kind === 'audio') bytes += stat.bytesReceived ?? 0;
      });
      return bytes;
    },
  };
}

describe('wrtc receivers of a 16 kHz session', () => {
  it('get fewer bits than from a full-band encoder, and hear both tones at the level sent', async () => {
    const session16k = await listen(16_000);
    const fullBand = await listen();
    // 10 ms chunks on time, as the media clock sends them (a late timer catches up).
    const start = performance.now();
    let chunk = 0;
    const feeder = setInterval(() => {
      while (chunk < (performance.now() - start) / 10) {
        const pcm = twoToneChunk(chunk++);
        session16k.output.pushAudio(pcm, 16_000);
        fullBand.output.pushAudio(pcm, 16_000);
      }
    }, 5);
    cleanups.push(() => clearInterval(feeder));
    for (const receiver of [session16k, fullBand])
      await receiver.peer.until(() => receiver.peer.firstAudible(0, 1_000) !== undefined, 10_000, 'the tones');
    await new Promise((r) => setTimeout(r, 500));
    const before = await Promise.all([session16k.bytesReceived(), fullBand.bytesReceived()]);
    const playedFrom = [session16k.played.length, fullBand.played.length];
    await new Promise((r) => setTimeout(r, 3_000));
    const after = await Promise.all([session16k.bytesReceived(), fullBand.bytesReceived()]);
    // Wideband Opus spends ~20 kb/s where the full-band encoder spends ~32 on the same audio.
    expect(after[1] - before[1]).toBeGreaterThan((3 * 20_000) / 8);
    expect((after[0] - before[0]) / (after[1] - before[1])).toBeLessThan(0.8);
    // What each receiver plays (its 10 ms buffers, a second of them) has both tones, as sent: 4 000 each.
    for (const [i, receiver] of [session16k, fullBand].entries()) {
      const played = receiver.played.slice(playedFrom[i], playedFrom[i]! + 100);
      const pcm = new Int16Array(played.reduce((n, p) => n + p.length, 0));
      played.reduce((at, p) => (pcm.set(p, at), at + p.length), 0);
      for (const hz of [440, 3_000]) {
        const level = amplitudeAt(pcm, hz, receiver.rate());
        expect(level, `${i === 0 ? '16 kHz session' : 'full band'}, ${hz} Hz`).toBeGreaterThan(4_000 * 0.7);
        expect(level, `${i === 0 ? '16 kHz session' : 'full band'}, ${hz} Hz`).toBeLessThan(4_000 * 1.3);
      }
    }
  }, 30_000);
});
