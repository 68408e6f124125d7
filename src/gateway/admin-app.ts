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
  return app;
}
