/**
 * What the service's domain (sessions, the persona rule, the avatar catalog, admission queues) refuses, in its
 * own words. Each error carries a client-safe `detail` (its message: no path, no secret, client text quoted by
 * `quoteClientValue`) and knows nothing of HTTP or WebSockets: the error plugin (`src/plugins/app/errors.ts`)
 * maps each class to its status once, the audio WebSockets (`src/routes/audio-stream.ts`) to their error codes.
 * One module for the whole service, not one per folder: the same refusal (a full queue, an unknown pick) comes
 * from sessions, catalog and previews alike, and the maps need every class in one place.
 */
import { Overloaded } from '../actors/admission.ts';

/** A refusal the domain decided; `detail` is what the client is told. */
export abstract class DomainError extends Error {
  constructor(readonly detail: string) {
    super(detail);
    this.name = new.target.name;
  }
}

/** No live session and no tombstone has this id. */
export class SessionNotFound extends DomainError {
  constructor() {
    super('session not found');
  }
}

/** The session ended (a tombstone, or torn down right now): nothing more reaches it. */
export class SessionTerminated extends DomainError {
  constructor() {
    super('session is terminated');
  }
}

/** The session's state does not accept the request now; `detail` is the machine's reason (`refusalDetail`). */
export class NotAdmitted extends DomainError {}

/**
 * The service cannot take this now, the request itself was fine (a cap or a bounded queue is full, the process is
 * out of file descriptors, it is shutting down): `Overloaded{retryAfterS}`, declared beside the admission primitive
 * (`actors/admission.ts`) because actors refuse work too, and answered once by the error plugin (503 + Retry-After).
 */
export { Overloaded };

/** A resource of a session (a WHEP viewer, an output) that the session does not have. */
export class SessionResourceNotFound extends DomainError {}

/** The session already has as many outputs as it may (`MAX_OUTPUTS_PER_SESSION`); delete one first. */
export class OutputLimitReached extends DomainError {}

/** The request picked something that cannot serve it: an avatar, model, TTS provider or voice (unknown, unconfigured, unfit). */
export class InvalidSelection extends DomainError {}

/** A value the request gave is malformed or out of bounds (a name, an image). */
export class InvalidInput extends DomainError {}

/** The avatar a request is about (not one it picks for a session, which is `InvalidSelection`) does not exist. */
export class AvatarNotFound extends DomainError {}

/** A tool result names a call the session never made (or one forgotten long ago). */
export class ToolCallNotFound extends DomainError {
  constructor() {
    super('no tool call with this call_id in this session');
  }
}

/** A tool result came too late: the call's deadline passed, it was answered already, or its turn was interrupted. */
export class ToolCallClosed extends DomainError {}

/** A backend the service depends on (a renderer) failed; `detail` is its path-free error text. */
export class BackendFailed extends DomainError {}

/** An invariant of the service broke; `detail` says which, without internals. */
export class ServiceFault extends DomainError {}

/** Retry-After of a descriptor shortage: idle connections time out within seconds (HEADERS_TIMEOUT_MS, KEEP_ALIVE_TIMEOUT_MS). */
export const OUT_OF_FILES_RETRY_AFTER_S = 5;
/** How deep `isOutOfFileDescriptors` follows `cause`: wrappers add a level or two, never more. */
const CAUSE_DEPTH = 5;
/** A process (EMFILE) or the system (ENFILE) out of file descriptors, as a code or, across a worker, in the message. */
const OUT_OF_FILES_TEXT = /\bE[MN]FILE\b/u;

/**
 * Whether an error, or one it wraps (`cause`), is a shortage of file descriptors: the service is overloaded,
 * the request was fine, so it is refused with `outOfFileDescriptors` (503 with Retry-After), never 500 or 502.
 */
export function isOutOfFileDescriptors(error: unknown): boolean {
  for (
    let current = error, depth = 0;
    current instanceof Error && depth < CAUSE_DEPTH;
    current = current.cause, depth++
  ) {
    const code = (current as NodeJS.ErrnoException).code;
    if (code === 'EMFILE' || code === 'ENFILE' || OUT_OF_FILES_TEXT.test(current.message)) return true;
  }
  return false;
}

export const outOfFileDescriptors = () =>
  new Overloaded(
    'the service has too many files and connections open right now; retry later',
    OUT_OF_FILES_RETRY_AFTER_S,
  );
