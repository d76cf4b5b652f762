import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chromium, type Browser, type Page } from 'playwright-core';
import { startTestApp, type TestApp } from './helpers/app.ts';
import { startOpenAiUpstream, type OpenAiUpstream } from './fakes/openai-upstream.ts';

const CHROMIUM = '/usr/bin/chromium';
const hasChromium = fs.existsSync(CHROMIUM);
/** Session setup, a chat turn and its first audio on 2 shared cores under load. */
const STEP_MS = 30_000;
/** The fake model's reply: several sentences, so the avatar is still speaking when Stop is pressed. */
const REPLY =
  'Hello from the avatar on another page. I will keep talking for a while. This sentence is here so that Stop has something to cut short. And one more for good measure.';

/** A host page on its own port (its own origin) holding exactly the two lines of docs/embedding.md. */
async function startHostPage(serviceUrl: string): Promise<{ origin: string; close(): Promise<void> }> {
  const page = `<!doctype html>\n<script src="${serviceUrl}/widget.js"></script>\n<avatar-chat avatar="demo-rt"></avatar-chat>\n`;
  const server = http.createServer((_req, res) => res.writeHead(200, { 'content-type': 'text/html' }).end(page));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

/** A free loopback port's origin, reserved by listening (the service must list the host page's origin before it starts). */
async function reserveHost(): Promise<{ server: http.Server; port: number }> {
  const server = http.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, port: (server.address() as AddressInfo).port };
}

/**
 * How far the mouth opens and closes over `frames` frames grabbed `intervalMs` apart: the range of the count of
 * mouth-interior pixels (dark red, neither skin nor lips) in the mouth region of the drawn demo face.
 */
async function mouthOpeningRange(page: Page, frames = 25, intervalMs = 80): Promise<number> {
  return page.evaluate(
    async ({ frames, intervalMs }) => {
      const video = document.querySelector('avatar-chat')!.shadowRoot!.querySelector('video')!;
      const canvas = document.createElement('canvas');
      canvas.width = video.videoWidth;
      canvas.height = video.videoHeight;
      const context = canvas.getContext('2d', { willReadFrequently: true })!;
      const counts: number[] = [];
      for (let i = 0; i < frames; i++) {
        if (i > 0) await new Promise((resolve) => setTimeout(resolve, intervalMs));
        context.drawImage(video, 0, 0);
        const data = context.getImageData(
          canvas.width * 0.35,
          canvas.height * 0.45,
          canvas.width * 0.3,
          canvas.height * 0.25,
        ).data;
        let open = 0;
        for (let p = 0; p < data.length; p += 4)
          if (data[p]! > 60 && data[p]! < 170 && data[p + 1]! < 70 && data[p + 2]! < 90) open++;
        counts.push(open);
      }
      return Math.max(...counts) - Math.min(...counts);
    },
    { frames, intervalMs },
  );
}

async function inboundAudioEnergy(page: Page): Promise<number> {
  return page.evaluate(async () => {
    const pc = (document.querySelector('avatar-chat') as unknown as { client: { peer: RTCPeerConnection } }).client
      .peer;
    let energy = 0;
    (await pc.getStats()).forEach((s: any) => {
      if (s.type === 'inbound-rtp' && s.kind === 'audio') energy = s.totalAudioEnergy ?? 0;
    });
    return energy;
  });
}

describe.skipIf(!hasChromium)('<avatar-chat> embedded in a page of another origin, in headless Chromium', () => {
  let upstream: OpenAiUpstream;
  let t: TestApp;
  let browser: Browser;
  let listedPort: number;

  beforeAll(async () => {
    upstream = await startOpenAiUpstream({
      chat: { replyTokens: REPLY.split(/(?<= )/), tokenDelayMs: 5, firstTokenDelayMs: 0 },
    });
    const reserved = await reserveHost();
    listedPort = reserved.port;
    await new Promise((resolve) => reserved.server.close(resolve));
    t = await startTestApp({
      env: { SERVICE_LLM_BASE_URL: upstream.baseUrl, SERVICE_CORS_ORIGINS: `http://127.0.0.1:${listedPort}` },
    });
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: [
        '--no-sandbox',
        '--disable-gpu',
        '--disable-background-networking',
        '--autoplay-policy=no-user-gesture-required',
        '--disable-component-update',
        '--no-first-run',
      ],
    });
  });
  afterAll(async () => {
    await browser?.close();
    await t?.close();
    await upstream?.close();
  });

  it('two lines on a listed origin: connects, answers a typed message aloud with a moving mouth, stops on Stop, shows the transcript', async () => {
    const page = `<!doctype html>\n<script src="${t.baseUrl}/widget.js"></script>\n<avatar-chat avatar="demo-rt"></avatar-chat>\n`;
    const server = http.createServer((_req, res) => res.writeHead(200, { 'content-type': 'text/html' }).end(page));
    await new Promise<void>((resolve) => server.listen(listedPort, '127.0.0.1', resolve));
    const tab = await browser.newPage();
    try {
      await tab.goto(`http://127.0.0.1:${listedPort}/`);
      await tab.evaluate(() => {
        const seen: Array<{ type: string; detail: any }> = [];
        (window as any).seen = seen;
        for (const type of ['ready', 'speaking', 'transcript', 'tool-call', 'error']) {
          document
            .querySelector('avatar-chat')!
            .addEventListener(type, (e) => seen.push({ type, detail: (e as CustomEvent).detail }));
        }
      });
      await tab.getByRole('button', { name: 'Start conversation' }).click();
      await tab.waitForFunction(() => (window as any).seen.some((e: any) => e.type === 'ready'), null, {
        timeout: STEP_MS,
      });
      const sessionId = await tab.evaluate(
        () => (window as any).seen.find((e: any) => e.type === 'ready').detail.sessionId as string,
      );
      expect(t.services.supervisor.liveIds()).toContain(sessionId);
      await tab.waitForFunction(
        () => document.querySelector('avatar-chat')!.shadowRoot!.querySelector('video')!.videoWidth > 0,
        null,
        { timeout: STEP_MS },
      );
      // The first second of video is the encoder ramping up its quality, not the avatar.
      await tab.waitForTimeout(1_000);
      const idleMotion = await mouthOpeningRange(tab);
      const energyBefore = await inboundAudioEnergy(tab);

      // Keyboard only: type into the labelled field and press Enter.
      await tab.getByLabel('Message').fill('Say something long, please.');
      await tab.getByLabel('Message').press('Enter');
      await tab.waitForFunction(
        () => (window as any).seen.some((e: any) => e.type === 'speaking' && e.detail.speaking),
        null,
        { timeout: STEP_MS },
      );
      const speakingMotion = await mouthOpeningRange(tab);
      const energyWhileSpeaking = await inboundAudioEnergy(tab);
      expect(energyWhileSpeaking).toBeGreaterThan(energyBefore);
      // Closed while idle (a few pixels of compression noise), opening and closing while speaking.
      expect(speakingMotion).toBeGreaterThan(idleMotion + 30);

      await tab.getByRole('button', { name: 'Stop' }).click();
      await tab.waitForFunction(
        () => (window as any).seen.some((e: any) => e.type === 'speaking' && !e.detail.speaking),
        null,
        { timeout: STEP_MS },
      );
      await tab.locator('avatar-chat .badge').filter({ hasText: 'idle' }).waitFor({ timeout: STEP_MS });
      const transcript = (await (await fetch(`${t.baseUrl}/sessions/${sessionId}/transcript`)).json()) as {
        turns: Array<{ outcome: string; user_text: string }>;
      };
      expect(transcript.turns.at(-1)).toMatchObject({
        outcome: 'interrupted',
        user_text: 'Say something long, please.',
      });

      const lines = await tab.locator('avatar-chat ol li').allTextContents();
      // Each line once, saying who spoke.
      expect(lines).toHaveLength(2);
      expect(lines[0]).toBe('You: Say something long, please.');
      expect(lines[1]).toMatch(/^Avatar: Hello from the avatar/);
      const seen = await tab.evaluate(() => (window as any).seen as Array<{ type: string; detail: any }>);
      expect(seen.filter((e) => e.type === 'error')).toEqual([]);
      expect(seen.filter((e) => e.type === 'transcript')[0].detail).toMatchObject({
        role: 'user',
        text: 'Say something long, please.',
      });
      await tab.getByRole('button', { name: 'End', exact: true }).click();
      await expect.poll(() => t.services.supervisor.liveIds().includes(sessionId), { timeout: STEP_MS }).toBe(false);
      expect(await tab.locator('avatar-chat .badge').textContent()).toBe('ended');
      // Disabled controls look disabled: Stop, Talk and End fade once the conversation is over.
      expect(
        await tab.locator('avatar-chat button[data-action="end"]').evaluate((b) => Number(getComputedStyle(b).opacity)),
      ).toBeLessThan(0.6);
    } finally {
      await tab.close();
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it('on an origin SERVICE_CORS_ORIGINS does not list: a clear error in the element, and no session is created', async () => {
    const host = await startHostPage(t.baseUrl);
    const tab = await browser.newPage();
    try {
      const before = t.services.supervisor.liveIds().length;
      await tab.goto(`${host.origin}/`);
      await tab.evaluate(() => {
        (window as any).errors = [];
        document
          .querySelector('avatar-chat')!
          .addEventListener('error', (e) => (window as any).errors.push((e as CustomEvent).detail));
      });
      await tab.getByRole('button', { name: 'Start conversation' }).click();
      const alert = tab.locator('avatar-chat [role="alert"]');
      await alert.filter({ hasText: 'SERVICE_CORS_ORIGINS' }).waitFor({ timeout: STEP_MS });
      expect(await alert.textContent()).toBe(
        `This page (${host.origin}) is not allowed to use the avatar service at ${t.baseUrl}: add ${host.origin} to SERVICE_CORS_ORIGINS on the service.`,
      );
      expect(await tab.evaluate(() => (window as any).errors)).toEqual([
        { message: await alert.textContent(), status: null },
      ]);
      expect(t.services.supervisor.liveIds().length).toBe(before);
      expect(await tab.getByRole('button', { name: 'Start conversation' }).isEnabled()).toBe(true);
      // The badge follows the refusal instead of staying on "connecting".
      expect(await tab.locator('avatar-chat .badge').textContent()).toBe('refused');
    } finally {
      await tab.close();
      await host.close();
    }
  });
});
