import fs from 'node:fs/promises';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json, post, startTestApp, type TestApp } from './helpers/app.ts';
import { PORTRAIT_FIXTURE } from './helpers/fixtures.ts';
import { validWav } from './helpers/fuzz-inputs.ts';
import { startOpenAiUpstream, type OpenAiUpstream } from './fakes/openai-upstream.ts';
import { startXttsFake, type FakeUpstream } from './fakes/tts-upstreams.ts';

/**
 * Every route's documented request body (`/openapi.json`) against what the route really accepts: the documented
 * example goes through (2xx), leaving out any field the document calls required is a 400, a field the document does
 * not list is a 400 where the schema says `additionalProperties: false`, and a route documenting no body takes none.
 * Multipart routes are built from their form's properties: each text field's `example`, each binary field a real file.
 */

type Schema = {
  $ref?: string;
  type?: string;
  format?: string;
  properties?: Record<string, Schema>;
  required?: string[];
  additionalProperties?: boolean;
  example?: unknown;
};
type Operation = {
  requestBody?: { required?: boolean; content: Record<string, { schema: Schema; example?: unknown }> };
  parameters?: Array<{ in: string; name: string }>;
};

interface Case {
  method: string;
  path: string;
  op: Operation;
}

const BODY_METHODS = new Set(['post', 'put', 'patch']);
/** Routes whose work outlives the check (a WebSocket upgrade, a stream) or that are not client API. */
const NOT_HTTP_BODY = new Set(['/sessions/{session_id}/speak_audio_stream', '/sessions/{session_id}/listen']);
/**
 * Routes whose example answers something a fresh session never asked for: their body passes validation, and the
 * route answers with this status instead of 2xx (a tool result for a call the session did not make: 404).
 */
const NEEDS_PRIOR_STATE = new Map([
  ['/sessions/{session_id}/tool_results', 404],
  // Renaming is for custom avatars; the examples rename a built-in one, which the route refuses after validation.
  ['/avatars/{avatar_id}', 403],
]);

describe('OpenAPI request bodies match what each route accepts', () => {
  let t: TestApp;
  let upstream: OpenAiUpstream;
  let xtts: FakeUpstream;
  let doc: { paths: Record<string, Record<string, Operation>>; components: { schemas: Record<string, Schema> } };
  let portrait: Buffer;
  const cases: Case[] = [];
  const sessions: string[] = [];

  const resolve = (schema: Schema): Schema => {
    if (!schema.$ref) return schema;
    const name = schema.$ref.replace('#/components/schemas/', '');
    const target = doc.components.schemas[name];
    if (!target) throw new Error(`unresolved ${schema.$ref}`);
    return resolve(target);
  };

  /** A started `mock` session for session routes: each case gets its own, so no turn in flight gets in the way. */
  async function freshSession(): Promise<string> {
    const created = await post(t.baseUrl, '/sessions', { avatar_id: 'demo-rt', model: 'mock' });
    expect(created.status).toBe(200);
    const id = (await json(created)).session_id as string;
    sessions.push(id);
    expect((await post(t.baseUrl, `/sessions/${id}/start`)).status).toBe(200);
    return id;
  }

  async function urlOf(path: string): Promise<string> {
    let url = path;
    if (url.includes('{session_id}')) url = url.replace('{session_id}', await freshSession());
    // A session's resource that does not exist: the route answers 404 or 405, never a refused body.
    url = url.replace('{viewer_id}', 'no-such-viewer');
    url = url.replace('{avatar_id}', 'astronaut');
    if (/\{[^}]+\}/.test(url)) throw new Error(`no value for a parameter of ${path}`);
    return `${t.baseUrl}${url}`;
  }

  /** A file that the field accepts, by its name: audio → a 16 kHz WAV, image → a portrait JPEG. */
  function fileFor(field: string): Blob {
    if (field === 'audio') return new Blob([new Uint8Array(validWav(8000))], { type: 'audio/wav' });
    if (field === 'image') return new Blob([new Uint8Array(portrait)], { type: 'image/jpeg' });
    throw new Error(`no fixture for binary field ${field}`);
  }

  function multipartBody(schema: Schema, omit?: string): FormData {
    const form = new FormData();
    // A form carries one file (MULTIPART_LIMITS.files): where a route documents alternatives (`image` or `video`), the first.
    let fileSet = false;
    for (const [name, property] of Object.entries(schema.properties ?? {})) {
      if (name === omit) continue;
      if (property.format === 'binary') {
        if (!fileSet) form.set(name, fileFor(name), `${name}.bin`);
        fileSet = true;
      } else if (property.example !== undefined) form.set(name, String(property.example));
    }
    return form;
  }

  async function send(
    c: Case,
    body: { json?: unknown; form?: FormData; sdp?: string } | null,
  ): Promise<{ status: number; text: string }> {
    const init: RequestInit = { method: c.method.toUpperCase() };
    if (body?.sdp !== undefined) {
      init.body = body.sdp;
      init.headers = { 'content-type': 'application/sdp' };
    } else if (body?.json !== undefined) {
      init.body = JSON.stringify(body.json);
      init.headers = { 'content-type': 'application/json' };
    } else if (body?.form) init.body = body.form;
    const res = await fetch(await urlOf(c.path), init);
    const text = await res.text();
    if (c.path === '/sessions' && res.status === 200)
      sessions.push((JSON.parse(text) as { session_id: string }).session_id);
    await endSessions();
    return { status: res.status, text };
  }

  /** Each case's session ends with it: SERVICE_MAX_SESSIONS stays free for the next. */
  async function endSessions(): Promise<void> {
    const ids = sessions.splice(0);
    await Promise.all(ids.map((id) => fetch(`${t.baseUrl}/sessions/${id}`, { method: 'DELETE' })));
  }

  beforeAll(async () => {
    [upstream, xtts] = await Promise.all([startOpenAiUpstream(), startXttsFake()]);
    t = await startTestApp({
      env: {
        SERVICE_LLM_BASE_URL: upstream.baseUrl,
        SERVICE_ASR_BASE_URL: upstream.baseUrl,
        SERVICE_TTS_LOCAL_CLONE_A_BASE_URL: xtts.url,
      },
    });
    portrait = await sharp(await fs.readFile(PORTRAIT_FIXTURE))
      .resize(256, 256)
      .jpeg()
      .toBuffer();
    doc = await json(await fetch(`${t.baseUrl}/openapi.json`));
    for (const [path, ops] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(ops)) {
        if (BODY_METHODS.has(method) && !NOT_HTTP_BODY.has(path)) cases.push({ method, path, op });
      }
    }
    // Service-wide persona changes last, so the session routes run with the embedded defaults.
    cases.sort((a, b) => Number(a.path.startsWith('/customize')) - Number(b.path.startsWith('/customize')));
  }, 60_000);

  afterAll(async () => {
    if (t) await endSessions();
    await t?.close();
    await Promise.all([upstream?.close(), xtts?.close()]);
  });

  it('documents a body for every multipart route and an example for every body', () => {
    const withBody = cases.filter((c) => c.op.requestBody);
    expect(withBody.length).toBeGreaterThanOrEqual(17);
    const multipart = withBody.filter((c) => c.op.requestBody!.content['multipart/form-data']);
    expect(multipart.map((c) => c.path).sort()).toEqual(
      [
        '/avatars/custom',
        '/customize/reference',
        '/sessions/{session_id}/customize/reference',
        '/sessions/{session_id}/speak_audio',
        '/sessions/{session_id}/speak_rt_audio',
        '/sessions/{session_id}/transcribe',
        '/voices/clone',
      ].sort(),
    );
    for (const c of withBody) {
      const [type, media] = Object.entries(c.op.requestBody!.content)[0];
      if (type === 'application/json') {
        expect(media.example, `${c.method} ${c.path}: example`).toBeDefined();
        expect(JSON.stringify(media.example), `${c.method} ${c.path}: a real example, not "string"`).not.toMatch(
          /"string"/,
        );
      } else {
        const schema = resolve(media.schema);
        for (const [name, property] of Object.entries(schema.properties ?? {})) {
          if (property.format !== 'binary' && schema.required?.includes(name))
            expect(property.example, `${c.path} ${name}: example`).toBeDefined();
        }
      }
    }
  });

  it('each documented example is accepted (2xx) by its route', async () => {
    const refused: string[] = [];
    for (const c of cases.filter((x) => x.op.requestBody)) {
      const [type, media] = Object.entries(c.op.requestBody!.content)[0];
      const body =
        type === 'application/json'
          ? { json: media.example }
          : type === 'application/sdp'
            ? { sdp: String(media.example) }
            : { form: multipartBody(resolve(media.schema)) };
      const { status, text } = await send(c, body);
      const expected = NEEDS_PRIOR_STATE.get(c.path);
      if (expected !== undefined ? status !== expected : status < 200 || status >= 300)
        refused.push(`${c.method} ${c.path} → ${status} ${text.slice(0, 200)}`);
    }
    expect(refused).toEqual([]);
    // One session per documented route (each created, used, ended): ~25 routes, ~1 s each on a busy host.
  }, 240_000);

  it('leaving out a documented required field is a 400; a field the document does not allow is a 400', async () => {
    const wrong: string[] = [];
    for (const c of cases.filter((x) => x.op.requestBody)) {
      const [type, media] = Object.entries(c.op.requestBody!.content)[0];
      const schema = resolve(media.schema);
      for (const field of schema.required ?? []) {
        let body;
        if (type === 'application/json') {
          const { [field]: _left, ...rest } = media.example as Record<string, unknown>;
          body = { json: rest };
        } else body = { form: multipartBody(schema, field) };
        const { status } = await send(c, body);
        if (status !== 400) wrong.push(`${c.method} ${c.path} without ${field} → ${status}`);
      }
      if (type === 'application/json' && schema.additionalProperties === false) {
        const { status } = await send(c, { json: { ...(media.example as object), undocumented_field: 1 } });
        if (status !== 400) wrong.push(`${c.method} ${c.path} with an undocumented field → ${status}`);
      }
    }
    expect(wrong).toEqual([]);
  }, 120_000);

  it('a route that documents no request body needs none (an empty POST is not refused as a bad body)', async () => {
    const refused: string[] = [];
    const bodiless = cases.filter((x) => !x.op.requestBody);
    expect(bodiless.map((c) => c.path)).toEqual(
      expect.arrayContaining(['/sessions/{session_id}/start', '/sessions/{session_id}/interrupt']),
    );
    for (const c of bodiless) {
      const { status, text } = await send(c, null);
      if (status === 400 || status === 415) refused.push(`${c.method} ${c.path} → ${status} ${text.slice(0, 200)}`);
    }
    expect(refused).toEqual([]);
  }, 60_000);
});
