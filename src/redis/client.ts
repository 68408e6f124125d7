import { type Cluster, Redis, type RedisOptions } from 'ioredis';
import type { TlsOptions } from '../tls.ts';

/** A connection to Aqueduct's Redis: one server, or a Redis Cluster (ioredis' Cluster client). */
export type RedisClient = Redis | Cluster;

/** Where Aqueduct's Redis is and how to authenticate and encrypt the connection to it. */
export interface RedisConnectionOptions {
  /** `redis://` or `rediss://` URL; credentials may be in it instead of `username`/`password`. */
  url: string;
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

/** A Redis client for `connection.url` with its credentials and TLS, plus `options` (retries, pipelining). */
export function createRedis(connection: RedisConnectionOptions, options: RedisOptions = {}): Redis {
  return new Redis(connection.url, { ...options, ...redisSecurity(connection) });
}
