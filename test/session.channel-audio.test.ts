import { readFileSync } from 'node:fs';
import { Decoder } from '@evan/opus';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { PoseChannelMessage } from '../client/face-canvas.ts';
import { parseWav } from '../actors/audio/wav.ts';
import type { PlayoutClock } from '../actors/media/playout.ts';
import { sessionParts } from '../src/sessions/session.ts';
import { json, post, startTestApp, type TestApp } from './helpers/app.ts';
import { eventually, postAudio, sleep, tone, wavBytes } from './helpers/conversation.ts';
import { PosePeer } from './helpers/pose-peer.ts';

const RATE = 16_000;
/** Samples per channel audio packet (20 ms) at the session's rate, and RTP ticks (48 kHz) per packet. */
const PACKET = 320;
const RTP_PER_PACKET = 960;
const ASK = JSON.stringify({ type: 'audio', codec: 'opus' });

type AudioMessage = Extract<PoseChannelMessage, { type: 'audio' }>;

/** The channel's audio decoded as the browser's player does: each packet at its rtp, a fresh stream resets the decoder. */
class ChannelAudio {
  private readonly decoder = new Decoder({ sample_rate: RATE, channels: 1 });
  /** Decoded packets by index on the 20 ms grid (a packet sent again replaces the first). */
  readonly packets = new Map<number, Int16Array>();
  /** Each packet's lead on arrival: its start minus the media clock's position then, ms. */
  readonly leadsMs: number[] = [];

  take(message: AudioMessage, clockMs: number): void {
    if (message.fresh) this.decoder.reset();
    message.packets.forEach((packet, i) => {
      const out = this.decoder.decode(Buffer.from(packet, 'base64'));
      const index = message.rtp / RTP_PER_PACKET + i;
      this.packets.set(index, new Int16Array(out.buffer.slice(out.byteOffset, out.byteOffset + out.byteLength)));
      this.leadsMs.push((index * PACKET * 1000) / RATE - clockMs);
    });
  }

  between(from: number, to: number): Int16Array {
    const pcm = new Int16Array(to - from);
    for (let index = Math.floor(from / PACKET); index * PACKET < to; index++) {
      const packet = this.packets.get(index);
      if (!packet) continue;
      for (let i = 0; i < PACKET; i++) {
        const at = index * PACKET + i - from;
        if (at >= 0 && at < pcm.length) pcm[at] = packet[i];
      }
    }
    return pcm;
  }
}

/** What the media clock played, tapped as it leaves (the reference the channel audio must match). */
function tapClock(playout: PlayoutClock): { between(from: number, to: number): Int16Array } {
  const chunks = new Map<number, Int16Array>();
  playout.on('audio', (samples, _rate, mediaMs) => chunks.set(Math.round((mediaMs * RATE) / 1000), samples.slice()));
  return {
    between(from, to) {
      const pcm = new Int16Array(to - from);
      for (const [start, chunk] of chunks)
        for (let i = 0; i < chunk.length; i++) {
          const at = start + i - from;
          if (at >= 0 && at < pcm.length) pcm[at] = chunk[i];
        }
      return pcm;
    },
  };
}

function rms(pcm: Int16Array): number {
  let sum = 0;
  for (const s of pcm) sum += s * s;
  return Math.sqrt(sum / Math.max(1, pcm.length));
}

/** The frequency of a tone by its rising zero crossings, Hz. */
function frequencyOf(pcm: Int16Array): number {
  let crossings = 0;
  for (let i = 1; i < pcm.length; i++) if (pcm[i - 1] < 0 && pcm[i] >= 0) crossings++;
  return (crossings * RATE) / pcm.length;
}

/** Pearson correlation of two signals' 20 ms RMS envelopes. */
function envelopeCorrelation(a: Int16Array, b: Int16Array): number {
  const env = (pcm: Int16Array) =>
    Array.from({ length: Math.floor(pcm.length / PACKET) }, (_, w) => rms(pcm.subarray(w * PACKET, (w + 1) * PACKET)));
  const x = env(a);
  const y = env(b);
  const mean = (v: number[]) => v.reduce((s, e) => s + e, 0) / v.length;
  const mx = mean(x);
  const my = mean(y);
  let sxy = 0;
  let sxx = 0;
  let syy = 0;
  for (let i = 0; i < x.length; i++) {
    sxy += (x[i] - mx) * (y[i] - my);
    sxx += (x[i] - mx) ** 2;
    syy += (y[i] - my) ** 2;
  }
  return sxy / Math.sqrt(sxx * syy);
}

/** 2.1 s of recorded speech ("Hello there can you hear me clearly") from the VAD fixture. */
function speech(): Int16Array {
  const { pcm } = parseWav(readFileSync(new URL('./fixtures/vad-speech-16k.wav', import.meta.url)));
  return pcm.slice((RATE * 800) / 1000, (RATE * 2_900) / 1000);
}

describe("channel audio: a client-rendered session's audio on the avatar channel, for a page that asks", () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp();
  });
  afterAll(async () => t?.close());

  async function clientSession(): Promise<{ id: string; playout: PlayoutClock }> {
    const created = await json(
      await post(t.baseUrl, '/sessions', { avatar_id: 'demo-rt', model: 'rt', render: 'client' }),
    );
    expect((await post(t.baseUrl, `/sessions/${created.session_id}/start`)).status).toBe(200);
    const session = t.services.supervisor.liveSession(created.session_id)!;
    return { id: created.session_id, playout: sessionParts(session).media.playout };
  }

  /** A page's peer that decodes the channel's audio as it comes, timing each packet against the media clock. */
  async function connect(id: string, playout: PlayoutClock): Promise<{ peer: PosePeer; heard: ChannelAudio }> {
    const peer = new PosePeer();
    const heard = new ChannelAudio();
    peer.onMessage = (message) => {
      if (message.type === 'audio') heard.take(message, playout.mediaMs);
    };
    await peer.connect(t.baseUrl, id);
    expect(await eventually(() => peer.of('hello').length > 0, 10_000)).toBe(true);
    return { peer, heard };
  }

  function speak(id: string, pcm: Int16Array): Promise<Response> {
    return postAudio(t.baseUrl, `/sessions/${id}/speak_audio`, wavBytes(pcm, RATE), {}, 'a.wav');
  }

  it('a page that asks gets audio-route, then Opus packets sent ahead of the clock that decode to what the clock played; its track then carries no audio', async () => {
    const { id, playout } = await clientSession();
    const played = tapClock(playout);
    const { peer, heard } = await connect(id, playout);
    try {
      expect(peer.of('hello')[0].channelAudio).toEqual(['opus']);
      peer.send(ASK);
      expect(await eventually(() => peer.of('audio-route').length > 0, 5_000)).toBe(true);
      const routed = peer.of('audio-route')[0];
      expect(routed.route).toBe('channel');
      // Nothing is sent for silence.
      await sleep(400);
      expect(peer.of('audio')).toEqual([]);

      // 1 s of a 440 Hz tone, 300 ms of silence, then 2.1 s of recorded speech, in one turn.
      const talk = speech();
      const pcm = new Int16Array(RATE * 1.3 + talk.length);
      pcm.set(tone(RATE, 1_000, 440, 12_000));
      pcm.set(talk, RATE * 1.3);
      const startMs = playout.mediaMs;
      expect((await speak(id, pcm)).status).toBe(200);
      const endMs = startMs + 200 + (pcm.length * 1000) / RATE;
      expect(await eventually(() => playout.mediaMs > endMs + 300, 15_000)).toBe(true);

      // Where the speech landed on the clock: the first loud sample the clock played after the request.
      const window = played.between((startMs * RATE) / 1000, (endMs * RATE) / 1000);
      const onset = window.findIndex((s) => Math.abs(s) > 1_000) + (startMs * RATE) / 1000;
      // The tone: its frequency and level, away from its edges.
      const toneHeard = heard.between(onset + RATE * 0.2, onset + RATE * 0.8);
      expect(frequencyOf(toneHeard)).toBeGreaterThan(430);
      expect(frequencyOf(toneHeard)).toBeLessThan(450);
      expect(rms(toneHeard) / (12_000 / Math.SQRT2)).toBeGreaterThan(0.8);
      expect(rms(toneHeard) / (12_000 / Math.SQRT2)).toBeLessThan(1.2);
      // The speech: its envelope follows what the clock played at the same RTP time.
      const from = onset + RATE * 1.3;
      const to = from + talk.length;
      const r = envelopeCorrelation(heard.between(from, to), played.between(from, to));
      expect(r, `speech envelope r ${r.toFixed(3)}`).toBeGreaterThanOrEqual(0.9);

      // Sent ahead: nearly every packet before its time left the clock, most well ahead.
      const leads = [...heard.leadsMs].sort((a, b) => a - b);
      const ahead = leads.filter((lead) => lead > 0).length / leads.length;
      expect(ahead, `leads ${leads.slice(0, 5).map(Math.round)}…`).toBeGreaterThan(0.9);
      expect(leads[Math.floor(leads.length / 2)]).toBeGreaterThan(100);

      // The track: silent from the switch on (no samples, or only silence).
      const trackAfter = peer.audio.filter((a) => a.at > routed.at + 300);
      expect(Math.max(0, ...trackAfter.map((a) => a.rms))).toBeLessThan(100);

      const metrics = await json(await fetch(`${t.baseUrl}/sessions/${id}/metrics`));
      expect(metrics.media.audio_packets_sent).toBeGreaterThanOrEqual(heard.packets.size);
      expect(metrics.media).toMatchObject({ audio_packets_late: expect.any(Number), audio_packets_skipped: 0 });
    } finally {
      peer.close();
    }
  }, 60_000);
});
