import { SetupError } from './errors.ts';

/**
 * The broker version the local broker, the testcontainers image and docker-compose.yml run when
 * KAFKA_VERSION names no other: the newest Kafka 4.x release on Maven Central.
 */
export const DEFAULT_KAFKA_VERSION = '4.4.0';

/**
 * The broker versions the whole test suite runs against (`.ci/run` runs it once per version): the
 * current 4.x line, and the last 3.x release, which clusters not yet moved to 4.x still run.
 */
export const TESTED_KAFKA_VERSIONS: readonly string[] = [DEFAULT_KAFKA_VERSION, '3.9.1'];

/** How a broker version logs: Kafka 4 moved from log4j 1.x (reload4j) to log4j2 (KIP-653). */
export interface KafkaLogging {
  /** The profile of kafka/pom.xml that adds the slf4j binding. */
  mavenProfile: 'log4j2' | 'reload4j';
  /** The JVM system property naming the configuration file, and the file in kafka/. */
  configProperty: 'log4j2.configurationFile' | 'log4j.configuration';
  configFile: 'log4j2.properties' | 'log4j.properties';
}

/**
 * The broker version chosen by `KAFKA_VERSION` (e.g. `3.9.1`), or {@link DEFAULT_KAFKA_VERSION}.
 * KRaft-only start-up (no ZooKeeper) and `kafka-storage format --add-scram` need Kafka 3.5 or newer.
 */
export function kafkaVersion(env: NodeJS.ProcessEnv = process.env): string {
  const chosen = env.KAFKA_VERSION?.trim();
  if (!chosen) return DEFAULT_KAFKA_VERSION;
  const match = /^(\d+)\.(\d+)\.(\d+)$/.exec(chosen);
  const [major, minor] = match ? [Number(match[1]), Number(match[2])] : [0, 0];
  if (major < 3 || (major === 3 && minor < 5)) {
    throw new SetupError(
      `KAFKA_VERSION must be a Kafka release from 3.5.0 on, such as ${TESTED_KAFKA_VERSIONS.join(' or ')}; got "${chosen}".`,
      `unset KAFKA_VERSION for Kafka ${DEFAULT_KAFKA_VERSION}, or set it to one of ${TESTED_KAFKA_VERSIONS.join(', ')} (the tested ones).`,
    );
  }
  return chosen;
}

/** The logging setup of a broker version. */
export function kafkaLogging(version: string): KafkaLogging {
  return Number(version.split('.')[0]) >= 4
    ? { mavenProfile: 'log4j2', configProperty: 'log4j2.configurationFile', configFile: 'log4j2.properties' }
    : { mavenProfile: 'reload4j', configProperty: 'log4j.configuration', configFile: 'log4j.properties' };
}
