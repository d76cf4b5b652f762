import fp from 'fastify-plugin';
import type { FastifyError, FastifyInstance } from 'fastify';
import { HttpError } from '../../errors.ts';
import { ProviderNotConfiguredError, UpstreamError, VoiceNotFoundError } from '../../../actors/tts/types.ts';
import { MalformedSdpError } from '../../../actors/media/webrtc.ts';

/**
 * One place that turns errors into `{detail}` answers (spec 7): 4xx with the reason, 502 with the
 * upstream text, 500 with a generic message while the exception is only logged.
 */
export default fp(async function errorPlugin(app: FastifyInstance) {
  app.setErrorHandler((error: FastifyError | Error, request, reply) => {
    if (error instanceof HttpError) {
      reply.headers(error.headers).code(error.statusCode).send({ detail: error.detail });
      return;
    }
    if (error instanceof UpstreamError) {
      request.log.warn({ upstreamStatus: error.upstreamStatus }, 'upstream provider error');
      reply.code(502).send({ detail: error.message });
      return;
    }
    if (error instanceof VoiceNotFoundError || error instanceof ProviderNotConfiguredError || error instanceof MalformedSdpError) {
      reply.code(400).send({ detail: error.message });
      return;
    }
    const fastifyError = error as FastifyError;
    if (fastifyError.validation) {
      reply.code(400).send({ detail: `${fastifyError.validationContext ?? 'request'} ${fastifyError.message}`.trim() });
      return;
    }
    const status = fastifyError.statusCode;
    if (status === 413 || fastifyError.code === 'FST_REQ_FILE_TOO_LARGE' || fastifyError.code === 'FST_ERR_CTP_BODY_TOO_LARGE') {
      reply.code(413).send({ detail: 'payload too large' });
      return;
    }
    if (typeof status === 'number' && status >= 400 && status < 500) {
      reply.code(status).send({ detail: fastifyError.message });
      return;
    }
    request.log.error({ err: error }, 'unhandled error');
    reply.code(500).send({ detail: 'internal server error' });
  });

  app.setNotFoundHandler((request, reply) => {
    reply.code(404).send({ detail: `route ${request.method} ${request.url.split('?')[0]} not found` });
  });
});
