import { setTimeout as sleep } from 'node:timers/promises';
import { type Command, InvalidArgumentError } from 'commander';
import { configSchema, REDIS_CONNECTION_SETTINGS } from '../config.ts';
import { describeIssues } from '../events/decode.ts';
import { TokenBucketLimiter } from '../limiter/index.ts';
import { redactUrl } from '../redact.ts';
import {
  createRedis,
  onNodeErrors,
  type RedisClient,
  type RedisConnectionOptions,
  redisErrorSummary,
} from '../redis/client.ts';
import { SetupError } from '../services/errors.ts';
import { ConfigError, readSettings } from '../settings.ts';
import { exitOnConfigError } from '../settings-exit.ts';
import { redisConnectionOptions } from '../settings-options.ts';
import { MAX_TIMER_MS } from '../timer-delay.ts';
import { formatBucketTable, type InspectSnapshot } from './format.ts';

const DEFAULT_REDIS_URL = 'redis://127.0.0.1:6379';
const DEFAULT_KEY_PREFIX = configSchema.shape.AQUEDUCT_REDIS_PREFIX.parse(undefined);
const CLEAR_SCREEN = '\x1b[2J\x1b[H';

/**
 * The consumer's settings of the Redis connection and its key prefix: inspect reads the buckets the
 * consumers write.
 */
const inspectSettingsSchema = configSchema.pick({
  ...REDIS_CONNECTION_SETTINGS,
  AQUEDUCT_REDIS_PREFIX: true,
});

interface InspectOptions {
  json?: boolean;
  watch?: boolean;
  interval: number;
  /** Unset: AQUEDUCT_REDIS_PREFIX's. */
  prefix?: string;
}

/** The Redis to inspect and the key prefix of its buckets. */
export interface InspectTarget {
  connection: RedisConnectionOptions;
  keyPrefix: string;
}

/**
 * `aqueduct inspect [pattern]`: every limiter bucket with its tokens now (refilled to the Redis server's
 * current time by a read-only script, not the stale stored level), rate, capacity, block-until and TTL.
 * Reads the consumer's Redis settings (`REDIS_URL` or `REDIS_CLUSTER_NODES`, the user, password and
 * TLS, `AQUEDUCT_REDIS_PREFIX`); finds buckets with SCAN (never KEYS; on a Cluster, on every master),
 * so it is safe on a busy production Redis.
 */
export function registerInspectCommand(program: Command): void {
  program
    .command('inspect')
    .description('show the limiter buckets as they are now: tokens, rate, capacity, blocked-until, TTL')
    .argument('[pattern]', 'glob on bucket names (* ? [abc]), e.g. "fcm*" or "fcm:tenant:*"', '*')
    .option('--json', 'print JSON (with --watch: one JSON document per line)')
    .option('--watch', 'refresh until Ctrl-C')
    .option('--interval <ms>', 'refresh interval of --watch in ms', parseInterval, 1000)
    .option(
      '--prefix <keyPrefix>',
      `prefix of the Redis keys (default: AQUEDUCT_REDIS_PREFIX, else "${DEFAULT_KEY_PREFIX}")`,
    )
    .addHelpText(
      'after',
      `\nRedis: $REDIS_URL (default ${DEFAULT_REDIS_URL}), or the Redis Cluster of $REDIS_CLUSTER_NODES; REDIS_USERNAME, REDIS_PASSWORD, REDIS_TLS* and AQUEDUCT_REDIS_PREFIX as for the consumer.`,
    )
    .action(async (pattern: string, options: InspectOptions) => {
      await runInspect(pattern, options);
    });
}

/** --interval: at most what a Node timer can wait, since a longer one fires after 1 ms. */
function parseInterval(value: string): number {
  const ms = Number(value);
  if (!Number.isInteger(ms) || ms < 50 || ms > MAX_TIMER_MS)
    throw new InvalidArgumentError(`must be an integer number of ms from 50 to ${MAX_TIMER_MS}.`);
  return ms;
}

/**
 * The Redis connection the environment's Redis settings give, and the key prefix: `prefixFlag` when
 * given, else AQUEDUCT_REDIS_PREFIX, the consumer's.
 * @throws ConfigError naming a bad setting
 */
export function inspectTarget(env: NodeJS.ProcessEnv, prefixFlag?: string): InspectTarget {
  const settings = readSettings(Object.keys(inspectSettingsSchema.shape), env);
  // The flag wins, so the setting it overrides is not checked.
  if (prefixFlag !== undefined) delete settings.AQUEDUCT_REDIS_PREFIX;
  const parsed = inspectSettingsSchema.safeParse(settings);
  if (!parsed.success) throw new ConfigError(`invalid configuration: ${describeIssues(parsed.error.issues)}`);
  return {
    connection: redisConnectionOptions(parsed.data),
    keyPrefix: prefixFlag ?? parsed.data.AQUEDUCT_REDIS_PREFIX,
  };
}

/** Where the connection goes, as a setting and its value (credentials masked), for messages. */
function describeTarget(connection: RedisConnectionOptions): string {
  return connection.clusterNodes
    ? `REDIS_CLUSTER_NODES=${connection.clusterNodes.map((node) => `${node.host}:${node.port}`).join(',')}`
    : `REDIS_URL=${redactUrl(connection.url)}`;
}

/** How long inspect waits for a connection before it says Redis is unreachable. */
const CONNECT_LIMIT_MS = 10_000;

/**
 * Resolves once the client is ready; rejects when it ends first or after `limitMs`. A Cluster client's
 * connect() alone may never settle: when its ready check finds `cluster_state:fail` it disconnects after
 * the listener that would reject has gone, and with nothing left to wait on, Node exits mid-await.
 */
function connected(redis: RedisClient, limitMs: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => fail(new Error(`no connection within ${limitMs} ms`)), limitMs);
    const ended = () => fail(new Error('Connection is closed.'));
    const fail = (error: Error) => {
      clearTimeout(timer);
      redis.off('end', ended);
      reject(error);
    };
    redis.once('end', ended);
    redis.connect().then(
      () => {
        clearTimeout(timer);
        redis.off('end', ended);
        resolve();
      },
      (error: Error) => fail(error),
    );
  });
}

async function runInspect(pattern: string, options: InspectOptions): Promise<void> {
  const { connection, keyPrefix } = await exitOnConfigError('inspect', () =>
    inspectTarget(process.env, options.prefix),
  );
  const target = describeTarget(connection);
  const redis = createRedis(connection, {
    lazyConnect: true,
    connectTimeout: 3000,
    maxRetriesPerRequest: 1,
    // A one-shot inspect fails at once; --watch keeps trying and shows the error meanwhile.
    ...(options.watch ? {} : { retryStrategy: () => null }),
  });
  // Reported where a command fails; a Cluster's connect() says only that no node answered, and the
  // last node's error (kept here) says why.
  let lastError: Error | undefined;
  redis.on('error', (error: Error) => {
    lastError = error;
  });
  // A Cluster's nodes report their own errors apart, by the address the cluster announces: the one
  // that says why when that address cannot be resolved or reached from here.
  let lastNodeError: string | undefined;
  onNodeErrors(
    redis,
    (error, node) => {
      lastNodeError = `node ${node}: ${redisErrorSummary(error).message}`;
    },
    0,
  );
  const why = () => lastNodeError ?? (lastError && redisErrorSummary(lastError).cause);
  try {
    await connected(redis, CONNECT_LIMIT_MS);
  } catch (error) {
    redis.disconnect();
    const cause = why();
    throw new SetupError(
      `Redis is unreachable at ${target}: ${(error as Error).message}${cause ? ` (${cause})` : ''}`,
      'start Redis there, or set REDIS_URL (or REDIS_CLUSTER_NODES) to the Redis the consumers use.',
      { cause: error },
    );
  }
  const limiter = new TokenBucketLimiter(redis, { keyPrefix, timeoutMs: 5000 });
  const snapshot = async (): Promise<InspectSnapshot> => {
    const buckets = await limiter.inspect(pattern);
    const [seconds, micros] = await redis.time();
    return {
      keyPrefix,
      pattern,
      serverTimeMs: Number(seconds) * 1000 + Number(micros) / 1000,
      buckets,
    };
  };

  try {
    if (!options.watch) {
      const shot = await snapshot().catch((error: unknown) => {
        const cause = why();
        throw new SetupError(
          `Redis could not be read at ${target}: ${(error as Error).message}${cause ? ` (${cause})` : ''}`,
          'check that every master of the Redis the consumers use is up (on a Cluster, `redis-cli cluster info` says cluster_state:ok), then run inspect again.',
          { cause: error },
        );
      });
      process.stdout.write(
        options.json ? `${JSON.stringify(shot, null, 2)}\n` : `${formatBucketTable(shot)}\n`,
      );
      return;
    }
    const stopped = new AbortController();
    const stop = () => stopped.abort();
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
    try {
      while (!stopped.signal.aborted) {
        let frame: string;
        try {
          const shot = await snapshot();
          frame = options.json
            ? JSON.stringify(shot)
            : `${CLEAR_SCREEN}aqueduct inspect "${pattern}" on ${target}, Redis time ${new Date(shot.serverTimeMs).toISOString()}, every ${options.interval} ms (Ctrl-C to stop)\n\n${formatBucketTable(shot)}`;
        } catch (error) {
          frame = options.json
            ? JSON.stringify({ error: (error as Error).message })
            : `${CLEAR_SCREEN}aqueduct inspect: ${(error as Error).message} (retrying every ${options.interval} ms)`;
        }
        process.stdout.write(`${frame}\n`);
        await sleep(options.interval, undefined, { signal: stopped.signal }).catch(() => {});
      }
    } finally {
      process.off('SIGINT', stop);
      process.off('SIGTERM', stop);
    }
  } finally {
    redis.disconnect();
  }
}
