/**
 * The audio path of a client-rendered session in isolation (issue 47): N wrtc senders of audio only, each connected
 * to a receiver in this process on loopback, fed as the service feeds them (10 ms of the built-in voice's speech every
 * 10 ms, looped with the pauses between its sentences), with variants of what the service controls: the rate it feeds
 * `RTCAudioSource` at, and the Opus parameters of the receiver's description (which set libwebrtc's encoder). Per
 * variant: ms CPU per stream-second of the sender's threads (Opus `AudioEncoder`, the RTP send path, the main thread's
 * `onData`), read per thread from /proc; the receivers' threads are left out. DTX is on in every variant, as the
 * service asks for it.
 *
 * Beside them, the channel path ("Audio on the pose channel", docs/performance.md): the same speech Opus-encoded by
 * the service's own encoder (`channelOpusEncoder`: 16 kHz, CELT at 32 kb/s, 20 ms packets) at complexity 0/2/5/9
 * and sent ~12.5 times a second as the pose batches carry it (`{type:'audio', rtp, packets:[base64…]}` on an `avatar` data channel; the
 * peer keeps its unfed audio track, as a session's does). There the encoder runs in the main thread, so its CPU is in
 * the main thread's figure. Each is an upper bound of what the service adds: it sends the audio as its own message
 * where the service puts it into a pose batch that goes anyway. Then, per complexity, what the encoder keeps
 * (`bench/opus-quality.ts`: log-spectral distance and envelope r of the decoded speech against the input), on the
 * bench's speech and on the speech of any clips named as arguments (their first `QUALITY_CLIP_S` seconds).
 *
 *   npm run bench -- audio_path
 *   BENCH_AUDIO_STREAMS=24 BENCH_AUDIO_SECONDS=8 npm run bench -- audio_path
 *   BENCH_AUDIO_VARIANTS='maxplaybackrate=16000$|channel' npm run bench -- audio_path   # only the variants matching
 *   npm run bench -- audio_path /path/to/speech.mp4   # the quality table on that clip's speech too
 */
import wrtc from '@roamhq/wrtc';
import { execFile } from 'node:child_process';
import { createRequire } from 'node:module';
import path from 'node:path';
import { promisify } from 'node:util';
import { upsamplePcm16 } from '../actors/audio/upsample.ts';
import { withOpusDtx } from '../actors/media/webrtc.ts';
import { synthesizeWithFlite } from '../actors/tts/builtin/flite.ts';
import { trimEdgeSilence } from '../actors/tts/builtin/engine.ts';
import { CHANNEL_PACKET_SAMPLES, CHANNEL_SAMPLE_RATE, channelEncoder, opusQuality } from './opus-quality.ts';
import { rms } from '../test/helpers/mp4.ts';
import { loadAverage, threadCpu, threadCpuDelta } from './proc.ts';
import { connectOnLoopback } from './stage-costs.ts';
import { round } from './stats.ts';

const { RTCPeerConnection, nonstandard } = wrtc;

const STREAMS = Number(process.env.BENCH_AUDIO_STREAMS ?? 24);
const SECONDS = Number(process.env.BENCH_AUDIO_SECONDS ?? 8);
/** Rounds of all variants, alternated, so drifting load falls on every variant alike. */
const ROUNDS = Number(process.env.BENCH_AUDIO_ROUNDS ?? 2);
/** Receiver-side threads (decoding, playout into the sinks): not the sender's cost. */
const RECEIVER_THREADS = /Decod|IncomingVideo|AudioDevice|TestAudio|receive/i;

/** A played 10 ms buffer this loud is speech (as the session benches count first audible). */
const AUDIBLE_RMS = 300;
/** Speech onsets after silence per variant for the first-audible reading. */
const ONSETS = Number(process.env.BENCH_AUDIO_ONSETS ?? 15);

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Variant {
  name: string;
  /** Rate the sender's `RTCAudioSource` is fed at. */
  feedRate: 16_000 | 48_000;
  /** Parameters added to the Opus `a=fmtp` line of the receiver's description. */
  fmtp?: string;
  /** An `a=ptime` line for the audio section of the receiver's description. */
  ptimeMs?: number;
}

/** Only the variants whose name matches (all when unset). */
const VARIANT_FILTER = process.env.BENCH_AUDIO_VARIANTS ? new RegExp(process.env.BENCH_AUDIO_VARIANTS) : null;

const TRACK_VARIANTS: Variant[] = [
  { name: '16 kHz feed (today)', feedRate: 16_000 },
  { name: '48 kHz feed', feedRate: 48_000 },
  { name: '16 kHz, maxplaybackrate=16000', feedRate: 16_000, fmtp: 'maxplaybackrate=16000;sprop-maxcapturerate=16000' },
  { name: '16 kHz, ptime 40', feedRate: 16_000, ptimeMs: 40 },
  { name: '16 kHz, ptime 60', feedRate: 16_000, ptimeMs: 60 },
  {
    name: '16 kHz, maxplaybackrate=16000 + ptime 60',
    feedRate: 16_000,
    fmtp: 'maxplaybackrate=16000;sprop-maxcapturerate=16000',
    ptimeMs: 60,
  },
];

/** The channel path at one complexity of the service's own Opus encoder (`CHANNEL_OPUS_COMPLEXITY`). */
interface ChannelVariant {
  name: string;
  complexity: number;
}

/** The complexities the lead chooses `CHANNEL_OPUS_COMPLEXITY` among. */
const CHANNEL_COMPLEXITIES = [0, 2, 5, 9];
const CHANNEL_VARIANTS: ChannelVariant[] = CHANNEL_COMPLEXITIES.map((complexity) => ({
  name: `channel, Opus complexity ${complexity}`,
  complexity,
}));
/** The channel encoder's bitrate, bit/s; unset: the service's (`CHANNEL_OPUS_BITRATE`). */
const CHANNEL_BITRATE = process.env.BENCH_CHANNEL_OPUS_BPS ? Number(process.env.BENCH_CHANNEL_OPUS_BPS) : undefined;
/**
 * How often the channel's audio goes: with each pose batch (`POSE_BATCH_FRAMES` 2 frames of 40 ms), 12.5 a second,
 * each carrying the 80 ms the clock moved since the last, four 20 ms packets.
 */
const CHANNEL_BATCH_MS = 80;
const PACKETS_PER_BATCH = CHANNEL_BATCH_MS / 20;
/** 48 kHz RTP ticks per 20 ms packet: the `rtp` a channel audio message is stamped with (`rtpOfMediaMs`). */
const RTP_TICKS_PER_PACKET = 960;
/** Seconds of each clip named as an argument that the quality table reads. */
const QUALITY_CLIP_S = 20;

function withOpusOptions(sdp: string, variant: Variant): string {
  const lines = sdp.split('\r\n');
  const opus = lines.map((line) => /^a=rtpmap:(\d+) opus\/48000/i.exec(line)?.[1]).find(Boolean);
  if (!opus) throw new Error('no Opus in the description');
  const out: string[] = [];
  for (const line of lines) {
    if (variant.fmtp && line.startsWith(`a=fmtp:${opus} `)) out.push(`${line};${variant.fmtp}`);
    else out.push(line);
    if (variant.ptimeMs && line.startsWith(`a=rtpmap:${opus} `)) out.push(`a=ptime:${variant.ptimeMs}`);
  }
  return out.join('\r\n');
}

interface AudioPair {
  source: InstanceType<typeof nonstandard.RTCAudioSource>;
  /** The sender's audio packets and bytes so far (outbound-rtp stats). */
  sent(): Promise<{ packets: number; bytes: number }>;
  /** The sender's transport bytes so far (`wireBytes`). */
  wire(): Promise<number>;
  /** When the receiver last played a 10 ms buffer louder than `AUDIBLE_RMS` (performance.now()), or 0. */
  lastAudibleAt(): number;
  close(): void;
}

/** Two wrtc peers in this process, the sender with an audio track of its own source (connected by the caller). */
function audioSenderPair() {
  const sender = new RTCPeerConnection();
  const receiver = new RTCPeerConnection();
  const source = new nonstandard.RTCAudioSource();
  const track = source.createTrack();
  sender.addTrack(track, new wrtc.MediaStream([track]));
  return { sender, receiver, source, track };
}

async function connectAudioPair(variant: Variant): Promise<AudioPair> {
  const { sender, receiver, source, track } = audioSenderPair();
  const sinks: Array<{ stop(): void }> = [];
  let audibleAt = 0;
  receiver.ontrack = (event: { track: MediaStreamTrack }) => {
    const sink = new nonstandard.RTCAudioSink(event.track);
    sink.ondata = (data: { samples: Int16Array }) => {
      if (rms(data.samples) > AUDIBLE_RMS) audibleAt = performance.now();
    };
    sinks.push(sink);
  };
  // DTX asked for as the service asks for it (`offerAsApplied`), then the variant's options.
  await connectOnLoopback(sender, receiver, (sdp) => withOpusOptions(withOpusDtx(sdp), variant));
  return {
    source,
    lastAudibleAt: () => audibleAt,
    wire: () => wireBytes(sender),
    sent: async () => {
      const report = await sender.getStats();
      const total = { packets: 0, bytes: 0 };
      report.forEach((stat: { type: string; packetsSent?: number; bytesSent?: number }) => {
        if (stat.type !== 'outbound-rtp') return;
        total.packets += stat.packetsSent ?? 0;
        total.bytes += stat.bytesSent ?? 0;
      });
      return total;
    },
    close: () => {
      for (const sink of sinks) sink.stop();
      track.stop();
      sender.close();
      receiver.close();
    },
  };
}

/** The built-in voice's sentences as the engine gives them (edge silence trimmed), with the pause between sentences. */
async function speech(): Promise<Int16Array> {
  const sentences = [
    'Would you like to hear more about the mountains of Norway?',
    'The fjords were carved by glaciers over many thousands of years.',
  ];
  const samples: number[] = [];
  for (const text of sentences) {
    samples.push(...trimEdgeSilence(await synthesizeWithFlite('slt', text)).pcm, ...new Int16Array(16 * 330));
  }
  return Int16Array.from(samples);
}

interface VariantResult {
  /** ms CPU per stream-second by sender thread group */
  threads: Record<string, number>;
  sender_total: number;
  /** Track: the main thread's `onData` per 10 ms chunk (wall time) */
  on_data_us_per_call?: number;
  /** Channel: the main thread's encode of one 20 ms packet, and base64 + JSON + `send` of one message (wall time) */
  encode_us_per_packet?: number;
  send_us_per_message?: number;
  /** Channel: messages per stream-second sent, and received over all streams against sent */
  messages_per_s?: number;
  messages_received_share?: number;
  /** Audio packets per stream-second and kbit/s of Opus payload per stream, as sent */
  packets_per_s: number;
  kbps: number;
  /** kbit/s per stream on the wire (the transport's bytes: RTP or SCTP, DTLS, RTCP, ICE) */
  wire_kbps: number;
}

/** The transport's bytes sent (every packet on the wire: media, SCTP, RTCP, DTLS, ICE). */
async function wireBytes(pc: InstanceType<typeof RTCPeerConnection>): Promise<number> {
  const report = await pc.getStats();
  let bytes = 0;
  report.forEach((stat: { type: string; bytesSent?: number }) => {
    if (stat.type === 'transport') bytes += stat.bytesSent ?? 0;
  });
  return bytes;
}

/** CPU per stream-second of the sender's thread groups between two readings; the receivers' threads left out. */
function senderThreads(
  before: ReturnType<typeof threadCpu>,
  streamSeconds: number,
  sendPath: string,
): { threads: Record<string, number>; total: number } {
  const byThread = threadCpuDelta(process.pid, before, threadCpu(process.pid));
  const threads: Record<string, number> = {};
  for (const [name, ms] of Object.entries(byThread)) {
    if (RECEIVER_THREADS.test(name)) continue;
    const group =
      name === 'AudioEncoder'
        ? 'Opus (AudioEncoder)'
        : name === 'main (JS event loop)'
          ? 'main thread'
          : name.startsWith('node thread')
            ? "node's threads"
            : sendPath;
    threads[group] = (threads[group] ?? 0) + ms;
  }
  return {
    threads: Object.fromEntries(Object.entries(threads).map(([k, v]) => [k, round(v / streamSeconds, 2)])),
    total: round(Object.values(threads).reduce((a, b) => a + b, 0) / streamSeconds, 2),
  };
}

async function measure(variant: Variant, speech16k: Int16Array, speech48k: Int16Array): Promise<VariantResult> {
  const pairs: AudioPair[] = [];
  try {
    for (let i = 0; i < STREAMS; i++) pairs.push(await connectAudioPair(variant));
    const pcm = variant.feedRate === 16_000 ? speech16k : speech48k;
    const chunk = variant.feedRate / 100;
    const chunks = Math.floor(pcm.length / chunk);
    // Each stream starts at its own place in the speech, as sessions do.
    const offsets = pairs.map((_, i) => Math.floor((i * chunks) / STREAMS));
    const feedFor = async (ms: number, measured: boolean) => {
      const start = performance.now();
      let sent = 0;
      let onDataMs = 0;
      while (performance.now() - start < ms) {
        const due = Math.floor((performance.now() - start) / 10);
        while (sent < due) {
          const t0 = performance.now();
          pairs.forEach((pair, i) => {
            const at = ((offsets[i]! + sent) % chunks) * chunk;
            pair.source.onData({
              samples: pcm.slice(at, at + chunk),
              sampleRate: variant.feedRate,
              bitsPerSample: 16,
              channelCount: 1,
              numberOfFrames: chunk,
            });
          });
          if (measured) onDataMs += performance.now() - t0;
          sent++;
        }
        await sleep(5);
      }
      return { sent, onDataMs };
    };
    await feedFor(2_000, false); // the encoders settle
    const sentBefore = await pairs[0]!.sent();
    const wireBefore = await pairs[0]!.wire();
    const before = threadCpu(process.pid);
    const start = performance.now();
    const { sent, onDataMs } = await feedFor(SECONDS * 1000, true);
    const seconds = (performance.now() - start) / 1000;
    const cpu = senderThreads(before, seconds * STREAMS, 'RTP send path & other libwebrtc threads');
    const sentAfter = await pairs[0]!.sent();
    const wireAfter = await pairs[0]!.wire();
    return {
      threads: cpu.threads,
      sender_total: cpu.total,
      on_data_us_per_call: round((onDataMs * 1000) / (sent * STREAMS), 1),
      packets_per_s: round((sentAfter.packets - sentBefore.packets) / seconds, 1),
      kbps: round(((sentAfter.bytes - sentBefore.bytes) * 8) / 1000 / seconds, 1),
      wire_kbps: round(((wireAfter - wireBefore) * 8) / 1000 / seconds, 1),
    };
  } finally {
    for (const pair of pairs) pair.close();
  }
}

interface ChannelPair {
  /** Sends one message on the sender's `avatar` channel. */
  send(message: string): void;
  wire(): Promise<number>;
  /** Messages the receiver got so far. */
  received(): number;
  close(): void;
}

/**
 * A session's peer as it is once its page took the channel audio: the audio track negotiated (the fallback) but not
 * fed, and the `avatar` data channel to a receiver in this process, which only counts what arrives.
 */
async function connectChannelPair(): Promise<ChannelPair> {
  const { sender, receiver, track } = audioSenderPair();
  const channel = sender.createDataChannel('avatar');
  let received = 0;
  receiver.ondatachannel = (event: RTCDataChannelEvent) => {
    event.channel.onmessage = () => received++;
  };
  await connectOnLoopback(sender, receiver, withOpusDtx);
  const deadline = performance.now() + 10_000;
  while (channel.readyState !== 'open' && performance.now() < deadline) await sleep(10);
  if (channel.readyState !== 'open') throw new Error('the avatar channel did not open');
  return {
    send: (message) => channel.send(message),
    wire: () => wireBytes(sender),
    received: () => received,
    close: () => {
      track.stop();
      sender.close();
      receiver.close();
    },
  };
}

/**
 * The channel path: every stream's speech encoded by its own `@evan/opus` encoder in 20 ms packets and sent as one
 * `audio` message per `CHANNEL_BATCH_MS`, the streams' batches spread over the interval as the sessions' clock
 * ticks are.
 */
async function measureChannel(variant: ChannelVariant, speech16k: Int16Array): Promise<VariantResult> {
  const pairs: ChannelPair[] = [];
  try {
    for (let i = 0; i < STREAMS; i++) pairs.push(await connectChannelPair());
    const encoders = pairs.map(() => channelEncoder(variant.complexity, CHANNEL_BITRATE));
    const packets = Math.floor(speech16k.length / CHANNEL_PACKET_SAMPLES);
    const offsets = pairs.map((_, i) => Math.floor((i * packets) / STREAMS));
    const packetsSent = pairs.map(() => 0);
    const sendFor = async (ms: number) => {
      const start = performance.now();
      const due = pairs.map((_, i) => start + (i * CHANNEL_BATCH_MS) / STREAMS);
      const totals = { encodeMs: 0, sendMs: 0, messages: 0, packets: 0, payloadBytes: 0 };
      while (performance.now() - start < ms) {
        pairs.forEach((pair, i) => {
          while (due[i]! <= performance.now()) {
            const t0 = performance.now();
            const first = packetsSent[i]!;
            const encoded: string[] = [];
            for (let k = first; k < first + PACKETS_PER_BATCH; k++) {
              const at = ((offsets[i]! + k) % packets) * CHANNEL_PACKET_SAMPLES;
              // `encode` returns a view of one shared buffer: base64 it before the next call.
              const packet = encoders[i]!.encode(speech16k.subarray(at, at + CHANNEL_PACKET_SAMPLES));
              totals.payloadBytes += packet.length;
              encoded.push(Buffer.from(packet.buffer, packet.byteOffset, packet.length).toString('base64'));
            }
            const t1 = performance.now();
            const rtp = (first * RTP_TICKS_PER_PACKET) % 2 ** 32;
            pair.send(JSON.stringify({ type: 'audio', rtp, packets: encoded }));
            totals.encodeMs += t1 - t0;
            totals.sendMs += performance.now() - t1;
            totals.messages++;
            totals.packets += PACKETS_PER_BATCH;
            packetsSent[i] = first + PACKETS_PER_BATCH;
            due[i]! += CHANNEL_BATCH_MS;
          }
        });
        await sleep(5);
      }
      return totals;
    };
    await sendFor(2_000); // the encoders and the channels settle
    const receivedBefore = pairs.reduce((n, p) => n + p.received(), 0);
    const wireBefore = await pairs[0]!.wire();
    const before = threadCpu(process.pid);
    const start = performance.now();
    const totals = await sendFor(SECONDS * 1000);
    const seconds = (performance.now() - start) / 1000;
    const cpu = senderThreads(before, seconds * STREAMS, 'SCTP send path & other libwebrtc threads');
    await sleep(200); // the last messages arrive
    const received = pairs.reduce((n, p) => n + p.received(), 0) - receivedBefore;
    const wireAfter = await pairs[0]!.wire();
    return {
      threads: cpu.threads,
      sender_total: cpu.total,
      encode_us_per_packet: round((totals.encodeMs * 1000) / totals.packets, 1),
      send_us_per_message: round((totals.sendMs * 1000) / totals.messages, 1),
      messages_per_s: round(totals.messages / STREAMS / seconds, 1),
      messages_received_share: round(received / totals.messages, 3),
      packets_per_s: round(totals.packets / STREAMS / seconds, 1),
      kbps: round((totals.payloadBytes * 8) / 1000 / STREAMS / seconds, 1),
      wire_kbps: round(((wireAfter - wireBefore) * 8) / 1000 / seconds, 1),
    };
  } finally {
    for (const pair of pairs) pair.close();
  }
}

/**
 * Speech onset → first audible buffer at the receiver (one stream, the host otherwise quiet): what the packet length
 * adds before every word after a pause (DTX silence, then the first sentence's chunks in real time), median of ONSETS.
 */
async function firstAudibleMs(variant: Variant, speech16k: Int16Array, speech48k: Int16Array): Promise<number> {
  const pair = await connectAudioPair(variant);
  try {
    const pcm = variant.feedRate === 16_000 ? speech16k : speech48k;
    const chunk = variant.feedRate / 100;
    // From the first loud 10 ms of the speech.
    let onset = 0;
    while (onset + chunk < pcm.length && rms(pcm.subarray(onset, onset + chunk)) <= AUDIBLE_RMS) onset += chunk;
    const silence = new Int16Array(chunk);
    const delays: number[] = [];
    for (let trial = 0; trial < ONSETS; trial++) {
      const start = performance.now();
      let sent = 0;
      let speechFrom = 0;
      // 800 ms of silence (DTX), then speech until it is heard (or 1 s).
      while (performance.now() - start < 1_800) {
        const due = Math.floor((performance.now() - start) / 10);
        while (sent < due) {
          const inSpeech = sent >= 80;
          if (inSpeech && speechFrom === 0) speechFrom = start + sent * 10;
          const at = onset + (sent - 80) * chunk;
          const samples = inSpeech ? pcm.slice(at, at + chunk) : silence;
          pair.source.onData({
            samples: samples.length === chunk ? samples : silence,
            sampleRate: variant.feedRate,
            bitsPerSample: 16,
            channelCount: 1,
            numberOfFrames: chunk,
          });
          sent++;
        }
        if (speechFrom > 0 && pair.lastAudibleAt() >= speechFrom) break;
        await sleep(2);
      }
      if (speechFrom > 0 && pair.lastAudibleAt() >= speechFrom) delays.push(pair.lastAudibleAt() - speechFrom);
    }
    delays.sort((a, b) => a - b);
    return round(delays[delays.length >> 1] ?? NaN, 1);
  } finally {
    pair.close();
  }
}

/** A clip's speech, its first `QUALITY_CLIP_S` seconds at the channel's 16 kHz mono (bundled ffmpeg). */
async function clipSpeech(file: string): Promise<Int16Array> {
  const ffmpeg = (createRequire(import.meta.url)('@ffmpeg-installer/ffmpeg') as { path: string }).path;
  const args = ['-v', 'error', '-t', String(QUALITY_CLIP_S), '-i', file, '-vn', '-ac', '1'];
  const { stdout } = await promisify(execFile)(
    ffmpeg,
    [...args, '-ar', String(CHANNEL_SAMPLE_RATE), '-f', 's16le', '-'],
    { encoding: 'buffer', maxBuffer: QUALITY_CLIP_S * CHANNEL_SAMPLE_RATE * 2 + 1024 },
  );
  // A copy: the output's offset in its buffer may be odd.
  return new Int16Array(new Uint8Array(stdout).buffer, 0, stdout.byteLength >> 1);
}

export async function benchAudioPath(): Promise<Record<string, unknown>> {
  const speech16k = await speech();
  const speech48k = upsamplePcm16(speech16k, 3);
  const selected = <T extends { name: string }>(variants: T[]) =>
    variants.filter((v) => !VARIANT_FILTER || VARIANT_FILTER.test(v.name));
  const trackVariants = selected(TRACK_VARIANTS);
  const channelVariants = selected(CHANNEL_VARIANTS);
  // What each complexity keeps, on the bench's speech and on the clips named as arguments (first: it takes seconds).
  const quality: Record<string, ReturnType<typeof opusQuality>[] | { error: string }> = {
    'built-in voice': CHANNEL_COMPLEXITIES.map((complexity) => opusQuality(speech16k, complexity, CHANNEL_BITRATE)),
  };
  for (const file of process.argv.slice(2).filter((arg) => arg.includes('/') || arg.includes('.'))) {
    const pcm = await clipSpeech(file).catch((error: Error) => error);
    quality[path.basename(file)] =
      pcm instanceof Error
        ? { error: pcm.message }
        : CHANNEL_COMPLEXITIES.map((complexity) => opusQuality(pcm, complexity, CHANNEL_BITRATE));
  }
  for (const [name, rows] of Object.entries(quality))
    for (const row of Array.isArray(rows) ? rows : [rows]) console.log(`  quality, ${name}: ${JSON.stringify(row)}`);
  const results: Record<string, VariantResult[]> = {};
  const loads: number[][] = [];
  const report = (name: string, result: VariantResult) => {
    (results[name] ??= []).push(result);
    const { threads, sender_total, ...rest } = result;
    console.log(
      `  ${name}: sender ${sender_total} ms per stream-second ${JSON.stringify(threads)}, ${JSON.stringify(rest)}, ` +
        `load ${loadAverage().join(' ')}`,
    );
  };
  for (let round_ = 0; round_ < ROUNDS; round_++) {
    for (const variant of alternated(trackVariants, channelVariants)) {
      loads.push(loadAverage());
      report(
        variant.name,
        'complexity' in variant
          ? await measureChannel(variant, speech16k)
          : await measure(variant, speech16k, speech48k),
      );
      await sleep(1_000);
    }
  }
  const firstAudible: Record<string, number[]> = {};
  for (let round_ = 0; round_ < ROUNDS; round_++) {
    for (const variant of trackVariants) {
      const ms = await firstAudibleMs(variant, speech16k, speech48k);
      (firstAudible[variant.name] ??= []).push(ms);
      console.log(`  ${variant.name}: speech onset → first audible p50 ${ms} ms, load ${loadAverage().join(' ')}`);
    }
  }
  return {
    streams: STREAMS,
    seconds: SECONDS,
    rounds: ROUNDS,
    load_at_start: loads,
    results,
    first_audible_p50_ms: firstAudible,
    channel_opus_quality: quality,
  };
}

/** Track variant k, then channel variant k, and so on: drifting load falls on both paths alike. */
function alternated(track: Variant[], channel: ChannelVariant[]): Array<Variant | ChannelVariant> {
  const out: Array<Variant | ChannelVariant> = [];
  for (let i = 0; i < Math.max(track.length, channel.length); i++)
    out.push(...track.slice(i, i + 1), ...channel.slice(i, i + 1));
  return out;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  console.log(JSON.stringify(await benchAudioPath(), null, 2));
  process.exit(0);
}
