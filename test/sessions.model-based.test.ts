import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import wrtc from '@roamhq/wrtc';
import { json, post, startTestApp, type TestApp } from './helpers/app.ts';
import { pcmBytes, postAudio, sleep, tone } from './helpers/conversation.ts';
import { SseClient } from './helpers/sse.ts';
import { startOpenAiUpstream, type OpenAiUpstream } from './fakes/openai-upstream.ts';

/**
 * Model-based test on the real service (fakes only for the LLM/ASR upstreams): random command sequences
 * over start, speak, chat, transcribe, interrupt, pause, resume, offer and delete are checked against the
 * spec's state table (3.1, 3.2, 8): what is allowed answers 200, what is not answers 409, never a 5xx;
 * terminated is final; the SSE stream keeps spec 6.1's rules whatever the sequence.
 */

/** A turn is certainly still in flight this soon after it was accepted (the speak text takes seconds to say). */
const SURELY_BUSY_MS = 1_200;
/** Interrupt settles within ~200 ms (spec 3.2); the model waits this long for `idle` before going on. */
const SETTLE_WAIT_MS = 1_500;
const LONG_TEXT =
  'This sentence is long enough to keep the avatar talking for several seconds, so a second request must wait.';

type State = 'created' | 'running' | 'paused' | 'terminated';
interface Model {
  state: State;
  /** When the last turn was accepted; null when certainly idle. */
  turnSince: number | null;
}
interface Real {
  t: TestApp;
  sessionId: string;
  offerSdp: string;
  statuses: number[];
}

function busy(model: Model): 'no' | 'yes' | 'maybe' {
  if (model.turnSince === null) return 'no';
  return performance.now() - model.turnSince < SURELY_BUSY_MS ? 'yes' : 'maybe';
}

async function expectState(real: Real, model: Model): Promise<void> {
  const res = await fetch(`${real.t.baseUrl}/sessions/${real.sessionId}`);
  expect(res.status).toBe(200);
  expect((await json(res)).state).toBe(model.state);
}

async function waitIdle(real: Real): Promise<void> {
  const deadline = performance.now() + SETTLE_WAIT_MS;
  while (performance.now() < deadline) {
    const body = await json(await fetch(`${real.t.baseUrl}/sessions/${real.sessionId}`));
    if (body.pipeline === 'idle') return;
    await sleep(25);
  }
  throw new Error('pipeline did not settle to idle after interrupt');
}

/** `speak 200`, `speak 409`, … across all runs: the test checks it explored both sides of the table. */
const outcomes = new Map<string, number>();

function record(real: Real, status: number, command = 'other'): number {
  real.statuses.push(status);
  outcomes.set(`${command} ${status}`, (outcomes.get(`${command} ${status}`) ?? 0) + 1);
  expect(status, 'no 5xx').toBeLessThan(500);
  return status;
}

/** A turn request (speak, chat, transcribe): allowed only when running and not busy. */
async function turnCommand(
  model: Model,
  real: Real,
  name: string,
  send: () => Promise<Response>,
  settlesAtOnce: boolean,
): Promise<void> {
  const res = await send();
  const status = record(real, res.status, name);
  const body = await res.text();
  const expectedBusy = busy(model);
  if (model.state !== 'running' || expectedBusy === 'yes') {
    expect(status, body).toBe(409);
  } else if (expectedBusy === 'no') {
    expect(status, body).toBe(200);
  } else {
    expect([200, 409]).toContain(status);
  }
  if (status === 200) model.turnSince = settlesAtOnce ? null : performance.now();
  await expectState(real, model);
}

class Start implements fc.AsyncCommand<Model, Real> {
  check = () => true;
  async run(model: Model, real: Real) {
    const status = record(real, (await post(real.t.baseUrl, `/sessions/${real.sessionId}/start`)).status, 'start');
    if (model.state === 'created') {
      expect(status).toBe(200);
      model.state = 'running';
    } else {
      expect(status).toBe(409);
    }
    await expectState(real, model);
  }
  toString = () => 'start';
}

class Speak implements fc.AsyncCommand<Model, Real> {
  check = () => true;
  run = (model: Model, real: Real) =>
    turnCommand(
      model,
      real,
      'speak',
      () => post(real.t.baseUrl, `/sessions/${real.sessionId}/speak`, { text: LONG_TEXT }),
      false,
    );
  toString = () => 'speak';
}

class Chat implements fc.AsyncCommand<Model, Real> {
  check = () => true;
  run = (model: Model, real: Real) =>
    turnCommand(
      model,
      real,
      'chat',
      () => post(real.t.baseUrl, `/sessions/${real.sessionId}/chat`, { prompt: 'Say something.' }),
      false,
    );
  toString = () => 'chat';
}

class Transcribe implements fc.AsyncCommand<Model, Real> {
  check = () => true;
  // Without trigger_chat the request answers once the transcript is there: the pipeline is idle again.
  run = (model: Model, real: Real) =>
    turnCommand(
      model,
      real,
      'transcribe',
      () => postAudio(real.t.baseUrl, `/sessions/${real.sessionId}/transcribe`, pcmBytes(tone(16_000, 300))),
      true,
    );
  toString = () => 'transcribe';
}

class Interrupt implements fc.AsyncCommand<Model, Real> {
  check = () => true;
  async run(model: Model, real: Real) {
    const res = await post(real.t.baseUrl, `/sessions/${real.sessionId}/interrupt`);
    record(real, res.status, 'interrupt');
    if (model.state === 'terminated') {
      expect(res.status).toBe(409);
    } else {
      expect(res.status).toBe(200);
      expect(await json(res)).toEqual({ interrupted: true });
      if (model.state === 'running') await waitIdle(real);
      model.turnSince = null;
    }
    await expectState(real, model);
  }
  toString = () => 'interrupt';
}

class Pause implements fc.AsyncCommand<Model, Real> {
  check = () => true;
  async run(model: Model, real: Real) {
    const status = record(real, (await post(real.t.baseUrl, `/sessions/${real.sessionId}/pause`)).status, 'pause');
    if (model.state === 'running') {
      expect(status).toBe(200);
      model.state = 'paused';
      model.turnSince = null;
    } else {
      expect(status).toBe(409);
    }
    await expectState(real, model);
  }
  toString = () => 'pause';
}

class Resume implements fc.AsyncCommand<Model, Real> {
  check = () => true;
  async run(model: Model, real: Real) {
    const status = record(real, (await post(real.t.baseUrl, `/sessions/${real.sessionId}/resume`)).status, 'resume');
    if (model.state === 'paused') {
      expect(status).toBe(200);
      model.state = 'running';
    } else {
      expect(status).toBe(409);
    }
    await expectState(real, model);
  }
  toString = () => 'resume';
}

class Offer implements fc.AsyncCommand<Model, Real> {
  check = () => true;
  async run(model: Model, real: Real) {
    const status = record(
      real,
      (await post(real.t.baseUrl, `/sessions/${real.sessionId}/webrtc/offer`, { sdp: real.offerSdp, type: 'offer' }))
        .status,
      'offer',
    );
    expect(status).toBe(model.state === 'terminated' ? 409 : 200);
    await expectState(real, model);
  }
  toString = () => 'offer';
}

class Delete implements fc.AsyncCommand<Model, Real> {
  check = () => true;
  async run(model: Model, real: Real) {
    const res = await fetch(`${real.t.baseUrl}/sessions/${real.sessionId}`, { method: 'DELETE' });
    record(real, res.status, 'delete');
    expect(res.status).toBe(200);
    expect(await json(res)).toEqual({ status: 'terminated' });
    model.state = 'terminated';
    model.turnSince = null;
    await expectState(real, model);
  }
  toString = () => 'delete';
}

const commands = [
  fc.constant(new Start()),
  fc.constant(new Speak()),
  fc.constant(new Chat()),
  fc.constant(new Transcribe()),
  fc.constant(new Interrupt()),
  fc.constant(new Pause()),
  fc.constant(new Resume()),
  fc.constant(new Offer()),
  fc.constant(new Delete()),
];

/** Spec 6.1 rules that hold whatever the command sequence was. */
function checkEventStream(sse: SseClient): void {
  const events = sse.events;
  const terminatedAt = events.findIndex((e) => e.type === 'session.terminated');
  if (terminatedAt >= 0) expect(terminatedAt, 'nothing after session.terminated').toBe(events.length - 1);
  const frames = events.filter((e) => e.type === 'frame').map((e) => e.data.frame_idx as number);
  for (let i = 1; i < frames.length; i++) expect(frames[i], 'frame_idx increases').toBeGreaterThan(frames[i - 1]);
  events.forEach((event, index) => {
    if (event.type === 'status')
      expect(['listening', 'thinking', 'speaking', 'idle', 'interrupted', 'error']).toContain(event.data.stage);
    // Rule 5: a recoverable error is followed by idle, an unrecoverable one by session.terminated.
    if (event.type === 'error') {
      const next = events
        .slice(index + 1)
        .find((e) => (e.type === 'status' && e.data.stage === 'idle') || e.type === 'session.terminated');
      expect(next, `error ${JSON.stringify(event.data)} is followed by idle or session.terminated`).toBeDefined();
    }
    if (event.type === 'status' && event.data.stage === 'interrupted') {
      const next = events.slice(index + 1).find((e) => e.type === 'status' || e.type === 'session.terminated');
      expect(
        next === undefined || next.type === 'session.terminated' || next.data.stage === 'idle',
        'interrupted then idle',
      ).toBe(true);
    }
  });
}

describe('random command sequences on a real session follow the spec state table', () => {
  let t: TestApp;
  let upstream: OpenAiUpstream;
  let offerSdp: string;

  beforeAll(async () => {
    upstream = await startOpenAiUpstream({
      chat: {
        replyTokens: [
          'Here ',
          'is ',
          'a ',
          'reply ',
          'that ',
          'takes ',
          'a ',
          'few ',
          'seconds ',
          'to ',
          'say ',
          'out ',
          'loud.',
        ],
        tokenDelayMs: 0,
      },
      transcription: { transcript: 'hello there', delayMs: 0 },
    });
    t = await startTestApp({
      env: {
        SERVICE_LLM_BASE_URL: upstream.baseUrl,
        SERVICE_ASR_BASE_URL: upstream.baseUrl,
        SERVICE_MAX_SESSIONS: '4',
      },
    });
    const pc = new wrtc.RTCPeerConnection();
    pc.addTransceiver('audio', { direction: 'recvonly' });
    pc.addTransceiver('video', { direction: 'recvonly' });
    const offer = await pc.createOffer();
    offerSdp = offer.sdp!;
    pc.close();
  });
  afterAll(async () => {
    await t?.close();
    await upstream?.close();
  });

  it('answers 200 exactly where the table allows, 409 elsewhere, never 5xx; terminated is final', async () => {
    let runs = 0;
    await fc.assert(
      // Half the runs begin with a started session, so pause/resume sequences are reached as often as start ones.
      fc.asyncProperty(
        fc.boolean(),
        fc.commands(commands, { maxCommands: 12, size: 'large' }),
        async (startFirst, cmds) => {
          runs++;
          const created = await post(t.baseUrl, '/sessions', { avatar_id: 'demo-rt', model: 'rt' });
          expect(created.status).toBe(200);
          const { session_id: sessionId } = await json(created);
          const sse = await SseClient.open(`${t.baseUrl}/sessions/${sessionId}/events`);
          const real: Real = { t, sessionId, offerSdp, statuses: [] };
          try {
            if (startFirst) expect((await post(t.baseUrl, `/sessions/${sessionId}/start`)).status).toBe(200);
            const initial: State = startFirst ? 'running' : 'created';
            await fc.asyncModelRun(() => ({ model: { state: initial, turnSince: null }, real }), cmds);
            // Whatever happened, delete ends it; a second delete still answers, and nothing is accepted after.
            expect((await fetch(`${t.baseUrl}/sessions/${sessionId}`, { method: 'DELETE' })).status).toBe(200);
            for (const path of ['start', 'speak', 'pause', 'resume', 'interrupt']) {
              const res = await post(
                t.baseUrl,
                `/sessions/${sessionId}/${path}`,
                path === 'speak' ? { text: 'late' } : undefined,
              );
              expect(res.status, `${path} after delete`).toBe(409);
            }
            await sleep(50);
            checkEventStream(sse);
          } finally {
            sse.close();
          }
        },
      ),
      { numRuns: 30, seed: 20261123, endOnFailure: true },
    );
    expect(runs).toBe(30);
    // The sequences reached both sides of each row of the table, not only the easy ones.
    for (const outcome of [
      'start 200',
      'start 409',
      'speak 200',
      'speak 409',
      'chat 200',
      'chat 409',
      'transcribe 200',
      'transcribe 409',
      'pause 200',
      'pause 409',
      'resume 200',
      'resume 409',
      'offer 200',
      'offer 409',
    ]) {
      expect(outcomes.get(outcome) ?? 0, outcome).toBeGreaterThan(0);
    }
    console.log('model-based outcomes', Object.fromEntries([...outcomes].sort()));
  }, 240_000);
});
