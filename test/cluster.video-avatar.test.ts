/**
 * Issue 27, Build 5: a video avatar in cluster mode. Two real service processes share one redis-server, one data
 * directory and one avatars directory. A clip avatar is made on node A; its whole bundle (the loop frames and
 * face_track.json) is on the shared storage, and once A has stopped, node B — which never held the avatar in
 * memory — lists it, opens a lipsync session on it and renders an offline MP4 job that plays its loop.
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  HEAD_MOTION,
  SAME_FRAME,
  measureOfflineClipBundle,
  readLoopReference,
  renderOfflineBundle,
  speechThenPause,
  uploadClip,
} from './helpers/clip-avatar.ts';
import { landscapeMp4 } from './helpers/clips.ts';
import { startRedis, type RedisProcess } from './helpers/redis-server.ts';
import { startServiceProcess, type ServiceProcess } from './helpers/service-process.ts';

/** A 2 s clip is a 50-frame loop: forwards and back in 98 frames (3.9 s). */
const CLIP_SECONDS = 2;
const PING_PONG_FRAMES = 2 * CLIP_SECONDS * 25 - 2;
/** Nothing here is about losing a node: a heartbeat a loaded host delays must not declare B's session lost. */
const NODE_TTL_S = 60;
/** Node start-ups (tsx, LevelDB, Redis, render pool) and one clip creation on a loaded, half-speed 2-core host. */
const SETUP_TIMEOUT_MS = 240_000;

describe('a video avatar on a cluster of two nodes (shared storage, real redis-server, real ffmpeg)', () => {
  let redis: RedisProcess;
  let dataDir: string;
  let downloads: string;
  const nodes: ServiceProcess[] = [];

  beforeAll(async () => {
    redis = await startRedis();
    dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'cluster-clip-data-'));
    downloads = await fs.mkdtemp(path.join(os.tmpdir(), 'cluster-clip-files-'));
    for (let i = 0; i < 2; i++) {
      // The first node copies the repository's avatars to a temporary directory; the second shares it.
      nodes.push(
        await startServiceProcess({
          dataDir,
          avatarsDir: nodes[0]?.avatarsDir,
          env: { SERVICE_REDIS_URL: redis.url, SERVICE_NODE_TTL_S: String(NODE_TTL_S) },
        }),
      );
    }
  }, SETUP_TIMEOUT_MS);

  afterAll(async () => {
    await Promise.all(nodes.map((node) => node.stop()));
    await redis?.stop();
    for (const dir of [dataDir, downloads]) if (dir) await fs.rm(dir, { recursive: true, force: true });
  }, 60_000);

  it(
    'a clip avatar made on node A is on the shared storage whole, and node B (A stopped) lists it, opens a session on it and renders an offline MP4 that plays its loop',
    async () => {
      const [a, b] = nodes;
      const made = await uploadClip(
        a.baseUrl,
        await fs.readFile(await landscapeMp4(downloads, CLIP_SECONDS)),
        'Shared clip',
      );
      const summary = await made.json();
      expect(made.status, JSON.stringify(summary)).toBe(200);
      const avatarId: string = summary.id;

      // The bundle on the shared avatars directory: every loop frame and the face track.
      const bundle = path.join(a.avatarsDir, avatarId);
      const manifest = JSON.parse(await fs.readFile(path.join(bundle, 'manifest.json'), 'utf8'));
      expect(await fs.readdir(path.join(bundle, 'frames'))).toHaveLength(manifest.metadata.clip.frame_count);
      expect(JSON.parse(await fs.readFile(path.join(bundle, 'face_track.json'), 'utf8'))).toHaveLength(
        manifest.metadata.clip.frame_count,
      );

      // A is gone: whatever B shows of the avatar, B read from the shared storage.
      await a.stop();
      const listed = await (await fetch(`${b.baseUrl}/avatars`)).json();
      expect(listed.map((avatar: { id: string }) => avatar.id)).toContain(avatarId);
      const served = await (await fetch(`${b.baseUrl}/avatars/${avatarId}`)).json();
      expect(served.metadata.clip).toMatchObject({
        frame_count: manifest.metadata.clip.frame_count,
        track_file: 'face_track.json',
      });

      const created = await fetch(`${b.baseUrl}/sessions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ avatar_id: avatarId, model: 'lipsync' }),
      });
      expect(created.status).toBe(200);
      const sessionId = (await created.json()).session_id;
      const file = await renderOfflineBundle(b.baseUrl, sessionId, speechThenPause(4_200), downloads);

      const found = await measureOfflineClipBundle(file, await readLoopReference(bundle));
      expect(found.silentFrames).toBeGreaterThanOrEqual(PING_PONG_FRAMES);
      expect(found.silentFromLoopFrame).toBeLessThan(SAME_FRAME);
      expect(found.headMotion).toBeGreaterThan(HEAD_MOTION);
      expect(found.speakingFrames).toBeGreaterThan(20);
      expect(found.speakingOpenedFraction).toBeGreaterThanOrEqual(0.5);
    },
    SETUP_TIMEOUT_MS,
  );
});
