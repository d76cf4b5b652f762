import fs from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chromium, type Browser } from 'playwright-core';
import { startTestApp, type TestApp } from './helpers/app.ts';

const CHROMIUM = '/usr/bin/chromium';
const hasChromium = fs.existsSync(CHROMIUM);

describe.skipIf(!hasChromium)('the demo page in headless Chromium', () => {
  let t: TestApp;
  let browser: Browser;

  beforeAll(async () => {
    [t, browser] = await Promise.all([
      startTestApp(),
      chromium.launch({
        executablePath: CHROMIUM,
        args: [
          '--no-sandbox',
          '--disable-gpu',
          '--disable-background-networking',
          '--autoplay-policy=no-user-gesture-required',
          '--disable-component-update',
          '--no-first-run',
        ],
      }),
    ]);
  });
  afterAll(async () => {
    await browser?.close();
    await t?.close();
  });

  it('starts a session, receives decoded video and audio over WebRTC, and speaks', async () => {
    const page = await browser.newPage();
    await page.goto(`${t.baseUrl}/`);
    await page.waitForFunction(() => (document.getElementById('model') as HTMLSelectElement).options.length > 0);
    await page.getByRole('radio', { name: 'Demo (drawn, real-time)' }).check();
    await page.click('#start');
    await page.waitForFunction(() => document.getElementById('state')!.textContent === 'running', null, {
      timeout: 20_000,
    });
    await page.fill('#text', 'Hello from the browser test. The avatar should be talking now.');
    await page.click('#speak');
    await page.waitForFunction(
      () => document.getElementById('timeline')!.textContent!.includes('first audio synthesised'),
      null,
      { timeout: 20_000 },
    );
    const received = () =>
      page.evaluate(async () => {
        const pc = (window as unknown as { demo: { pc: RTCPeerConnection } }).demo.pc;
        const report = await pc.getStats();
        const out: Record<string, number> = { framesDecoded: 0, audioBytes: 0, frameWidth: 0, totalAudioEnergy: 0 };
        report.forEach((s: any) => {
          if (s.type === 'inbound-rtp' && s.kind === 'video') {
            out.framesDecoded = s.framesDecoded ?? 0;
            out.frameWidth = s.frameWidth ?? 0;
          }
          if (s.type === 'inbound-rtp' && s.kind === 'audio') {
            out.audioBytes = s.bytesReceived ?? 0;
            out.totalAudioEnergy = s.totalAudioEnergy ?? 0;
          }
        });
        return out;
      });
    // Until a second of video and the speech's audio have been decoded (not a fixed wait).
    const decoded = async () => {
      const now = await received();
      return now.framesDecoded > 25 && now.frameWidth > 0 && now.audioBytes > 1000 && now.totalAudioEnergy > 0;
    };
    await expect.poll(decoded, { timeout: 20_000, interval: 50 }).toBe(true);
    const stats = await received();
    expect(stats.framesDecoded).toBeGreaterThan(25);
    expect(stats.frameWidth).toBeGreaterThan(0);
    expect(stats.audioBytes).toBeGreaterThan(1000);
    expect(stats.totalAudioEnergy).toBeGreaterThan(0);
    await page.waitForFunction(
      () => document.getElementById('timeline')!.textContent!.includes('avatar speaking'),
      null,
      { timeout: 20_000 },
    );
    expect(await page.textContent('#timeline')).toContain('avatar speaking');
    await page.close();
  });

  it('renders Swagger UI at /docs and ReDoc at /redoc with every request to other hosts blocked', async () => {
    const page = await browser.newPage();
    const foreign: string[] = [];
    await page.route('**/*', (route) => {
      const url = new URL(route.request().url());
      if (url.hostname !== '127.0.0.1' && url.protocol !== 'data:' && url.protocol !== 'blob:') {
        foreign.push(url.href);
        return route.abort();
      }
      return route.continue();
    });
    await page.goto(`${t.baseUrl}/docs/`);
    await page.waitForSelector('.swagger-ui .opblock', { timeout: 20_000 });
    expect(await page.locator('.swagger-ui .opblock').count()).toBeGreaterThan(20);
    await page.goto(`${t.baseUrl}/redoc`);
    await page.waitForSelector('h1', { timeout: 30_000 });
    expect(await page.textContent('h1')).toContain('Avatar Conversation Service');
    expect(foreign).toEqual([]);
    await page.close();
  });
});
