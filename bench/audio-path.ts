/**
 * The audio path of a client-rendered session in isolation (issue 47): N wrtc senders of audio only, each connected
 * to a receiver in this process on loopback, fed as the service feeds them (10 ms of the built-in voice's speech every
 * 10 ms, looped with the pauses between its sentences), with variants of what the service controls: the rate it feeds
 * `RTCAudioSource` at, and the Opus parameters of the receiver's description (which set libwebrtc's encoder). Per
 * variant: ms CPU per stream-second of the sender's threads (Opus `AudioEncoder`, the RTP send path, the main thread's
 * `onData`), read per thread from /proc; the receivers' threads are left out. DTX is on in every variant, as the
 * service asks for it.
 *
 *   npm run bench -- audio_path
 *   BENCH_AUDIO_STREAMS=24 BENCH_AUDIO_SECONDS=8 npm run bench -- audio_path
 */
import wrtc from '@roamhq/wrtc';
import { upsamplePcm16 } from '../actors/audio/upsample.ts';
import { withOpusDtx } from '../actors/media/webrtc.ts';
import { synthesizeWithFlite } from '../actors/tts/builtin/flite.ts';
import { trimEdgeSilence } from '../actors/tts/builtin/engine.ts';
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

const VARIANTS: Variant[] = [
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
  /** When the receiver last played a 10 ms buffer louder than `AUDIBLE_RMS` (performance.now()), or 0. */
  lastAudibleAt(): number;
  close(): void;
}

async function connectAudioPair(variant: Variant): Promise<AudioPair> {
  const sender = new RTCPeerConnection();
  const receiver = new RTCPeerConnection();
  const source = new nonstandard.RTCAudioSource();
  const track = source.createTrack();
  sender.addTrack(track, new wrtc.MediaStream([track]));
  const sinks: Array<{ stop(): void }> = [];
  let audibleAt = 0;
  receiver.ontrack = (event: { track: MediaStreamTrack }) => {
    const sink = new nonstandard.RTCAudioSink(event.track);
    sink.ondata = (data: { samples: Int16Array }) => {
      let sum = 0;
      for (const sample of data.samples) sum += sample * sample;
      if (Math.sqrt(sum / Math.max(1, data.samples.length)) > AUDIBLE_RMS) audibleAt = performance.now();
    };
    sinks.push(sink);
  };
  // DTX asked for as the service asks for it (`offerAsApplied`), then the variant's options.
  await connectOnLoopback(sender, receiver, (sdp) => withOpusOptions(withOpusDtx(sdp), variant));
  return {
    source,
    lastAudibleAt: () => audibleAt,
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
  on_data_us_per_call: number;
  /** Audio packets per stream-second and kbit/s per stream, as sent */
  packets_per_s: number;
  kbps: number;
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
    const before = threadCpu(process.pid);
    const start = performance.now();
    const { sent, onDataMs } = await feedFor(SECONDS * 1000, true);
    const seconds = (performance.now() - start) / 1000;
    const streamSeconds = seconds * STREAMS;
    const byThread = threadCpuDelta(process.pid, before, threadCpu(process.pid));
    const sentAfter = await pairs[0]!.sent();
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
              : 'RTP send path & other libwebrtc threads';
      threads[group] = (threads[group] ?? 0) + ms;
    }
    const perStreamSecond = Object.fromEntries(
      Object.entries(threads).map(([k, v]) => [k, round(v / streamSeconds, 2)]),
    );
    return {
      threads: perStreamSecond,
      sender_total: round(Object.values(threads).reduce((a, b) => a + b, 0) / streamSeconds, 2),
      on_data_us_per_call: round((onDataMs * 1000) / (sent * STREAMS), 1),
      packets_per_s: round((sentAfter.packets - sentBefore.packets) / seconds, 1),
      kbps: round(((sentAfter.bytes - sentBefore.bytes) * 8) / 1000 / seconds, 1),
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

function rms(pcm: Int16Array): number {
  let sum = 0;
  for (const sample of pcm) sum += sample * sample;
  return Math.sqrt(sum / Math.max(1, pcm.length));
}

export async function benchAudioPath(): Promise<Record<string, unknown>> {
  const speech16k = await speech();
  const speech48k = upsamplePcm16(speech16k, 3);
  const results: Record<string, VariantResult[]> = {};
  const loads: number[][] = [];
  for (let round_ = 0; round_ < ROUNDS; round_++) {
    for (const variant of VARIANTS) {
      loads.push(loadAverage());
      const result = await measure(variant, speech16k, speech48k);
      (results[variant.name] ??= []).push(result);
      console.log(
        `  ${variant.name}: sender ${result.sender_total} ms per stream-second ${JSON.stringify(result.threads)}, ` +
          `onData ${result.on_data_us_per_call} µs/call, ${result.packets_per_s} packets/s, ${result.kbps} kbit/s, load ${loadAverage().join(' ')}`,
      );
      await sleep(1_000);
    }
  }
  const firstAudible: Record<string, number[]> = {};
  for (let round_ = 0; round_ < ROUNDS; round_++) {
    for (const variant of VARIANTS) {
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
  };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  console.log(JSON.stringify(await benchAudioPath(), null, 2));
  process.exit(0);
}
