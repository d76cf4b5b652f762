/**
 * Fuzzes every HTTP route of the real service, run as a child process, with fast-check: arbitrary and
 * malformed JSON, schema-shaped bodies with mutated fields, hostile path parameters and query strings,
 * multipart bodies with broken framing and arbitrary files (WAV headers with random rates, depths,
 * channels and lengths). Routes are enumerated from the service's own /openapi.json, so a new route is
 * fuzzed without touching this file. The seed is fixed and the run bounded.
 *
 * Asserts: no 500 and no 5xx a route does not document (documented 502/503 are the contract when an
 * upstream refuses or a capacity is reached), every 4xx carries {detail}, no filesystem path in any
 * answer, no crash (the child never exits), and the catalog entries and the live session made at the
 * start survive. Every finding is collected with its request and reported together at the end.
 */
import fs from 'node:fs/promises';
import fc from 'fast-check';
import sharp from 'sharp';
import wrtc from '@roamhq/wrtc';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TTS_PROVIDER_IDS } from '../actors/tts/types.ts';
import { startOpenAiUpstream, type OpenAiUpstream } from './fakes/openai-upstream.ts';
import { startXttsFake, type FakeUpstream } from './fakes/tts-upstreams.ts';
import { PORTRAIT_FIXTURE } from './helpers/fixtures.ts';
import {
  arbitraryJsonText,
  buildMultipart,
  jsonContentType,
  multipartBody,
  pathSegment,
  percentEncode,
  queryString,
  schemaShaped,
  sdpOffer,
  validWav,
  type JsonSchema,
  type MultipartForm,
  type SchemaContext,
} from './helpers/fuzz-inputs.ts';
import { FuzzTarget, formatFindings, type FuzzRequest } from './helpers/fuzz-target.ts';
import type { ServiceProcess } from './helpers/service-process.ts';

/** Fixed: a CI failure replays exactly. */
const SEED = 0x5eed_2024;
/**
 * Cases per operation (57 operations today, every one fuzzed); with the multipart extras ~2 550 requests, ~45 s on
 * 2 shared cores. 50 per operation took ~60 s, and 80 over 240 s on one core shared with another test file.
 */
const CASES_PER_OPERATION = 35;
/** Multipart routes are where uploads are parsed and decoded: they get extra cases. */
const EXTRA_MULTIPART_CASES = 80;
/** Per-file bound: start-up, set-up, the run and a few crash restarts. */
const FILE_TIMEOUT_MS = 480_000;

interface Operation {
  id: string;
  method: string;
  template: string;
  pathParams: string[];
  queryParams: string[];
  jsonBody: JsonSchema | null;
  multipart: MultipartForm | null;
  allowed5xx: Set<number>;
}

/** What the run keeps alive and expects to find at the end. */
interface Kept {
  voiceEntryId: number;
  voiceId: string;
  customAvatarId: string | null;
  liveSessionId: string;
  createdSessionId: string;
  terminatedSessionId: string;
}

async function call(
  baseUrl: string,
  method: string,
  path: string,
  body?: unknown,
): Promise<{ status: number; body: any }> {
  const res = await fetch(`${baseUrl}${path}`, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(30_000),
  });
  const text = await res.text();
  return {
    status: res.status,
    body: text && res.headers.get('content-type')?.includes('json') ? JSON.parse(text) : text,
  };
}

async function callMultipart(baseUrl: string, path: string, form: FormData): Promise<{ status: number; body: any }> {
  const res = await fetch(`${baseUrl}${path}`, { method: 'POST', body: form, signal: AbortSignal.timeout(60_000) });
  return { status: res.status, body: await res.json() };
}

/** Routes, their parameters and bodies, from the service's own OpenAPI document. */
function operationsOf(openapi: any): Operation[] {
  const components: Record<string, JsonSchema> = openapi.components?.schemas ?? {};
  const operations: Operation[] = [];
  for (const [template, methods] of Object.entries<any>(openapi.paths)) {
    for (const [method, op] of Object.entries<any>(methods)) {
      const params: any[] = op.parameters ?? [];
      const jsonSchema = op.requestBody?.content?.['application/json']?.schema ?? null;
      // Multipart bodies are parsed by the handler; the route documents the form as a component named in its description.
      const formName = /multipart\/form-data \(see (\w+)\)/.exec(op.description ?? '')?.[1];
      let multipart: MultipartForm | null = null;
      if (formName || /multipart\/form-data/.test(op.description ?? '')) {
        const form = (formName && components[formName]) || {
          properties: { file: { type: 'string', format: 'binary' } },
        };
        multipart = { fields: {}, files: [], required: (form as JsonSchema).required ?? [] };
        for (const [name, schema] of Object.entries<JsonSchema>(form.properties ?? {})) {
          if (schema.format === 'binary') multipart.files.push(name);
          else multipart.fields[name] = schema;
        }
      }
      operations.push({
        id: `${method.toUpperCase()} ${template}`,
        method: method.toUpperCase(),
        template,
        pathParams: params.filter((p) => p.in === 'path').map((p) => p.name),
        queryParams: params.filter((p) => p.in === 'query').map((p) => p.name),
        jsonBody: jsonSchema,
        multipart,
        allowed5xx: new Set(
          Object.keys(op.responses ?? {})
            .map(Number)
            .filter((s) => s === 502 || s === 503),
        ),
      });
    }
  }
  return operations;
}

describe('fuzzing every route of the running service', () => {
  let target: FuzzTarget;
  let llm: OpenAiUpstream;
  let xtts: FakeUpstream;
  let kept: Kept;
  let openapi: any;
  const validFiles: { audio: Buffer[]; image: Buffer[] } = { audio: [], image: [] };
  let offerSdp = '';
  const setupTimings: Record<string, number> = {};

  /** Sessions live in memory: made again after a crash restart. */
  async function makeSessions(service: ServiceProcess): Promise<void> {
    const create = async () => {
      const res = await call(service.baseUrl, 'POST', '/sessions', { avatar_id: 'demo-rt', model: 'mock' });
      if (res.status !== 200) throw new Error(`set-up: POST /sessions ${res.status} ${JSON.stringify(res.body)}`);
      return res.body.session_id as string;
    };
    const live = await create();
    expect((await call(service.baseUrl, 'POST', `/sessions/${live}/start`)).status).toBe(200);
    const created = await create();
    const terminated = await create();
    expect((await call(service.baseUrl, 'DELETE', `/sessions/${terminated}`)).status).toBe(200);
    kept = { ...kept, liveSessionId: live, createdSessionId: created, terminatedSessionId: terminated };
  }

  beforeAll(async () => {
    [llm, xtts] = await Promise.all([startOpenAiUpstream(), startXttsFake()]);
    const env = {
      SERVICE_LLM_BASE_URL: llm.baseUrl,
      SERVICE_ASR_BASE_URL: llm.baseUrl,
      SERVICE_TTS_LOCAL_CLONE_A_BASE_URL: xtts.url,
    };
    // The inputs are made while the service starts.
    const inputsMade = (async () => {
      // A real offer from a wrtc peer: the fuzz sends it as is and mutated line by line.
      const pc = new wrtc.RTCPeerConnection();
      pc.addTransceiver('audio', { direction: 'recvonly' });
      pc.addTransceiver('video', { direction: 'recvonly' });
      offerSdp = (await pc.createOffer()).sdp ?? '';
      pc.close();

      const portrait = await fs.readFile(PORTRAIT_FIXTURE);
      const small = await sharp(portrait).resize(160, 160).jpeg().toBuffer();
      validFiles.audio.push(validWav(8000), validWav(4000, 24000), validWav(1600, 48000));
      validFiles.image.push(small, await sharp(small).png().toBuffer(), await sharp(small).webp().toBuffer());
      return small;
    })();
    [target] = await Promise.all([FuzzTarget.start({ env }, makeSessions), inputsMade]);
    const smallPortrait = await inputsMade;
    const { baseUrl } = target.service;
    openapi = (await call(baseUrl, 'GET', '/openapi.json')).body;

    // The kept voice and the kept avatar are independent: made side by side, each timed.
    const timed = async <T>(name: string, work: () => Promise<T>): Promise<T> => {
      const started = performance.now();
      const result = await work();
      setupTimings[name] = performance.now() - started;
      return result;
    };
    const clone = new FormData();
    clone.set('provider', 'local_clone_a');
    clone.set('target_model', 'en');
    clone.set('display_label', 'kept voice');
    clone.set('audio', new Blob([new Uint8Array(validWav(24000, 24000))]), 'kept.wav');
    const avatar = new FormData();
    avatar.set('name', 'kept avatar');
    avatar.set('base_avatar_id', 'astronaut');
    avatar.set('image', new Blob([new Uint8Array(smallPortrait)]), 'kept.jpg');
    const [cloned, custom] = await Promise.all([
      timed('cloneMs', () => callMultipart(baseUrl, '/voices/clone', clone)),
      timed('customAvatarMs', () => callMultipart(baseUrl, '/avatars/custom', avatar)),
    ]);
    expect(cloned.status, JSON.stringify(cloned.body)).toBe(200);
    expect(custom.status, JSON.stringify(custom.body)).toBe(200);

    kept = {
      voiceEntryId: cloned.body.entry_id,
      voiceId: cloned.body.voice_id,
      customAvatarId: custom.body.id,
      liveSessionId: '',
      createdSessionId: '',
      terminatedSessionId: '',
    };
    await makeSessions(target.service);
  }, FILE_TIMEOUT_MS);

  afterAll(async () => {
    await target?.service.stop();
    await Promise.all([llm?.close(), xtts?.close()]);
  });

  it(
    'answers every fuzzed request without a server error, a crash or a lost catalog entry',
    async () => {
      const runStarted = performance.now();
      const operations = operationsOf(openapi);
      expect(operations.length).toBeGreaterThan(30);
      const avatars = (await call(target.service.baseUrl, 'GET', '/avatars')).body.map((a: { id: string }) => a.id);
      const models = (await call(target.service.baseUrl, 'GET', '/models')).body.models.map(
        (m: { id: string }) => m.id,
      );

      // Ids the fuzzer may use to reach real resources. Sessions are looked up at send time (a crash restart replaces them).
      // `@new-*` stand for the latest resource the fuzz itself created (so DELETE and job routes meet real ones).
      const SESSION_PLACEHOLDERS = ['@live', '@created', '@terminated'];
      const knownByParam: Record<string, string[]> = {
        session_id: SESSION_PLACEHOLDERS,
        avatar_id: [...avatars, '@new-avatar'],
        entry_id: [String(kept.voiceEntryId), '@new-entry'],
        job_id: ['@new-job'],
        token: [],
      };
      const harvested: Record<string, string> = {
        '@new-avatar': 'custom-none-0',
        '@new-entry': '999999999',
        '@new-job': '00000000-0000-4000-8000-000000000000',
      };
      const dictionary = [
        ...avatars,
        ...models,
        ...TTS_PROVIDER_IDS,
        kept.voiceId,
        'en-US-JennyNeural',
        'en',
        'Hello there.',
        ...SESSION_PLACEHOLDERS,
        ...Object.keys(harvested),
      ];
      const fieldHints: Array<[RegExp, string[]]> = [
        [/avatar_id$/, avatars],
        [/^model$/, models],
        // local_clone_a is the one cloning provider configured (the XTTS fake): weighted so clones get through.
        [
          /provider/,
          [
            'builtin',
            'builtin',
            'local_clone_a',
            'local_clone_a',
            'local_clone_a',
            'local_clone_a',
            ...TTS_PROVIDER_IDS,
          ],
        ],
        [/voice/, [kept.voiceId, 'en-US-JennyNeural']],
        [/target_model|tts_model/, ['en']],
        [/text|prompt/, ['Hello there.', 'Hi.']],
        [/^sdp$/, sdpOffer(offerSdp)],
      ];
      const ctx: SchemaContext = { components: openapi.components?.schemas ?? {}, dictionary, fieldHints };

      /** A DELETE must not remove what the run checks at the end: the kept voice, avatar and live session. */
      const refersToKept = (segment: string): boolean => {
        let decoded = segment;
        try {
          decoded = decodeURIComponent(segment);
        } catch {}
        const trimmed = decoded.trim();
        return (
          (/^[+-]?[\d.e]+$/i.test(trimmed) && Number(trimmed) === kept.voiceEntryId) ||
          trimmed.toLowerCase() === kept.customAvatarId?.toLowerCase() ||
          trimmed === '@live' ||
          trimmed === '@created'
        );
      };

      const caseFor = (op: Operation, extraMultipart: boolean): fc.Arbitrary<FuzzRequest> => {
        const segment = (name: string, hostileOnly: boolean) => {
          const known = knownByParam[name] ?? dictionary;
          // Mostly real ids, so the body under fuzz reaches the handler; the `path` kind sends hostile ids only.
          const arb = hostileOnly
            ? pathSegment([])
            : known.length
              ? fc.oneof(
                  { weight: 5, arbitrary: fc.constantFrom(...known).map(percentEncode) },
                  { weight: 1, arbitrary: pathSegment(known) },
                )
              : pathSegment([]);
          return op.method === 'DELETE' ? arb.filter((s) => !refersToKept(s)) : arb;
        };
        const path = (
          hostileOnly: boolean,
          query = fc.oneof(
            { weight: 6, arbitrary: fc.constant('') },
            { weight: 1, arbitrary: queryString(op.queryParams, dictionary) },
          ),
        ) =>
          fc
            .tuple(fc.tuple(...op.pathParams.map((name) => segment(name, hostileOnly))), query)
            .map(
              ([values, query]) =>
                op.pathParams.reduce((p, name, i) => p.replace(`{${name}}`, values[i]), op.template) + query,
            );
        type Body = { headers: Record<string, string>; body?: Buffer };
        const request = (kind: string, p: fc.Arbitrary<string>, body: fc.Arbitrary<Body>) =>
          fc
            .tuple(p, body)
            .map(([pathText, b]): FuzzRequest => ({ op: op.id, kind, method: op.method, path: pathText, ...b }));
        const jsonBody = (text: fc.Arbitrary<string>, contentType = jsonContentType) =>
          fc
            .tuple(text, contentType)
            .map(([t, type]): Body => ({ headers: type ? { 'content-type': type } : {}, body: Buffer.from(t) }));
        const noBody = fc.constant<Body>({ headers: {} });
        const kinds: Array<{ weight: number; arbitrary: fc.Arbitrary<FuzzRequest> }> = [];
        if (op.multipart) {
          const validFilesFor = (field: string) =>
            /image|photo|portrait/.test(field) ? validFiles.image : validFiles.audio;
          const form = multipartBody(op.multipart, ctx, validFilesFor).map((spec) => {
            const built = buildMultipart(spec);
            return { headers: { 'content-type': built.contentType }, body: built.body };
          });
          kinds.push({ weight: 8, arbitrary: request('multipart', path(false), form) });
          if (extraMultipart) return request('multipart', path(false), form);
        }
        if (op.jsonBody) {
          const shaped = jsonBody(
            schemaShaped(op.jsonBody, ctx).map((v) => JSON.stringify(v) ?? ''),
            fc.constant('application/json'),
          );
          kinds.push({ weight: 6, arbitrary: request('schema', path(false), shaped) });
        }
        kinds.push({
          weight: op.jsonBody ? 2 : 1,
          arbitrary: request('json', path(false), jsonBody(arbitraryJsonText)),
        });
        if (op.pathParams.length)
          kinds.push({
            weight: op.jsonBody || op.multipart ? 2 : 3,
            arbitrary: request('path', path(true), op.jsonBody || op.multipart ? jsonBody(arbitraryJsonText) : noBody),
          });
        kinds.push({
          weight: op.pathParams.length ? 1 : 2,
          arbitrary: request('query', path(false, queryString(op.queryParams, dictionary)), noBody),
        });
        return fc.oneof(...kinds);
      };

      // One deterministic list per operation, then round-robin so the state one route leaves is met by the others.
      const perOperation = operations.map((op, index) => {
        const cases = fc.sample(caseFor(op, false), { seed: SEED + index, numRuns: CASES_PER_OPERATION });
        if (op.multipart)
          cases.push(...fc.sample(caseFor(op, true), { seed: SEED + 1000 + index, numRuns: EXTRA_MULTIPART_CASES }));
        return { op, cases };
      });
      const longest = Math.max(...perOperation.map((p) => p.cases.length));
      const createdByFuzz: string[] = [];
      const deletedByFuzz: string[] = [];
      const msByOperation: Record<string, number> = {};
      const answeredOk = new Set<string>();

      for (let round = 0; round < longest && !target.gaveUp; round++) {
        for (const { op, cases } of perOperation) {
          const fuzzCase = cases[round];
          if (!fuzzCase || target.gaveUp) continue;
          const ids: Record<string, string> = {
            '@live': kept.liveSessionId,
            '@created': kept.createdSessionId,
            '@terminated': kept.terminatedSessionId,
            ...harvested,
          };
          const resolveIds = (text: string) =>
            text.replace(
              /(%40|@)(live|created|terminated|new-avatar|new-entry|new-job)/g,
              (_m, _at, name: string) => ids[`@${name}`],
            );
          const sent: FuzzRequest = {
            ...fuzzCase,
            path: resolveIds(fuzzCase.path),
            body:
              fuzzCase.body && fuzzCase.body.includes('@')
                ? Buffer.from(resolveIds(fuzzCase.body.toString('latin1')), 'latin1')
                : fuzzCase.body,
          };
          const sentAt = performance.now();
          const response = await target.send(sent, op.allowed5xx);
          msByOperation[op.id] = (msByOperation[op.id] ?? 0) + performance.now() - sentAt;
          if (response && response.status < 300) answeredOk.add(op.id);
          // FUZZ_VERBOSE=1 shows every refusal: how deep each route's cases get.
          if (process.env.FUZZ_VERBOSE && response && response.status >= 400)
            console.log(op.id, response.status, response.body.slice(0, 160));
          if (response?.status === 200 && op.id === 'POST /sessions') {
            // Each created session renders idle frames: end it at once so fuzz-made sessions cannot pile up on 2 cores.
            const id = JSON.parse(response.body).session_id as string;
            createdByFuzz.push(id);
            await call(target.service.baseUrl, 'DELETE', `/sessions/${id}`).catch(() => undefined);
          }
          if (response?.status === 200 && op.method === 'DELETE') deletedByFuzz.push(sent.path);
          if (response?.status === 200 && op.method === 'POST' && response.contentType.includes('json')) {
            const body = JSON.parse(response.body);
            if (typeof body.job_id === 'string') harvested['@new-job'] = body.job_id;
            if (Number.isInteger(body.entry_id)) harvested['@new-entry'] = String(body.entry_id);
            if (op.template.startsWith('/avatars') && typeof body.id === 'string') harvested['@new-avatar'] = body.id;
          }
        }
        await target.checkAlive(`during round ${round}`);
      }
      const fuzzSeconds = (performance.now() - runStarted) / 1000;

      // The service is alive, and what was made at the start is still there.
      await target.checkAlive('after the run');
      const { baseUrl } = target.service;
      expect((await call(baseUrl, 'GET', '/healthz')).status).toBe(200);
      const voices = (await call(baseUrl, 'GET', '/voices')).body.items as Array<{ id: number }>;
      if (!voices.some((v) => v.id === kept.voiceEntryId))
        target.finding(
          `lost catalog entry: voice ${kept.voiceEntryId}`,
          null,
          `DELETEs that succeeded: ${deletedByFuzz.join(', ')}`,
        );
      const listed = (await call(baseUrl, 'GET', '/avatars')).body.map((a: { id: string }) => a.id);
      for (const id of [...avatars, kept.customAvatarId!]) {
        if (!listed.includes(id))
          target.finding(
            `lost catalog entry: avatar ${id}`,
            null,
            `DELETEs that succeeded: ${deletedByFuzz.join(', ')}`,
          );
      }
      const live = await call(baseUrl, 'GET', `/sessions/${kept.liveSessionId}`);
      if (live.status !== 200 || !['running', 'paused'].includes(live.body.state))
        target.finding('live session lost', null, JSON.stringify(live.body));

      const byOperationKind: Record<string, number> = {};
      for (const { cases } of perOperation)
        for (const c of cases) byOperationKind[c.kind] = (byOperationKind[c.kind] ?? 0) + 1;
      const figures = {
        seed: SEED,
        operations: operations.length,
        ...target.figures,
        casesByKind: byOperationKind,
        sessionsCreatedByFuzz: createdByFuzz.length,
        deletesThatSucceeded: deletedByFuzz.length,
        // Operations no fuzzed request got through to a 2xx: their handlers were only reached up to validation.
        neverAnswered2xx: operations.map((op) => op.id).filter((id) => !answeredOk.has(id)),
        findings: target.findings.length,
        fuzzSeconds: Number(fuzzSeconds.toFixed(1)),
        slowestOperationsMs: Object.fromEntries(
          Object.entries(msByOperation)
            .sort((a, b) => b[1] - a[1])
            .slice(0, 6)
            .map(([k, v]) => [k, Math.round(v)]),
        ),
        setupMs: Object.fromEntries(Object.entries(setupTimings).map(([k, v]) => [k, Math.round(v)])),
      };
      console.log(`fuzz.routes figures ${JSON.stringify(figures)}`);
      if (target.findings.length) console.log(`fuzz.routes findings:\n${formatFindings(target.findings)}`);

      // Graceful shutdown still works after the run.
      const exit = await target.service.stop();
      if (exit.code !== 0)
        target.finding(
          `shutdown after the run exited ${JSON.stringify(exit)}`,
          null,
          target.service.logs().slice(-2000),
        );

      expect(target.findings, formatFindings(target.findings)).toEqual([]);
    },
    FILE_TIMEOUT_MS,
  );
});
