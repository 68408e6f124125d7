import { cpus, totalmem } from 'node:os';
import { kafkaVersion } from '../src/services/kafka-version.ts';

/** The machine a figure was measured on, stored beside every result. */
export function machine(): { cores: number; memoryGiB: number; cpu: string; node: string; kafka: string } {
  return {
    cores: cpus().length,
    memoryGiB: Math.round(totalmem() / 2 ** 30),
    cpu: cpus()[0]?.model ?? 'unknown',
    node: process.version,
    kafka: kafkaBroker(),
  };
}

/** The broker a run used: the local broker's version, or the one KAFKA_BROKERS points at. */
export function kafkaBroker(): string {
  return process.env.KAFKA_BROKERS
    ? 'KAFKA_BROKERS (version not recorded)'
    : `Kafka ${kafkaVersion()} (local)`;
}
