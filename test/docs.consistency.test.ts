import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../src/config.ts';
import { REMOTE_TTS_PROVIDER_IDS } from '../actors/tts/registry.ts';
import { envVarName } from '../actors/tts/providers/common.ts';

/** The documentation a newcomer reads first says what the code does: numbers, ports and variable names. */

const REPO_ROOT = path.resolve(import.meta.dirname, '..');
const read = (relative: string) => fs.readFileSync(path.join(REPO_ROOT, relative), 'utf8');
const README = read('README.md');
const DOCS = fs
  .readdirSync(path.join(REPO_ROOT, 'docs'))
  .filter((name) => name.endsWith('.md'))
  .map((name) => ({ file: `docs/${name}`, text: read(`docs/${name}`) }));
const CONFIG_SOURCE = read('src/config.ts');
const DEFAULTS = loadConfig({}, REPO_ROOT);

const NUMBER_WORDS: Record<string, number> = {
  one: 1,
  two: 2,
  three: 3,
  four: 4,
  five: 5,
  six: 6,
  seven: 7,
  eight: 8,
  nine: 9,
  ten: 10,
};

/** Bundles the catalog lists: directories with a manifest, not hidden, not in-progress (`.`) or custom. */
function builtInAvatarCount(): number {
  const dir = path.join(REPO_ROOT, 'avatars');
  return fs.readdirSync(dir, { withFileTypes: true }).filter((entry) => {
    if (!entry.isDirectory() || entry.name.startsWith('.') || entry.name.startsWith('custom-')) return false;
    const manifest = path.join(dir, entry.name, 'manifest.json');
    if (!fs.existsSync(manifest)) return false;
    return (
      (JSON.parse(fs.readFileSync(manifest, 'utf8')) as { metadata?: { hidden?: unknown } }).metadata?.hidden !== true
    );
  }).length;
}

/** Every variable the service reads: the literal names in src/config.ts and the TTS providers' endpoint variables. */
function variablesRead(): { literal: Set<string>; provider: Set<string> } {
  const literal = new Set([...CONFIG_SOURCE.matchAll(/'(SERVICE_[A-Z0-9_]+)'/gu)].map((match) => match[1]));
  const provider = new Set(
    REMOTE_TTS_PROVIDER_IDS.flatMap((id) => [envVarName(id, 'BASE_URL'), envVarName(id, 'API_KEY')]),
  );
  return { literal, provider };
}

/** `SERVICE_*` names in a text; templates such as `SERVICE_TTS_<ID>_BASE_URL` or `SERVICE_*` are not names. */
function namesIn(text: string): string[] {
  return [...text.matchAll(/(?<![A-Z0-9_])SERVICE_[A-Z0-9_]*/gu)]
    .map((match) => match[0])
    .filter((name) => !name.endsWith('_'));
}

describe('README numbers', () => {
  it('names as many built-in avatars as avatars/ holds', () => {
    const match = /\b(\w+) built-in avatars\b/u.exec(README);
    expect(match, 'README states the number of built-in avatars').not.toBeNull();
    const stated = NUMBER_WORDS[match![1].toLowerCase()] ?? Number(match![1]);
    expect(stated).toBe(builtInAvatarCount());
  });

  it('points the browser at the default host and port', () => {
    expect(README).toContain(`http://${DEFAULTS.host}:${DEFAULTS.port}/`);
    expect(README).toContain(`Avatar service ready at http://${DEFAULTS.host}:${DEFAULTS.port}`);
  });

  it('never suggests running an upstream server on the service’s own default port', () => {
    const upstreamUrls = [
      ...[...README.matchAll(/_BASE_URL=(\S+)/gu)].map((match) => ({ file: 'README.md', url: match[1] })),
      ...DOCS.filter(({ file }) => file === 'docs/llm-asr.md' || file === 'docs/providers.md').flatMap(
        ({ file, text }) =>
          [...text.matchAll(/https?:\/\/(?:127\.0\.0\.1|localhost):\d+[^\s`|)]*/gu)].map((match) => ({
            file,
            url: match[0],
          })),
      ),
    ];
    expect(upstreamUrls.length).toBeGreaterThan(3);
    const clashing = upstreamUrls.filter(({ url }) => new URL(url).port === String(DEFAULTS.port));
    expect(clashing).toEqual([]);
  });
});

describe('SERVICE_* variables in the documentation', () => {
  const { literal, provider } = variablesRead();

  it('every name in README.md and docs/*.md is one the service reads', () => {
    const unknown = [{ file: 'README.md', text: README }, ...DOCS].flatMap(({ file, text }) =>
      namesIn(text)
        .filter((name) => !literal.has(name) && !provider.has(name))
        .map((name) => `${file}: ${name}`),
    );
    expect([...new Set(unknown)]).toEqual([]);
  });

  it('every variable src/config.ts reads has a row in docs/configuration.md', () => {
    const configuration = read('docs/configuration.md');
    expect(literal.size).toBeGreaterThan(20);
    const undocumented = [...literal].filter((name) => !configuration.includes(`\`${name}\``));
    expect(undocumented).toEqual([]);
  });

  it('the TTS providers’ endpoint variables are documented by their pattern and each by name in docs/providers.md', () => {
    const configuration = read('docs/configuration.md');
    expect(configuration).toContain('`SERVICE_TTS_<ID>_BASE_URL`, `SERVICE_TTS_<ID>_API_KEY`');
    const providers = read('docs/providers.md');
    const unnamed = REMOTE_TTS_PROVIDER_IDS.filter((id) => !providers.includes(`SERVICE_TTS_${id.toUpperCase()}_`));
    expect(unnamed).toEqual([]);
  });
});
