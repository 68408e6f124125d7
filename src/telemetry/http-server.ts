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

/**
 * How long a client may hold the health server: probes and scrapes are small requests answered at once.
 * Node checks the header and request deadlines every `connectionsCheckingInterval`.
 */
const LIMITS = {
  headersTimeoutMs: 5_000,
  requestTimeoutMs: 10_000,
  keepAliveTimeoutMs: 5_000,
  /** A connection with no traffic at all for this long is closed. */
  idleTimeoutMs: 30_000,
  /** Kubernetes' probes and a few scrapers need a handful; further connections are refused. */
  maxConnections: 256,
};

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
  const server: Server = createServer({ connectionsCheckingInterval: 1000 }, (request, response) => {
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
        (error: Error) =>
          response.writeHead(500, { 'content-type': 'text/plain; charset=utf-8' }).end(error.message),
      );
    } else {
      response.writeHead(404).end();
    }
  });
  // Node's defaults let one client hold a socket for minutes (headers 60 s, request 300 s, an idle
  // connection forever) and open any number of them: a scraper or a hostile peer in the cluster could
  // then keep close() (and so the consumer's shutdown) waiting, or take the process's file descriptors.
  server.headersTimeout = LIMITS.headersTimeoutMs;
  server.requestTimeout = LIMITS.requestTimeoutMs;
  server.keepAliveTimeout = LIMITS.keepAliveTimeoutMs;
  server.setTimeout(LIMITS.idleTimeoutMs, (socket) => socket.destroy());
  server.maxConnections = LIMITS.maxConnections;
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
    close: () =>
      new Promise((resolve) => {
        server.close(() => resolve());
        // A probe or a scrape cut short is retried by its caller; a shutdown held up is not.
        server.closeAllConnections();
      }),
  };
}
