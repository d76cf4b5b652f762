import wrtc from '@roamhq/wrtc';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from './helpers/app.ts';
import { startOpenAiUpstream, type OpenAiUpstream } from './fakes/openai-upstream.ts';
import {
  AvatarApiError,
  AvatarClient,
  AvatarNetworkError,
  type ServerEvents,
  type ToolDefinition,
} from '../client/avatar-client.ts';

/** A turn of a short sentence, synthesised and played by the built-in TTS, on 2 shared cores. */
const TURN_MS = 30_000;
const MAP_TOOL: ToolDefinition = {
  type: 'function',
  function: {
    name: 'show_map',
    description: 'Shows a place',
    parameters: { type: 'object', properties: { place: { type: 'string' } } },
  },
};

/** Records a client's SSE events and waits for one. */
function recorder(client: AvatarClient) {
  const seen: Array<{ type: string; data: any }> = [];
  for (const type of ['status', 'tts', 'llm', 'tool_call', 'session.terminated', 'error'] as const)
    client.on(type, (data) => seen.push({ type, data }));
  const waitFor = async (match: (e: { type: string; data: any }) => boolean, from = 0, timeout = TURN_MS) => {
    const end = Date.now() + timeout;
    while (Date.now() < end) {
      const found = seen.slice(from).find(match);
      if (found) return found;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    throw new Error(`timed out; saw ${seen.map((e) => e.type).join(',')}`);
  };
  return { seen, waitFor };
}

async function expectApiError(promise: Promise<unknown>, status: number, detail: RegExp) {
  const error = await promise.then(
    () => null,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(AvatarApiError);
  expect((error as AvatarApiError).status).toBe(status);
  expect((error as AvatarApiError).detail).toMatch(detail);
}

describe('the typed client library against the real service on loopback', () => {
  let t: TestApp;
  let upstream: OpenAiUpstream;
  let avatarId: string;
  const clients: AvatarClient[] = [];
  const newClient = (options: ConstructorParameters<typeof AvatarClient>[0] = {}) => {
    const client = new AvatarClient({
      server: t.baseUrl,
      RTCPeerConnection: wrtc.RTCPeerConnection as never,
      ...options,
    });
    clients.push(client);
    return client;
  };

  beforeAll(async () => {
    upstream = await startOpenAiUpstream();
    t = await startTestApp({ env: { SERVICE_LLM_BASE_URL: upstream.baseUrl } });
    const avatars = (await (await fetch(`${t.baseUrl}/avatars`)).json()) as Array<{ id: string; model_type: string }>;
    avatarId = avatars.find((a) => a.model_type === 'rt')!.id;
  });
  afterAll(async () => {
    for (const client of clients) client.disconnect();
    await t?.close();
    await upstream?.close();
  });

  it('creates, connects, starts, speaks, interrupts, pauses, resumes, reads the transcript and ends a session', async () => {
    const client = newClient();
    const tracks: string[] = [];
    client.on('track', ({ track }) => tracks.push(track.kind));
    const events = recorder(client);
    const sessionId = await client.createSession({ avatar_id: avatarId, model: 'rt' });
    expect(sessionId).toMatch(/^[0-9a-f-]{36}$/);
    const pc = await client.connect();
    expect(pc.remoteDescription?.type).toBe('answer');
    await client.start();
    expect((await client.session()).state).toBe('running');
    expect(tracks.sort()).toEqual(['audio', 'video']);

    const turnId = await client.speak('Hello from the typed client. This sentence is long enough to be cut short.');
    expect(turnId).toMatch(/^[0-9a-f-]{36}$/);
    await events.waitFor((e) => e.type === 'tts' && e.data.stage === 'first_audio' && e.data.turn_id === turnId);
    const from = events.seen.length;
    expect(await client.interrupt()).toEqual({ interrupted: true });
    await events.waitFor((e) => e.type === 'status' && e.data.stage === 'interrupted', from);
    await events.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', from);

    await client.pause();
    expect((await client.session()).state).toBe('paused');
    await expectApiError(client.speak('not now'), 409, /paused/);
    await client.resume();
    expect((await client.session()).state).toBe('running');

    const transcript = await client.transcript();
    expect(transcript.turns.find((turn) => turn.turn_id === turnId)?.outcome).toBe('interrupted');

    await client.end();
    await client.end(); // idempotent: no session left, nothing sent
    expect(client.sessionId).toBeNull();
    const after = (await (await fetch(`${t.baseUrl}/sessions/${sessionId}`)).json()) as { state: string };
    expect(after.state).toBe('terminated');
  });

  it('answers a client tool call with its handler, and the model speaks what the handler returned', async () => {
    upstream.setScenario({
      chat: {
        scripted: [
          {
            tokens: ['One moment.'],
            toolCalls: [{ id: 'call_map', name: 'show_map', arguments: '{"place": "Lyon"}' }],
          },
          { tokens: (messages) => [`Shown: ${messages.at(-1)!.content}`, '.'] },
        ],
      },
    });
    const calls: ServerEvents['tool_call'][] = [];
    const client = newClient({ tools: { show_map: (args, call) => (calls.push(call), { shown: args.place }) } });
    const events = recorder(client);
    await client.createSession({ avatar_id: avatarId, model: 'rt', tools: [MAP_TOOL] });
    await client.connect();
    await client.start();
    const turnId = await client.chat('Show me Lyon');
    await events.waitFor((e) => e.type === 'status' && e.data.stage === 'idle' && e.data.turn_id === turnId);
    expect(calls).toEqual([{ turn_id: turnId, call_id: 'call_map', name: 'show_map', arguments: { place: 'Lyon' } }]);
    const llmText = events.seen
      .filter((e) => e.type === 'llm')
      .map((e) => e.data.delta)
      .join('');
    expect(llmText).toContain('Shown: {"shown":"Lyon"}');
    const transcript = await client.transcript();
    expect(transcript.turns.at(-1)!.tool_calls).toEqual([
      { call_id: 'call_map', name: 'show_map', arguments: { place: 'Lyon' }, ok: true },
    ]);
    await client.end();
  });

  it('talk() asks for an echo-cancelled microphone and offers it on a sendrecv audio track, replacing the peer', async () => {
    const source = new (wrtc as any).nonstandard.RTCAudioSource();
    const asked: MediaStreamConstraints[] = [];
    const client = newClient({
      getUserMedia: async (constraints) => (
        asked.push(constraints),
        new (wrtc as any).MediaStream([source.createTrack()])
      ),
    });
    await client.createSession({ avatar_id: avatarId, model: 'rt' });
    const first = await client.connect();
    await client.start();
    const microphone = await client.talk();
    expect(asked).toEqual([{ audio: { echoCancellation: true, noiseSuppression: true, autoGainControl: true } }]);
    expect(client.microphone).toBe(microphone);
    expect(await client.talk()).toBe(microphone); // already talking: the same microphone, no new offer
    expect(client.peer).not.toBe(first);
    expect(first.connectionState).toBe('closed');
    expect(client.peer!.localDescription!.sdp).toMatch(/m=audio[\s\S]*a=sendrecv/);
    client.stopTalking();
    expect(client.microphone).toBeNull();
    expect(microphone.getAudioTracks()[0]!.readyState).toBe('ended');
    await client.end();
  });

  it('a tool handler that throws answers the model with {error} and reports tool_error; handleTool adds a handler later', async () => {
    upstream.setScenario({
      chat: {
        scripted: [
          {
            tokens: ['Checking.'],
            toolCalls: [{ id: 'call_fail', name: 'show_map', arguments: '{"place": "Nowhere"}' }],
          },
          { tokens: (messages) => [`Result ${messages.at(-1)!.content}`, '.'] },
        ],
      },
    });
    const client = newClient();
    client.handleTool('show_map', () => {
      throw new Error('map service down');
    });
    const failures: unknown[] = [];
    client.on('tool_error', ({ error }) => failures.push((error as Error).message));
    const events = recorder(client);
    await client.createSession({ avatar_id: avatarId, model: 'rt', tools: [MAP_TOOL] });
    await client.connect();
    await client.start();
    const turnId = await client.chat('Show me nowhere');
    await events.waitFor((e) => e.type === 'status' && e.data.stage === 'idle' && e.data.turn_id === turnId);
    expect(failures).toEqual(['map service down']);
    expect(
      events.seen
        .filter((e) => e.type === 'llm')
        .map((e) => e.data.delta)
        .join(''),
    ).toContain('Result {"error":"map service down"}');
    await client.end();
  });

  it('reconnects its event stream when the stream drops, and stops at session.terminated', async () => {
    let eventStreams = 0;
    // The first event stream ends after its first chunk, as a proxy restarting mid-stream would end it.
    const droppingFetch: typeof fetch = async (input, init) => {
      const response = await fetch(input, init);
      if (!String(input).endsWith('/events') || ++eventStreams > 1) return response;
      const reader = response.body!.getReader();
      const first = await reader.read();
      await reader.cancel();
      return new Response(new ReadableStream({ start: (c) => (c.enqueue(first.value), c.close()) }), {
        status: 200,
        headers: response.headers,
      });
    };
    const client = newClient({ fetch: droppingFetch });
    const events = recorder(client);
    const reconnects: number[] = [];
    client.on('reconnecting', ({ attempt }) => reconnects.push(attempt));
    const sessionId = await client.createSession({ avatar_id: avatarId, model: 'rt' });
    await client.connect();
    await client.start();
    const deadline = Date.now() + TURN_MS;
    while (eventStreams < 2 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50));
    expect(reconnects).toEqual([1]);
    // Wait until the reopened stream is attached before the session ends, so its end is what the client hears.
    await new Promise((resolve) => setTimeout(resolve, 300));
    await fetch(`${t.baseUrl}/sessions/${sessionId}`, { method: 'DELETE' });
    await events.waitFor((e) => e.type === 'session.terminated');
    expect(eventStreams).toBe(2);
    client.disconnect();
  });

  it("turns every refusal into an AvatarApiError carrying the status and the service's detail", async () => {
    const client = newClient();
    await expectApiError(client.createSession({ avatar_id: 'no-such-avatar', model: 'rt' }), 400, /avatar/);
    await expectApiError(client.createSession({ avatar_id: avatarId, model: '' } as never), 400, /model/);
    client.attach('00000000-0000-4000-8000-000000000000');
    await expectApiError(client.start(), 404, /not found/);
    await expectApiError(client.session(), 404, /not found/);
    await expectApiError(client.transcript(), 404, /not found/);
    await expectApiError(client.speak('hello'), 404, /not found/);
    await expectApiError(client.chat('hello'), 404, /not found/);
    await expectApiError(client.pause(), 404, /not found/);
    await expectApiError(client.resume(), 404, /not found/);
    await expectApiError(client.sendToolResult('call_x', {}), 404, /not found/);
    await expectApiError(client.connect(), 404, /not found/);

    await client.createSession({ avatar_id: avatarId, model: 'rt' });
    await expectApiError(client.speak('before start'), 409, /not started/);
    await expectApiError(client.sendToolResult('call_unknown', { ok: true }), 404, /call/);
    await expectApiError(client.speak(''), 400, /text/);
    await client.end();
    await expectApiError(
      new AvatarClient({ server: t.baseUrl }).request('POST', '/sessions', { avatar_id: avatarId }),
      400,
      /model/,
    );
  });

  it('says the service was not reached with an AvatarNetworkError, and needs a session before a session verb', async () => {
    const closed = new AvatarClient({ server: 'http://127.0.0.1:9' });
    await expect(closed.createSession({ avatar_id: 'a', model: 'rt' })).rejects.toBeInstanceOf(AvatarNetworkError);
    await expect(new AvatarClient({ server: t.baseUrl }).speak('hi')).rejects.toThrow(/no session/);
  });
});
