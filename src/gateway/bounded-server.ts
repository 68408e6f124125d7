import Fastify, { type FastifyInstance } from 'fastify';

/** What bounds a client's hold on the server: every timeout in milliseconds. */
export interface ConnectionLimits {
  /** Headers and body must all have arrived within this time (408 and closed otherwise). */
  requestTimeoutMs: number;
  /** Headers must all have arrived within this time (closed otherwise). */
  headersTimeoutMs: number;
  /** An idle kept-alive connection is closed after this time. */
  keepAliveTimeoutMs: number;
  /** A connection with no traffic at all is closed after this time. */
  connectionTimeoutMs: number;
  /** Most open connections; further ones are closed at once. */
  maxConnections: number;
}

/** The settings' defaults (AQUEDUCT_GATEWAY_*_TIMEOUT_MS, AQUEDUCT_GATEWAY_MAX_CONNECTIONS). */
export const DEFAULT_CONNECTION_LIMITS: ConnectionLimits = {
  requestTimeoutMs: 20_000,
  headersTimeoutMs: 10_000,
  keepAliveTimeoutMs: 5_000,
  connectionTimeoutMs: 30_000,
  maxConnections: 4096,
};

/**
 * A fastify instance whose server drops slow and idle clients: Node checks the header and request
 * deadlines only every `connectionsCheckingInterval` (30 s by default), so the check runs often enough
 * for a deadline to be kept within a fraction of itself.
 */
export function boundedFastify(
  limits: Partial<ConnectionLimits>,
  options: { bodyLimit?: number } = {},
): FastifyInstance {
  const l = { ...DEFAULT_CONNECTION_LIMITS, ...limits };
  const app = Fastify({
    logger: false,
    return503OnClosing: true,
    ...options,
    requestTimeout: l.requestTimeoutMs,
    keepAliveTimeout: l.keepAliveTimeoutMs,
    connectionTimeout: l.connectionTimeoutMs,
    http: {
      headersTimeout: l.headersTimeoutMs,
      requestTimeout: l.requestTimeoutMs,
      connectionsCheckingInterval: Math.max(
        50,
        Math.min(1000, Math.floor(Math.min(l.headersTimeoutMs, l.requestTimeoutMs) / 4)),
      ),
    },
  });
  app.server.maxConnections = l.maxConnections;
  return app;
}
