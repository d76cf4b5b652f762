import { json, post, startTestApp, type TestApp } from '../test/helpers/app.ts';
import { ReceivingPeer } from '../test/helpers/peer.ts';
import { SseClient } from '../test/helpers/sse.ts';
import { summary } from './stats.ts';

/** Receiver-side RMS above this counts as audible speech. */
const AUDIBLE_RMS = 300;
const SPEAK_RUNS = 12;

export interface RealtimeResults {
  speakToFirstAudibleMs: ReturnType<typeof summary>;
  interruptToSilenceMs: ReturnType<typeof summary>;
  serverInterruptToIdleMs: ReturnType<typeof summary>;
}

async function sleep(ms: number) {
  await new Promise((r) => setTimeout(r, ms));
}

/** Measures speak → first audible sample and interrupt → silence at a real wrtc receiver on loopback. */
export async function benchRealtime(app?: TestApp): Promise<RealtimeResults> {
  const t = app ?? (await startTestApp());
  const avatars = await json(await fetch(`${t.baseUrl}/avatars`));
  const avatar = avatars.find((a: { model_type: string }) => a.model_type === 'rt') ?? avatars[0];
  const model = avatar.model_type === 'rt' ? 'rt' : 'mock';
  const { session_id } = await json(await post(t.baseUrl, '/sessions', { avatar_id: avatar.id, model }));
  const sse = await SseClient.open(`${t.baseUrl}/sessions/${session_id}/events`);
  const peer = await ReceivingPeer.connect(t.baseUrl, session_id);
  peer.keepFrames = false;
  await post(t.baseUrl, `/sessions/${session_id}/start`);
  await peer.until(() => peer.audio.length > 50, 10_000, 'audio flowing');

  // Warm the TTS engines once: the first synthesis of a process loads the WASM engines.
  await post(t.baseUrl, `/sessions/${session_id}/speak`, { text: 'Warm up.' });
  await sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', 30_000, 'warm-up idle');

  const firstAudible: number[] = [];
  const toSilence: number[] = [];
  const toIdle: number[] = [];
  for (let i = 0; i < SPEAK_RUNS; i++) {
    await sleep(300);
    const from = sse.events.length;
    const sentAt = performance.now();
    await post(t.baseUrl, `/sessions/${session_id}/speak`, {
      text: `Run number ${i + 1}. This sentence is long enough to be interrupted while it is still playing out loud.`,
    });
    await peer.until(() => peer.firstAudible(sentAt, AUDIBLE_RMS) !== undefined, 15_000, 'audible');
    firstAudible.push(peer.firstAudible(sentAt, AUDIBLE_RMS)!.at - sentAt);
    await sleep(400);
    const interruptAt = performance.now();
    await post(t.baseUrl, `/sessions/${session_id}/interrupt`);
    const idle = await sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', 5_000, 'idle', from);
    toIdle.push(idle.at - interruptAt);
    await peer.until(
      () => {
        const after = peer.audio.filter((a) => a.at > interruptAt);
        return after.some(
          (a, idx) =>
            after.slice(idx, idx + 5).length === 5 && after.slice(idx, idx + 5).every((b) => b.rms < AUDIBLE_RMS),
        );
      },
      5_000,
      'silence',
    );
    const after = peer.audio.filter((a) => a.at > interruptAt);
    const idx = after.findIndex(
      (a, k) => after.slice(k, k + 5).length === 5 && after.slice(k, k + 5).every((b) => b.rms < AUDIBLE_RMS),
    );
    toSilence.push(after[idx].at - interruptAt);
  }
  peer.close();
  sse.close();
  await fetch(`${t.baseUrl}/sessions/${session_id}`, { method: 'DELETE' });
  if (!app) await t.close();
  return {
    speakToFirstAudibleMs: summary(firstAudible),
    interruptToSilenceMs: summary(toSilence),
    serverInterruptToIdleMs: summary(toIdle),
  };
}
