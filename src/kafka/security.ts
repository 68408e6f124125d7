import { readFileSync } from 'node:fs';
import type { ConnectionOptions } from 'node:tls';
import type { KafkaConfig, SASLOptions } from 'kafkajs';
import { type Config, ConfigError } from '../config.ts';

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
  const tlsWanted =
    settings.KAFKA_TLS ||
    settings.KAFKA_TLS_CA_FILE !== undefined ||
    settings.KAFKA_TLS_CERT_FILE !== undefined ||
    settings.KAFKA_TLS_KEY_FILE !== undefined;
  if (tlsWanted) {
    security.ssl = tlsOptions({
      caFile: settings.KAFKA_TLS_CA_FILE,
      certFile: settings.KAFKA_TLS_CERT_FILE,
      keyFile: settings.KAFKA_TLS_KEY_FILE,
      rejectUnauthorized: settings.KAFKA_TLS_REJECT_UNAUTHORIZED,
      names: { ca: 'KAFKA_TLS_CA_FILE', cert: 'KAFKA_TLS_CERT_FILE', key: 'KAFKA_TLS_KEY_FILE' },
    });
  }
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

/** Options of {@link tlsOptions}. */
export interface TlsFiles {
  caFile: string | undefined;
  certFile: string | undefined;
  keyFile: string | undefined;
  rejectUnauthorized: boolean;
  /** The settings the files came from, for error messages. */
  names: { ca: string; cert: string; key: string };
}

/** Node TLS options with the PEM files read; a file that cannot be read is a ConfigError naming its setting. */
export function tlsOptions(files: TlsFiles): ConnectionOptions {
  const read = (path: string | undefined, name: string): Buffer | undefined => {
    if (path === undefined) return undefined;
    try {
      return readFileSync(path);
    } catch (error) {
      throw new ConfigError(
        `cannot read ${name}=${path} (${(error as NodeJS.ErrnoException).code ?? 'unreadable'})`,
      );
    }
  };
  const ca = read(files.caFile, files.names.ca);
  const cert = read(files.certFile, files.names.cert);
  const key = read(files.keyFile, files.names.key);
  return {
    rejectUnauthorized: files.rejectUnauthorized,
    ...(ca ? { ca } : {}),
    ...(cert ? { cert } : {}),
    ...(key ? { key } : {}),
  };
}
