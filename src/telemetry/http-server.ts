import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Registry } from 'prom-client';
import { listenOrExplain } from '../lifecycle.ts';

/** Options of {@link startHealthServer}. */
export interface HealthServerOptions {
  /** Port (0: a free one). */
  port: number;
  /** The setting the port comes from, named in the error when the port is taken. */
  setting?: string;
  host?: string;
  /** `/readyz` answers 200 only while this returns true. */
  isReady: () => boolean;
  /** Served at `/metrics` in Prometheus text format. */
  registry?: Registry;
}

/** A running health/metrics endpoint. */
export interface HealthServer {
  port: number;
  close(): Promise<void>;
}

/**
 * `/healthz` (the process is alive and its event loop turns), `/readyz` (connected to Kafka and Redis
 * and a member of the group) and `/metrics` (Prometheus), for Kubernetes probes and scraping.
 */
export async function startHealthServer(options: HealthServerOptions): Promise<HealthServer> {
  const server: Server = createServer((request, response) => {
    const path = (request.url ?? '/').split('?')[0];
    if (request.method !== 'GET' && request.method !== 'HEAD') {
      response.writeHead(405, { allow: 'GET, HEAD' }).end();
      return;
    }
    if (path === '/healthz') {
      response.writeHead(200, { 'content-type': 'application/json' }).end('{"status":"ok"}');
    } else if (path === '/readyz') {
      const ready = options.isReady();
      response
        .writeHead(ready ? 200 : 503, { 'content-type': 'application/json' })
        .end(JSON.stringify({ status: ready ? 'ready' : 'not ready' }));
    } else if (path === '/metrics' && options.registry) {
      const registry = options.registry;
      registry.metrics().then(
        (text) => response.writeHead(200, { 'content-type': registry.contentType }).end(text),
        (error: Error) => response.writeHead(500).end(error.message),
      );
    } else {
      response.writeHead(404).end();
    }
  });
  const host = options.host ?? '0.0.0.0';
  await listenOrExplain(
    options.setting ?? 'port',
    options.port,
    host,
    () =>
      new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(options.port, host, () => resolve());
      }),
  );
  return {
    port: (server.address() as AddressInfo).port,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
