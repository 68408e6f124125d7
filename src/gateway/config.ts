import { z } from 'zod';
import {
  type Config,
  configSchema,
  numberSetting,
  positive,
  positiveInt,
  REDIS_CONNECTION_SETTINGS,
  redactConfig,
} from '../config.ts';
import { describeIssues } from '../events/decode.ts';
import { EVENT_LIMITS } from '../events/event.ts';
import { jsonErrorWithoutInput } from '../redact.ts';
import { ConfigError, readSettings, settingsReference } from '../settings.ts';
import { MAX_TIMER_MS } from '../timer-delay.ts';

/**
 * The gateway's configuration (`aqueduct serve`): the shared settings it needs from the consumer's
 * schema (brokers, topic, Redis, the per-tenant rate) plus its own `AQUEDUCT_GATEWAY_*` settings. Read
 * like the consumer's: environment variables, optionally a JSON file with the same keys
 * (`--config file.json`; the environment wins), validated once at start with a message naming every bad
 * field. API key hashes are masked by {@link redactGatewayConfig}.
 */

const tenantName = z
  .string()
  .min(1)
  .max(EVENT_LIMITS.tenantLength)
  .regex(/^[A-Za-z0-9._-]+$/, 'letters, digits, dot, dash, underscore');

/**
 * Key hash → tenant. A key that is not a lower-case hex SHA-256 is reported without its text: it may be
 * a real API key pasted where its hash belongs.
 */
const apiKeyMap = z.record(z.string(), z.unknown()).transform((record, ctx) => {
  const out: Record<string, string> = {};
  for (const [hash, tenant] of Object.entries(record)) {
    if (!/^[0-9a-f]{64}$/.test(hash)) {
      ctx.addIssue({
        code: 'custom',
        message:
          'a key is not a lower-case hex SHA-256 (64 hex digits); map the hash of each API key (`aqueduct serve --hash-key KEY`), never the key itself',
      });
      continue;
    }
    const parsed = tenantName.safeParse(tenant);
    if (!parsed.success) {
      ctx.addIssue({
        code: 'custom',
        path: [`${hash.slice(0, 8)}…`],
        message: parsed.error.issues[0]?.message ?? 'a tenant name',
      });
      continue;
    }
    out[hash] = parsed.data;
  }
  return out;
});

/** A JSON object given as text (environment) or as an object (config file). */
function jsonObject<T extends z.ZodType>(inner: T) {
  return z
    .union([z.string(), z.record(z.string(), z.unknown())])
    .transform((value, ctx) => {
      if (typeof value !== 'string') return value;
      try {
        return JSON.parse(value) as unknown;
      } catch (error) {
        ctx.addIssue({ code: 'custom', message: `not JSON: ${jsonErrorWithoutInput(error)}` });
        return z.NEVER;
      }
    })
    .pipe(inner);
}

/** One tenant's admission limit. */
const tenantLimit = z
  .object({
    /** Events per second the tenant may submit (may be fractional). */
    rate: z.number().positive(),
    /** The most events it may submit at once after an idle spell (default: one second of `rate`). */
    burst: z.number().int().positive().optional(),
  })
  .strict();

export const gatewayConfigSchema = configSchema
  .pick({
    KAFKA_BROKERS: true,
    KAFKA_CLIENT_ID: true,
    KAFKA_SASL_MECHANISM: true,
    KAFKA_SASL_USERNAME: true,
    KAFKA_SASL_PASSWORD: true,
    KAFKA_TLS: true,
    KAFKA_TLS_CA_FILE: true,
    KAFKA_TLS_CERT_FILE: true,
    KAFKA_TLS_KEY_FILE: true,
    KAFKA_TLS_REJECT_UNAUTHORIZED: true,
    AQUEDUCT_TOPIC: true,
    AQUEDUCT_TOPIC_REPLICATION_FACTOR: true,
    AQUEDUCT_TOPIC_MIN_INSYNC_REPLICAS: true,
    ...REDIS_CONNECTION_SETTINGS,
    AQUEDUCT_REDIS_PREFIX: true,
    AQUEDUCT_LIMITER_FAILURE_POLICY: true,
    AQUEDUCT_SHUTDOWN_TIMEOUT_MS: true,
    LOG_LEVEL: true,
  })
  .extend({
    AQUEDUCT_TENANT_RATE: numberSetting(positive)
      .optional()
      .describe(
        'Events per second each tenant may submit through the gateway (429 beyond it); unset: no limit unless AQUEDUCT_GATEWAY_TENANT_LIMITS names the tenant.',
      ),
    AQUEDUCT_TENANT_BURST: numberSetting(positiveInt)
      .optional()
      .describe('Events a tenant may submit at once after an idle spell (default: one second of the rate).'),
    AQUEDUCT_GATEWAY_TENANT_LIMITS: jsonObject(z.record(tenantName, tenantLimit))
      .optional()
      .describe(
        'Per-tenant overrides of the admission limit, JSON: {"acme": {"rate": 2000, "burst": 5000}}.',
      ),
    AQUEDUCT_GATEWAY_PORT: numberSetting(z.number().int().min(0).max(65535))
      .default(8080)
      .describe('Port of the API, `POST /v1/notifications`, and nothing else (0: a free port).'),
    AQUEDUCT_GATEWAY_ADMIN_PORT: numberSetting(z.number().int().min(0).max(65535))
      .default(9465)
      .describe(
        'Port of /openapi.json, /healthz, /readyz and /metrics (0: a free port): for probes and Prometheus, never exposed to callers.',
      ),
    AQUEDUCT_GATEWAY_HOST: z
      .string()
      .min(1)
      .default('0.0.0.0')
      .describe('Address the gateway listens on (both ports).'),
    AQUEDUCT_GATEWAY_REQUEST_TIMEOUT_MS: numberSetting(positiveInt.max(MAX_TIMER_MS))
      .default(20_000)
      .describe(
        'A request whose headers and body have not all arrived within this time is answered 408 and its connection closed (slow clients hold no socket longer).',
      ),
    AQUEDUCT_GATEWAY_HEADERS_TIMEOUT_MS: numberSetting(positiveInt.max(MAX_TIMER_MS))
      .default(10_000)
      .describe(
        'A request whose headers have not all arrived within this time gets its connection closed; at most AQUEDUCT_GATEWAY_REQUEST_TIMEOUT_MS.',
      ),
    AQUEDUCT_GATEWAY_KEEP_ALIVE_TIMEOUT_MS: numberSetting(positiveInt.max(MAX_TIMER_MS))
      .default(5_000)
      .describe('A kept-alive connection with no new request within this time is closed.'),
    AQUEDUCT_GATEWAY_CONNECTION_TIMEOUT_MS: numberSetting(positiveInt.max(MAX_TIMER_MS))
      .default(30_000)
      .describe('A connection on which nothing is sent or received for this long is closed.'),
    AQUEDUCT_GATEWAY_MAX_CONNECTIONS: numberSetting(positiveInt)
      .default(4096)
      .describe(
        'Most open connections to the API port; a further one takes the place of the oldest holding no request received whole (idle, or still sending its request), or is closed at once when every one holds one.',
      ),
    AQUEDUCT_GATEWAY_MAX_PIPELINED: numberSetting(positiveInt.max(65_536))
      .default(256)
      .describe(
        'Most requests of one connection received and not yet answered; the one beyond is answered 429 `too-many-pipelined` and the connection closed.',
      ),
    AQUEDUCT_GATEWAY_API_KEYS: jsonObject(apiKeyMap)
      .optional()
      .describe(
        'API keys, JSON: {"<sha256 hex of the key>": "<tenant>"} (`aqueduct serve --hash-key KEY` prints the hash); or AQUEDUCT_GATEWAY_API_KEYS_FILE, a file holding that JSON (e.g. mounted from a Secret).',
      ),
    AQUEDUCT_GATEWAY_MAX_BATCH: numberSetting(positiveInt.max(10_000))
      .default(500)
      .describe('Most events in one request (413 beyond it).'),
    AQUEDUCT_GATEWAY_MAX_BODY_BYTES: numberSetting(positiveInt)
      .default(1024 * 1024)
      .describe('Largest request body in bytes (413 beyond it).'),
    AQUEDUCT_GATEWAY_BODY_MEMORY_BYTES: numberSetting(positiveInt)
      .optional()
      .describe(
        "Bytes all request bodies being read may hold together, beyond each body's first 16 KiB (one event, never refused); a body finding it full is answered 503 and its connection closed. Default: 64 × AQUEDUCT_GATEWAY_MAX_BODY_BYTES.",
      ),
    AQUEDUCT_GATEWAY_PRODUCE_TIMEOUT_MS: numberSetting(positiveInt.max(MAX_TIMER_MS))
      .default(5000)
      .describe('A Kafka write not acknowledged within this time answers 503 (never 202).'),
    AQUEDUCT_GATEWAY_PRODUCERS: numberSetting(positiveInt.max(64))
      .default(4)
      .describe(
        'Idempotent Kafka producers per gateway, each with one produce request in flight (requests arriving meanwhile are coalesced).',
      ),
    AQUEDUCT_GATEWAY_RETRY_AFTER_SECONDS: numberSetting(positiveInt)
      .default(2)
      .describe('Retry-After of a 503 while Kafka (or Redis) cannot be reached.'),
  })
  .refine((c) => c.AQUEDUCT_GATEWAY_HEADERS_TIMEOUT_MS <= c.AQUEDUCT_GATEWAY_REQUEST_TIMEOUT_MS, {
    path: ['AQUEDUCT_GATEWAY_HEADERS_TIMEOUT_MS'],
    message: 'must not be larger than AQUEDUCT_GATEWAY_REQUEST_TIMEOUT_MS',
  })
  // Smaller, a body of the largest size would be refused (503) even with nothing else being read.
  .refine(
    (c) =>
      c.AQUEDUCT_GATEWAY_BODY_MEMORY_BYTES === undefined ||
      c.AQUEDUCT_GATEWAY_BODY_MEMORY_BYTES >= c.AQUEDUCT_GATEWAY_MAX_BODY_BYTES,
    {
      path: ['AQUEDUCT_GATEWAY_BODY_MEMORY_BYTES'],
      message: 'must be at least AQUEDUCT_GATEWAY_MAX_BODY_BYTES (one body of the largest size)',
    },
  );

export type GatewayConfig = z.output<typeof gatewayConfigSchema>;
export type GatewayConfigInput = z.input<typeof gatewayConfigSchema>;

/** A tenant's admission limit as the gateway applies it. */
export interface TenantLimit {
  /** Events per second. */
  rate: number;
  /** Bucket capacity in events. */
  burst: number;
}

/**
 * Reads the gateway configuration from `env` (and a JSON file, whose keys the environment overrides),
 * like the consumer's `loadConfig`: any setting `X` may be given as `X_FILE`, the path of a file holding
 * its value (secrets in mounted files), never both. A file may also hold the consumer's settings (one
 * file for both), which are ignored here.
 */
export function loadGatewayConfig(env: NodeJS.ProcessEnv = process.env, file?: string): GatewayConfig {
  // The file may also hold the consumer's settings: one file can configure both processes.
  const merged = readSettings(
    Object.keys(gatewayConfigSchema.shape),
    env,
    file,
    Object.keys(configSchema.shape),
  );
  const parsed = gatewayConfigSchema.safeParse(merged);
  if (!parsed.success) throw new ConfigError(`invalid configuration: ${describeIssues(parsed.error.issues)}`);
  return parsed.data;
}

/**
 * The API keys of a configuration: key hash → tenant. At least one is required: a gateway nobody can
 * call is a mistake, and one anybody can call must never happen by omission.
 * @throws ConfigError naming the setting
 */
export function apiKeyHashes(config: GatewayConfig): Map<string, string> {
  const hashes = new Map(Object.entries(config.AQUEDUCT_GATEWAY_API_KEYS ?? {}));
  if (hashes.size === 0) {
    throw new ConfigError(
      'AQUEDUCT_GATEWAY_API_KEYS: no API key configured; set it (or AQUEDUCT_GATEWAY_API_KEYS_FILE) to {"<sha256 hex>": "<tenant>"}; `aqueduct serve --hash-key KEY` prints a hash',
    );
  }
  return hashes;
}

/** The default admission limit of every tenant, or null when tenants are not limited by default. */
export function defaultTenantLimit(config: GatewayConfig): TenantLimit | null {
  const rate = config.AQUEDUCT_TENANT_RATE;
  if (rate === undefined) return null;
  return { rate, burst: config.AQUEDUCT_TENANT_BURST ?? Math.max(1, Math.ceil(rate)) };
}

/** The per-tenant overrides, with their bursts filled in. */
export function tenantLimitOverrides(config: GatewayConfig): Map<string, TenantLimit> {
  return new Map(
    Object.entries(config.AQUEDUCT_GATEWAY_TENANT_LIMITS ?? {}).map(([tenant, limit]) => [
      tenant,
      { rate: limit.rate, burst: limit.burst ?? Math.max(1, Math.ceil(limit.rate)) },
    ]),
  );
}

/** One line per setting: name, default and description (for `--help` and docs/gateway.md). */
export function gatewayConfigReference(): Array<{ name: string; defaultValue: string; description: string }> {
  return settingsReference(gatewayConfigSchema.shape);
}

/** The configuration with secrets masked (the consumer's rules, plus the API key hashes), for logs. */
export function redactGatewayConfig(config: GatewayConfig): Record<string, unknown> {
  // redactConfig only walks the entries; the gateway's are a subset of the consumer's plus its own.
  const redacted = redactConfig(config as unknown as Config);
  if (config.AQUEDUCT_GATEWAY_API_KEYS !== undefined) {
    redacted.AQUEDUCT_GATEWAY_API_KEYS = `*** (${Object.keys(config.AQUEDUCT_GATEWAY_API_KEYS).length} keys)`;
  }
  return redacted;
}

/**
 * The settings table of docs/gateway.md: the gateway's own settings (the ones it shares with the
 * consumer are in the consumer's reference, docs/configuration.md). `node scripts/readme-config.ts`
 * writes it there, and a test keeps the page in step with it.
 */
export function gatewayConfigMarkdown(): string {
  const shared = configSchema.shape as Record<string, unknown>;
  const own = new Set(
    Object.entries(gatewayConfigSchema.shape)
      .filter(([name, field]) => shared[name] !== field)
      .map(([name]) => name),
  );
  const rows = gatewayConfigReference()
    .filter((r) => own.has(r.name))
    .map(
      (r) =>
        `| \`${r.name}\` | ${r.defaultValue === '' ? '–' : `\`${r.defaultValue}\``} | ${r.description} |`,
    );
  const others = gatewayConfigReference()
    .filter((r) => !own.has(r.name))
    .map((r) => `\`${r.name}\``)
    .join(', ');
  return [
    '| variable | default | meaning |',
    '| --- | --- | --- |',
    ...rows,
    '',
    `Shared with the consumer, as in the configuration reference: ${others}.`,
  ].join('\n');
}
