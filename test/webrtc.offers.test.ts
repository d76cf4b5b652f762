/**
 * WebRTC signaling under concurrent and hostile offers: offers on one session are answered one at a
 * time (each 200 or 409, never 5xx, and the last one answered is the peer that receives media), and
 * any SDP libwebrtc rejects is a 400 that leaves the connected viewer streaming.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_MEDIA_SECTIONS } from '../actors/media/webrtc.ts';
import { json, post, startTestApp, type TestApp } from './helpers/app.ts';
import { ReceivingPeer, realOfferSdp } from './helpers/peer.ts';

/** ICE on loopback plus the first rendered frames on 2 shared cores. */
const MEDIA_WAIT_MS = 15_000;
const CONCURRENT_OFFERS = 5;
/** Several rounds, because whether offers overlap inside the service depends on scheduling. */
const ROUNDS = 3;
const PATH_IN_TEXT = /(^|[\s'"(=:])\/[\w.@-]+\//;

async function createStartedSession(t: TestApp): Promise<string> {
  const created = await post(t.baseUrl, '/sessions', { avatar_id: 'demo-rt', model: 'rt' });
  expect(created.status).toBe(200);
  const sessionId = (await json(created)).session_id as string;
  expect((await post(t.baseUrl, `/sessions/${sessionId}/start`)).status).toBe(200);
  return sessionId;
}

function statusOf(outcome: PromiseSettledResult<ReceivingPeer>): number {
  if (outcome.status === 'fulfilled') return 200;
  const match = /^offer failed: (\d{3}) /.exec((outcome.reason as Error).message);
  if (!match) throw outcome.reason;
  return Number(match[1]);
}

describe('WebRTC offers at the edge', () => {
  let t: TestApp;
  const peers: ReceivingPeer[] = [];

  beforeAll(async () => {
    t = await startTestApp();
  });

  afterAll(async () => {
    for (const peer of peers) peer.close();
    await t?.close();
  });

  it(`${CONCURRENT_OFFERS} concurrent offers on one session each answer 200 or 409, and the last one answered receives the media`, async () => {
    const sessionId = await createStartedSession(t);
    const statuses: number[] = [];
    let lastAnswered: ReceivingPeer | undefined;
    for (let round = 0; round < ROUNDS; round++) {
      const outcomes = await Promise.allSettled(
        Array.from({ length: CONCURRENT_OFFERS }, () =>
          ReceivingPeer.connect(t.baseUrl, sessionId).then((peer) => {
            peers.push(peer);
            lastAnswered = peer;
            return peer;
          }),
        ),
      );
      statuses.push(...outcomes.map(statusOf));
    }
    expect(statuses.filter((status) => status !== 200 && status !== 409)).toEqual([]);
    expect(statuses).toContain(200);
    const viewer = lastAnswered!;
    await viewer.until(() => viewer.frames.length >= 5, MEDIA_WAIT_MS, 'video at the peer answered last');
    const before = viewer.frames.length;
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(viewer.frames.length).toBeGreaterThan(before);
  }, 90_000);

  it('a dozen malformed offers are 400 {detail} without a path, and the connected viewer keeps streaming', async () => {
    const sessionId = await createStartedSession(t);
    const viewer = await ReceivingPeer.connect(t.baseUrl, sessionId);
    peers.push(viewer);
    viewer.keepFrames = false;
    await viewer.until(() => viewer.frames.length >= 5, MEDIA_WAIT_MS, 'viewer video');

    const valid = await realOfferSdp();
    const sections = valid.split(/(?=^m=)/m);
    const audioSection = sections.find((section) => section.startsWith('m=audio'))!;
    const offers: Array<[string, unknown]> = [
      ['an empty sdp', { sdp: '', type: 'offer' }],
      ['garbage text', { sdp: 'hello, this is not a session description', type: 'offer' }],
      ['a bare version line', { sdp: 'v=0', type: 'offer' }],
      ['no media section', { sdp: 'v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\n', type: 'offer' }],
      ['an m= line with no codecs', { sdp: valid.replace(/^(m=audio \d+ [A-Z/]+)( \d+)+/m, '$1'), type: 'offer' }],
      ['no DTLS fingerprint', { sdp: valid.replace(/^a=fingerprint.*\r\n/gm, ''), type: 'offer' }],
      ['no ICE credentials', { sdp: valid.replace(/^a=ice-(ufrag|pwd).*\r\n/gm, ''), type: 'offer' }],
      ['a duplicate mid', { sdp: valid.replace(/^a=mid:1\r$/m, 'a=mid:0\r'), type: 'offer' }],
      [
        'a BUNDLE group naming a missing mid',
        { sdp: valid.replace(/^a=group:BUNDLE.*\r$/m, 'a=group:BUNDLE 7 8\r'), type: 'offer' },
      ],
      [
        'a candidate with an invalid port',
        {
          sdp: valid.replace(/^(a=mid:0\r\n)/m, '$1a=candidate:1 1 udp 2122260223 10.0.0.1 -5 typ host\r\n'),
          type: 'offer',
        },
      ],
      [
        `${MAX_MEDIA_SECTIONS + 1} media sections`,
        { sdp: valid + audioSection.repeat(MAX_MEDIA_SECTIONS - 1), type: 'offer' },
      ],
      ['a 100 KB offer', { sdp: valid + `a=x-padding:${'p'.repeat(100_000)}\r\n`, type: 'offer' }],
      ['type answer', { sdp: valid, type: 'answer' }],
      ['an sdp that is not a string', { sdp: 42, type: 'offer' }],
    ];
    for (const [label, body] of offers) {
      const res = await post(t.baseUrl, `/sessions/${sessionId}/webrtc/offer`, body);
      expect(res.status, label).toBe(400);
      const { detail } = await json(res);
      expect(typeof detail, label).toBe('string');
      expect(detail, label).not.toMatch(PATH_IN_TEXT);
    }

    // None of them replaced the connected peer: video keeps arriving on the same connection.
    const before = viewer.frames.length;
    await viewer.until(() => viewer.frames.length >= before + 10, 5_000, 'viewer video after the malformed offers');
    expect(viewer.pc.connectionState).toBe('connected');
  }, 90_000);
});
