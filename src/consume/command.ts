import type { Command } from 'commander';
import { Redis } from 'ioredis';
import { type Config, ConfigError, configReference, loadConfig, redactConfig } from '../config.ts';
import { createKafka } from '../kafka/client.ts';
import { TokenBucketLimiter } from '../limiter/index.ts';
import { createLogger } from '../log.ts';
import { errorSummary, NotificationConsumer } from '../pipeline/consumer.ts';
import { createProviders } from '../providers/index.ts';
import { startHealthServer } from '../telemetry/http-server.ts';
import { SummaryObserver } from '../telemetry/summary.ts';

/** `aqueduct consume`: one member of the consumer group, until SIGTERM/SIGINT. */
export function registerConsumeCommand(program: Command): void {
  const reference = configReference()
    .map(
      (r) =>
        `  ${r.name.padEnd(40)} ${r.description}${r.defaultValue ? ` (default: ${r.defaultValue})` : ''}`,
    )
    .join('\n');
  program
    .command('consume')
    .description('run a consumer: Kafka → token bucket → FCM/APNs, until SIGTERM or SIGINT')
    .option('--config <file>', 'JSON file with the settings below (environment variables win)')
    .addHelpText(
      'after',
      `\nSettings (environment variables, or keys of --config):\n${reference}\n  OTEL_*${' '.repeat(35)}standard OpenTelemetry variables (tracing is off when none is set)`,
    )
    .action(async (flags: { config?: string }) => {
      let config: Config;
      try {
        config = loadConfig(process.env, flags.config);
      } catch (error) {
        if (error instanceof ConfigError) {
          console.error(`aqueduct consume: ${error.message}`);
          process.exit(2);
        }
        throw error;
      }
      await runConsumer(config);
    });
}

/** Starts everything a consumer process needs and stops it cleanly on SIGTERM/SIGINT. */
export async function runConsumer(config: Config): Promise<void> {
  const logger = createLogger(config.LOG_LEVEL);
  logger.info({ config: redactConfig(config) }, 'starting consumer');
  const redis = new Redis(config.REDIS_URL, { maxRetriesPerRequest: 2, enableAutoPipelining: true });
  redis.on('error', (error) => logger.warn({ err: errorSummary(error) }, 'redis connection error'));
  const limiter = new TokenBucketLimiter(redis, {
    keyPrefix: config.AQUEDUCT_REDIS_PREFIX,
    failurePolicy: config.AQUEDUCT_LIMITER_FAILURE_POLICY,
    onFailOpen: (error) =>
      logger.warn({ err: errorSummary(error) }, 'limiter failed open: sending unmetered'),
  });
  const providers = createProviders(config, { maxInFlight: config.AQUEDUCT_SEND_CONCURRENCY });
  const kafka = createKafka({ brokers: config.KAFKA_BROKERS, clientId: config.KAFKA_CLIENT_ID, logger });

  const summary = new SummaryObserver();
  const consumer = await NotificationConsumer.start(config, {
    kafka,
    redis,
    providers,
    tokenSource: limiter,
    logger,
    observer: summary,
  });
  summary.start(logger, 2000);
  const health = await startHealthServer({
    port: config.AQUEDUCT_HTTP_PORT,
    isReady: () => consumer.ready && redis.status === 'ready',
  });
  logger.info({ httpPort: health.port, topics: consumer.topics }, 'consumer running');

  let exitCode = 0;
  await new Promise<void>((resolve) => {
    process.once('SIGTERM', resolve);
    process.once('SIGINT', resolve);
    consumer.onFatal = () => {
      exitCode = 1;
      resolve();
    };
  });
  logger.info('shutting down');
  const hardStop = setTimeout(() => {
    logger.error('shutdown bound exceeded; exiting');
    process.exit(1);
  }, config.AQUEDUCT_SHUTDOWN_TIMEOUT_MS + 2000).unref();
  await consumer.stop();
  summary.stop(logger);
  await Promise.all([providers.fcm.close(), providers.apns.close(), health.close()]);
  redis.disconnect();
  clearTimeout(hardStop);
  logger.info({ exitCode }, 'stopped');
  process.exitCode = exitCode;
}
