/**
 * What routes use of sessions, and nothing else: the session (through its verbs), its events and tools as clients
 * see them, the persona rule (a request's voice on the session's), and the session's own refusal of a superseded
 * peer. Other concerns have their own door: client audio uploads `src/http/audio-uploads.ts`, the TTS stage
 * `src/tts/stage.ts`.
 */
export type { Session } from './session.ts';
export type { SessionEventRecord } from './event-hub.ts';
export type { SessionToolDefinition } from './tools.ts';
export {
  defaultsPersona,
  requestOverrides,
  resolveTtsSelection,
  selectTts,
  sessionPersona,
  type PersonaBase,
  type TtsOverrides,
} from './persona.ts';
export type { TtsSelection } from '../../actors/tts/types.ts';
export { PeerGoneError } from '../../actors/media/webrtc.ts';
