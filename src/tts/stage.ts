/**
 * What the TTS routes (`/tts/preview`, `/tts/voices`, `/voices`) use of the TTS stage: the provider ids a request
 * may name, and the audio plumbing a preview answer is made with (concatenation, resampling, WAV). Routes reach
 * the stage through here, never `actors/` directly; sessions reach it through the persona rule.
 */
export { isTtsProviderId, TTS_PROVIDER_IDS, type TtsProviderId } from '../../actors/tts/types.ts';
export { concatPcm } from '../../actors/audio/decode.ts';
export { resamplePcm16 } from '../../actors/audio/resample.ts';
export { encodeWav } from '../../actors/audio/wav.ts';
export { isAbortError } from '../../actors/upstream/abort.ts';
