import type { TestProject } from 'vitest/node';
import { startServices } from '../src/services/index.ts';

declare module 'vitest' {
  export interface ProvidedContext {
    kafkaBrokers: string[];
    redisUrl: string;
    /** A 3-master Redis Cluster's nodes, `host:port,…` (REDIS_CLUSTER_NODES' form). */
    redisClusterNodes: string;
  }
}

/**
 * Starts the real Kafka broker, Redis server and Redis Cluster once for the whole test run (or uses
 * KAFKA_BROKERS / REDIS_URL / REDIS_CLUSTER_NODES, or testcontainers with
 * AQUEDUCT_TEST_RUNTIME=containers for the first two; see src/services) and stops whatever it started
 * when the run ends.
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const started = Date.now();
  const services = await startServices({
    redisCluster: true,
    log: (message) => console.log(`[services] ${message}`),
  });
  console.log(`[services] ready in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  project.provide('kafkaBrokers', services.kafkaBrokers);
  project.provide('redisUrl', services.redisUrl);
  project.provide('redisClusterNodes', services.redisClusterNodes ?? '');
  return async () => {
    await services.stop();
  };
}
