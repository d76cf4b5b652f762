/**
 * The page at `/` in headless Chromium, driven only through accessible names (what a screen-reader or keyboard
 * user reaches): avatar, model, voice + preview, system prompt, start, speak, chat, stop, pause/resume, captions,
 * speak-while-speaking advice, pause during a turn, record + download, offline render + download, portrait upload
 * (file input and drag and drop), Talk with a fake microphone (heard, transcribed, answered, the answer's audio
 * received on the microphone-carrying peer), end; a 390 px phone viewport; Chat disabled with a hint when no language model is configured.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { ENGINE_START_TIMEOUT_MS } from '../actors/tts/builtin/engine-child.ts';
import { startTestApp, tempDir, type TestApp } from './helpers/app.ts';
import { wavBytes } from './helpers/conversation.ts';
import { loadVadFixture } from './helpers/vad-fixture.ts';
import { PORTRAIT_FIXTURE } from './helpers/fixtures.ts';
import { startOpenAiUpstream, type OpenAiUpstream } from './fakes/openai-upstream.ts';

const CHROMIUM = '/usr/bin/chromium';
const REPLY = ['Yes', ', I', ' can', ' hear', ' you', ' clearly', '.'];
/** One step of a user's path. */
const STEP_MS = 60_000;
/**
 * The first voice preview starts the preview engine (compiling 21 MB of WASM) at `PREVIEW_ENGINE_NICENESS`, so that it
 * never delays a live turn: on a core the other test file keeps busy it gets a few per cent of it, and at half CPU
 * that start took over 60 s. Nothing promises a preview's speed on a saturated host, only the service's own bound on
 * an engine's start (`ENGINE_START_TIMEOUT_MS`) and then a sentence.
 */
const FIRST_PREVIEW_MS = ENGINE_START_TIMEOUT_MS + STEP_MS;

async function launch(args: string[] = []): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--autoplay-policy=no-user-gesture-required',
      ...args,
    ],
  });
}

const timelineText = (page: Page) => page.getByRole('log', { name: 'Event timeline' }).innerText();
const waitTimeline = (page: Page, needle: string | RegExp) =>
  page.waitForFunction(
    ([source, flags]) =>
      new RegExp(source, flags).test(document.querySelector('[aria-label="Event timeline"]')!.textContent ?? ''),
    typeof needle === 'string' ? [needle.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'), ''] : [needle.source, needle.flags],
    { timeout: STEP_MS },
  );

/** One Chromium for the file (its fake microphone plays `mic.wav` once); each describe has its own context. */
let browser: Browser;
let dir: string;

beforeAll(async () => {
  const fixture = loadVadFixture();
  const first = fixture.labels.segments.find((segment) => segment.kind === 'speech')!;
  // Half a second of quiet, the utterance, then quiet long enough for the answer (played once: %noloop).
  const pcm = new Int16Array(16_000 * 12);
  pcm.set(fixture.pcm.subarray((first.startMs - 100) * 16, (first.endMs + 100) * 16), 8_000);
  dir = await tempDir('page-');
  const wav = path.join(dir, 'mic.wav');
  await fs.writeFile(wav, wavBytes(pcm, 16_000));
  const portrait = async () =>
    fs.writeFile(
      path.join(dir, 'portrait.jpg'),
      await sharp(await fs.readFile(PORTRAIT_FIXTURE))
        .resize(320, 320)
        .jpeg()
        .toBuffer(),
    );
  [browser] = await Promise.all([
    launch([
      '--use-fake-ui-for-media-stream',
      '--use-fake-device-for-media-stream',
      `--use-file-for-fake-audio-capture=${wav}%noloop`,
    ]),
    portrait(),
  ]);
}, 120_000);

afterAll(async () => {
  await browser?.close();
  if (dir) await fs.rm(dir, { recursive: true, force: true });
});

describe('the page at / driven by accessible names (Chromium)', () => {
  let upstream: OpenAiUpstream;
  let t: TestApp;
  let context: BrowserContext;
  let page: Page;

  beforeAll(async () => {
    upstream = await startOpenAiUpstream({
      transcription: { transcript: 'Hello there, can you hear me clearly?' },
      chat: { replyTokens: REPLY },
    });
    t = await startTestApp({ env: { SERVICE_LLM_BASE_URL: upstream.baseUrl, SERVICE_ASR_BASE_URL: upstream.baseUrl } });
    // One context for the whole path: each step goes on from where the previous one left the page.
    context = await browser.newContext({ permissions: ['microphone'], acceptDownloads: true });
    page = await context.newPage();
    await page.goto(`${t.baseUrl}/`);
  }, 120_000);

  afterAll(async () => {
    await context?.close();
    await t?.close();
    await upstream?.close();
  });

  it(
    'choose avatar, model (only those rendering it), voice with a preview, and a system prompt; start',
    async () => {
      const avatar = page.getByRole('radio', { name: 'Demo (drawn, real-time)' });
      await avatar.check();
      await page.waitForFunction(
        () =>
          document.querySelectorAll('#model option').length > 0 &&
          document.querySelectorAll('#voice option').length > 0,
        null,
        { timeout: STEP_MS },
      );
      const model = page.getByLabel('Model', { exact: true });
      const models = await model
        .locator('option')
        .evaluateAll((options) => options.map((o) => (o as HTMLOptionElement).value));
      // Exactly the models whose `renders` include the avatar's model type: lipsync models are not offered for it.
      const all = (await (await fetch(`${t.baseUrl}/models`)).json()).models as Array<{
        id: string;
        renders: string[];
      }>;
      // `mock` (a debug overlay) only with `?debug` in the address.
      expect(models.sort()).toEqual(
        all
          .filter((m) => m.renders.includes('rt') && m.id !== 'mock')
          .map((m) => m.id)
          .sort(),
      );
      expect(models).not.toContain('lipsync');
      await page.getByRole('radio', { name: 'Astronaut' }).check();
      expect(
        await model.locator('option').evaluateAll((options) => options.map((o) => (o as HTMLOptionElement).value)),
      ).toContain('lipsync');
      await avatar.check();
      await model.selectOption('rt');

      const voice = page.getByLabel('Voice', { exact: true });
      // Each provider's group names its service and id; each built-in voice its engine and character.
      expect(
        await voice.locator('optgroup[label="Built-in offline voices (flite and eSpeak NG) (builtin)"] option').count(),
      ).toBeGreaterThan(5);
      expect(await voice.locator('option[value="builtin|en-US-AriaNeural"]').textContent()).toBe(
        'Aria: flite “slt”, American English, female (same voice as Jenny)',
      );
      await voice.selectOption('builtin|en-GB-RyanNeural');
      await page.getByRole('button', { name: 'Preview voice' }).click();
      await page.waitForFunction(
        () => document.getElementById('preview-status')!.textContent!.startsWith('Playing a preview of'),
        null,
        { timeout: FIRST_PREVIEW_MS },
      );

      await page.getByLabel('System prompt').fill('You are a test avatar. Answer in one sentence.');
      await page.getByRole('button', { name: 'Start session' }).click();
      await page.waitForFunction(() => document.getElementById('state')!.textContent === 'running', null, {
        timeout: STEP_MS,
      });
      const sessionId = await page.evaluate(
        () => (window as unknown as { demo: { sessionId: string } }).demo.sessionId,
      );
      const info = await (await fetch(`${t.baseUrl}/sessions/${sessionId}`)).json();
      expect(info).toMatchObject({
        avatar_id: 'demo-rt',
        model: 'rt',
        tts_provider: 'builtin',
        tts_voice: 'en-GB-RyanNeural',
        llm_system_prompt: 'You are a test avatar. Answer in one sentence.',
      });
    },
    FIRST_PREVIEW_MS + 2 * STEP_MS,
  );

  it('type and Speak: captions show the words, the avatar state shows speaking, the timeline the request → first audio latency', async () => {
    await page.getByLabel('Message').fill('Hello from the page test.');
    await page.getByRole('button', { name: 'Speak', exact: true }).click();
    await page.waitForFunction(() => document.getElementById('badge')!.dataset.stage === 'speaking', null, {
      timeout: STEP_MS,
    });
    expect(await page.getByRole('region', { name: 'Captions' }).innerText()).toBe('Hello from the page test.');
    await waitTimeline(page, /speak request → first audio \d+ ms/);
    const stats = await page.evaluate(async () => {
      const report = await (window as unknown as { demo: { pc: RTCPeerConnection } }).demo.pc.getStats();
      let frames = 0;
      report.forEach((s: any) => {
        if (s.type === 'inbound-rtp' && s.kind === 'video') frames = s.framesDecoded ?? 0;
      });
      return frames;
    });
    expect(stats).toBeGreaterThan(10);
  }, 120_000);

  it('Pause while a Speak turn is speaking cuts it; Resume; then Chat: the whole reply reaches the captions and the avatar returns to idle', async () => {
    // The previous step's turn first plays out: a Speak while it still speaks would be a 409.
    await page.waitForFunction(() => document.getElementById('badge')!.dataset.stage === 'idle', null, {
      timeout: STEP_MS,
    });
    // Long enough that the turn is still speaking when Pause is pressed (several sentences of synthesis).
    await page
      .getByLabel('Message')
      .fill(
        'This is a long announcement that keeps the avatar talking for many seconds. It goes on with a second sentence. ' +
          'And a third one, so that the pause certainly cuts the turn in the middle of its speech.',
      );
    await page.getByRole('button', { name: 'Speak', exact: true }).click();
    await page.waitForFunction(() => document.getElementById('badge')!.dataset.stage === 'speaking', null, {
      timeout: STEP_MS,
    });
    await page.getByRole('button', { name: 'Pause' }).click();
    await page.getByRole('button', { name: 'Resume' }).waitFor({ timeout: STEP_MS });
    expect(await page.textContent('#state')).toBe('paused');
    // The pause ended the turn: the service says `status idle (paused)` and the page shows the avatar idle.
    await page.waitForFunction(() => document.getElementById('badge')!.dataset.stage === 'idle', null, {
      timeout: STEP_MS,
    });
    await waitTimeline(page, 'avatar idle (paused)');
    // The paused turn is closed like any other: its latency line, with the outcome the service recorded.
    await waitTimeline(page, /turn paused: speak request → first audio \d+ ms/);
    await page.getByRole('button', { name: 'Resume' }).click();
    await page.getByRole('button', { name: 'Pause' }).waitFor({ timeout: STEP_MS });
    expect(await page.textContent('#state')).toBe('running');
    // A pause and resume made by someone else through the API (an operator console) show on the page too:
    // the service tells every SSE client `status idle (paused)` and `status idle (resumed)`.
    const sessionId = await page.evaluate(() => (window as unknown as { demo: { sessionId: string } }).demo.sessionId);
    expect((await fetch(`${t.baseUrl}/sessions/${sessionId}/pause`, { method: 'POST' })).status).toBe(200);
    await page.getByRole('button', { name: 'Resume' }).waitFor({ timeout: STEP_MS });
    expect(await page.textContent('#state')).toBe('paused');
    expect((await fetch(`${t.baseUrl}/sessions/${sessionId}/resume`, { method: 'POST' })).status).toBe(200);
    await page.getByRole('button', { name: 'Pause' }).waitFor({ timeout: STEP_MS });
    expect(await page.textContent('#state')).toBe('running');
    await waitTimeline(page, 'avatar idle (resumed)');

    // The chat's HTTP answer and its SSE events travel on different connections, so the page can get the whole
    // reply on SSE before the answer that names the turn; the page used to reset the turn's captions when that
    // answer came, leaving them empty. Holding the answer until the page's event stream (its AvatarClient) has
    // delivered the reply tests that order on every run instead of by chance.
    await page.evaluate(() => {
      const w = window as unknown as {
        demo: { client: { on(type: string, listener: (data: { delta: string }) => void): void } };
        chatDeltas: string;
      };
      w.chatDeltas = '';
      w.demo.client.on('llm', (data) => (w.chatDeltas += data.delta));
    });
    let replyBeforeAnswer = false;
    await page.route(
      '**/chat',
      async (route) => {
        const response = await route.fetch();
        try {
          await page.waitForFunction(
            (reply) => (window as unknown as { chatDeltas: string }).chatDeltas === reply,
            REPLY.join(''),
            { timeout: STEP_MS },
          );
          replyBeforeAnswer = true;
        } finally {
          await route.fulfill({ response });
        }
      },
      { times: 1 },
    );
    await page.getByLabel('Message').fill('Can you hear me?');
    await page.getByRole('button', { name: 'Chat' }).click();
    await waitTimeline(page, 'you asked: “Can you hear me?”');
    expect(replyBeforeAnswer).toBe(true);
    await page.unrouteAll();
    await page.waitForFunction((reply) => document.getElementById('captions')!.textContent === reply, REPLY.join(''), {
      timeout: STEP_MS,
    });
    await waitTimeline(page, /chat request → first audio \d+ ms, first LLM token \d+ ms/);
    await page.waitForFunction(() => document.getElementById('badge')!.dataset.stage === 'idle', null, {
      timeout: STEP_MS,
    });
    expect(await page.getByRole('region', { name: 'Captions' }).innerText()).toBe(REPLY.join(''));
    expect(await page.getByRole('alert').count()).toBe(0);
  }, 180_000);

  it('Stop interrupts; Speak while speaking is a banner saying what to do, dismissed by its button', async () => {
    await page
      .getByLabel('Message')
      .fill(
        'This is a long sentence that keeps the avatar busy for a while, so that the next request finds it speaking.',
      );
    await page.getByRole('button', { name: 'Speak', exact: true }).click();
    await page.waitForFunction(() => document.getElementById('badge')!.dataset.stage === 'speaking', null, {
      timeout: STEP_MS,
    });
    await page.getByRole('button', { name: 'Speak', exact: true }).click();
    const alert = page.getByRole('alert');
    await alert.waitFor({ timeout: STEP_MS });
    expect(await alert.innerText()).toContain('press Stop to interrupt it');
    await page.getByRole('button', { name: 'Dismiss error' }).click();
    expect(await page.getByRole('alert').count()).toBe(0);
    await page.getByRole('button', { name: 'Stop: interrupt the avatar' }).click();
    await waitTimeline(page, 'avatar interrupted');
    await waitTimeline(page, /interrupt → silence \d+ ms/);
  }, 120_000);

  it('Start recording, speak, Stop recording, then Download recording gives an MP4', async () => {
    await page.getByRole('button', { name: 'Start recording' }).click();
    await page.getByRole('button', { name: 'Stop recording' }).waitFor({ timeout: STEP_MS });
    // Earlier turns already put latency lines on the timeline: wait for one more, the recorded turn's.
    const latencyLines = async () =>
      (await timelineText(page)).match(/speak request → first audio \d+ ms/g)?.length ?? 0;
    const before = await latencyLines();
    await page.getByLabel('Message').fill('Recorded words.');
    await page.getByRole('button', { name: 'Speak', exact: true }).click();
    await expect.poll(latencyLines, { timeout: STEP_MS }).toBe(before + 1);
    await page.getByRole('button', { name: 'Stop recording' }).click();
    const link = page.getByRole('link', { name: 'Download recording' });
    await link.waitFor({ timeout: STEP_MS });
    const [download] = await Promise.all([page.waitForEvent('download'), link.click()]);
    const file = await download.path();
    const bytes = await fs.readFile(file!);
    expect(bytes.length).toBeGreaterThan(1000);
    expect(bytes.subarray(4, 8).toString('latin1')).toBe('ftyp');
  }, 180_000);

  it('Render last answer offline: a progress bar, then Download video gives an MP4', async () => {
    await page.getByRole('button', { name: 'Render last answer offline' }).click();
    expect(await page.getByRole('progressbar', { name: 'Offline render progress' }).isVisible()).toBe(true);
    const link = page.getByRole('link', { name: 'Download video' });
    await link.waitFor({ timeout: 60_000 });
    expect(await page.getByRole('progressbar', { name: 'Offline render progress' }).getAttribute('value')).toBe('1');
    const [download] = await Promise.all([page.waitForEvent('download'), link.click()]);
    const bytes = await fs.readFile((await download.path())!);
    expect(bytes.subarray(4, 8).toString('latin1')).toBe('ftyp');
  }, 180_000);

  it('Upload portrait: the new avatar appears among the avatars, selected, with upload progress at 100 %', async () => {
    await page.getByLabel('Portrait name').fill('Page test portrait');
    await page.getByLabel('Upload portrait').setInputFiles(path.join(dir, 'portrait.jpg'));
    await page.getByRole('radio', { name: 'Page test portrait' }).waitFor({ state: 'attached', timeout: 60_000 });
    expect(await page.getByRole('radio', { name: 'Page test portrait' }).isChecked()).toBe(true);
    expect(await page.getByRole('progressbar', { name: 'Upload progress' }).getAttribute('value')).toBe('1');
    expect(await page.getByRole('status').filter({ hasText: 'is ready' }).count()).toBe(1);
  }, 180_000);

  it('Drop a portrait on the drop zone: the new avatar appears, selected, with upload progress at 100 %; a non-image is refused with advice', async () => {
    const zone = page.getByRole('region', { name: 'New avatar from a portrait' });
    // A real DataTransfer holding a File, built in the page, as a drag from the desktop would carry it.
    const carrying = (file: { base64: string; name: string; type: string }) =>
      page.evaluateHandle(({ base64, name, type }) => {
        const transfer = new DataTransfer();
        transfer.items.add(new File([Uint8Array.from(atob(base64), (c) => c.charCodeAt(0))], name, { type }));
        return transfer;
      }, file);
    // Each event as the browser dispatches it during a drag; `true` when the page cancelled it.
    const drag = (type: 'dragenter' | 'dragover' | 'drop', transfer: Awaited<ReturnType<typeof carrying>>) =>
      zone.evaluate(
        (element, [eventType, dataTransfer]) =>
          !element.dispatchEvent(new DragEvent(eventType, { bubbles: true, cancelable: true, dataTransfer })),
        [type, transfer] as const,
      );

    const text = await carrying({
      base64: Buffer.from('not a photo').toString('base64'),
      name: 'notes.txt',
      type: 'text/plain',
    });
    expect(await drag('dragenter', text)).toBe(true);
    expect(await drag('drop', text)).toBe(true);
    const refusal = page.getByRole('alert');
    await refusal.waitFor({ timeout: STEP_MS });
    expect(await refusal.innerText()).toContain('drop a JPEG, PNG or WebP portrait');
    await page.getByRole('button', { name: 'Dismiss error' }).click();

    await page.getByLabel('Portrait name').fill('Dropped portrait');
    const portrait = await carrying({
      base64: (await fs.readFile(PORTRAIT_FIXTURE)).toString('base64'),
      name: path.basename(PORTRAIT_FIXTURE),
      type: 'image/png',
    });
    // Cancelled dragenter/dragover make the zone a drop target (and highlight it); a cancelled drop keeps the
    // browser from opening the file in place of the page.
    expect(await drag('dragenter', portrait)).toBe(true);
    expect(await drag('dragover', portrait)).toBe(true);
    expect(await zone.getAttribute('class')).toContain('over');
    expect(await drag('drop', portrait)).toBe(true);
    expect(await zone.getAttribute('class')).not.toContain('over');
    await page.getByRole('radio', { name: 'Dropped portrait' }).waitFor({ state: 'attached', timeout: 60_000 });
    expect(await page.getByRole('radio', { name: 'Dropped portrait' }).isChecked()).toBe(true);
    expect(await page.getByRole('progressbar', { name: 'Upload progress' }).getAttribute('value')).toBe('1');
    expect(await page.getByRole('status').filter({ hasText: 'New avatar “Dropped portrait” is ready' }).count()).toBe(
      1,
    );
    const avatars = (await (await fetch(`${t.baseUrl}/avatars`)).json()) as Array<{ id: string; name: string }>;
    expect(avatars.filter((avatar) => avatar.name === 'Dropped portrait')).toHaveLength(1);
    expect(await page.getByRole('alert').count()).toBe(0);
  }, 180_000);

  it('Talk: the fake microphone is heard (level meter moves), the avatar shows listening, the transcript and the reply, and receives its audio', async () => {
    const talk = page.getByRole('button', { name: 'Talk' });
    await talk.click();
    await page.waitForFunction(() => document.getElementById('talk')!.getAttribute('aria-pressed') === 'true', null, {
      timeout: STEP_MS,
    });
    await page.waitForFunction(() => (document.getElementById('mic-level') as HTMLMeterElement).value > 0.01, null, {
      timeout: STEP_MS,
    });
    await waitTimeline(page, 'avatar listening');
    await waitTimeline(page, 'you said: “Hello there, can you hear me clearly?”');
    // The page listened before it showed the transcript, and the answer speaks after it.
    await waitTimeline(
      page,
      /avatar listening[\s\S]*you said: “Hello there, can you hear me clearly\?”[\s\S]*avatar speaking/,
    );
    await waitTimeline(page, /end of speech → first audio \d+ ms/);
    await page.waitForFunction((reply) => document.getElementById('captions')!.textContent === reply, REPLY.join(''), {
      timeout: STEP_MS,
    });
    expect(await page.getByRole('region', { name: 'Captions' }).innerText()).toBe(REPLY.join(''));

    // The recogniser got the utterance the fake microphone played (≈ 1.9 s with the service's pre/post-roll).
    const upload = upstream.requests.find((r) => r.transcription)!.transcription!;
    const seconds = upload.wav!.samples / upload.wav!.sampleRate;
    expect(seconds).toBeGreaterThan(1.5);
    expect(seconds).toBeLessThan(3.5);

    // The answer plays in the page: audio energy arrives on the (new, microphone-carrying) peer, which sends the microphone.
    const audio = () =>
      page.evaluate(async () => {
        const report = await (window as unknown as { demo: { pc: RTCPeerConnection } }).demo.pc.getStats();
        let energy = 0;
        let sent = 0;
        report.forEach((s: any) => {
          if (s.type === 'inbound-rtp' && s.kind === 'audio') energy = s.totalAudioEnergy ?? 0;
          if (s.type === 'outbound-rtp' && s.kind === 'audio') sent = s.packetsSent ?? 0;
        });
        return { energy, sent };
      });
    const arrived = async () => {
      const { energy, sent } = await audio();
      return energy > 0 && sent > 50;
    };
    await expect.poll(arrived, { timeout: STEP_MS, interval: 50 }).toBe(true);
    const received = await audio();
    expect(received.sent).toBeGreaterThan(50);
    expect(received.energy).toBeGreaterThan(0);
    await talk.click();
    expect(await talk.getAttribute('aria-pressed')).toBe('false');
  }, 180_000);

  it('End session', async () => {
    await page.getByRole('button', { name: 'End session' }).click();
    await page.waitForFunction(() => document.getElementById('state')!.textContent === 'terminated', null, {
      timeout: STEP_MS,
    });
    expect(await page.getByRole('button', { name: 'Start session' }).isEnabled()).toBe(true);
    expect(await page.getByRole('button', { name: 'Speak', exact: true }).isDisabled()).toBe(true);
    expect(t.services.supervisor.liveCount).toBe(0);
    expect(await timelineText(page)).toContain('session started');
  }, 60_000);
});

describe('the page on a 390 px phone, without a language model (Chromium)', () => {
  let t: TestApp;

  beforeAll(async () => {
    t = await startTestApp();
  }, 120_000);
  afterAll(async () => {
    await t?.close();
  });

  it('fits 390 px wide, every control is named and reachable, Chat is disabled with a hint, no request leaves the host', async () => {
    const context = await browser.newContext({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true });
    const page = await context.newPage();
    const foreign: string[] = [];
    const failed: string[] = [];
    page.on('request', (request) => {
      if (
        new URL(request.url()).hostname !== '127.0.0.1' &&
        !request.url().startsWith('data:') &&
        !request.url().startsWith('blob:')
      )
        foreign.push(request.url());
    });
    page.on('response', (response) => {
      if (response.status() >= 400) failed.push(`${response.status()} ${response.url()}`);
    });
    // `?debug` offers the `mock` model (cheap to render) used below.
    await page.goto(`${t.baseUrl}/?debug`);
    await page.getByRole('radio', { name: 'Astronaut' }).waitFor({ state: 'attached' });
    expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);

    const names = [
      ['button', 'Start session'],
      ['button', 'End session'],
      ['button', 'Preview voice'],
      ['button', 'Talk'],
      ['button', 'Speak'],
      ['button', 'Chat'],
      ['button', 'Stop: interrupt the avatar'],
      ['button', 'Pause'],
      ['button', 'Start recording'],
      ['button', 'Render last answer offline'],
      ['combobox', 'Model'],
      ['combobox', 'Voice'],
      ['textbox', 'System prompt'],
      ['textbox', 'Message'],
      ['textbox', 'Portrait name'],
      ['meter', 'Microphone level'],
      ['region', 'Captions'],
      ['log', 'Event timeline'],
    ] as const;
    for (const [role, name] of names) {
      const control = page.getByRole(role, { name, exact: true });
      expect(await control.count(), `${role} "${name}"`).toBe(1);
      const box = await control.boundingBox();
      expect(box, `${role} "${name}" is laid out`).not.toBeNull();
      expect(box!.x + box!.width, `${role} "${name}" fits`).toBeLessThanOrEqual(391);
    }
    expect(await page.getByLabel('Upload portrait').count()).toBe(1);
    // Every interactive element has a name (label, aria-label or text).
    const unnamed = await page.evaluate(() =>
      [...document.querySelectorAll('button, select, textarea, input, a[href]')]
        .filter((el) => {
          const labelled =
            (el as HTMLInputElement).labels?.length || el.getAttribute('aria-label') || el.textContent!.trim();
          return !labelled;
        })
        .map((el) => el.outerHTML.slice(0, 80)),
    );
    expect(unnamed).toEqual([]);

    // Keyboard: Tab reaches Start session and Enter starts.
    await page.getByLabel('Model', { exact: true }).selectOption('mock');
    await page.getByLabel('System prompt').focus();
    await page.keyboard.press('Tab');
    expect(await page.evaluate(() => document.activeElement?.textContent)).toBe('Start session');
    await page.keyboard.press('Enter');
    await page.waitForFunction(() => document.getElementById('state')!.textContent === 'running', null, {
      timeout: STEP_MS,
    });
    const chat = page.getByRole('button', { name: 'Chat' });
    expect(await chat.isDisabled()).toBe(true);
    expect(await page.textContent('#chat-hint')).toContain('SERVICE_LLM_BASE_URL');
    expect(await page.getByRole('button', { name: 'Speak', exact: true }).isEnabled()).toBe(true);
    expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
    await page.getByRole('button', { name: 'End session' }).click();
    const favicon = await fetch(`${t.baseUrl}/favicon.ico`);
    expect(favicon.status).toBe(200);
    expect(failed).toEqual([]);
    expect(foreign).toEqual([]);
    await context.close();
  }, 180_000);
});
