/**
 * Hands-free conversation from the page at `/` in headless Chromium with a fake microphone: Chromium
 * plays a WAV file (one utterance of the VAD fixture, then silence) as its capture device; the page's
 * "Talk" button sends it on the WebRTC peer; the service hears it, recognises it through the loopback
 * ASR fake and answers; the page shows the transcript and the reply and receives the answer's audio.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chromium, type Browser } from 'playwright-core';
import { startTestApp, tempDir, type TestApp } from './helpers/app.ts';
import { wavBytes } from './helpers/conversation.ts';
import { loadVadFixture } from './helpers/vad-fixture.ts';
import { startOpenAiUpstream, type OpenAiUpstream } from './fakes/openai-upstream.ts';

const CHROMIUM = '/usr/bin/chromium';

describe('talking to the avatar from the page at / (Chromium, fake microphone)', () => {
  let upstream: OpenAiUpstream;
  let t: TestApp;
  let browser: Browser;
  let dir: string;

  beforeAll(async () => {
    const fixture = loadVadFixture();
    const first = fixture.labels.segments.find((segment) => segment.kind === 'speech')!;
    // Half a second of quiet, the utterance, then quiet long enough for the answer (played once: %noloop).
    const pcm = new Int16Array(16_000 * 12);
    pcm.set(fixture.pcm.subarray((first.startMs - 100) * 16, (first.endMs + 100) * 16), 8_000);
    dir = await tempDir('talk-');
    const wav = path.join(dir, 'mic.wav');
    await fs.writeFile(wav, wavBytes(pcm, 16_000));
    upstream = await startOpenAiUpstream({
      transcription: { transcript: 'Hello there, can you hear me clearly?' },
      chat: { replyTokens: ['Yes', ', I', ' can', ' hear', ' you', ' clearly', '.'] },
    });
    t = await startTestApp({ env: { SERVICE_LLM_BASE_URL: upstream.baseUrl, SERVICE_ASR_BASE_URL: upstream.baseUrl } });
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: [
        '--no-sandbox',
        '--disable-gpu',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--autoplay-policy=no-user-gesture-required',
        '--use-fake-ui-for-media-stream',
        '--use-fake-device-for-media-stream',
        `--use-file-for-fake-audio-capture=${wav}%noloop`,
      ],
    });
  });

  afterAll(async () => {
    await browser?.close();
    await t?.close();
    await upstream?.close();
    if (dir) await fs.rm(dir, { recursive: true, force: true });
  });

  it('Talk sends the microphone; the page shows listening, the transcript and the reply, and receives its audio', async () => {
    const context = await browser.newContext({ permissions: ['microphone'] });
    const page = await context.newPage();
    await page.goto(`${t.baseUrl}/`);
    await page.waitForFunction(() => (document.getElementById('model') as HTMLSelectElement).options.length > 0);
    await page.getByRole('button', { name: 'Start session' }).click();
    await page.waitForFunction(() => document.getElementById('state')!.textContent === 'running', null, { timeout: 20_000 });
    const talk = page.getByRole('button', { name: 'Talk' });
    await talk.click();
    await page.waitForFunction(() => document.getElementById('talk')!.getAttribute('aria-pressed') === 'true', null, { timeout: 10_000 });

    const log = () => page.textContent('#timeline').then((text) => text ?? '');
    await page.waitForFunction(() => document.getElementById('timeline')!.textContent!.includes('avatar listening'), null, { timeout: 20_000 });
    await page.waitForFunction(() => document.getElementById('timeline')!.textContent!.includes('you said: “Hello there, can you hear me clearly?”'), null, {
      timeout: 20_000,
    });
    await page.waitForFunction(() => document.getElementById('timeline')!.textContent!.includes('avatar speaking'), null, { timeout: 30_000 });
    const text = await log();
    await page.waitForFunction(() => document.getElementById('captions')!.textContent === 'Yes, I can hear you clearly.', null, { timeout: 20_000 });
    expect(text.indexOf('avatar listening')).toBeLessThan(text.indexOf('you said:'));

    // The recogniser got the utterance the fake microphone played (≈ 1.9 s with the service's pre/post-roll).
    const upload = upstream.requests.find((r) => r.transcription)!.transcription!;
    const seconds = upload.wav!.samples / upload.wav!.sampleRate;
    expect(seconds).toBeGreaterThan(1.5);
    expect(seconds).toBeLessThan(3.5);

    // The answer plays in the page: audio energy arrives on the (new, microphone-carrying) peer.
    await page.waitForTimeout(1_500);
    const audio = await page.evaluate(async () => {
      const pc = (window as unknown as { demo: { pc: RTCPeerConnection } }).demo.pc;
      const report = await pc.getStats();
      let energy = 0;
      let sent = 0;
      report.forEach((s: any) => {
        if (s.type === 'inbound-rtp' && s.kind === 'audio') energy = s.totalAudioEnergy ?? 0;
        if (s.type === 'outbound-rtp' && s.kind === 'audio') sent = s.packetsSent ?? 0;
      });
      return { energy, sent };
    });
    expect(audio.sent).toBeGreaterThan(50);
    expect(audio.energy).toBeGreaterThan(0);
    await context.close();
  });
});
