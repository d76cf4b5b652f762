/**
 * The transport floor's sending process (bench/transport-floor.ts): bare @roamhq/wrtc senders and nothing else —
 * no service, no rendering, no TTS. Each sender carries what a session sends: a 512×512 I420 frame every 40 ms and
 * 10 ms of PCM every 10 ms at the service's default rate. Signalling goes over the fork's IPC channel with complete
 * (non-trickle) descriptions; the receivers live in the parent, so this process's CPU is the sending side only.
 */
import path from 'node:path';
import wrtc from '@roamhq/wrtc';
import { FPS, HEIGHT, WIDTH, toneChunk } from './synthetic-media.ts';
import { BUNDLE_FRAME_PATH, loadRgba } from '../actors/render/image.ts';
import { rgbaToI420 } from '../actors/render/i420.ts';
import { VIDEO_SOURCE_INIT, withVideoBitrateCap } from '../actors/media/webrtc.ts';

const { RTCPeerConnection, nonstandard } = wrtc;

/** The service's default SERVICE_SAMPLE_RATE: the rate its audio track is fed at. */
const SAMPLE_RATE = 16_000;
/** ICE gathering on loopback takes milliseconds; 10 s means something is broken. */
const GATHER_TIMEOUT_MS = 10_000;

type Message = { type: 'open'; count: number } | { type: 'answer'; index: number; sdp: string } | { type: 'close' };

interface Sender {
  pc: InstanceType<typeof RTCPeerConnection>;
  audio: InstanceType<typeof nonstandard.RTCAudioSource>;
  video: InstanceType<typeof nonstandard.RTCVideoSource>;
  tracks: MediaStreamTrack[];
}

const senders: Sender[] = [];
let feeding = false;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function gathered(pc: InstanceType<typeof RTCPeerConnection>): Promise<void> {
  const deadline = performance.now() + GATHER_TIMEOUT_MS;
  while (pc.iceGatheringState !== 'complete') {
    if (performance.now() > deadline) throw new Error('ICE gathering did not complete');
    await sleep(10);
  }
}

async function open(count: number): Promise<void> {
  for (let index = 0; index < count; index++) {
    const pc = new RTCPeerConnection();
    const audio = new nonstandard.RTCAudioSource();
    const video = new nonstandard.RTCVideoSource(VIDEO_SOURCE_INIT);
    const tracks = [audio.createTrack(), video.createTrack()];
    const stream = new wrtc.MediaStream(tracks);
    for (const track of tracks) pc.addTrack(track, stream);
    await pc.setLocalDescription(await pc.createOffer());
    await gathered(pc);
    senders.push({ pc, audio, video, tracks });
    process.send!({ type: 'offer', index, sdp: pc.localDescription!.sdp });
  }
}

const AVATAR_DIR = path.join(import.meta.dirname, '..', 'avatars', 'astronaut');
/** The astronaut's mouth (its manifest's animation.mouth_center and mouth_width), where speech changes the picture. */
const MOUTH = { x: 222, y: 145, halfWidth: 21, maxOpen: 12 };

/** The avatar's frame with the mouth drawn open by `opening` (0-1): a dark band in the luma plane, as speech changes it. */
function speakingFrames(base: Uint8Array, count: number): Uint8Array[] {
  return Array.from({ length: count }, (_, i) => {
    const frame = Uint8Array.from(base);
    const open = Math.round(MOUTH.maxOpen * (0.5 + 0.5 * Math.sin((2 * Math.PI * i) / count)));
    for (let y = MOUTH.y - open / 2; y < MOUTH.y + open / 2; y++) {
      frame.fill(
        40,
        Math.round(y) * WIDTH + MOUTH.x - MOUTH.halfWidth,
        Math.round(y) * WIDTH + MOUTH.x + MOUTH.halfWidth,
      );
    }
    return frame;
  });
}

/** Feeds every sender on the media clock's cadence until the parent says close. */
async function feed(): Promise<void> {
  const pcm = toneChunk(SAMPLE_RATE);
  const rgba = await loadRgba(path.join(AVATAR_DIR, BUNDLE_FRAME_PATH), WIDTH, HEIGHT);
  // Syllable-rate mouth motion: ~4 openings a second at 25 fps.
  const frames = speakingFrames(rgbaToI420(rgba.data, WIDTH, HEIGHT).data, 6);
  const start = performance.now();
  let chunks = 0;
  let frameIndex = 0;
  while (senders.length > 0) {
    const due = Math.floor((performance.now() - start) / 10);
    while (chunks < due) {
      chunks++;
      const frame = chunks % (100 / FPS) === 0 ? frames[frameIndex++ % frames.length] : null;
      for (const sender of senders) {
        sender.audio.onData({
          samples: pcm,
          sampleRate: SAMPLE_RATE,
          bitsPerSample: 16,
          channelCount: 1,
          numberOfFrames: pcm.length,
        });
        if (frame) sender.video.onFrame({ width: WIDTH, height: HEIGHT, data: frame });
      }
    }
    await sleep(5);
  }
}

process.on('message', (message: Message) => {
  if (message.type === 'open') {
    open(message.count).catch((error: Error) => process.send!({ type: 'error', message: error.message }));
  } else if (message.type === 'answer') {
    const sender = senders[message.index];
    // Capped as the service caps its own senders (`VIDEO_MAX_BITRATE_KBPS`), so the floor is the same media.
    void sender.pc.setRemoteDescription({ type: 'answer', sdp: withVideoBitrateCap(message.sdp) }).then(() => {
      // Several answers may settle in one tick: one feeding loop, whichever sees them all first.
      if (!feeding && senders.every((s) => s.pc.remoteDescription)) {
        feeding = true;
        process.send!({ type: 'feeding' });
        void feed();
      }
    });
  } else {
    for (const sender of senders.splice(0)) {
      for (const track of sender.tracks) track.stop();
      sender.pc.close();
    }
    process.exit(0);
  }
});
// The parent going away ends this process too (no orphan sender).
process.on('disconnect', () => process.exit(0));
process.send!({ type: 'ready' });
