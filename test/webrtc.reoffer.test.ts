import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json, post, startTestApp, type TestApp } from './helpers/app.ts';
import { ReceivingPeer } from './helpers/peer.ts';

describe('WebRTC signaling', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp();
  });
  afterAll(async () => t?.close());

  it('answers with one audio and one video track, and a new offer replaces the previous peer', async () => {
    const { session_id } = await json(await post(t.baseUrl, '/sessions', { avatar_id: 'demo-rt', model: 'rt' }));
    const first = await ReceivingPeer.connect(t.baseUrl, session_id);
    const answer = first.pc.remoteDescription!.sdp;
    expect(answer.match(/^m=audio /gm)).toHaveLength(1);
    expect(answer.match(/^m=video /gm)).toHaveLength(1);
    expect(answer).toMatch(/a=candidate:.* 127\.0\.0\.1 |a=candidate:/);
    // The media clock starts at start (docs/api.md); from then on the avatar idles on screen.
    expect((await post(t.baseUrl, `/sessions/${session_id}/start`)).status).toBe(200);
    await first.until(() => first.frames.length > 5, 10_000, 'first peer video');
    expect(first.frames.at(-1)!.width).toBe(512);

    const second = await ReceivingPeer.connect(t.baseUrl, session_id);
    await second.until(() => second.frames.length > 5, 10_000, 'second peer video');
    const firstCount = first.frames.length;
    await new Promise((r) => setTimeout(r, 600));
    // The replaced peer gets nothing more; the new one keeps receiving.
    expect(first.frames.length - firstCount).toBeLessThanOrEqual(2);
    const secondCount = second.frames.length;
    await new Promise((r) => setTimeout(r, 400));
    expect(second.frames.length).toBeGreaterThan(secondCount);
    first.close();
    second.close();
    await fetch(`${t.baseUrl}/sessions/${session_id}`, { method: 'DELETE' });
  });
});
