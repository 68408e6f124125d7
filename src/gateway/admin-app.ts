import type { FastifyInstance } from 'fastify';
import { boundedFastify } from './bounded-server.ts';
import type { GatewayMetrics } from './metrics.ts';
import { openApiDocument } from './openapi.ts';

/** What {@link buildAdminApp} serves. */
export interface AdminAppOptions {
  metrics: GatewayMetrics;
  /** `/readyz` answers 200 only while this returns true. */
  isReady: () => boolean;
  /** Version shown in the OpenAPI document. */
  version: string;
  maxBatch: number;
  maxBodyBytes: number;
}

/**
 * The gateway's admin app, on a port of its own that callers never reach (the Kubernetes Service does
 * not expose it): `/openapi.json`, `/healthz`, `/readyz` and `/metrics`, none behind an API key.
 */
export function buildAdminApp(options: AdminAppOptions): FastifyInstance {
  const { metrics } = options;
  const app = boundedFastify({});
  const document = openApiDocument({
    version: options.version,
    maxBatch: options.maxBatch,
    maxBodyBytes: options.maxBodyBytes,
  });
  app.get('/openapi.json', async (_request, reply) => reply.send(document));
  app.get('/healthz', async (_request, reply) => reply.send({ status: 'ok' }));
  app.get('/readyz', async (_request, reply) => {
    const ready = options.isReady();
    return reply.code(ready ? 200 : 503).send({ status: ready ? 'ready' : 'not ready' });
  });
  app.get('/metrics', async (_request, reply) =>
    reply.type(metrics.registry.contentType).send(await metrics.registry.metrics()),
  );
  // Another method on a path that exists is a 405 naming the methods it takes (RFC 9110 §15.5.6), as the
  // consumer's health server answers; fastify's default would say the path does not exist.
  app.setNotFoundHandler(async (request, reply) => {
    const path = request.url.split('?')[0] ?? '';
    if (ADMIN_PATHS.includes(path)) {
      return reply
        .code(405)
        .header('allow', 'GET, HEAD')
        .send({ error: 'method-not-allowed', message: `${path} takes GET and HEAD only` });
    }
    return reply.code(404).send({
      error: 'not-found',
      message: `no such route; the admin port serves ${ADMIN_PATHS.join(', ')}`,
    });
  });
  return app;
}

/** The admin app's routes, each served for GET and HEAD. */
const ADMIN_PATHS: readonly string[] = ['/openapi.json', '/healthz', '/readyz', '/metrics'];
