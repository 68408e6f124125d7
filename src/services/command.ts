import type { Command } from 'commander';
import { startServices } from './index.ts';

/** `aqueduct services`: starts Kafka and Redis for local work and prints how to point Aqueduct at them. */
export function registerServicesCommand(program: Command): void {
  program
    .command('services')
    .description('start a local Kafka broker and redis-server (same switch as the tests) until Ctrl-C')
    .action(async () => {
      const services = await startServices({ log: (message) => console.error(message) });
      console.log(`export KAFKA_BROKERS=${services.kafkaBrokers.join(',')}`);
      console.log(`export REDIS_URL=${services.redisUrl}`);
      if (services.source.kafka !== 'env') {
        // One broker holds one copy: the override of the production defaults (3 replicas, 2 in sync).
        console.log('export AQUEDUCT_TOPIC_REPLICATION_FACTOR=1 AQUEDUCT_TOPIC_MIN_INSYNC_REPLICAS=1');
      }
      console.error('Running. Ctrl-C stops what was started.');
      await new Promise<void>((resolve) => {
        process.once('SIGINT', resolve);
        process.once('SIGTERM', resolve);
      });
      await services.stop();
    });
}
