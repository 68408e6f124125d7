import { describe, expect, it } from 'vitest';
import { buildAdminApp } from '../../src/gateway/admin-app.ts';
import { GatewayMetrics } from '../../src/gateway/metrics.ts';

describe("gateway: the admin port's routes", () => {
  const app = () =>
    buildAdminApp({
      metrics: new GatewayMetrics({ defaultMetrics: false }),
      isReady: () => true,
      version: '0.0.0',
      maxBatch: 10,
      maxBodyBytes: 1024,
    });

  it('answers GET and HEAD, and another method on a route 405 with the methods it takes', async () => {
    const admin = app();
    try {
      for (const url of ['/healthz', '/readyz', '/metrics', '/openapi.json']) {
        expect((await admin.inject({ method: 'GET', url })).statusCode, url).toBe(200);
        expect((await admin.inject({ method: 'HEAD', url })).statusCode, url).toBe(200);
        for (const method of ['POST', 'PUT', 'DELETE'] as const) {
          const answer = await admin.inject({ method, url: `${url}?x=1` });
          expect([answer.statusCode, answer.headers.allow], `${method} ${url}`).toEqual([405, 'GET, HEAD']);
          expect(answer.json()).toEqual({
            error: 'method-not-allowed',
            message: `${url} takes GET and HEAD only`,
          });
        }
      }
      const elsewhere = await admin.inject({ method: 'POST', url: '/v1/notifications' });
      expect([elsewhere.statusCode, elsewhere.json().error]).toEqual([404, 'not-found']);
      // A target fastify cannot decode is answered in the same shape, without quoting it.
      const undecodable = await admin.inject({ method: 'GET', url: '/healthz%zz' });
      expect(undecodable.statusCode).toBe(400);
      expect(undecodable.json()).toMatchObject({ error: 'bad-request' });
      expect(undecodable.body).not.toContain('%zz');
    } finally {
      await admin.close();
    }
  });

  it('serves the metrics as Prometheus text format 0.0.4, whatever the scraper accepts', async () => {
    const admin = app();
    try {
      const answer = await admin.inject({
        method: 'GET',
        url: '/metrics',
        headers: { accept: 'application/openmetrics-text; version=1.0.0' },
      });
      expect(answer.headers['content-type']).toBe('text/plain; version=0.0.4; charset=utf-8');
      expect(answer.body).toContain('# TYPE aqueduct_gateway_requests_total counter');
      expect(answer.body).not.toContain('# EOF');
    } finally {
      await admin.close();
    }
  });
});
