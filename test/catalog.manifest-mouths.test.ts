import { describe, expect, it } from 'vitest';
import { validateManifest } from '../src/catalog/manifest.ts';

const clipManifest = (mouths?: unknown) => ({
  id: 'custom-clip-1',
  name: 'Clip',
  model_type: 'lipsync',
  fps: 25,
  sample_rate: 16000,
  width: 512,
  height: 512,
  version: '1.0.0',
  metadata: {
    clip: {
      frame_count: 50,
      fps: 25,
      loop: 'ping-pong',
      track_file: 'face_track.json',
      face_found_fraction: 1,
      source: { duration_s: 2, width: 640, height: 360, rotation: 0, codec: 'h264', has_audio: true },
      ...(mouths === undefined ? {} : { mouths }),
    },
  },
});

describe('a video avatar manifest with harvested mouths (metadata.clip.mouths)', () => {
  it('is accepted when it names the bundle’s mouths/index.json and mouths/atlas.png, and without mouths at all', () => {
    expect(
      validateManifest(clipManifest({ count: 11, index_file: 'mouths/index.json', atlas_file: 'mouths/atlas.png' }))
        .metadata.clip?.mouths?.count,
    ).toBe(11);
    expect(validateManifest(clipManifest()).metadata.clip?.mouths).toBeUndefined();
  });

  it('is refused when it names other files (a bundle must not make a session read outside its mouths/)', () => {
    for (const mouths of [
      { count: 1, index_file: '../../secrets.json', atlas_file: 'mouths/atlas.png' },
      { count: 1, index_file: 'mouths/index.json', atlas_file: '/etc/hostname' },
      null,
      'mouths',
    ]) {
      expect(() => validateManifest(clipManifest(mouths)), JSON.stringify(mouths)).toThrow(
        /metadata\.clip\.mouths must name mouths\/index\.json and mouths\/atlas\.png/,
      );
    }
  });
});
