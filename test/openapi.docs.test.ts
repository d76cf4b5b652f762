import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Validator } from '@seriousme/openapi-schema-validator';
import { json, startTestApp, type TestApp } from './helpers/app.ts';

describe('generated OpenAPI and documentation UIs', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp();
  });
  afterAll(async () => t?.close());

  it('serves a valid OpenAPI 3 document listing every route with schemas', async () => {
    const doc = await json(await fetch(`${t.baseUrl}/openapi.json`));
    const validator = new Validator();
    const result = await validator.validate(doc);
    expect(result.errors ?? []).toEqual([]);
    expect(result.valid).toBe(true);
    expect(doc.openapi).toMatch(/^3\./);
    const paths = Object.keys(doc.paths);
    for (const p of [
      '/health',
      '/healthz',
      '/queue/status',
      '/models',
      '/avatars',
      '/avatars/{avatar_id}',
      '/avatars/{avatar_id}/preview',
      '/sessions',
      '/sessions/{session_id}',
      '/sessions/{session_id}/start',
      '/sessions/{session_id}/webrtc/offer',
      '/sessions/{session_id}/events',
      '/sessions/{session_id}/speak',
      '/sessions/{session_id}/interrupt',
      '/sessions/{session_id}/speak_audio_stream',
      '/sessions/{session_id}/listen',
      '/sessions/{session_id}/metrics',
      '/avatars/custom',
      '/tts/preview',
      '/voices/clone',
      '/sessions/{session_id}/rt-offline-bundle/{job_id}/download',
      '/customize/reference',
    ]) {
      expect(paths).toContain(p);
    }
    const create = doc.paths['/sessions'].post;
    expect(create.requestBody.content['application/json'].schema).toBeDefined();
    expect(Object.keys(create.responses)).toEqual(expect.arrayContaining(['200', '400', '502']));
  });

  it('renders Swagger UI and ReDoc from local assets only', async () => {
    const docs = await fetch(`${t.baseUrl}/docs/`);
    expect(docs.status).toBe(200);
    const html = await docs.text();
    expect(html).not.toMatch(/src="https?:/);
    const bundleJs = await fetch(`${t.baseUrl}/docs/static/swagger-ui-bundle.js`);
    expect(bundleJs.status).toBe(200);
    expect((await bundleJs.text()).length).toBeGreaterThan(100_000);
    const redoc = await fetch(`${t.baseUrl}/redoc`);
    const redocHtml = await redoc.text();
    expect(redocHtml).toContain('/redoc/redoc.standalone.js');
    expect(redocHtml).not.toMatch(/src="https?:/);
    const bundle = await fetch(`${t.baseUrl}/redoc/redoc.standalone.js`);
    expect(bundle.status).toBe(200);
    expect((await bundle.text()).length).toBeGreaterThan(100_000);
  });

  it('answers liveness, component health, models and queue', async () => {
    expect(await json(await fetch(`${t.baseUrl}/healthz`))).toEqual({ status: 'ok' });
    const health = await json(await fetch(`${t.baseUrl}/health`));
    expect(health.components.llm.status).toBe('not_configured');
    expect(health.components.storage.status).toBe('ok');
    const { models } = await json(await fetch(`${t.baseUrl}/models`));
    expect(models.map((m: { id: string }) => m.id).sort()).toEqual([
      'lipsync',
      'lipsync_b',
      'lipsync_c',
      'mock',
      'rt',
      'rt_head',
    ]);
    expect(models.find((m: { id: string }) => m.id === 'mock')).toMatchObject({ connected: true, status: 'connected' });
    expect(models.find((m: { id: string }) => m.id === 'lipsync_b')).toMatchObject({
      connected: false,
      status: 'not_configured',
    });
    const queue = await json(await fetch(`${t.baseUrl}/queue/status`));
    expect(queue).toEqual({ capacity: 8, active: 0, available: 8, created: 0 });
  });

  it('answers a plain GET on the audio WebSocket path with 426 {detail}', async () => {
    const res = await fetch(`${t.baseUrl}/sessions/00000000-0000-4000-8000-000000000000/speak_audio_stream`);
    expect(res.status).toBe(426);
    const listen = await fetch(`${t.baseUrl}/sessions/00000000-0000-4000-8000-000000000000/listen`);
    expect(listen.status).toBe(426);
    expect((await listen.json()).detail).toMatch(/WebSocket/);
    expect(await json(res)).toHaveProperty('detail');
  });

  it('answers unknown routes with 404 {detail}', async () => {
    const res = await fetch(`${t.baseUrl}/nope`);
    expect(res.status).toBe(404);
    expect(await json(res)).toHaveProperty('detail');
  });
});
