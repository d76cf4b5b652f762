/**
 * WHIP output into a loopback WHIP endpoint answering with a real wrtc peer: the offer comes with the bearer token,
 * video and speech arrive, a refusing server fails only its own output (SSE output_failed, retrying), and the
 * session's end DELETEs the WHIP resource.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json, post, startTestApp, type TestApp } from './helpers/app.ts';
import { SseClient } from './helpers/sse.ts';
import { AUDIBLE_RMS } from './helpers/conversation.ts';
import { WhipEndpoint } from './fakes/whip-endpoint.ts';

/** ICE on loopback plus the first frames on 2 shared cores. */
const MEDIA_WAIT_MS = 30_000;

async function until(
  predicate: () => boolean | Promise<boolean>,
  what: string,
  timeoutMs = MEDIA_WAIT_MS,
): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!(await predicate())) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

describe('WHIP output to a loopback WHIP endpoint', () => {
  let t: TestApp;
  let whip: WhipEndpoint;

  beforeAll(async () => {
    whip = await WhipEndpoint.start();
    t = await startTestApp();
  });

  afterAll(async () => {
    await t?.close();
    await whip?.close();
  });

  it('pushes video and speech with the bearer token; a refusing server fails only its output; the session end DELETEs the resource', async () => {
    const sessionId = (await json(await post(t.baseUrl, '/sessions', { avatar_id: 'demo-rt', model: 'rt' })))
      .session_id;
    const sse = await SseClient.open(`${t.baseUrl}/sessions/${sessionId}/events`);
    try {
      expect((await post(t.baseUrl, `/sessions/${sessionId}/start`)).status).toBe(200);
      const outputs = async () =>
        (await json(await fetch(`${t.baseUrl}/sessions/${sessionId}/outputs`))).outputs as Array<
          Record<string, string>
        >;

      const created = await post(t.baseUrl, `/sessions/${sessionId}/outputs`, {
        type: 'whip',
        url: `${whip.baseUrl}/whip/endpoint-secret`,
        bearer_token: 'token-123',
      });
      expect(created.status).toBe(201);
      const good = await json(created);
      await until(
        async () => (await outputs()).some((o) => o.output_id === good.output_id && o.state === 'live'),
        'the WHIP output to go live',
      );
      expect(whip.authorizations).toContain('Bearer token-123');
      const listed = JSON.stringify(await outputs());
      expect(listed).not.toContain('token-123');
      expect(listed).not.toContain('endpoint-secret');
      await until(() => whip.frames.length >= 5, 'frames at the WHIP endpoint');
      expect(whip.frames.at(-1)!.width).toBeGreaterThan(0);

      const refused = await json(
        await post(t.baseUrl, `/sessions/${sessionId}/outputs`, {
          type: 'whip',
          url: `${whip.baseUrl}/refuse/x`,
          bearer_token: 'wrong',
        }),
      );
      const failed = await sse.waitFor(
        (e) => e.type === 'error' && e.data.code === 'output_failed',
        MEDIA_WAIT_MS,
        'output_failed',
      );
      expect(failed.data.output_id).toBe(refused.output_id);
      expect(String(failed.data.message)).not.toContain('wrong');
      await until(
        async () => (await outputs()).find((o) => o.output_id === refused.output_id)?.state === 'retrying',
        'the refused output retrying',
      );

      const sentAt = performance.now();
      expect(
        (
          await post(t.baseUrl, `/sessions/${sessionId}/speak`, {
            text: 'Hello, media server. This is my voice over WHIP.',
          })
        ).status,
      ).toBe(200);
      await until(() => whip.firstAudible(sentAt, AUDIBLE_RMS), 'speech at the WHIP endpoint');
      expect((await outputs()).find((o) => o.output_id === good.output_id)?.state).toBe('live');

      expect(whip.deletes).toEqual([]);
      expect((await fetch(`${t.baseUrl}/sessions/${sessionId}`, { method: 'DELETE' })).status).toBeLessThan(300);
      await until(() => whip.deletes.length === 1, 'the DELETE of the WHIP resource');
      expect(whip.deletes[0]).toMatch(/^\/whip\/resource\/\d+$/);
    } finally {
      sse.close();
    }
  });

  it('a 307 and a Location on another origin fail the push: the other origin (a second loopback server) receives nothing, not even the DELETE', async () => {
    const other = await WhipEndpoint.start();
    const sessionId = (await json(await post(t.baseUrl, '/sessions', { avatar_id: 'demo-rt', model: 'rt' })))
      .session_id;
    const sse = await SseClient.open(`${t.baseUrl}/sessions/${sessionId}/events`);
    try {
      expect((await post(t.baseUrl, `/sessions/${sessionId}/start`)).status).toBe(200);
      const outputs = async () =>
        (await json(await fetch(`${t.baseUrl}/sessions/${sessionId}/outputs`))).outputs as Array<
          Record<string, string>
        >;
      const otherOrigin = encodeURIComponent(other.baseUrl);
      const cases: Array<[string, string, RegExp]> = [
        ['redirect', 'token-redirected', /307/],
        ['foreign', 'token-foreign', /resource on another origin/],
      ];
      for (const [mode, token, why] of cases) {
        const from = sse.events.length;
        const created = await post(t.baseUrl, `/sessions/${sessionId}/outputs`, {
          type: 'whip',
          url: `${whip.baseUrl}/${mode}/${otherOrigin}`,
          bearer_token: token,
        });
        expect(created.status).toBe(201);
        const { output_id: outputId } = await json(created);
        const failed = await sse.waitFor(
          (e) => e.type === 'error' && e.data.code === 'output_failed' && e.data.output_id === outputId,
          MEDIA_WAIT_MS,
          `output_failed (${mode})`,
          from,
        );
        expect(String(failed.data.message)).toMatch(why);
        expect(String(failed.data.message)).not.toContain(token);
        await until(
          async () => (await outputs()).find((o) => o.output_id === outputId)?.state === 'retrying',
          `the ${mode} output retrying`,
        );
        expect(whip.received).toContainEqual({
          method: 'POST',
          path: `/${mode}/${otherOrigin}`,
          authorization: `Bearer ${token}`,
        });
        expect(
          (await fetch(`${t.baseUrl}/sessions/${sessionId}/outputs/${outputId}`, { method: 'DELETE' })).status,
        ).toBe(204);
      }
      expect((await fetch(`${t.baseUrl}/sessions/${sessionId}`, { method: 'DELETE' })).status).toBeLessThan(300);
      expect(other.received).toEqual([]);
    } finally {
      sse.close();
      await other.close();
    }
  });

  it('DELETE of an output ends its WHIP session at the server', async () => {
    const sessionId = (await json(await post(t.baseUrl, '/sessions', { avatar_id: 'demo-rt', model: 'rt' })))
      .session_id;
    expect((await post(t.baseUrl, `/sessions/${sessionId}/start`)).status).toBe(200);
    const deletesBefore = whip.deletes.length;
    const output = await json(
      await post(t.baseUrl, `/sessions/${sessionId}/outputs`, { type: 'whip', url: `${whip.baseUrl}/whip/second` }),
    );
    await until(
      async () => (await json(await fetch(`${t.baseUrl}/sessions/${sessionId}/outputs`))).outputs[0].state === 'live',
      'live',
    );
    expect(
      (await fetch(`${t.baseUrl}/sessions/${sessionId}/outputs/${output.output_id}`, { method: 'DELETE' })).status,
    ).toBe(204);
    expect(whip.deletes.length).toBe(deletesBefore + 1);
    expect((await fetch(`${t.baseUrl}/sessions/${sessionId}`, { method: 'DELETE' })).status).toBeLessThan(300);
  });
});
