import type { TestProject } from 'vitest/node';
import { startServices } from '../src/services/index.ts';

declare module 'vitest' {
  export interface ProvidedContext {
    kafkaBrokers: string[];
    redisUrl: string;
  }
}

/**
 * Starts the real Kafka broker and Redis server once for the whole test run (or uses KAFKA_BROKERS /
 * REDIS_URL, or testcontainers with AQUEDUCT_TEST_RUNTIME=containers; see src/services) and stops
 * whatever it started when the run ends.
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const started = Date.now();
  const services = await startServices({ log: (message) => console.log(`[services] ${message}`) });
  console.log(`[services] ready in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  project.provide('kafkaBrokers', services.kafkaBrokers);
  project.provide('redisUrl', services.redisUrl);
  return async () => {
    await services.stop();
  };
}
