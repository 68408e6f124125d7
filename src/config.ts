import { z } from 'zod';
import { describeIssues } from './events/decode.ts';
import { HEADER_SAFE } from './events/event.ts';
import { redactUrl } from './redact.ts';
import { ConfigError, readSettings, settingsReference } from './settings.ts';
import { MAX_TIMER_MS } from './timer-delay.ts';

/**
 * The consumer's configuration: environment variables, optionally a JSON file with the same keys
 * (`aqueduct consume --config file.json`; the environment wins). Validated once at start, with a
 * message naming every bad field. Secrets (passwords, key files' contents) are never printed:
 * {@link redactConfig} masks them for `--help` and start-up logs.
 */

const bool = z
  .union([z.boolean(), z.enum(['true', 'false', '1', '0', 'yes', 'no'])], {
    error: 'expected true or false (or 1/0, yes/no)',
  })
  .transform((v) => v === true || v === 'true' || v === '1' || v === 'yes');
export const positive = z.number().positive();
export const positiveInt = z.number().int().positive();

/**
 * A number setting: a JSON number (a `--config` file) or decimal text (the environment), checked by
 * `inner`. Anything else is refused rather than coerced the way `Number()` would: `true` is not 1, `[]`
 * or `false` not 0 (a free port, no idempotency window), `0x1F90` not 8080.
 */
export const numberSetting = <T extends z.ZodNumber>(inner: T) => z.preprocess(numberFromSetting, inner);

const DECIMAL = /^[+-]?(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?$/i;

function numberFromSetting(value: unknown, context: z.RefinementCtx): unknown {
  if (typeof value !== 'string') return value;
  const text = value.trim();
  if (DECIMAL.test(text)) return Number(text);
  context.addIssue({ code: 'custom', message: 'expected a decimal number' });
  return z.NEVER;
}
// Every setting in ms is at most MAX_TIMER_MS: Node fires a timer armed for longer after 1 ms.

/**
 * `host:port,host:port` as a list (spaces and empty entries ignored), each port from 1 to 65535. No IPv6
 * literals: kafkajs splits a broker at its colon.
 */
const hostPortList = (text: string, context: z.RefinementCtx): string[] => {
  const nodes = text
    .split(',')
    .map((node) => node.trim())
    .filter(Boolean);
  for (const node of nodes) {
    const match = /^[^\s:]+:(\d{1,5})$/.exec(node);
    const port = Number(match?.[1]);
    if (!(port >= 1 && port <= 65535))
      context.addIssue({ code: 'custom', message: `"${node}" is not host:port with a port from 1 to 65535` });
  }
  if (nodes.length === 0) context.addIssue({ code: 'custom', message: 'at least one host:port' });
  return nodes;
};

/**
 * A Redis URL as ioredis reads it: `redis://` or `rediss://`, a host, and at most a database number as
 * its path. ioredis takes any other scheme for part of a host name and sends a path that is not a number
 * as `SELECT`, which Redis refuses after the connection is made, so both are refused here, by name.
 */
const redisUrl = (text: string, context: z.RefinementCtx): void => {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    context.addIssue({ code: 'custom', message: 'not a URL: redis://host:port or rediss://host:port' });
    return;
  }
  if (url.protocol !== 'redis:' && url.protocol !== 'rediss:')
    context.addIssue({ code: 'custom', message: `scheme ${url.protocol}// is not redis:// or rediss://` });
  else if (!url.hostname) context.addIssue({ code: 'custom', message: 'no host' });
  if (!/^\/?(\d{1,9})?$/.test(url.pathname))
    context.addIssue({ code: 'custom', message: 'the path must be a database number (redis://host:port/0)' });
};

/** A value sent as an HTTP header (apns-topic, the JWT's key and team ids): no control characters, no spaces. */
const headerSafe = z.string().min(1).regex(HEADER_SAFE, 'printable ASCII without spaces');

export const configSchema = z.object({
  KAFKA_BROKERS: z
    .string()
    .default('127.0.0.1:9092')
    .transform(hostPortList)
    .describe('Kafka bootstrap servers, `host:port,host:port`.'),
  KAFKA_CLIENT_ID: z
    .string()
    .min(1)
    .default('aqueduct')
    .describe('kafkajs client id (appears in broker logs and quotas).'),
  AQUEDUCT_TOPIC: z
    .string()
    .regex(/^[A-Za-z0-9._-]{1,200}$/, 'a Kafka topic name')
    .default('notifications')
    .describe(
      'The notification topic; `<topic>.retry`, `<topic>.deferred`, `<topic>.dlq` and `<topic>.invalid-tokens` derive from it.',
    ),
  AQUEDUCT_TOPIC_REPLICATION_FACTOR: numberSetting(positiveInt)
    .default(3)
    .describe(
      'Replication factor of the topics Aqueduct creates. A single-broker cluster (local services, tests) sets 1.',
    ),
  AQUEDUCT_TOPIC_MIN_INSYNC_REPLICAS: numberSetting(positiveInt)
    .default(2)
    .describe(
      '`min.insync.replicas` of the topics Aqueduct creates: how many copies an acknowledged (acks: -1) write is on. At start, an existing topic below these settings is warned about, as is one that is compacted (`cleanup.policy=compact`) or whose `max.message.bytes` is below the largest record Aqueduct may write there. A single-broker cluster sets 1.',
    ),
  AQUEDUCT_GROUP_ID: z
    .string()
    .min(1)
    .default('aqueduct')
    .describe(
      'The consumer group every instance joins, for the topic and its retry topic. Parked events are read back from the deferred topic by the group `<id>.deferred`.',
    ),
  KAFKA_SASL_MECHANISM: z
    .enum(['plain', 'scram-sha-256', 'scram-sha-512'])
    .optional()
    .describe(
      'SASL mechanism for Kafka: `plain`, `scram-sha-256` or `scram-sha-512` (needs KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD). Unset: no SASL.',
    ),
  KAFKA_SASL_USERNAME: z.string().min(1).optional().describe('SASL user name for Kafka.'),
  KAFKA_SASL_PASSWORD: z
    .string()
    .min(1)
    .optional()
    .describe('SASL password for Kafka. Secret: prefer KAFKA_SASL_PASSWORD_FILE.'),
  KAFKA_TLS: bool
    .default(false)
    .describe('Connect to Kafka over TLS (on by itself when a KAFKA_TLS_*_FILE is set).'),
  KAFKA_TLS_CA_FILE: z
    .string()
    .min(1)
    .optional()
    .describe("PEM file of the CA(s) to trust for the brokers' certificates (default: the system CAs)."),
  KAFKA_TLS_CERT_FILE: z
    .string()
    .min(1)
    .optional()
    .describe('PEM client certificate for mutual TLS with Kafka (with KAFKA_TLS_KEY_FILE).'),
  KAFKA_TLS_KEY_FILE: z
    .string()
    .min(1)
    .optional()
    .describe('PEM private key (unencrypted) of KAFKA_TLS_CERT_FILE.'),
  KAFKA_TLS_REJECT_UNAUTHORIZED: bool
    .default(true)
    .describe("false accepts any broker certificate (tests only: it gives up TLS's protection)."),
  REDIS_URL: z
    .string()
    .default('redis://127.0.0.1:6379')
    .superRefine(redisUrl)
    .describe(
      'Redis holding the token buckets and the dedupe marks, `redis://host:port[/db]`; `rediss://` for TLS. Credentials may be in it, or in REDIS_USERNAME/REDIS_PASSWORD. Not used when REDIS_CLUSTER_NODES is set.',
    ),
  REDIS_CLUSTER_NODES: z
    .string()
    .transform(hostPortList)
    .optional()
    .describe(
      'A Redis Cluster instead of one Redis: `host:port,host:port`, a few of its masters (the rest are discovered). When set, REDIS_URL is ignored (this wins); the user, password and TLS come from REDIS_USERNAME, REDIS_PASSWORD and REDIS_TLS*.',
    ),
  REDIS_USERNAME: z
    .string()
    .min(1)
    .optional()
    .describe('Redis ACL user (Redis 6+); unset: the `default` user.'),
  REDIS_PASSWORD: z
    .string()
    .min(1)
    .optional()
    .describe('Password of the Redis user (or `requirepass`). Secret: prefer REDIS_PASSWORD_FILE.'),
  REDIS_TLS: bool
    .default(false)
    .describe('Connect to Redis over TLS (on by itself with `rediss://` or a REDIS_TLS_*_FILE).'),
  REDIS_TLS_CA_FILE: z
    .string()
    .min(1)
    .optional()
    .describe("PEM file of the CA(s) to trust for Redis's certificate (default: the system CAs)."),
  REDIS_TLS_CERT_FILE: z
    .string()
    .min(1)
    .optional()
    .describe('PEM client certificate for Redis (`tls-auth-clients yes`), with REDIS_TLS_KEY_FILE.'),
  REDIS_TLS_KEY_FILE: z
    .string()
    .min(1)
    .optional()
    .describe('PEM private key (unencrypted) of REDIS_TLS_CERT_FILE.'),
  REDIS_TLS_REJECT_UNAUTHORIZED: bool
    .default(true)
    .describe("false accepts any Redis certificate (tests only: it gives up TLS's protection)."),
  AQUEDUCT_REDIS_PREFIX: z
    .string()
    .regex(/^[A-Za-z0-9._-]+$/)
    .default('aqueduct')
    .describe('Prefix of every Redis key Aqueduct writes.'),

  AQUEDUCT_FCM_RATE: numberSetting(positive)
    .default(800)
    .describe('FCM pushes per second allowed to the whole fleet (may be fractional).'),
  AQUEDUCT_FCM_BURST: numberSetting(positiveInt)
    .default(2000)
    .describe('FCM burst: the most pushes the fleet may send at once after an idle spell.'),
  AQUEDUCT_APNS_RATE: numberSetting(positive)
    .default(800)
    .describe('APNs pushes per second allowed to the whole fleet (may be fractional).'),
  AQUEDUCT_APNS_BURST: numberSetting(positiveInt)
    .default(2000)
    .describe('APNs burst: the most pushes the fleet may send at once after an idle spell.'),
  AQUEDUCT_TENANT_RATE: numberSetting(positive)
    .optional()
    .describe("Optional per-tenant cap inside the provider's limit (each tenant gets its own bucket)."),
  AQUEDUCT_TENANT_BURST: numberSetting(positiveInt)
    .optional()
    .describe('Burst of each tenant bucket (default: one second of AQUEDUCT_TENANT_RATE).'),
  AQUEDUCT_TENANT_FAIRNESS: bool
    .default(true)
    .describe(
      "Share each provider's limit max-min fairly among the tenants with work: a tenant over its share has its excess parked on `<topic>.deferred` and read back as its share allows, so that it holds back no other tenant's events. false: first come, first served.",
    ),
  AQUEDUCT_TENANT_WEIGHTS: z
    .string()
    .default('')
    .transform((text, context) => {
      const weights = new Map<string, number>();
      for (const part of text
        .split(',')
        .map((p) => p.trim())
        .filter(Boolean)) {
        const match = /^([A-Za-z0-9._-]{1,64})=(\d+(?:\.\d+)?)$/.exec(part);
        const weight = match ? Number(match[2]) : Number.NaN;
        if (!match?.[1] || !(weight > 0) || !Number.isFinite(weight)) {
          context.addIssue({ code: 'custom', message: `"${part}" is not tenant=weight with a weight > 0` });
          return z.NEVER;
        }
        weights.set(match[1], weight);
      }
      return weights as ReadonlyMap<string, number>;
    })
    .describe(
      'Weights of the fair share, `tenant=weight,…` (e.g. `acme=2,globex=0.5`); a tenant not named weighs 1.',
    ),
  AQUEDUCT_LIMITER_ENABLED: bool
    .default(true)
    .describe('Set false to run without any limit (the fire-and-forget baseline of the benchmarks).'),
  AQUEDUCT_LIMITER_FAILURE_POLICY: z
    .enum(['closed', 'open'])
    .default('closed')
    .describe(
      'What to do when Redis cannot be reached: `closed` pauses (nothing is sent unmetered), `open` sends anyway.',
    ),
  AQUEDUCT_ACQUIRE_CHUNK: numberSetting(positiveInt)
    .optional()
    .describe(
      "When throttled, wait until at least this many tokens can be had (per provider bucket) rather than one at a time: bigger chunks mean fewer Redis calls, smaller ones a smoother stream. Default: a quarter second's worth of the provider rate, at least 200, at most a quarter of the burst (at least 1).",
    ),

  AQUEDUCT_SEND_CONCURRENCY: numberSetting(positiveInt)
    .default(64)
    .describe(
      "Pushes in flight at once per provider in each consumer process. Also the most tokens a process holds that the provider has not answered yet (or a tenth of a second of the rate, when that is more); the shared bucket refills only up to its burst minus what the processes hold, so no margin under the provider's limits is needed.",
    ),
  AQUEDUCT_MAX_ATTEMPTS: numberSetting(positiveInt)
    .default(5)
    .describe('Attempts before a transiently failing event is dead-lettered.'),
  AQUEDUCT_MAX_THROTTLES: numberSetting(positiveInt)
    .default(20)
    .describe(
      "Provider throttles (429s) one event may meet before it is dead-lettered (`max-throttles`). A throttle spends no attempt: the provider refused to look at the push then, not the push itself; its retry waits for the provider's Retry-After, or a back-off that doubles with each throttle.",
    ),
  AQUEDUCT_RETRY_BASE_MS: numberSetting(positiveInt.max(MAX_TIMER_MS))
    .default(1000)
    .describe('First retry delay; doubles each attempt (with jitter) unless the provider said Retry-After.'),
  AQUEDUCT_MAX_FLEET_BLOCK_MS: numberSetting(positiveInt.max(MAX_TIMER_MS))
    .default(60_000)
    .describe(
      "Longest fleet-wide block a provider's project-wide 429 can set, in ms: a longer Retry-After (or a proxy's absurd one) is cut to this, in the consumer and in Redis alike.",
    ),
  AQUEDUCT_RATE_CUT: numberSetting(positive.max(1))
    .default(0.85)
    .describe(
      "After a provider's project-wide 429 (beside the fleet block), the fleet sends at this share of the rate it sent at: the provider is slower than configured. 1 turns this off.",
    ),
  AQUEDUCT_RATE_CUT_HOLD_MS: numberSetting(z.number().int().min(0).max(MAX_TIMER_MS))
    .default(10_000)
    .describe('How long a cut rate holds before it climbs back, in ms.'),
  AQUEDUCT_RATE_RECOVERY_PER_SECOND: numberSetting(positive)
    .default(0.02)
    .describe('After the hold, the share of the configured rate a cut rate regains each second.'),
  AQUEDUCT_MAX_RETRY_DELAY_MS: numberSetting(positiveInt.max(MAX_TIMER_MS))
    .default(3_600_000)
    .describe(
      "Longest delay of one event's retry, in ms: a provider's Retry-After and the doubling back-off are both cut to this.",
    ),
  AQUEDUCT_IDEMPOTENCY_WINDOW_SECONDS: numberSetting(z.number().int().min(0))
    .default(86_400)
    .describe(
      'How long a final outcome is remembered by (tenant, id), so that a second copy of an event published again is pushed once, in seconds (remembered at least this long, at most twice). 0 turns the window off (redeliveries after a crash or a rebalance are still recognized, by offset). About 16 bytes of Redis memory per event in the window.',
    ),
  AQUEDUCT_MARK_FLUSH_MS: numberSetting(z.number().int().min(0).max(1000))
    .default(50)
    .describe(
      'How long finished events wait for others before their marks go to Redis together, in ms. A consumer killed outright (kill -9) pushes again what it delivered in this last span; shorter costs more Redis calls.',
    ),
  AQUEDUCT_IDEMPOTENCY_SHARDS: numberSetting(positiveInt)
    .default(8192)
    .describe(
      "Shards of the idempotency window. A lookup scans one shard's string: keep events per window ÷ shards under about 10 000.",
    ),
  AQUEDUCT_DEDUPE_TTL_SECONDS: numberSetting(positiveInt)
    .optional()
    .describe(
      'Deprecated name of AQUEDUCT_IDEMPOTENCY_WINDOW_SECONDS, used as the window when that is not set.',
    ),
  AQUEDUCT_MAX_MESSAGE_BYTES: numberSetting(positiveInt)
    .default(16 * 1024)
    .describe(
      'Largest accepted message value, in bytes: a larger one is dead-lettered (`too-large`) before it is parsed.',
    ),
  AQUEDUCT_MAX_HEADER_BYTES: numberSetting(positiveInt)
    .default(16 * 1024)
    .describe(
      'Largest accepted message key plus headers, in bytes: a larger message is dead-lettered (`too-large`) before its value is read.',
    ),
  AQUEDUCT_FETCH_MAX_BYTES_PER_PARTITION: numberSetting(positiveInt)
    .default(1024 * 1024)
    .describe(
      "Bytes fetched per partition per request (the Java consumer's `max.partition.fetch.bytes` default): how far a partition's events can get ahead of an unfinished one (one provider's past the other's), and the re-read after a pause.",
    ),
  AQUEDUCT_SESSION_TIMEOUT_MS: numberSetting(z.number().int().min(6000).max(300_000))
    .default(30_000)
    .describe(
      'Kafka group session timeout: how long a consumer that died without leaving (kill -9, a lost host) holds its partitions before the group hands them to the others.',
    ),
  AQUEDUCT_METADATA_MAX_AGE_MS: numberSetting(positiveInt.max(MAX_TIMER_MS))
    .default(60_000)
    .describe(
      "How often each consumer reads the topics' metadata again, in ms: partitions added to the topic (`kafka-topics.sh --alter --partitions`) are read within about this long, after the rebalance the first member to see them starts. kafkajs' and the Java client's default, 300000, would leave them unread for up to five minutes.",
    ),
  AQUEDUCT_SHUTDOWN_TIMEOUT_MS: numberSetting(positiveInt.max(MAX_TIMER_MS))
    .default(25_000)
    .describe('Drain bound on SIGTERM/SIGINT: in-flight work finishes and offsets commit within this time.'),
  AQUEDUCT_HTTP_PORT: numberSetting(z.number().int().min(0).max(65535))
    .default(9464)
    .describe('Port of /healthz, /readyz and /metrics (0: a free port).'),

  FCM_PROJECT_ID: z
    .string()
    .min(1)
    .default('aqueduct-local')
    .describe('Firebase project id the FCM v1 API is called for.'),
  FCM_ENDPOINT: z
    .string()
    .url()
    .optional()
    .describe(
      'Send FCM requests to this https://host:port instead of Google (simulators, proxies); http:// for plain text to a TLS-originating sidecar.',
    ),
  FCM_CA_FILE: z
    .string()
    .min(1)
    .optional()
    .describe('PEM file of a CA to trust for an https:// FCM_ENDPOINT.'),
  GOOGLE_APPLICATION_CREDENTIALS: z
    .string()
    .min(1)
    .optional()
    .describe('Service-account JSON file for FCM (else Application Default Credentials).'),
  APNS_KEY_FILE: z.string().min(1).optional().describe('APNs token-auth signing key (.p8 file).'),
  APNS_KEY_ID: headerSafe.optional().describe('Key id of APNS_KEY_FILE.'),
  APNS_TEAM_ID: headerSafe.optional().describe('Apple developer team id.'),
  APNS_TOPIC: headerSafe.default('dev.aqueduct.app').describe('The app bundle id (apns-topic).'),
  APNS_PRODUCTION: bool.default(false).describe('true: production APNs; false: the sandbox.'),
  AQUEDUCT_APNS_SHARED_TOKEN: bool
    .default(true)
    .describe(
      'Every consumer sends the same APNs provider token, kept in Redis (`<prefix>:apns-token:{<team>.<key id>}`, for at most an hour) and renewed there every 40 minutes, so that a fleet updates its token as seldom as Apple asks however many processes start. false: each process signs its own (the JWT is a credential; false keeps it out of Redis).',
    ),
  APNS_ENDPOINT: z
    .string()
    .url()
    .optional()
    .describe(
      'Send APNs requests to this https://host:port instead of Apple; http:// for plain-text HTTP/2 to a TLS-originating sidecar.',
    ),
  APNS_CA_FILE: z
    .string()
    .min(1)
    .optional()
    .describe('PEM file of a CA to trust for an https:// APNS_ENDPOINT.'),

  LOG_LEVEL: z
    .enum(['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'])
    .default('info')
    .describe('Log level of the JSON logs on stdout.'),
});

export type Config = z.output<typeof configSchema>;

/** The settings of the Redis connection, for the commands that read only those (a zod `pick` mask). */
export const REDIS_CONNECTION_SETTINGS = {
  REDIS_URL: true,
  REDIS_CLUSTER_NODES: true,
  REDIS_USERNAME: true,
  REDIS_PASSWORD: true,
  REDIS_TLS: true,
  REDIS_TLS_CA_FILE: true,
  REDIS_TLS_CERT_FILE: true,
  REDIS_TLS_KEY_FILE: true,
  REDIS_TLS_REJECT_UNAUTHORIZED: true,
} as const;
export type ConfigInput = z.input<typeof configSchema>;

const SECRET = /PASSWORD|SECRET|CREDENTIALS|KEY_FILE|TOKEN/;

/**
 * Reads configuration from `env` (and a JSON file, whose keys the environment overrides). Any setting
 * `X` may instead be given as `X_FILE`, the path of a file holding its value (one trailing newline is
 * dropped), in the environment or the JSON file: secrets then live in mounted files, not in the
 * environment that `ps e` or a crash dump shows. Giving both `X` and `X_FILE` is an error.
 */
export function loadConfig(env: NodeJS.ProcessEnv = process.env, file?: string): Config {
  const merged = readSettings(Object.keys(configSchema.shape), env, file);
  const parsed = configSchema.safeParse(merged);
  if (!parsed.success) throw new ConfigError(`invalid configuration: ${describeIssues(parsed.error.issues)}`);
  // The deprecated name stands in for the window where the window itself is not given.
  const deprecatedWindow = parsed.data.AQUEDUCT_DEDUPE_TTL_SECONDS;
  if (merged.AQUEDUCT_IDEMPOTENCY_WINDOW_SECONDS === undefined && deprecatedWindow !== undefined) {
    parsed.data.AQUEDUCT_IDEMPOTENCY_WINDOW_SECONDS = deprecatedWindow;
  }
  checkConnectionSettings(parsed.data);
  return parsed.data;
}

/** Settings that only make sense together; checked after parsing so that each message names the pair. */
function checkConnectionSettings(config: Config): void {
  const problems: string[] = [];
  if (config.KAFKA_SASL_MECHANISM && !(config.KAFKA_SASL_USERNAME && config.KAFKA_SASL_PASSWORD)) {
    problems.push('KAFKA_SASL_MECHANISM needs KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD');
  }
  if (!config.KAFKA_SASL_MECHANISM && (config.KAFKA_SASL_USERNAME || config.KAFKA_SASL_PASSWORD)) {
    problems.push('KAFKA_SASL_USERNAME/KAFKA_SASL_PASSWORD need KAFKA_SASL_MECHANISM');
  }
  for (const prefix of ['KAFKA_TLS', 'REDIS_TLS'] as const) {
    if (Boolean(config[`${prefix}_CERT_FILE`]) !== Boolean(config[`${prefix}_KEY_FILE`])) {
      problems.push(`${prefix}_CERT_FILE and ${prefix}_KEY_FILE go together`);
    }
  }
  const url = new URL(config.REDIS_URL);
  if (url.password && config.REDIS_PASSWORD) {
    problems.push('the Redis password is both in REDIS_URL and REDIS_PASSWORD: give it one way only');
  }
  if (url.username && config.REDIS_USERNAME) {
    problems.push('the Redis user is both in REDIS_URL and REDIS_USERNAME: give it one way only');
  }
  if (problems.length > 0) throw new ConfigError(`invalid configuration: ${problems.join('; ')}`);
}

/** One line per setting: name, default and description (for `--help` and docs/configuration.md). */
export function configReference(): Array<{ name: string; defaultValue: string; description: string }> {
  return settingsReference(configSchema.shape);
}

/** The configuration with secrets masked, for logs and `--help`. */
export function redactConfig(config: Config): Record<string, unknown> {
  return Object.fromEntries(
    Object.entries(config).map(([key, value]) => {
      if (SECRET.test(key) && value !== undefined) return [key, '***'];
      if (key === 'REDIS_URL' && typeof value === 'string') return [key, redactUrl(value)];
      return [key, value];
    }),
  );
}

/** The topics the consumer reads and writes. */
export interface Topics {
  main: string;
  retry: string;
  /** Where the events of a tenant over its fair share are parked until its share allows them. */
  deferred: string;
  deadLetter: string;
  invalidTokens: string;
}

/**
 * The idempotency window in seconds: the setting, else its deprecated name's value (`loadConfig` puts
 * that in its place), else a day.
 */
export function idempotencyWindowOf(config: Pick<Config, 'AQUEDUCT_IDEMPOTENCY_WINDOW_SECONDS'>): number {
  return config.AQUEDUCT_IDEMPOTENCY_WINDOW_SECONDS;
}

/** The topics of AQUEDUCT_TOPIC's family. */
export function topicsOf(config: Pick<Config, 'AQUEDUCT_TOPIC'>): Topics {
  return topicFamily(config.AQUEDUCT_TOPIC);
}

/** The topics derived from a main topic, which Aqueduct writes and creates beside it. */
export function derivedTopics(topics: Topics): string[] {
  return [topics.retry, topics.deferred, topics.deadLetter, topics.invalidTokens];
}

/**
 * The consumer group that reads the deferred topic back: a group of its own beside `AQUEDUCT_GROUP_ID`,
 * so that reading parked events back never waits for the main topic's fetches, nor they for it.
 */
export function readBackGroupId(groupId: string): string {
  return `${groupId}.deferred`;
}

/** A main topic and the four derived from its name: `.retry`, `.deferred`, `.dlq` and `.invalid-tokens`. */
export function topicFamily(main: string): Topics {
  return {
    main,
    retry: `${main}.retry`,
    deferred: `${main}.deferred`,
    deadLetter: `${main}.dlq`,
    invalidTokens: `${main}.invalid-tokens`,
  };
}
