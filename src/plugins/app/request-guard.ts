import type { IncomingHttpHeaders } from 'node:http';
import fp from 'fastify-plugin';
import type { FastifyInstance, RouteOptions } from 'fastify';
import { forbidden } from '../../errors.ts';
import { errorRef } from '../../schemas/common.ts';
import type { RequestOriginGuard } from '../../security/request-origin.ts';

export interface RequestGuardOptions {
  guard: RequestOriginGuard;
  /** True for a request a cluster node signed (its Origin was judged by the node the client reached). */
  isFromNode(method: string, url: string, headers: IncomingHttpHeaders): boolean;
}

/**
 * Refuses, before any route, a request whose Host does not name this service or whose Origin is a foreign
 * page's (the decision is `RequestOriginGuard`'s, src/security/request-origin.ts). WebSocket upgrades pass
 * through Fastify's routing too, so this hook covers them. Every documented route lists the 403.
 */
export default fp(async function requestGuardPlugin(app: FastifyInstance, opts: RequestGuardOptions) {
  const { guard, isFromNode } = opts;
  app.addHook('onRoute', (route: RouteOptions) => {
    if (!route.schema?.response) return;
    route.schema = { ...route.schema, response: { 403: errorRef, ...(route.schema.response as object) } };
  });
  app.addHook('onRequest', async (request) => {
    const headers = request.raw.headers;
    const refusal = guard.refusal(request.method, headers, isFromNode(request.method, request.raw.url ?? '/', headers));
    if (refusal === null) return;
    request.log.info(
      { origin_refused: headers.origin !== undefined, method: request.method },
      'request refused by the origin guard',
    );
    throw forbidden(refusal);
  });
});
