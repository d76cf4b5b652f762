import { readFileSync } from 'node:fs';
import { Decoder } from '@evan/opus';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { PoseChannelMessage } from '../client/face-canvas.ts';
import { parseWav } from '../actors/audio/wav.ts';
import type { MouthSource, PlayoutClock } from '../actors/media/playout.ts';
import { FrameTimeline, MOUTH_LOOKAHEAD_MS } from '../actors/media/timeline.ts';
import { CLOSED_MOUTH } from '../actors/render/types.ts';
import { sessionParts } from '../src/sessions/session.ts';
import { MAX_POSE_BUFFERED_BYTES, PoseChannel } from '../src/sessions/pose-channel.ts';
import { json, post, startTestApp, type TestApp } from './helpers/app.ts';
import { eventually, postAudio, sleep, tone, wavBytes } from './helpers/conversation.ts';
import { connectWhepViewer } from './helpers/peer.ts';
import { rms } from './helpers/mp4.ts';
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
      expect(routed).toMatchObject({ route: 'channel', encoderDelay: 120 });
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

  /** Whether the peer's track carried audio louder than `level` (RMS) after `since`. */
  const trackHeard = (peer: { audio: Array<{ at: number; rms: number }> }, since: number, level = 1_000) =>
    peer.audio.some((a) => a.at > since && a.rms > level);

  it('a page that opens the channel but never asks hears the track as before, and gets no channel audio', async () => {
    const { id, playout } = await clientSession();
    const { peer } = await connect(id, playout);
    try {
      expect(peer.of('hello')[0].channelAudio).toEqual(['opus']);
      const since = performance.now();
      expect((await speak(id, tone(RATE, 1_000, 330, 12_000))).status).toBe(200);
      expect(await eventually(() => trackHeard(peer, since), 10_000), 'the tone on the track').toBe(true);
      await sleep(300);
      expect(peer.of('audio-route')).toEqual([]);
      expect(peer.of('audio')).toEqual([]);
    } finally {
      peer.close();
    }
  }, 40_000);

  it('junk on the channel changes nothing (not JSON, huge, binary, another type, another codec, an array); a request after it still works', async () => {
    const { id, playout } = await clientSession();
    const { peer } = await connect(id, playout);
    try {
      const junk: Array<string | Uint8Array<ArrayBuffer>> = [
        'not json {',
        JSON.stringify({ type: 'audio', codec: 'opus', pad: 'x'.repeat(100_000) }),
        new TextEncoder().encode(ASK) as Uint8Array<ArrayBuffer>,
        JSON.stringify({ type: 'audio', codec: 'pcm' }),
        JSON.stringify({ type: 'audio' }),
        JSON.stringify({ type: 'hello', codec: 'opus' }),
        JSON.stringify([{ type: 'audio', codec: 'opus' }]),
        'null',
        '"audio"',
        '{"type":"audio","codec":"opus"'.repeat(3),
      ];
      for (const message of junk) peer.send(message);
      await sleep(500);
      expect(peer.of('audio-route')).toEqual([]);
      // The session is unharmed and its audio still on the track.
      expect((await json(await fetch(`${t.baseUrl}/sessions/${id}`))).state).toBe('running');
      const since = performance.now();
      expect((await speak(id, tone(RATE, 800, 330, 12_000))).status).toBe(200);
      expect(await eventually(() => trackHeard(peer, since), 10_000), 'the tone on the track').toBe(true);
      expect(peer.of('audio')).toEqual([]);
      // A well-formed request still switches; asking twice switches once.
      peer.send(ASK);
      peer.send(ASK);
      expect(await eventually(() => peer.of('audio-route').length > 0, 5_000)).toBe(true);
      await sleep(300);
      expect(peer.of('audio-route')).toHaveLength(1);
    } finally {
      peer.close();
    }
  }, 40_000);

  it('a WHEP viewer on the same session still hears the audio while the main peer takes it on the channel', async () => {
    const { id, playout } = await clientSession();
    const { peer, heard } = await connect(id, playout);
    const { viewer, location } = await connectWhepViewer(t.baseUrl, id);
    try {
      peer.send(ASK);
      expect(await eventually(() => peer.of('audio-route').length > 0, 5_000)).toBe(true);
      const since = performance.now();
      expect((await speak(id, tone(RATE, 1_000, 330, 12_000))).status).toBe(200);
      await viewer.until(() => viewer.audio.some((a) => a.at > since && a.rms > 1_000), 10_000, 'audio at the viewer');
      expect(await eventually(() => heard.packets.size > 25, 10_000), 'channel audio at the page').toBe(true);
    } finally {
      viewer.close();
      peer.close();
    }
    expect((await fetch(`${t.baseUrl}${location}`, { method: 'DELETE' })).status).toBe(204);
  }, 40_000);

  it('barge-in sends flush with audio: true, and no audio of the dropped speech after it', async () => {
    const { id, playout } = await clientSession();
    const { peer, heard } = await connect(id, playout);
    try {
      peer.send(ASK);
      expect(await eventually(() => peer.of('audio-route').length > 0, 5_000)).toBe(true);
      expect((await speak(id, tone(RATE, 4_000, 330, 12_000))).status).toBe(200);
      expect(await eventually(() => heard.packets.size > 40, 10_000), 'channel audio').toBe(true);
      expect((await post(t.baseUrl, `/sessions/${id}/interrupt`)).status).toBe(200);
      expect(await eventually(() => peer.of('flush').some((m) => m.audio === true), 5_000)).toBe(true);
      await sleep(800);
      const flushAt = peer.messages.findIndex((m) => m.type === 'flush' && m.audio === true);
      expect(peer.messages.slice(flushAt).filter((m) => m.type === 'audio')).toEqual([]);
      // Flushes of poses alone (new audio under poses sent ahead) leave the audio sent standing.
      expect(
        peer
          .of('flush')
          .filter((m) => m.fromRtp !== undefined)
          .every((m) => m.audio === undefined),
      ).toBe(true);

      // New speech after the barge-in starts a fresh stream.
      const before = peer.of('audio').length;
      expect((await speak(id, tone(RATE, 500, 330, 12_000))).status).toBe(200);
      expect(await eventually(() => peer.of('audio').length > before, 5_000)).toBe(true);
      expect(peer.of('audio')[before].fresh).toBe(true);
    } finally {
      peer.close();
    }
  }, 40_000);

  it('a reconnecting peer starts on the track again until its page asks', async () => {
    const { id, playout } = await clientSession();
    const first = await connect(id, playout);
    first.peer.send(ASK);
    expect(await eventually(() => first.peer.of('audio-route').length > 0, 5_000)).toBe(true);
    const second = await connect(id, playout);
    try {
      const since = performance.now();
      expect((await speak(id, tone(RATE, 1_000, 330, 12_000))).status).toBe(200);
      expect(await eventually(() => trackHeard(second.peer, since), 10_000), 'the new peer hears its track').toBe(true);
      expect(second.peer.of('audio-route')).toEqual([]);
      expect(second.peer.of('audio')).toEqual([]);
      await sleep(1_000);
      second.peer.send(ASK);
      expect(await eventually(() => second.peer.of('audio-route').length > 0, 5_000)).toBe(true);
      const switched = performance.now();
      expect((await speak(id, tone(RATE, 1_000, 330, 12_000))).status).toBe(200);
      expect(await eventually(() => second.heard.packets.size > 25, 10_000), 'channel audio').toBe(true);
      await sleep(500);
      expect(trackHeard(second.peer, switched + 300, 100)).toBe(false);
    } finally {
      first.peer.close();
      second.peer.close();
    }
  }, 40_000);
});

describe('channel audio packets: whole 20 ms packets on the clock grid, ahead by the lead, padded only when due, re-sent when audio lands, fresh after a gap', () => {
  const hello = { kitUrl: '/k', model: 'rt', fps: 25, width: 512, height: 512 };
  const quiet: MouthSource = { durationMs: 0, poseAt: () => CLOSED_MOUTH, levelAt: () => 0 };
  const endOfTick = () => new Promise<void>((resolve) => setImmediate(resolve));
  const pose = (ptsMs: number) => ({ frameIdx: ptsMs / 40, ptsMs, mouth: CLOSED_MOUTH, level: 0, speaking: false });

  /** A pose channel on a fake open channel, reading a real frame timeline whose clock position the test sets. */
  function channelOn(sampleRate: number) {
    const sent: PoseChannelMessage[] = [];
    const listeners = new Map<string, (event: { data: unknown }) => void>();
    const state = { clock: 0, buffered: 0, routed: 0 };
    const timeline = new FrameTimeline(sampleRate, 25);
    const channel = {
      label: 'avatar',
      readyState: 'open',
      get bufferedAmount() {
        return state.buffered;
      },
      send: (text: string) => {
        const data = JSON.parse(text) as PoseChannelMessage | PoseChannelMessage[];
        sent.push(...(Array.isArray(data) ? data : [data]));
      },
      close: () => undefined,
      addEventListener: (type: string, listener: (event: never) => void) =>
        listeners.set(type, listener as (event: { data: unknown }) => void),
    };
    const poses = new PoseChannel(hello, () => (state.clock * 1000) / sampleRate, {
      sampleRate,
      queuedAudio: (from, to) => {
        const pcm = timeline.speechBetween(from, to);
        return pcm && { pcm, complete: to <= timeline.endSample };
      },
      routeToChannel: () => {
        state.routed++;
        return true;
      },
    });
    poses.attach(channel);
    return {
      poses,
      sent,
      state,
      timeline,
      ask: (data: unknown = ASK) => listeners.get('message')!({ data }),
      /** Queues `samples` of a tone at the end of the timeline (or at the clock, after a gap). */
      queue: (samples: number) =>
        timeline.append(samples, quiet, null, state.clock, tone(sampleRate, (samples * 1000) / sampleRate, 440, 9_000)),
      /** One batch at the clock's position (a pose goes, and the audio due rides with it); its audio messages. */
      async batch(): Promise<AudioMessage[]> {
        const from = sent.length;
        poses.pose(pose((state.clock * 1000) / sampleRate + 160));
        await endOfTick();
        return sent.slice(from).filter((m): m is AudioMessage => m.type === 'audio');
      },
    };
  }
  const packetsOf = (messages: AudioMessage[]) =>
    messages.flatMap((m) => m.packets.map((_, i) => m.rtp / RTP_PER_PACKET + i));

  it('sends the queued audio in packets up to the lead, waits for a packet not all queued until it is due, then re-sends it whole', async () => {
    const c = channelOn(RATE);
    await endOfTick();
    expect(c.sent[0]).toMatchObject({ type: 'hello', channelAudio: ['opus'] });
    c.ask();
    await endOfTick();
    // The encoder's delay (CELT's 2.5 ms lookahead: 40 samples at 16 kHz), in rtp ticks.
    expect(c.sent.at(-1)).toEqual({ type: 'audio-route', route: 'channel', encoderDelay: 120 });
    expect(c.poses.route).toBe('channel');

    c.queue(8_100);
    // Up to CHANNEL_AUDIO_LEAD_MS (240 ms: 12 packets) ahead of the clock, the first one fresh.
    const first = await c.batch();
    expect(first).toHaveLength(1);
    expect(first[0]).toMatchObject({ rtp: 0, fresh: true });
    expect(packetsOf(first)).toEqual([...Array(12).keys()]);
    c.state.clock = 1_280;
    const second = await c.batch();
    expect(packetsOf(second)).toEqual([12, 13, 14, 15]);
    expect(second[0].fresh).toBeUndefined();
    // Packet 25 (8 000–8 320) is not all queued and not due: it waits.
    c.state.clock = 5_000;
    expect(packetsOf(await c.batch())).toEqual([16, 17, 18, 19, 20, 21, 22, 23, 24]);
    // Due (CHANNEL_AUDIO_DUE_MS): it goes zero-padded.
    c.state.clock = 6_600;
    expect(packetsOf(await c.batch())).toEqual([25]);
    expect(await c.batch()).toEqual([]);
    // The rest of the sentence lands in it: it goes again, whole, continuing the stream, with what follows.
    c.queue(2_000);
    const resent = await c.batch();
    expect(packetsOf(resent)).toEqual([25, 26, 27, 28, 29, 30]);
    expect(resent[0].fresh).toBeUndefined();
    // Each packet decodes to 20 ms at the session's rate.
    const decoder = new Decoder({ sample_rate: RATE, channels: 1 });
    for (const packet of resent[0].packets)
      expect(decoder.decode(Buffer.from(packet, 'base64')).byteLength).toBe(PACKET * 2);

    // After a gap (everything played; new speech at the clock): a fresh stream from the clock's packet.
    c.state.clock = 20_000;
    c.timeline.forgetBefore(20_000);
    c.queue(1_600);
    // Speech after silence: the clock voids the poses sent ahead under it, and the audio rides with that flush at once.
    const before = c.sent.length;
    c.poses.flush(1_250 - MOUTH_LOOKAHEAD_MS);
    await endOfTick();
    const afterGap = c.sent.slice(before).filter((m): m is AudioMessage => m.type === 'audio');
    expect(c.sent[before]).toMatchObject({ type: 'flush' });
    expect(afterGap[0]).toMatchObject({ rtp: 62 * RTP_PER_PACKET, fresh: true });
    expect(c.poses.counts).toMatchObject({ lateAudioPackets: 0, skippedAudioPackets: 0 });
    expect(c.poses.counts.sentAudioPackets).toBe(
      packetsOf([...first, ...second]).length + 9 + 1 + 6 + afterGap[0].packets.length,
    );

    // Barge-in: the flush says the audio goes too, and nothing more is sent for it.
    c.timeline.clear();
    c.poses.flush(null);
    await endOfTick();
    expect(c.sent.at(-1)).toEqual({ type: 'flush', audio: true });
    expect(await c.batch()).toEqual([]);
  });

  it('does not send the digital silence between two sentences: the next sentence starts a fresh stream after the gap', async () => {
    const c = channelOn(RATE);
    await endOfTick();
    c.ask();
    await endOfTick();
    // A sentence (5 packets), a pause of exact zeros queued as audio (5 packets), the next sentence (5 packets).
    c.queue(5 * PACKET);
    c.timeline.append(5 * PACKET, quiet, null, c.state.clock, new Int16Array(5 * PACKET));
    c.queue(5 * PACKET);
    const sent = await c.batch();
    expect(packetsOf(sent)).toEqual([0, 1, 2, 3, 4]);
    expect(sent[0].fresh).toBe(true);
    // The next batch skips the pause and starts the next sentence afresh, up to the lead (12 packets ahead).
    const next = await c.batch();
    expect(packetsOf(next)).toEqual([10, 11]);
    expect(next[0]).toMatchObject({ rtp: 10 * RTP_PER_PACKET, fresh: true });
    c.state.clock = 5 * PACKET;
    const rest = await c.batch();
    expect(packetsOf(rest)).toEqual([12, 13, 14]);
    expect(rest[0].fresh).toBeUndefined();
    expect(c.poses.counts.sentAudioPackets).toBe(10);
  });

  it('sends speech whose first chunks left in a catch-up tick before the batch from the packet holding its first sample, counted late', async () => {
    const c = channelOn(RATE);
    await endOfTick();
    c.ask();
    await endOfTick();
    // Speech queued at the clock (packet 10), and three 10 ms chunks leave in one catch-up tick before the next batch.
    c.state.clock = 10 * PACKET;
    c.queue(20 * PACKET);
    c.state.clock += 3 * 160;
    const sent = await c.batch();
    expect(sent[0]).toMatchObject({ rtp: 10 * RTP_PER_PACKET, fresh: true });
    // Packet 10 left before this tick's chunk: late. Packet 11 leaves with it: on time.
    expect(c.poses.counts.lateAudioPackets).toBe(1);
  });

  it('a page that asks in the middle of speech gets the channel audio from the first packet its track has not begun', async () => {
    const c = channelOn(RATE);
    await endOfTick();
    c.queue(30 * PACKET);
    c.state.clock = 5 * PACKET + 100;
    c.ask();
    await endOfTick();
    // The audio rides with `audio-route`.
    const audio = c.sent.filter((m): m is AudioMessage => m.type === 'audio');
    expect(packetsOf(audio)[0]).toBe(6);
    expect(audio[0].fresh).toBe(true);
  });

  it('counts audio against the buffered bound (a page that stops reading stalls its audio), and starts afresh after', async () => {
    const c = channelOn(RATE);
    c.ask();
    c.queue(RATE * 3);
    await c.batch();
    c.state.buffered = MAX_POSE_BUFFERED_BYTES * 2;
    // Past the bound (it is read again only once the bound passes, so fill it with what went).
    for (let i = 0; i < 200 && c.poses.counts.skippedAudioPackets === 0; i++) {
      c.state.clock += 320;
      await c.batch();
    }
    expect(c.poses.counts.skippedAudioPackets).toBeGreaterThan(0);
    const sentWhileStalled = c.poses.counts.sentAudioPackets;
    // A second later, still stalled: nothing goes.
    c.state.clock += RATE;
    expect(await c.batch()).toEqual([]);
    expect(c.poses.counts.sentAudioPackets).toBe(sentWhileStalled);
    // The page reads again: audio from the clock on, a fresh stream (the skipped packets never reached its decoder).
    c.state.buffered = 0;
    c.state.clock += 320;
    const resumed = await c.batch();
    expect(resumed[0]).toMatchObject({ fresh: true, rtp: Math.floor(c.state.clock / PACKET) * RTP_PER_PACKET });
  });

  it('a session at a rate Opus does not encode offers no channel audio and ignores the request; 48 kHz encodes 48 kHz packets', async () => {
    const odd = channelOn(22_050);
    await endOfTick();
    expect(odd.sent[0]).toMatchObject({ type: 'hello' });
    expect(odd.sent[0]).not.toHaveProperty('channelAudio');
    odd.ask();
    await endOfTick();
    expect(odd.state.routed).toBe(0);
    expect(odd.poses.route).toBe('track');

    const wide = channelOn(48_000);
    wide.ask();
    wide.queue(48_000);
    const packets = await wide.batch();
    expect(packetsOf(packets)).toEqual([...Array(12).keys()]);
    const decoder = new Decoder({ sample_rate: 48_000, channels: 1 });
    const pcm = decoder.decode(Buffer.from(packets[0].packets[5], 'base64'));
    expect(pcm.byteLength).toBe(960 * 2);
  });
});
