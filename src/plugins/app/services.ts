import fp from 'fastify-plugin';
import type { FastifyInstance } from 'fastify';
import type { Services } from '../../services.ts';

declare module 'fastify' {
  interface FastifyInstance {
    services: Services;
  }
}

/** Decorates the instance with the long-lived services, so every route plugin reaches them the same way. */
export default fp(async function servicesPlugin(app: FastifyInstance, opts: { services: Services }) {
  app.decorate('services', opts.services);
});
