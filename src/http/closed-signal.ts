import type { FastifyReply } from 'fastify';

/**
 * Aborts when the client goes away before the answer is written: the response's `close` fires on a dropped
 * connection too, and `writableFinished` tells that apart from a normal end.
 */
export function closedSignal(reply: FastifyReply): AbortSignal {
  const controller = new AbortController();
  const response = reply.raw;
  response.once('close', () => {
    if (!response.writableFinished) controller.abort(new DOMException('client closed the request', 'AbortError'));
  });
  return controller.signal;
}
