import { Redis, type RedisOptions } from 'ioredis';
import type { Config } from '../config.ts';
import { tlsWhenWanted } from '../tls.ts';

/** The settings {@link redisSecurity} and {@link createRedis} read. */
export type RedisConnectionSettings = Pick<
  Config,
  | 'REDIS_URL'
  | 'REDIS_USERNAME'
  | 'REDIS_PASSWORD'
  | 'REDIS_TLS'
  | 'REDIS_TLS_CA_FILE'
  | 'REDIS_TLS_CERT_FILE'
  | 'REDIS_TLS_KEY_FILE'
  | 'REDIS_TLS_REJECT_UNAUTHORIZED'
>;

/**
 * ioredis options for authentication and TLS: the ACL user and password when given apart from the URL,
 * and TLS (CA, client certificate and key from their PEM files) when REDIS_TLS is on, the URL is
 * `rediss://`, or a TLS file is given.
 */
export function redisSecurity(settings: RedisConnectionSettings): RedisOptions {
  const options: RedisOptions = {};
  if (settings.REDIS_USERNAME) options.username = settings.REDIS_USERNAME;
  if (settings.REDIS_PASSWORD) options.password = settings.REDIS_PASSWORD;
  const tls = tlsWhenWanted(settings.REDIS_TLS || settings.REDIS_URL.startsWith('rediss:'), {
    caFile: settings.REDIS_TLS_CA_FILE,
    certFile: settings.REDIS_TLS_CERT_FILE,
    keyFile: settings.REDIS_TLS_KEY_FILE,
    rejectUnauthorized: settings.REDIS_TLS_REJECT_UNAUTHORIZED,
    names: { ca: 'REDIS_TLS_CA_FILE', cert: 'REDIS_TLS_CERT_FILE', key: 'REDIS_TLS_KEY_FILE' },
  });
  if (tls) options.tls = tls;
  return options;
}

/** A Redis client for REDIS_URL with the configured credentials and TLS, plus `options` (retries, pipelining). */
export function createRedis(settings: RedisConnectionSettings, options: RedisOptions = {}): Redis {
  return new Redis(settings.REDIS_URL, { ...options, ...redisSecurity(settings) });
}
