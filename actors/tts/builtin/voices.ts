/**
 * The built-in voice table. Names follow the `<lang>-<region>-<name>Neural` format the interface
 * specification gives for the built-in provider; each maps to an engine voice of matching gender.
 * English uses flite (better quality, phone timings); other languages use eSpeak-NG with its
 * `+f2`/`+m3` voice variants for gender. Documented in docs/voices-builtin.md.
 */
import type { EngineName } from './engine.ts';

export interface BuiltinVoice {
  voice: string;
  lang: string;
  gender: 'female' | 'male';
  engine: EngineName;
  /** Voice name passed to the engine. */
  engineVoice: string;
}

export const BUILTIN_VOICE_TABLE: ReadonlyArray<BuiltinVoice> = Object.freeze([
  { voice: 'en-US-JennyNeural', lang: 'en-US', gender: 'female', engine: 'flite', engineVoice: 'slt' },
  { voice: 'en-US-AriaNeural', lang: 'en-US', gender: 'female', engine: 'flite', engineVoice: 'slt' },
  { voice: 'en-US-GuyNeural', lang: 'en-US', gender: 'male', engine: 'flite', engineVoice: 'rms' },
  { voice: 'en-US-DavisNeural', lang: 'en-US', gender: 'male', engine: 'flite', engineVoice: 'kal16' },
  { voice: 'en-GB-RyanNeural', lang: 'en-GB', gender: 'male', engine: 'flite', engineVoice: 'awb' },
  // Flite ships no British female voice; eSpeak's RP English with a female variant is the closest match.
  { voice: 'en-GB-SoniaNeural', lang: 'en-GB', gender: 'female', engine: 'espeak', engineVoice: 'en-gb-x-rp+f3' },
  { voice: 'de-DE-KatjaNeural', lang: 'de-DE', gender: 'female', engine: 'espeak', engineVoice: 'de+f2' },
  { voice: 'de-DE-ConradNeural', lang: 'de-DE', gender: 'male', engine: 'espeak', engineVoice: 'de+m3' },
  { voice: 'fr-FR-DeniseNeural', lang: 'fr-FR', gender: 'female', engine: 'espeak', engineVoice: 'fr-fr+f2' },
  { voice: 'fr-FR-HenriNeural', lang: 'fr-FR', gender: 'male', engine: 'espeak', engineVoice: 'fr-fr+m3' },
  { voice: 'es-ES-ElviraNeural', lang: 'es-ES', gender: 'female', engine: 'espeak', engineVoice: 'es+f2' },
  { voice: 'es-ES-AlvaroNeural', lang: 'es-ES', gender: 'male', engine: 'espeak', engineVoice: 'es+m3' },
  { voice: 'it-IT-ElsaNeural', lang: 'it-IT', gender: 'female', engine: 'espeak', engineVoice: 'it+f2' },
  { voice: 'it-IT-DiegoNeural', lang: 'it-IT', gender: 'male', engine: 'espeak', engineVoice: 'it+m3' },
  { voice: 'pt-BR-FranciscaNeural', lang: 'pt-BR', gender: 'female', engine: 'espeak', engineVoice: 'pt-br+f2' },
  { voice: 'pt-BR-AntonioNeural', lang: 'pt-BR', gender: 'male', engine: 'espeak', engineVoice: 'pt-br+m3' },
  { voice: 'nl-NL-ColetteNeural', lang: 'nl-NL', gender: 'female', engine: 'espeak', engineVoice: 'nl+f2' },
  { voice: 'nl-NL-MaartenNeural', lang: 'nl-NL', gender: 'male', engine: 'espeak', engineVoice: 'nl+m3' },
  { voice: 'pl-PL-ZofiaNeural', lang: 'pl-PL', gender: 'female', engine: 'espeak', engineVoice: 'pl+f2' },
  { voice: 'pl-PL-MarekNeural', lang: 'pl-PL', gender: 'male', engine: 'espeak', engineVoice: 'pl+m3' },
  { voice: 'ru-RU-SvetlanaNeural', lang: 'ru-RU', gender: 'female', engine: 'espeak', engineVoice: 'ru+f2' },
  { voice: 'ru-RU-DmitryNeural', lang: 'ru-RU', gender: 'male', engine: 'espeak', engineVoice: 'ru+m3' },
  { voice: 'ja-JP-NanamiNeural', lang: 'ja-JP', gender: 'female', engine: 'espeak', engineVoice: 'ja+f2' },
  { voice: 'ja-JP-KeitaNeural', lang: 'ja-JP', gender: 'male', engine: 'espeak', engineVoice: 'ja+m3' },
  { voice: 'zh-CN-XiaoxiaoNeural', lang: 'zh-CN', gender: 'female', engine: 'espeak', engineVoice: 'cmn+f2' },
  { voice: 'zh-CN-YunxiNeural', lang: 'zh-CN', gender: 'male', engine: 'espeak', engineVoice: 'cmn+m3' },
]);

export const BUILTIN_DEFAULT_VOICE = 'en-US-JennyNeural';

const voicesByLowerCaseName = new Map(BUILTIN_VOICE_TABLE.map((entry) => [entry.voice.toLowerCase(), entry]));

/** Voice names are matched case-insensitively; returns undefined for unknown names. */
export function findBuiltinVoice(voice: string): BuiltinVoice | undefined {
  return voicesByLowerCaseName.get(voice.trim().toLowerCase());
}
