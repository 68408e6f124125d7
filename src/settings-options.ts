import type { Config } from './config.ts';
import type { KafkaSecurityOptions } from './kafka/security.ts';
import type { TopicDurability } from './kafka/topics.ts';
import type { RedisConnectionOptions } from './redis/client.ts';
import { ConfigError } from './settings.ts';
import { tlsWhenWanted } from './tls.ts';

/**
 * The settings (environment variables or `--config` keys, validated by `loadConfig`) turned into the
 * typed options of the clients the verbs build: Kafka security, the Redis connection and the topics'
 * durability. Below this module (src/kafka, src/redis, src/providers, src/pipeline, src/limiter) no
 * setting name is read. A setting that cannot work is refused here, in a message that names it; file
 * contents (PEM files) are read here too, so that such a message can name its setting.
 */

/** The settings {@link kafkaSecurityOptions} reads. */
export type KafkaSecuritySettings = Pick<
  Config,
  | 'KAFKA_SASL_MECHANISM'
  | 'KAFKA_SASL_USERNAME'
  | 'KAFKA_SASL_PASSWORD'
  | 'KAFKA_TLS'
  | 'KAFKA_TLS_CA_FILE'
  | 'KAFKA_TLS_CERT_FILE'
  | 'KAFKA_TLS_KEY_FILE'
  | 'KAFKA_TLS_REJECT_UNAUTHORIZED'
>;

/**
 * Kafka security from the settings: TLS when KAFKA_TLS is on or a TLS file is given (CA, client
 * certificate and key read from their PEM files), SASL PLAIN or SCRAM when KAFKA_SASL_MECHANISM is set.
 * The result holds the password: hand it to `kafkaSecurity`, never to a logger.
 */
export function kafkaSecurityOptions(settings: KafkaSecuritySettings): KafkaSecurityOptions {
  const options: KafkaSecurityOptions = {};
  const tls = tlsWhenWanted(settings.KAFKA_TLS, {
    caFile: settings.KAFKA_TLS_CA_FILE,
    certFile: settings.KAFKA_TLS_CERT_FILE,
    keyFile: settings.KAFKA_TLS_KEY_FILE,
    rejectUnauthorized: settings.KAFKA_TLS_REJECT_UNAUTHORIZED,
    names: { ca: 'KAFKA_TLS_CA_FILE', cert: 'KAFKA_TLS_CERT_FILE', key: 'KAFKA_TLS_KEY_FILE' },
  });
  if (tls) options.tls = tls;
  const mechanism = settings.KAFKA_SASL_MECHANISM;
  if (mechanism) {
    const username = settings.KAFKA_SASL_USERNAME;
    const password = settings.KAFKA_SASL_PASSWORD;
    if (!username || !password) {
      throw new ConfigError('KAFKA_SASL_MECHANISM needs KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD');
    }
    options.sasl = { mechanism, username, password };
  }
  return options;
}

/** The settings {@link redisConnectionOptions} reads. */
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
 * The Redis connection from the settings: REDIS_URL, the ACL user and password when given apart from
 * the URL, and TLS (CA, client certificate and key from their PEM files) when REDIS_TLS is on, the URL
 * is `rediss://`, or a TLS file is given. The result holds the password: never log it.
 */
export function redisConnectionOptions(settings: RedisConnectionSettings): RedisConnectionOptions {
  const options: RedisConnectionOptions = { url: settings.REDIS_URL };
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

/** The durability the settings ask for (AQUEDUCT_TOPIC_REPLICATION_FACTOR, AQUEDUCT_TOPIC_MIN_INSYNC_REPLICAS). */
export function topicDurabilityOf(
  settings: Pick<Config, 'AQUEDUCT_TOPIC_REPLICATION_FACTOR' | 'AQUEDUCT_TOPIC_MIN_INSYNC_REPLICAS'>,
): TopicDurability {
  return {
    replicationFactor: settings.AQUEDUCT_TOPIC_REPLICATION_FACTOR,
    minInsyncReplicas: settings.AQUEDUCT_TOPIC_MIN_INSYNC_REPLICAS,
  };
}
