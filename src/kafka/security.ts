import type { KafkaConfig, SASLOptions } from 'kafkajs';
import type { Config } from '../config.ts';
import { ConfigError } from '../settings.ts';
import { tlsWhenWanted } from '../tls.ts';

/** The settings {@link kafkaSecurity} reads. */
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
 * kafkajs `ssl` and `sasl` settings from the configuration: TLS when KAFKA_TLS is on or a TLS file is
 * given (CA, client certificate and key read from their PEM files), SASL PLAIN or SCRAM when
 * KAFKA_SASL_MECHANISM is set. The result holds the password: hand it to kafkajs, never to a logger.
 */
export function kafkaSecurity(settings: KafkaSecuritySettings): Pick<KafkaConfig, 'ssl' | 'sasl'> {
  const security: Pick<KafkaConfig, 'ssl' | 'sasl'> = {};
  const tls = tlsWhenWanted(settings.KAFKA_TLS, {
    caFile: settings.KAFKA_TLS_CA_FILE,
    certFile: settings.KAFKA_TLS_CERT_FILE,
    keyFile: settings.KAFKA_TLS_KEY_FILE,
    rejectUnauthorized: settings.KAFKA_TLS_REJECT_UNAUTHORIZED,
    names: { ca: 'KAFKA_TLS_CA_FILE', cert: 'KAFKA_TLS_CERT_FILE', key: 'KAFKA_TLS_KEY_FILE' },
  });
  if (tls) security.ssl = tls;
  const mechanism = settings.KAFKA_SASL_MECHANISM;
  if (mechanism) {
    const username = settings.KAFKA_SASL_USERNAME;
    const password = settings.KAFKA_SASL_PASSWORD;
    if (!username || !password) {
      throw new ConfigError('KAFKA_SASL_MECHANISM needs KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD');
    }
    security.sasl = { mechanism, username, password } as SASLOptions;
  }
  return security;
}
