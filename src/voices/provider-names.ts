/**
 * Honest names (issue 45): which real service or engine each TTS provider id stands for, and what each built-in
 * voice really is. The provider ids and the built-in voice ids are the specification's and stay as ids; these
 * names go beside them in GET /health, GET /tts/voices, GET /voices and the page.
 */
import { BUILTIN_VOICE_TABLE, type BuiltinVoice } from '../../actors/tts/builtin/voices.ts';
import type { TtsProviderId } from '../../actors/tts/types.ts';

/** The service behind each provider id (protocols in docs/providers.md). */
export const TTS_PROVIDER_SERVICES: Readonly<Record<TtsProviderId, string>> = Object.freeze({
  builtin: 'Built-in offline voices (flite and eSpeak NG)',
  cloud_a: 'Alibaba Cloud DashScope Qwen-TTS',
  cloud_b: 'Alibaba Cloud DashScope CosyVoice',
  cloud_c: 'ElevenLabs',
  cloud_d: 'fal.ai F5-TTS',
  cloud_e: 'Azure AI Speech',
  cloud_f: 'Google Cloud Text-to-Speech',
  local_clone_a: 'Coqui XTTS-v2 server (self-hosted)',
  local_clone_b: 'CosyVoice server (self-hosted)',
  compat_http: 'OpenAI-compatible speech API',
});

const ENGINE_NAMES: Record<BuiltinVoice['engine'], string> = { flite: 'flite', espeak: 'eSpeak NG' };
const LANGUAGES = new Intl.DisplayNames(['en'], { type: 'language' });

/** `en-US-JennyNeural` → `Jenny`. */
export function builtinVoiceName(voice: string): string {
  return /^[a-z]{2,3}-[A-Z]{2}-(.+?)Neural$/u.exec(voice)?.[1] ?? voice;
}

/**
 * What a built-in voice is: engine, engine voice, language and character, and which other ids sound the same
 * (several spec names share one engine voice), e.g. `flite “slt”: American English, female (same voice as Aria)`.
 */
function describeBuiltin(entry: BuiltinVoice): string {
  const twins = BUILTIN_VOICE_TABLE.filter(
    (other) => other !== entry && other.engine === entry.engine && other.engineVoice === entry.engineVoice,
  );
  const language = LANGUAGES.of(entry.lang) ?? entry.lang;
  const same =
    twins.length > 0 ? ` (same voice as ${twins.map((twin) => builtinVoiceName(twin.voice)).join(', ')})` : '';
  return `${builtinVoiceName(entry.voice)}: ${ENGINE_NAMES[entry.engine]} “${entry.engineVoice}”, ${language}, ${entry.gender}${same}`;
}

/** Description per built-in voice id. */
export const BUILTIN_VOICE_DESCRIPTIONS: ReadonlyMap<string, string> = new Map(
  BUILTIN_VOICE_TABLE.map((entry) => [entry.voice, describeBuiltin(entry)]),
);
