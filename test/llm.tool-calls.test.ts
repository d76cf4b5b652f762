import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_JSON_DEPTH, nestsDeeperThan } from '../actors/json-depth.ts';
import { createOpenAiLlm } from '../actors/llm/providers/openai.ts';
import { MAX_TOOL_ARGUMENT_BYTES, MAX_TOOL_CALLS_PER_ROUND, ToolCallAssembler } from '../actors/llm/tool-calls.ts';
import { parseToolArguments, runToolRound } from '../actors/llm/tool-round.ts';
import type { LlmToolCall, LlmToolDefinition, ToolInvocation, ToolRunner } from '../actors/llm/types.ts';
import { UpstreamError } from '../actors/upstream/errors.ts';
import { startOpenAiUpstream, type OpenAiUpstream } from './fakes/openai-upstream.ts';
import { caught } from './helpers/caught.ts';

/** The OpenAI provider's side of tool calling against a real loopback server streaming tool_calls deltas. */

const TOOLS: LlmToolDefinition[] = [
  {
    type: 'function',
    function: { name: 'lookup', parameters: { type: 'object', properties: { q: { type: 'string' } } } },
  },
];

let upstream: OpenAiUpstream;
beforeAll(async () => {
  upstream = await startOpenAiUpstream();
});
afterAll(async () => {
  await upstream.close();
});

async function round(tools?: LlmToolDefinition[]): Promise<{ deltas: string[]; calls: LlmToolCall[] | null }> {
  const llm = createOpenAiLlm({ baseUrl: upstream.baseUrl, model: 'm' });
  const deltas: string[] = [];
  let calls: LlmToolCall[] | null = null;
  for await (const delta of llm.stream({
    messages: [{ role: 'user', content: 'hi' }],
    signal: AbortSignal.timeout(10_000),
    tools,
    onToolCalls: (made) => (calls = made),
  })) {
    deltas.push(delta);
  }
  return { deltas, calls };
}

describe('OpenAI provider: streamed tool calls', () => {
  it('assembles interleaved fragments of parallel calls in index order, after the text, and sends the tools', async () => {
    const args = [
      JSON.stringify({ q: 'first query, long enough for many fragments' }),
      JSON.stringify({ q: 'ünïcödé 🙂' }),
    ];
    upstream.setScenario({
      chat: {
        scripted: [
          {
            tokens: ['One', ' moment.'],
            toolCalls: [
              { id: 'a', name: 'lookup', arguments: args[0] },
              { id: 'b', name: 'lookup', arguments: args[1] },
            ],
          },
        ],
      },
    });
    const before = upstream.requests.length;
    const { deltas, calls } = await round(TOOLS);
    expect(deltas).toEqual(['One', ' moment.']);
    expect(calls).toEqual([
      { id: 'a', name: 'lookup', arguments: args[0] },
      { id: 'b', name: 'lookup', arguments: args[1] },
    ]);
    expect(upstream.requests[before].chat!.body.tools).toEqual(TOOLS);
  });

  it('offers no tools and reports no calls when the request has none', async () => {
    upstream.setScenario({
      chat: { scripted: [{ tokens: ['Words.'], toolCalls: [{ id: 'x', name: 'lookup', arguments: '{}' }] }] },
    });
    const before = upstream.requests.length;
    const { deltas, calls } = await round(undefined);
    expect(deltas).toEqual(['Words.']);
    expect(calls).toBeNull();
    expect(upstream.requests[before].chat!.body).not.toHaveProperty('tools');
  });

  it(`refuses more than ${MAX_TOOL_CALLS_PER_ROUND} calls in one answer and arguments over ${MAX_TOOL_ARGUMENT_BYTES} bytes`, async () => {
    const many = Array.from({ length: MAX_TOOL_CALLS_PER_ROUND + 1 }, (_, i) => ({
      id: `c${i}`,
      name: 'lookup',
      arguments: '{}',
    }));
    upstream.setScenario({ chat: { scripted: [{ toolCalls: many }] } });
    const tooMany = await caught(round(TOOLS));
    expect(tooMany).toBeInstanceOf(UpstreamError);
    expect((tooMany as Error).message).toMatch(/more than 16 tool calls/);

    upstream.setScenario({
      chat: {
        scripted: [
          { toolCalls: [{ id: 'big', name: 'lookup', arguments: `{"q":"${'x'.repeat(MAX_TOOL_ARGUMENT_BYTES)}"}` }] },
        ],
      },
    });
    const tooLong = await caught(round(TOOLS));
    expect(tooLong).toBeInstanceOf(UpstreamError);
    expect((tooLong as Error).message).toMatch(/tool arguments over/);
  });
});

describe('tool call pieces', () => {
  it('a whole (non-streamed) reply: calls by position, object arguments as JSON text, missing ids made up, nameless calls dropped', () => {
    const assembler = new ToolCallAssembler('LLM');
    assembler.push([
      { function: { name: 'lookup', arguments: { q: 'x' } } },
      { id: 'given', function: { name: 'lookup', arguments: '{}' } },
      { function: { arguments: '{}' } },
    ]);
    const [first, second, ...rest] = assembler.finish();
    expect(first.id).toMatch(/^call_[0-9a-f]{32}$/);
    expect(first).toMatchObject({ name: 'lookup', arguments: '{"q":"x"}' });
    expect(second).toEqual({ id: 'given', name: 'lookup', arguments: '{}' });
    expect(rest).toEqual([]);
  });

  it.each([
    ['{"q": 1}', { q: 1 }],
    ['', {}],
    ['  ', {}],
    ['[1]', null],
    ['"text"', null],
    ['{"q": ', null],
    ['null', null],
  ])('arguments %j parse to %j', (text, parsed) => {
    expect(parseToolArguments(text)).toEqual(parsed);
  });
});

describe('JSON depth: deep values are found without recursion and never reach a tool', () => {
  /** `depth` levels of objects (or arrays), parsed from text: JSON.parse is iterative, JSON.stringify is not. */
  const nested = (depth: number, open = '{"a":', leaf = '{}', close = '}') =>
    JSON.parse(`${open.repeat(depth - 1)}${leaf}${close.repeat(depth - 1)}`) as unknown;

  it.each([
    ['a scalar', 'x', 0],
    ['an empty object', {}, 1],
    [`${MAX_JSON_DEPTH} levels of objects`, nested(MAX_JSON_DEPTH), MAX_JSON_DEPTH],
    [`${MAX_JSON_DEPTH} levels of arrays`, nested(MAX_JSON_DEPTH, '[', '[]', ']'), MAX_JSON_DEPTH],
    [
      `${MAX_JSON_DEPTH} levels with wide siblings`,
      { wide: Array.from({ length: 1000 }, () => 1), deep: nested(MAX_JSON_DEPTH - 1) },
      MAX_JSON_DEPTH,
    ],
  ])('%s is within the bound', (_name, value, depth) => {
    expect(nestsDeeperThan(value)).toBe(false);
    expect(nestsDeeperThan(value, depth - 1)).toBe(depth > 0);
  });

  it.each([
    [`${MAX_JSON_DEPTH + 1} levels`, nested(MAX_JSON_DEPTH + 1)],
    ['1,000,000 levels of arrays (past where JSON.stringify throws)', nested(1_000_000, '[', '[]', ']')],
    ['100,000 levels below a shallow sibling', [1, { b: nested(100_000) }]],
  ])('%s nests too deep, found without a stack overflow', (_name, value) => {
    expect(nestsDeeperThan(value)).toBe(true);
  });

  it('arguments a server sent as a 5,000-deep object, or as 5,000-deep text, make a tool error; the runner is never called', async () => {
    const assembler = new ToolCallAssembler('test');
    assembler.push([{ index: 0, id: 'as_object', function: { name: 'lookup', arguments: nested(5_000) } }]);
    assembler.push([
      {
        index: 1,
        id: 'as_text',
        function: { name: 'lookup', arguments: `${'{"a":'.repeat(4_999)}{}${'}'.repeat(4_999)}` },
      },
    ]);
    assembler.push([{ index: 2, id: 'flat', function: { name: 'lookup', arguments: { q: 'x' } } }]);
    const calls = assembler.finish();
    const ran: ToolInvocation[] = [];
    const runner: ToolRunner = {
      fillerText: null,
      definitions: () => TOOLS,
      run: async (call) => (ran.push(call), '{"found":true}'),
    };
    const outputs = await runToolRound(runner, 'turn', calls, AbortSignal.timeout(5_000), () => {});
    expect(ran.map((call) => call.callId)).toEqual(['flat']);
    expect(JSON.parse(outputs[0]).error).toMatch(/not a JSON object/);
    expect(JSON.parse(outputs[1]).error).toBe(
      `the arguments of lookup nest deeper than ${MAX_JSON_DEPTH} levels; the tool was not called`,
    );
    expect(outputs[2]).toBe('{"found":true}');
  });
});
