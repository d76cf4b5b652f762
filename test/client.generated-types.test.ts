import fs from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { Type } from '@sinclair/typebox';
import { GENERATED_TYPES_PATH, renderClientTypes } from '../tools/generate-client-types.ts';
import { SessionInfo } from '../src/schemas/sessions.ts';

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
