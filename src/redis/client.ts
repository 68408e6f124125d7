import { Cluster, type ClusterOptions, Redis, type RedisOptions } from 'ioredis';
import type { TlsOptions } from '../tls.ts';

/** A connection to Aqueduct's Redis: one server, or a Redis Cluster (ioredis' Cluster client). */
export type RedisClient = Redis | Cluster;

/** One node of a Redis Cluster to start from. */
export interface RedisNodeAddress {
  host: string;
  port: number;
}

/** Where Aqueduct's Redis is and how to authenticate and encrypt the connection to it. */
export interface RedisConnectionOptions {
  /** `redis://` or `rediss://` URL; credentials may be in it instead of `username`/`password`. */
  url: string;
  /**
   * A Redis Cluster instead of the server at `url` (which is then not used): a few of its nodes, from
   * which the client discovers the rest and which node serves each slot.
   */
  clusterNodes?: readonly RedisNodeAddress[] | undefined;
  /** The ACL user, when not in the URL. */
  username?: string | undefined;
  /** The user's password (or `requirepass`'s), when not in the URL. A secret: never log these options. */
  password?: string | undefined;
  /** Connect over TLS with these certificates (PEM contents, already read). Absent: as the URL says. */
  tls?: TlsOptions | undefined;
}

/** ioredis options for authentication and TLS: the ACL user and password given apart from the URL, and TLS. */
export function redisSecurity(options: RedisConnectionOptions): RedisOptions {
  const security: RedisOptions = {};
  if (options.username) security.username = options.username;
  if (options.password) security.password = options.password;
  if (options.tls) security.tls = { ...options.tls };
  return security;
}

/**
 * A Redis client for the connection (one server at `url`, or the Redis Cluster of `clusterNodes`) with
 * its credentials and TLS, plus `options` (retries, pipelining). On a Cluster, the options that are the
 * whole client's (lazy connect, the retry strategy) are the Cluster's, and the others (and the
 * credentials and TLS) every node connection's; auto-pipelining is not used there (see below).
 */
export function createRedis(connection: RedisConnectionOptions, options: RedisOptions = {}): RedisClient {
  if (!connection.clusterNodes)
    return new Redis(connection.url, { ...options, ...redisSecurity(connection) });
  // Auto-pipelining stays off on a Cluster: ioredis groups a defined script's calls by the node of their
  // first argument, which for a script is `numkeys`, not a key, so calls for keys on different nodes
  // land in one pipeline that the Cluster client then refuses. Each call is routed by its own keys.
  const { enableAutoPipelining: _, lazyConnect, retryStrategy, ...perNode } = options;
  const clusterOptions: ClusterOptions = { redisOptions: { ...perNode, ...redisSecurity(connection) } };
  if (lazyConnect !== undefined) clusterOptions.lazyConnect = lazyConnect;
  // ioredis' own curve for a Cluster grows by 2 ms an attempt, which retries (and logs) an unreachable
  // cluster several times a second for minutes; a single server's default curve is used instead.
  clusterOptions.clusterRetryStrategy = retryStrategy
    ? (times) => retryStrategy(times)
    : (times) => Math.min(times * 50, 2000);
  // The Cluster client resolves node host names to addresses before connecting; over TLS that would
  // check the certificate against an IP address. Kept as given, the name is what TLS verifies (as
  // managed clusters that announce host names with TLS need).
  if (connection.tls) clusterOptions.dnsLookup = (host, callback) => callback(null, host);
  return new Cluster(
    connection.clusterNodes.map((node) => ({ ...node })),
    clusterOptions,
  );
}

/** Parses `host:port` node addresses (REDIS_CLUSTER_NODES' entries, already checked for the form). */
export function redisNodeAddresses(nodes: readonly string[]): RedisNodeAddress[] {
  return nodes.map((node) => {
    const colon = node.lastIndexOf(':');
    return { host: node.slice(0, colon), port: Number(node.slice(colon + 1)) };
  });
}

/**
 * A Redis connection error for the logs: its name and message, and for a Redis Cluster none of whose
 * nodes answered (ioredis' "Failed to refresh slots cache.") the last node's error, which says why.
 */
export function redisErrorSummary(error: Error): { name: string; message: string; cause?: string } {
  const lastNodeError = (error as { lastNodeError?: unknown }).lastNodeError;
  return {
    name: error.name,
    message: error.message,
    ...(lastNodeError instanceof Error ? { cause: lastNodeError.message } : {}),
  };
}

/**
 * Tells `report` about the connection errors of each node of a Redis Cluster (nothing for one server,
 * whose client says them as `error`). ioredis reports a node's errors as `node error`, not `error`, so
 * without this a master that is down, or an address the nodes announce that this host cannot resolve
 * or reach (a client sees only what the cluster announces), leaves nothing but calls that time out.
 * At most one report per node every `everyMs`, with the number held back since the last.
 */
export function onNodeErrors(
  redis: RedisClient,
  report: (error: Error, node: string, suppressed: number) => void,
  everyMs = 5000,
): void {
  if (!(redis instanceof Cluster)) return;
  const last = new Map<string, { at: number; suppressed: number }>();
  redis.on('node error', (error: Error, node: string) => {
    const now = Date.now();
    const seen = last.get(node);
    if (seen && now - seen.at < everyMs) {
      seen.suppressed++;
      return;
    }
    last.set(node, { at: now, suppressed: 0 });
    report(error, node, seen?.suppressed ?? 0);
  });
}
