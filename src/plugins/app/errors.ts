import fp from 'fastify-plugin';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { HttpError } from '../../errors.ts';
import {
  AvatarNotFound,
  BackendFailed,
  DomainError,
  InvalidInput,
  InvalidSelection,
  NotAdmitted,
  OutputLimitReached,
  Overloaded,
  ServiceFault,
  SessionResourceNotFound,
  SessionNotFound,
  SessionTerminated,
  ToolCallClosed,
  ToolCallNotFound,
  isOutOfFileDescriptors,
  outOfFileDescriptors,
} from '../../domain-errors.ts';
import { scrubPaths, serializeErrorForLog } from '../../logger.ts';
import { VoiceNotFoundError } from '../../../actors/tts/types.ts';
import { ProviderNotConfiguredError, UpstreamError } from '../../../actors/upstream/errors.ts';
import { MalformedSdpError } from '../../../actors/media/webrtc.ts';

/** What the domain refuses with: its own errors and the overload refusal of every admission (`Overloaded`). */
type Refusal = DomainError | Overloaded;

/** The HTTP status of every domain error (`src/domain-errors.ts`): the one place the domain meets HTTP. */
export const DOMAIN_STATUSES: ReadonlyArray<readonly [abstract new (...args: never[]) => Refusal, number]> = [
  [InvalidInput, 400],
  [InvalidSelection, 400],
  [AvatarNotFound, 404],
  [SessionNotFound, 404],
  [ToolCallNotFound, 404],
  [SessionResourceNotFound, 404],
  [OutputLimitReached, 409],
  [NotAdmitted, 409],
  [ToolCallClosed, 409],
  [SessionTerminated, 409],
  [ServiceFault, 500],
  [BackendFailed, 502],
  [Overloaded, 503],
];

/** The HTTP answer of a domain error: its status, its detail, and Retry-After when it says when to retry. */
export function httpErrorOf(error: Refusal): HttpError {
  const status = DOMAIN_STATUSES.find(([kind]) => error instanceof kind)?.[1] ?? 500;
  return new HttpError(
    status,
    error.detail,
    error instanceof Overloaded ? { 'retry-after': String(error.retryAfterS) } : {},
  );
}

/**
 * One place that turns errors into `{detail}` answers (spec 7): domain errors by `DOMAIN_STATUSES`, 4xx with
 * the reason, 502 with the upstream text, 503 with Retry-After when the process ran out of file descriptors
 * (EMFILE/ENFILE, wherever they come from), 500 with a generic message while the exception is only logged.
 * Every `detail` and every logged error passes through `scrubPaths`, whichever logger the app was built with,
 * so no answer or log line carries a filesystem path.
 */
export default fp(async function errorPlugin(app: FastifyInstance) {
  app.setErrorHandler((error: FastifyError | Error, request, reply) => {
    closeIfBodyStalled(request, reply);
    const refusal = error instanceof DomainError || error instanceof Overloaded ? httpErrorOf(error) : error;
    if (refusal instanceof HttpError) {
      sendDetail(reply.headers(refusal.headers), refusal.statusCode, refusal.detail);
      return;
    }
    // After the deliberate answers: one may quote client text, which must not turn into a 503.
    if (isOutOfFileDescriptors(error)) {
      // Overload, not a defect: logged without the error's text (it may name a file).
      request.log.warn({ code: (error as NodeJS.ErrnoException).code }, 'out of file descriptors');
      const overload = httpErrorOf(outOfFileDescriptors());
      sendDetail(reply.headers(overload.headers), overload.statusCode, overload.detail);
      return;
    }
    if (error instanceof UpstreamError) {
      request.log.warn({ upstreamStatus: error.upstreamStatus }, 'upstream provider error');
      sendDetail(reply, 502, error.message);
      return;
    }
    if (
      error instanceof VoiceNotFoundError ||
      error instanceof ProviderNotConfiguredError ||
      error instanceof MalformedSdpError
    ) {
      sendDetail(reply, 400, error.message);
      return;
    }
    const fastifyError = error as FastifyError;
    if (fastifyError.validation) {
      // Fastify's message already names the part ("body/sdp must be string"); only add it when missing.
      const context = fastifyError.validationContext ?? 'request';
      sendDetail(
        reply,
        400,
        fastifyError.message.startsWith(context) ? fastifyError.message : `${context} ${fastifyError.message}`,
      );
      return;
    }
    const status = fastifyError.statusCode;
    if (
      status === 413 ||
      fastifyError.code === 'FST_REQ_FILE_TOO_LARGE' ||
      fastifyError.code === 'FST_ERR_CTP_BODY_TOO_LARGE'
    ) {
      sendDetail(reply, 413, 'payload too large');
      return;
    }
    if (typeof status === 'number' && status >= 400 && status < 500) {
      sendDetail(reply, status, fastifyError.message);
      return;
    }
    request.log.error({ err: serializeErrorForLog(error) }, 'unhandled error');
    sendDetail(reply, 500, 'internal server error');
  });

  app.setNotFoundHandler((request, reply) => {
    // The client's own URL, echoed as sent: not a server path.
    reply.code(404).send({ detail: `route ${request.method} ${request.url.split('?')[0]} not found` });
  });
});

function sendDetail(reply: FastifyReply, status: number, detail: string): void {
  reply.code(status).send({ detail: scrubPaths(detail) });
}

/**
 * A body someone started reading and then paused (a parser that gave up half-way) is never read by
 * Node again, so the next request on a keep-alive socket would wait behind it. Such an answer closes
 * the connection and lets the rest of the body flow away meanwhile. Bodies nobody touched are drained
 * by Node itself after the answer, and `readMultipart` drains its own before it throws.
 */
function closeIfBodyStalled(request: FastifyRequest, reply: FastifyReply): void {
  const raw = request.raw;
  if (raw.complete || raw.readableFlowing !== false) return;
  reply.header('connection', 'close');
  raw.resume();
}
