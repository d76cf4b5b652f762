/**
 * Screenshots of the page at `/` and of the two-line `<avatar-chat>` embed, light and dark, desktop (1280×860) and
 * phone (390×844), each taken while the avatar speaks a typed message: what a new user sees in the first minutes.
 * The service runs in-process (the repository's avatars in a temp copy, no language model, no speech recognition);
 * the embed is served from a second loopback origin listed in SERVICE_CORS_ORIGINS. Chromium via playwright-core.
 *
 *   npx tsx tools/screenshots.ts [out-dir]          (default docs/img/)
 *
 * `test/browser.first-minutes.test.ts` runs it into a temp directory and looks at what it wrote.
 */
import fs from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { startTestApp } from '../test/helpers/app.ts';

const REPO = path.resolve(import.meta.dirname, '..');
const DEFAULT_OUT = path.join(REPO, 'docs', 'img');
/** Session set-up and the first audio of a typed message on 2 shared cores under load. */
const STEP_MS = 60_000;
/** The avatar on both screenshots: the photo avatar, whose face is a small part of its frame (the widget crops to it). */
const AVATAR_ID = 'astronaut';
const MESSAGE = 'Hello! I am your talking avatar.';

export const VIEWPORTS = { desktop: { width: 1280, height: 860 }, phone: { width: 390, height: 844 } } as const;
export const SCHEMES = ['light', 'dark'] as const;

/** The files written, by name: `page-<viewport>-<scheme>.png` and `widget-<viewport>-<scheme>.png`. */
export function screenshotNames(): string[] {
  return (['page', 'widget'] as const).flatMap((what) =>
    Object.keys(VIEWPORTS).flatMap((viewport) => SCHEMES.map((scheme) => `${what}-${viewport}-${scheme}.png`)),
  );
}

async function speakOnPage(page: Page): Promise<void> {
  await page.getByRole('radio', { name: 'Astronaut' }).check();
  await page.getByRole('button', { name: 'Start session' }).click();
  await page.waitForFunction(() => document.getElementById('state')!.textContent === 'running', null, {
    timeout: STEP_MS,
  });
  await page.getByLabel('Message').fill(MESSAGE);
  await page.getByRole('button', { name: 'Speak', exact: true }).click();
  await page.waitForFunction(() => document.getElementById('badge')!.dataset.stage === 'speaking', null, {
    timeout: STEP_MS,
  });
}

async function speakInWidget(page: Page): Promise<void> {
  await page.getByRole('button', { name: 'Start conversation' }).click();
  await page.locator('avatar-chat .badge').filter({ hasText: 'idle' }).waitFor({ timeout: STEP_MS });
  await page.getByLabel('Message').fill(MESSAGE);
  await page.getByLabel('Message').press('Enter');
  await page.locator('avatar-chat .badge').filter({ hasText: 'speaking' }).waitFor({ timeout: STEP_MS });
}

/** Waits until the video shows decoded frames (not the poster), then half a second more for the encoder's ramp-up. */
async function settleVideo(page: Page, selector: string): Promise<void> {
  await page.waitForFunction(
    (s) =>
      (document.querySelector('avatar-chat')?.shadowRoot ?? document).querySelector<HTMLVideoElement>(s)!.videoWidth >
      0,
    selector,
    { timeout: STEP_MS },
  );
  await page.waitForTimeout(500);
}

/** Takes every screenshot of `screenshotNames()` into `outDir`; returns the paths written. */
export async function takeScreenshots(outDir: string): Promise<string[]> {
  await fs.mkdir(outDir, { recursive: true });
  const host = http.createServer();
  await new Promise<void>((resolve) => host.listen(0, '127.0.0.1', resolve));
  const hostOrigin = `http://127.0.0.1:${(host.address() as AddressInfo).port}`;
  const service = await startTestApp({ env: { SERVICE_CORS_ORIGINS: hostOrigin } });
  host.on('request', (_req, res) => {
    const embed =
      `<!doctype html>\n<meta name="viewport" content="width=device-width, initial-scale=1">\n<meta name="color-scheme" content="light dark">\n<title>Embed</title>\n` +
      `<script src="${service.baseUrl}/widget.js"></script>\n<avatar-chat avatar="${AVATAR_ID}"></avatar-chat>\n`;
    res.writeHead(200, { 'content-type': 'text/html' }).end(embed);
  });
  let browser: Browser | null = null;
  const written: string[] = [];
  try {
    browser = await chromium.launch({
      executablePath: '/usr/bin/chromium',
      args: [
        '--no-sandbox',
        '--disable-gpu',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--autoplay-policy=no-user-gesture-required',
      ],
    });
    for (const [viewportName, viewport] of Object.entries(VIEWPORTS)) {
      for (const scheme of SCHEMES) {
        for (const what of ['page', 'widget'] as const) {
          const context = await browser.newContext({
            viewport,
            colorScheme: scheme,
            isMobile: viewportName === 'phone',
            hasTouch: viewportName === 'phone',
          });
          try {
            const page = await context.newPage();
            if (what === 'page') {
              await page.goto(`${service.baseUrl}/`);
              await speakOnPage(page);
              await settleVideo(page, '#video');
            } else {
              await page.goto(`${hostOrigin}/`);
              await speakInWidget(page);
              await settleVideo(page, 'video');
            }
            const file = path.join(outDir, `${what}-${viewportName}-${scheme}.png`);
            await page.screenshot({ path: file });
            written.push(file);
          } finally {
            await context.close();
          }
        }
      }
    }
  } finally {
    await browser?.close();
    await service.close();
    await new Promise((resolve) => host.close(resolve));
  }
  return written;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const outDir = path.resolve(process.argv[2] ?? DEFAULT_OUT);
  const written = await takeScreenshots(outDir);
  for (const file of written) console.log(path.relative(process.cwd(), file));
  process.exit(0);
}
