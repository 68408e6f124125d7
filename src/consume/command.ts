import { setTimeout as sleep } from 'node:timers/promises';
import type { Command } from 'commander';
import { type Config, configReference, loadConfig, redactConfig, topicFamily } from '../config.ts';
import type { Platform } from '../events/event.ts';
import { createKafka } from '../kafka/client.ts';
import { kafkaSecurity } from '../kafka/security.ts';
import {
  exitStopped,
  logUncaughtErrors,
  onStopSignals,
  openResources,
  PortInUseError,
} from '../lifecycle.ts';
import { TokenBucketLimiter } from '../limiter/index.ts';
import { RestartSafeTokenSource } from '../limiter/restart-guard.ts';
import { createLogger, type Logger } from '../log.ts';
import { errorSummary, failureLogger, NotificationConsumer, type StopResult } from '../pipeline/consumer.ts';
import { warmUpHotPaths } from '../pipeline/warm-up.ts';
import { RedisProviderTokenStore } from '../providers/apns-token-store.ts';
import { createProviders, ProviderConfigError, type ProvidersOptions } from '../providers/index.ts';
import { createRedis, onNodeErrors, type RedisClient, redisErrorSummary } from '../redis/client.ts';
import { warnIfRedisEvicts } from '../redis/eviction-policy.ts';
import { RedisReachability } from '../redis/reachability.ts';
import { ConfigError, settingsHelp } from '../settings.ts';
import { exitOnConfigError } from '../settings-exit.ts';
import { kafkaSecurityOptions, providersOptions, redisConnectionOptions } from '../settings-options.ts';
import { type HealthServer, startHealthServer } from '../telemetry/http-server.ts';
import { createMetrics, type Metrics, PipelineMetrics } from '../telemetry/metrics.ts';
import { combineObservers } from '../telemetry/observers.ts';
import { PipelineTracing, type ProviderServer } from '../telemetry/pipeline-tracing.ts';
import { SummaryObserver } from '../telemetry/summary.ts';
import { isTracingEnabled, startTracing } from '../telemetry/tracing.ts';
import { consumerOptions } from './options.ts';

/** `aqueduct consume`: one member of the consumer group, until SIGTERM/SIGINT. */
export function registerConsumeCommand(program: Command): void {
  const reference = settingsHelp(configReference());
  program
    .command('consume')
    .description('run a consumer: Kafka → token bucket → FCM/APNs, until SIGTERM or SIGINT')
    .option('--config <file>', 'JSON file with the settings below (environment variables win)')
    .addHelpText(
      'after',
      `\nSettings (environment variables, or keys of --config):\n${reference}\n  OTEL_*${' '.repeat(35)}standard OpenTelemetry variables; tracing is on when OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_CONFIG_FILE is set, or OTEL_TRACES_EXPORTER names an exporter other than none (OTEL_SDK_DISABLED=true turns it off)`,
    )
    .action(async (flags: { config?: string }) => {
      const config = await exitOnConfigError('consume', () => loadConfig(process.env, flags.config));
      await runConsumer(config);
    });
}

/** Options of {@link startConsumerApp}. */
export interface ConsumerAppOptions {
  /** Where the JSON logs go. Default: stdout at LOG_LEVEL. */
  logger?: Logger;
  /** Interval of the `pipeline summary` log line. Default 2000 ms. */
  summaryIntervalMs?: number;
}

/** A consumer process's parts, running: what `aqueduct consume` runs, and what tests assemble in-process. */
export interface ConsumerApp {
  readonly consumer: NotificationConsumer;
  readonly health: HealthServer;
  readonly metrics: Metrics;
  readonly summary: SummaryObserver;
  readonly logger: Logger;
  /**
   * Drains and commits (see NotificationConsumer.stop; `drainTimeoutMs` bounds that part, default
   * AQUEDUCT_SHUTDOWN_TIMEOUT_MS), then closes the providers, Redis and the HTTP server.
   */
  stop(options?: { drainTimeoutMs?: number }): Promise<StopResult>;
}

/**
 * Assembles and starts a consumer: the health/metrics server first (so that `/healthz` answers while
 * the consumer connects and `/readyz` says "not ready" until the group is joined and Redis is
 * connected), then Redis, the limiter, the providers, and the consumer group member with its observers:
 * the `pipeline summary` counts, the Prometheus metrics, and, when tracing is on (start it first), the
 * spans.
 */
export async function startConsumerApp(
  config: Config,
  options: ConsumerAppOptions = {},
): Promise<ConsumerApp> {
  const logger = options.logger ?? createLogger(config.LOG_LEVEL);
  logger.info({ config: redactConfig(config), tracing: isTracingEnabled() }, 'starting consumer');
  const metrics = createMetrics();
  const pipelineMetrics = new PipelineMetrics(metrics.registry, {
    rates: { fcm: config.AQUEDUCT_FCM_RATE, apns: config.AQUEDUCT_APNS_RATE },
  });
  const redis = createRedis(redisConnectionOptions(config), {
    maxRetriesPerRequest: 2,
    enableAutoPipelining: true,
  });
  redis.on('error', (error) => logger.warn({ err: redisErrorSummary(error) }, 'redis connection error'));
  onNodeErrors(redis, (error, node, suppressed) =>
    logger.warn({ node, err: redisErrorSummary(error), suppressed }, 'redis node connection error'),
  );
  // The hash tags a consumer's calls use: the providers' buckets and the three dedupe tags.
  const reachability = new RedisReachability(
    redis,
    ['{fcm}', '{apns}', '{d0}', '{d1}', '{d2}'].map(
      (tag) => `${config.AQUEDUCT_REDIS_PREFIX}:${tag}:reachable`,
    ),
  );
  let consumer: NotificationConsumer | undefined;
  let health: HealthServer;
  try {
    health = await startHealthServer({
      port: config.AQUEDUCT_HTTP_PORT,
      setting: 'AQUEDUCT_HTTP_PORT',
      isReady: () => consumer?.ready === true && reachability.ok,
      registry: metrics.registry,
    });
  } catch (error) {
    reachability.stop();
    redis.disconnect();
    throw error;
  }
  logger.info({ httpPort: health.port }, 'health server listening');

  const limiter = new TokenBucketLimiter(redis, {
    keyPrefix: config.AQUEDUCT_REDIS_PREFIX,
    failurePolicy: config.AQUEDUCT_LIMITER_FAILURE_POLICY,
    maxBlockMs: config.AQUEDUCT_MAX_FLEET_BLOCK_MS,
    adaptiveRate: {
      cut: config.AQUEDUCT_RATE_CUT,
      holdMs: config.AQUEDUCT_RATE_CUT_HOLD_MS,
      recoveryPerSecond: config.AQUEDUCT_RATE_RECOVERY_PER_SECOND,
    },
    onFailOpen: (error) =>
      logger.warn({ err: errorSummary(error) }, 'limiter failed open: sending unmetered'),
  });
  const summary = new SummaryObserver();
  const observer = combineObservers(
    summary,
    failureLogger(logger),
    pipelineMetrics,
    ...(isTracingEnabled()
      ? [
          new PipelineTracing({
            groupId: config.AQUEDUCT_GROUP_ID,
            deferredTopic: topicFamily(config.AQUEDUCT_TOPIC).deferred,
            clientId: config.KAFKA_CLIENT_ID,
            servers: providerServers(config),
          }),
        ]
      : []),
  );
  let providers: ReturnType<typeof createProviders> | undefined;
  const stopWarmUp = new AbortController();
  let warmingUp: Promise<void> = Promise.resolve();
  try {
    providers = createProviders(
      sharingApnsToken(
        providersOptions(config, { maxInFlight: config.AQUEDUCT_SEND_CONCURRENCY }),
        config,
        redis,
        logger,
      ),
    );
    // Connections first, partitions after: a process that joins cold would hold granted tokens through
    // its TLS handshakes, and the provider would see them late (TokenPoolOptions.window explains why
    // that matters).
    const warm = await Promise.all([providers.fcm.warmUp?.(), providers.apns.warmUp?.()]);
    logger.info({ fcm: warm[0], apns: warm[1] }, 'provider connections opened');
    // The codecs are warmed while the group join below waits for the broker (see warmUpHotPaths).
    warmingUp = warmUpHotPaths({ signal: stopWarmUp.signal }).then((result) =>
      result.warmed
        ? logger.info({ records: result.records, ms: result.ms }, 'hot paths warmed up')
        : logger.warn({ reason: result.reason }, 'hot paths not warmed up'),
    );
    const kafka = createKafka({
      brokers: config.KAFKA_BROKERS,
      clientId: config.KAFKA_CLIENT_ID,
      logger,
      extra: kafkaSecurity(kafkaSecurityOptions(config)),
    });
    consumer = await NotificationConsumer.start(consumerOptions(config), {
      kafka,
      redis,
      providers,
      tokenSource: new RestartSafeTokenSource(limiter, redis, {
        markerKeyFor: (tag) => `${config.AQUEDUCT_REDIS_PREFIX}:{${tag}}:redis-epoch`,
        onDataLoss: (buckets) =>
          logger.warn(
            { buckets },
            'Redis lost its data: buckets emptied, sending resumes at the refill rate',
          ),
      }),
      logger,
      observer,
    });
  } catch (error) {
    stopWarmUp.abort();
    await Promise.all([warmingUp, providers?.fcm.close(), providers?.apns.close(), health.close()]);
    reachability.stop();
    redis.disconnect();
    throw error;
  }
  pipelineMetrics.watch(consumer);
  void warnIfRedisEvicts(redis, logger);
  summary.start(logger, options.summaryIntervalMs ?? 2000);
  logger.info({ httpPort: health.port, topics: consumer.topics }, 'consumer running');

  const running = consumer;
  const started = providers;
  return {
    consumer: running,
    health,
    metrics,
    summary,
    logger,
    async stop(stopOptions = {}) {
      stopWarmUp.abort();
      const result = await running.stop(stopOptions.drainTimeoutMs);
      await warmingUp;
      summary.stop(logger);
      await Promise.all([started.fcm.close(), started.apns.close(), health.close()]);
      reachability.stop();
      redis.disconnect();
      return result;
    },
  };
}

/** With AQUEDUCT_APNS_SHARED_TOKEN, APNs takes the fleet's provider token from Redis. */
function sharingApnsToken(
  options: ProvidersOptions,
  config: Config,
  redis: RedisClient,
  logger: Logger,
): ProvidersOptions {
  if (!options.apns || !config.AQUEDUCT_APNS_SHARED_TOKEN) return options;
  const store = new RedisProviderTokenStore(redis, {
    prefix: config.AQUEDUCT_REDIS_PREFIX,
    teamId: options.apns.teamId,
    keyId: options.apns.keyId,
  });
  return {
    ...options,
    apns: {
      ...options.apns,
      tokenStore: store,
      onTokenStoreError: (error) =>
        logger.warn(
          { err: errorSummary(error) },
          'APNs provider token not shared: Redis unreachable, using a token of this process',
        ),
    },
  };
}

/** Starts tracing and a consumer, and stops both cleanly on SIGTERM/SIGINT (or a fatal consumer crash). */
export async function runConsumer(config: Config): Promise<void> {
  const logger = createLogger(config.LOG_LEVEL);
  logUncaughtErrors(logger);
  // The whole stop fits in AQUEDUCT_SHUTDOWN_TIMEOUT_MS from the signal: the drain gets most of it,
  // closing the rest. A signal is heard from the start: one that came while the consumer was still
  // joining its group would otherwise kill the process as a member that never left, and every other
  // member's next join would wait for its session to expire. A second signal exits at once.
  const bound = config.AQUEDUCT_SHUTDOWN_TIMEOUT_MS;
  let stopBy: number | undefined;
  let exitCode = 0;
  let started = false;
  let hardStop: NodeJS.Timeout | undefined;
  let requestStop: () => void = () => {};
  const stopRequested = new Promise<void>((resolve) => {
    requestStop = resolve;
  });
  const beginStop = () => {
    if (stopBy !== undefined) return;
    stopBy = Date.now() + bound;
    if (!started)
      logger.info('stop requested while starting: stopping once started (a second signal exits at once)');
    hardStop = setTimeout(() => {
      logger.error({ open: openResources() }, 'shutdown bound exceeded; exiting');
      process.exit(1);
    }, bound).unref();
    requestStop();
  };
  onStopSignals(beginStop, (signal) =>
    logger.warn({ signal }, 'second signal: exiting at once, without finishing the drain'),
  );

  const tracing = await startTracing('aqueduct-consumer', { logger });
  let app: ConsumerApp;
  try {
    app = await startConsumerApp(config, { logger });
  } catch (error) {
    // A taken port and a refused setting have their own answer (one line naming the setting, status 2:
    // see cli.ts).
    if (
      error instanceof PortInUseError ||
      error instanceof ConfigError ||
      error instanceof ProviderConfigError
    )
      throw error;
    // Nothing was consumed yet: a missing topic or brokers out of reach are a setup problem,
    // told as one line with what to fix rather than as a crash with a stack.
    const why = startFailure(error, config);
    logger.fatal({ err: errorSummary(error) }, `consumer could not start: ${why}`);
    await tracing.shutdown().catch(() => {});
    console.error(`aqueduct consume: ${why}`);
    process.exit(1);
  }
  started = true;
  app.consumer.onFatal = () => {
    exitCode = 1;
    beginStop();
  };
  await stopRequested;
  logger.info('shutting down');
  const deadline = stopBy ?? Date.now() + bound;
  await app.stop({
    drainTimeoutMs: Math.max(0, deadline - Date.now() - Math.min(3000, Math.round(bound / 5))),
  });
  // After the consumer: its last spans end while it drains; shutdown exports them, within what is left
  // of the bound (an unreachable collector must not turn a clean stop into a hard one).
  const flushed = await Promise.race([
    tracing.shutdown().then(() => true),
    sleep(Math.max(0, deadline - Date.now() - 1000), false, { ref: false }),
  ]);
  if (!flushed) logger.warn('trace export did not finish in time; the last spans are lost');
  clearTimeout(hardStop);
  logger.info({ exitCode }, 'stopped');
  exitStopped(logger, exitCode);
}

/** Why a consumer could not start, naming the brokers when kafkajs gave up reaching them. */
function startFailure(error: unknown, config: Config): string {
  const { name, message } = errorSummary(error);
  return String(name).startsWith('KafkaJS')
    ? `Kafka at ${config.KAFKA_BROKERS.join(',')}: ${String(message)}`
    : String(message);
}

/** Where each provider's pushes go (for the CLIENT spans' server.address and server.port). */
function providerServers(config: Config): Record<Platform, ProviderServer> {
  const server = (endpoint: string | undefined, fallback: string): ProviderServer => {
    if (!endpoint) return { address: fallback, port: 443 };
    // Not parseEndpoint: this runs before the providers are built, which refuse a bad endpoint cleanly.
    const url = new URL(endpoint);
    const port = url.port ? Number(url.port) : url.protocol === 'http:' ? 80 : 443;
    return { address: url.hostname.replace(/^\[(.*)\]$/, '$1'), port };
  };
  return {
    fcm: server(config.FCM_ENDPOINT, 'fcm.googleapis.com'),
    apns: server(
      config.APNS_ENDPOINT,
      config.APNS_PRODUCTION ? 'api.push.apple.com' : 'api.sandbox.push.apple.com',
    ),
  };
}
