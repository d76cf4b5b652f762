import fs from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import pino, { type Logger } from 'pino';
import sharp from 'sharp';
import { buildApp, type BuiltApp } from '../../src/app.ts';
import { loadConfig, type ServiceConfig } from '../../src/config.ts';
import type { ServiceOverrides } from '../../src/services.ts';

export const REPO_AVATARS = path.resolve(import.meta.dirname, '..', '..', 'avatars');

export interface TestApp extends BuiltApp {
  baseUrl: string;
  config: ServiceConfig;
  dataDir: string;
  avatarsDir: string;
  close(): Promise<void>;
}

export async function tempDir(prefix = 'avatar-svc-'): Promise<string> {
  return fs.mkdtemp(path.join(os.tmpdir(), prefix));
}

/** Writes a minimal valid bundle (solid-colour face card) into `avatarsDir/<id>`. */
export async function makeAvatarBundle(
  avatarsDir: string,
  id: string,
  opts: { model_type?: string; width?: number; height?: number; fps?: number; metadata?: Record<string, unknown> } = {},
): Promise<string> {
  const width = opts.width ?? 128;
  const height = opts.height ?? 128;
  const dir = path.join(avatarsDir, id);
  await fs.mkdir(path.join(dir, 'frames'), { recursive: true });
  const png = await sharp({ create: { width, height, channels: 3, background: { r: 200, g: 160, b: 140 } } })
    .png()
    .toBuffer();
  await fs.writeFile(path.join(dir, 'frames', 'frame_00000.png'), png);
  await fs.writeFile(path.join(dir, 'preview.png'), png);
  const manifest = {
    id,
    name: id,
    model_type: opts.model_type ?? 'rt',
    fps: opts.fps ?? 25,
    sample_rate: 16000,
    width,
    height,
    version: '1.0.0',
    metadata: opts.metadata ?? {},
  };
  await fs.writeFile(path.join(dir, 'manifest.json'), JSON.stringify(manifest, null, 2));
  return dir;
}

/** Copies the repository's built-in avatars into a temp dir so tests can add and delete freely. */
export async function copyRepoAvatars(target: string): Promise<void> {
  await fs.cp(REPO_AVATARS, target, {
    recursive: true,
    filter: (src) => !path.basename(src).startsWith('.') && !path.basename(src).startsWith('custom-'),
  });
}

/**
 * Starts the real app on an ephemeral loopback port with a temp data dir. `env` adds SERVICE_* variables;
 * pass `dataDir`/`avatarsDir` to reuse them across a restart.
 */
export async function startTestApp(
  options: {
    env?: Record<string, string>;
    dataDir?: string;
    avatarsDir?: string;
    withRepoAvatars?: boolean;
    overrides?: ServiceOverrides;
    /** The app's logger instead of a plain pino at TEST_LOG_LEVEL (e.g. `createLogger` writing to a capture stream). */
    logger?: Logger;
  } = {},
): Promise<TestApp> {
  const dataDir = options.dataDir ?? (await tempDir('avatar-data-'));
  let avatarsDir = options.avatarsDir;
  if (!avatarsDir) {
    avatarsDir = await tempDir('avatar-bundles-');
    if (options.withRepoAvatars !== false) await copyRepoAvatars(avatarsDir);
  }
  const config = loadConfig({
    SERVICE_PORT: '0',
    SERVICE_DATA_DIR: dataDir,
    SERVICE_AVATARS_DIR: avatarsDir,
    SERVICE_LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'silent',
    SERVICE_RENDER_THREADS: '1',
    ...options.env,
  });
  const logger = options.logger ?? pino({ level: config.logLevel });
  const built = await buildApp(config, logger, options.overrides);
  await built.app.listen({ host: '127.0.0.1', port: 0 });
  const address = built.app.server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  let closed = false;
  return {
    ...built,
    config,
    dataDir,
    avatarsDir,
    baseUrl: `http://127.0.0.1:${port}`,
    async close() {
      if (closed) return;
      closed = true;
      await built.app.close();
    },
  };
}

export async function json(res: Response): Promise<any> {
  const text = await res.text();
  return text ? JSON.parse(text) : null;
}

export async function post(baseUrl: string, path: string, body?: unknown): Promise<Response> {
  return fetch(`${baseUrl}${path}`, {
    method: 'POST',
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
}

/**
 * An HTTP request whose path is sent byte for byte (fetch would normalise `..` segments away), with any headers
 * fetch would not let through as given (a foreign Host).
 */
export function rawRequest(
  baseUrl: string,
  method: string,
  rawPath: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: string }> {
  const url = new URL(baseUrl);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: url.hostname, port: url.port, method, path: rawPath, headers }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk) => (body += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}
