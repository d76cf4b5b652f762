import fs from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { Type, type Static } from '@sinclair/typebox';
import { GENERATED_TYPES_PATH, renderClientTypes } from '../tools/generate-client-types.ts';
import * as sessions from '../src/schemas/sessions.ts';
import * as interaction from '../src/schemas/interaction.ts';
import * as tools from '../src/schemas/tools.ts';
import * as sdp from '../src/schemas/sdp.ts';
import { SSE_EVENT_SCHEMAS } from '../src/schemas/events.ts';
import type * as Generated from '../client/generated/api-types.ts';

const { SessionInfo } = sessions;

// The typecheck half: a schema changed without regenerating makes these types differ, and `tsc --noEmit` fails here.
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
type Holds<T extends true> = T;
export type GeneratedTypesMatchTheSchemas = [
  Holds<Same<Generated.CreateSessionRequest, Static<typeof sessions.CreateSessionRequest>>>,
  Holds<Same<Generated.CreateSessionResponse, Static<typeof sessions.CreateSessionResponse>>>,
  Holds<Same<Generated.SessionInfo, Static<typeof sessions.SessionInfo>>>,
  Holds<Same<Generated.SessionTranscript, Static<typeof sessions.SessionTranscript>>>,
  Holds<Same<Generated.SpeakRequest, Static<typeof interaction.SpeakRequest>>>,
  Holds<Same<Generated.ChatRequest, Static<typeof interaction.ChatRequest>>>,
  Holds<Same<Generated.InterruptResponse, Static<typeof interaction.InterruptResponse>>>,
  Holds<Same<Generated.ToolDefinition, Static<typeof tools.ToolDefinition>>>,
  Holds<Same<Generated.ToolResultRequest, Static<typeof tools.ToolResultRequest>>>,
  Holds<Same<Generated.SdpOffer, Static<typeof sdp.SdpOffer>>>,
  Holds<Same<Generated.SdpAnswer, Static<typeof sdp.SdpAnswer>>>,
  Holds<Same<Generated.ServerEvents, { [K in keyof typeof SSE_EVENT_SCHEMAS]: Static<(typeof SSE_EVENT_SCHEMAS)[K]> }>>,
];

describe('the client library types generated from the service schemas', () => {
  it('the committed client/generated/api-types.ts is what the generator writes now (run tools/generate-client-types.ts after a schema change)', async () => {
    expect(await fs.readFile(GENERATED_TYPES_PATH, 'utf8')).toBe(renderClientTypes());
  });

  it('a schema change changes the generated types, so a stale file fails the test above', () => {
    const before = renderClientTypes();
    const properties = SessionInfo.properties as Record<string, unknown>;
    properties.mood = Type.String();
    try {
      expect(renderClientTypes()).not.toBe(before);
      expect(renderClientTypes()).toContain('mood?: string;');
    } finally {
      delete properties.mood;
    }
  });
});
