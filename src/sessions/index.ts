/**
 * The one import routes need for sessions and the stages behind them, so that a route never reaches into
 * `actors/` or `machines/` itself: the session (its admission), the persona rule, request plumbing
 * (deferreds, queues) and the stage pieces an HTTP edge converts with (upload decoding, WAV, TTS ids).
 */
export type { Session } from './session.ts';
export type { SessionEventRecord } from './event-hub.ts';
export type { SessionToolDefinition } from './tools.ts';
export { AsyncQueue, deferred, type Deferred } from '../../actors/async-queue.ts';
export {
  defaultsPersona,
  requestOverrides,
  resolveTtsSelection,
  selectTts,
  sessionPersona,
  type PersonaBase,
  type TtsOverrides,
} from './persona.ts';
export type { RequestEventType, SessionEvent, TurnInfo } from '../../machines/session.machine.ts';
export { AudioTooLongError, concatPcm, describeDuration, InvalidAudioError, UPLOAD_AUDIO_RULES } from '../../actors/audio/decode.ts';
export { AudioDecoderBusyError, closeAudioDecoder, decodeAudioOffThread } from '../../actors/audio/decode-pool.ts';
export { DecodedDurationWatch } from '../../actors/audio/duration-watch.ts';
export { resamplePcm16 } from '../../actors/audio/resample.ts';
export { encodeWav, pcm16FromLittleEndian } from '../../actors/audio/wav.ts';
export { PLAYOUT_HIGH_WATER_MS } from '../../actors/media/playout.ts';
export { PeerGoneError } from '../../actors/media/webrtc.ts';
export { isTtsProviderId, TTS_PROVIDER_IDS, type TtsProviderId, type TtsSelection } from '../../actors/tts/types.ts';
export { isAbortError } from '../../actors/upstream/abort.ts';
