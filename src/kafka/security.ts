import type { KafkaConfig, SASLOptions } from 'kafkajs';
import type { TlsOptions } from '../tls.ts';

/** SASL authentication with the brokers: the mechanism and one user's credentials. */
export interface KafkaSaslOptions {
  /** `plain`, or SCRAM with SHA-256 or SHA-512 (the broker must have the user for that mechanism). */
  mechanism: 'plain' | 'scram-sha-256' | 'scram-sha-512';
  /** The SASL user name. */
  username: string;
  /** The user's password. A secret: never log these options. */
  password: string;
}

/** How Aqueduct's Kafka clients authenticate and encrypt. Empty: plaintext, no authentication. */
export interface KafkaSecurityOptions {
  /** Connect over TLS with these certificates (PEM contents, already read). Absent: plaintext. */
  tls?: TlsOptions | undefined;
  /** Authenticate with SASL. Absent: no authentication. */
  sasl?: KafkaSaslOptions | undefined;
}

/**
 * kafkajs `ssl` and `sasl` settings from the security options. The result holds the password: hand it
 * to kafkajs, never to a logger.
 */
export function kafkaSecurity(options: KafkaSecurityOptions): Pick<KafkaConfig, 'ssl' | 'sasl'> {
  const security: Pick<KafkaConfig, 'ssl' | 'sasl'> = {};
  if (options.tls) security.ssl = { ...options.tls };
  if (options.sasl) {
    const { mechanism, username, password } = options.sasl;
    security.sasl = { mechanism, username, password } as SASLOptions;
  }
  return security;
}
