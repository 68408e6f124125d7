import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type Document, parseAllDocuments, parseDocument } from 'yaml';

/** The repository root, whatever directory vitest runs from. */
export const repoRoot = fileURLToPath(new URL('../../', import.meta.url));

/**
 * Every environment variable of Aqueduct's runtime contract (the names the code reads). The deployment
 * files may set these and no others: a misspelt name would be ignored silently by the process and the
 * default would win, which no schema can see.
 */
export const CONTRACT_ENV: ReadonlySet<string> = new Set([
  'KAFKA_BROKERS',
  'KAFKA_CLIENT_ID',
  'AQUEDUCT_TOPIC',
  'AQUEDUCT_TOPIC_REPLICATION_FACTOR',
  'AQUEDUCT_TOPIC_MIN_INSYNC_REPLICAS',
  'AQUEDUCT_GROUP_ID',
  'REDIS_URL',
  'AQUEDUCT_FCM_RATE',
  'AQUEDUCT_FCM_BURST',
  'AQUEDUCT_APNS_RATE',
  'AQUEDUCT_APNS_BURST',
  'AQUEDUCT_TENANT_RATE',
  'AQUEDUCT_TENANT_BURST',
  'FCM_PROJECT_ID',
  'GOOGLE_APPLICATION_CREDENTIALS',
  'FCM_ENDPOINT',
  'FCM_CA_FILE',
  'APNS_KEY_FILE',
  'APNS_KEY_ID',
  'APNS_TEAM_ID',
  'APNS_TOPIC',
  'APNS_PRODUCTION',
  'APNS_ENDPOINT',
  'APNS_CA_FILE',
  'AQUEDUCT_HTTP_PORT',
  'AQUEDUCT_GATEWAY_PORT',
  'AQUEDUCT_GATEWAY_ADMIN_PORT',
  'AQUEDUCT_GATEWAY_HOST',
  'AQUEDUCT_GATEWAY_REQUEST_TIMEOUT_MS',
  'AQUEDUCT_GATEWAY_HEADERS_TIMEOUT_MS',
  'AQUEDUCT_GATEWAY_KEEP_ALIVE_TIMEOUT_MS',
  'AQUEDUCT_GATEWAY_CONNECTION_TIMEOUT_MS',
  'AQUEDUCT_GATEWAY_MAX_CONNECTIONS',
  'AQUEDUCT_GATEWAY_API_KEYS',
  'AQUEDUCT_GATEWAY_API_KEYS_FILE',
  'AQUEDUCT_GATEWAY_TENANT_LIMITS',
  'AQUEDUCT_GATEWAY_MAX_BATCH',
  'AQUEDUCT_GATEWAY_MAX_BODY_BYTES',
  'AQUEDUCT_GATEWAY_PRODUCE_TIMEOUT_MS',
  'AQUEDUCT_GATEWAY_PRODUCERS',
  'AQUEDUCT_GATEWAY_RETRY_AFTER_SECONDS',
  'AQUEDUCT_SHUTDOWN_TIMEOUT_MS',
  'LOG_LEVEL',
]);

/**
 * The standard OpenTelemetry SDK variables (from the OpenTelemetry specification's "SDK environment
 * variables" and OTLP exporter configuration), which the contract accepts as a set. Listed by name so
 * that a misspelt OTEL_ variable fails like any other.
 */
export const OTEL_STANDARD_ENV: ReadonlySet<string> = new Set([
  'OTEL_SDK_DISABLED',
  'OTEL_SERVICE_NAME',
  'OTEL_RESOURCE_ATTRIBUTES',
  'OTEL_LOG_LEVEL',
  'OTEL_PROPAGATORS',
  'OTEL_TRACES_SAMPLER',
  'OTEL_TRACES_SAMPLER_ARG',
  'OTEL_TRACES_EXPORTER',
  'OTEL_METRICS_EXPORTER',
  'OTEL_LOGS_EXPORTER',
  'OTEL_EXPORTER_OTLP_ENDPOINT',
  'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT',
  'OTEL_EXPORTER_OTLP_PROTOCOL',
  'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL',
  'OTEL_EXPORTER_OTLP_HEADERS',
  'OTEL_EXPORTER_OTLP_TRACES_HEADERS',
  'OTEL_EXPORTER_OTLP_TIMEOUT',
  'OTEL_EXPORTER_OTLP_COMPRESSION',
  'OTEL_EXPORTER_OTLP_CERTIFICATE',
  'OTEL_BSP_SCHEDULE_DELAY',
  'OTEL_BSP_EXPORT_TIMEOUT',
  'OTEL_BSP_MAX_QUEUE_SIZE',
  'OTEL_BSP_MAX_EXPORT_BATCH_SIZE',
]);

/** True when `name` is a variable Aqueduct or its OpenTelemetry SDK reads. */
export function isDocumentedEnv(name: string): boolean {
  return CONTRACT_ENV.has(name) || OTEL_STANDARD_ENV.has(name);
}

/**
 * The topic's partition count everywhere this repository creates the topic or scales on it: the
 * compose publisher's `--partitions`, the KEDA `maxReplicaCount`, the HPA alternative's `maxReplicas`.
 */
export const TOPIC_PARTITIONS = 6;

/** The HTTP paths of the telemetry contract. */
export const HEALTH_PATHS = { live: '/healthz', ready: '/readyz', metrics: '/metrics' } as const;

/** A file's text, by its path from the repository root. */
export function readRepoFile(relativePath: string): string {
  return readFileSync(join(repoRoot, relativePath), 'utf8');
}

/** Throws with every parse error and warning of a YAML document, naming the file. */
function assertClean(document: Document, file: string): void {
  const problems = [...document.errors, ...document.warnings];
  if (problems.length > 0) {
    throw new Error(`${file}: ${problems.map((problem) => problem.message).join('; ')}`);
  }
}

/**
 * Parses a Compose file as Compose does: YAML 1.2 with `<<` merge keys resolved.
 * @param relativePath path from the repository root.
 */
export function parseComposeFile(relativePath: string): unknown {
  const document = parseDocument(readRepoFile(relativePath), { merge: true, prettyErrors: true });
  assertClean(document, relativePath);
  return document.toJS({ maxAliasCount: 100 });
}

/**
 * Parses every document of a Kubernetes YAML file as kubectl does: YAML 1.1 (so `0440` is octal and
 * `yes` a boolean, as in Go's yaml) and no merge keys.
 * @param relativePath path from the repository root.
 */
export function parseKubernetesFile(relativePath: string): unknown[] {
  const documents = parseAllDocuments(readRepoFile(relativePath), { version: '1.1', prettyErrors: true });
  if (!Array.isArray(documents)) throw new Error(`${relativePath}: not a YAML stream`);
  for (const document of documents) assertClean(document, relativePath);
  return documents.map((document) => document.toJS()).filter((value) => value !== null);
}

/** A plain JSON object (the shape every manifest node is parsed into). */
export type JsonObject = { [key: string]: unknown };

/** True for a non-null, non-array object. */
export function isObject(value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * Follows `path` into nested objects and arrays (numbers index arrays) and returns what is there, or
 * undefined when any step is missing. Used to read manifests without a cast at every level.
 */
export function at(value: unknown, ...path: (string | number)[]): unknown {
  let current = value;
  for (const step of path) {
    if (typeof step === 'number') {
      if (!Array.isArray(current)) return undefined;
      current = current[step];
    } else {
      if (!isObject(current)) return undefined;
      current = current[step];
    }
  }
  return current;
}

/** Like {@link at}, for an array (empty when absent or not an array). */
export function arrayAt(value: unknown, ...path: (string | number)[]): unknown[] {
  const found = at(value, ...path);
  return Array.isArray(found) ? found : [];
}

/** Like {@link at}, for an object (empty when absent or not an object). */
export function objectAt(value: unknown, ...path: (string | number)[]): JsonObject {
  const found = at(value, ...path);
  return isObject(found) ? found : {};
}

/** Like {@link at}, for a string; throws naming the path when it is not one. */
export function stringAt(value: unknown, ...path: (string | number)[]): string {
  const found = at(value, ...path);
  if (typeof found !== 'string') throw new Error(`expected a string at ${path.join('.')}, found ${found}`);
  return found;
}

/**
 * A Go duration as Compose reads it (`1m30s`, `500ms`), in milliseconds.
 * @throws when the text is not a duration.
 */
export function goDurationMs(text: string): number {
  const units: Record<string, number> = {
    ns: 1e-6,
    us: 1e-3,
    µs: 1e-3,
    ms: 1,
    s: 1000,
    m: 60_000,
    h: 3_600_000,
  };
  const parts = [...text.matchAll(/(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)/g)];
  if (parts.length === 0 || parts.map((part) => part[0]).join('') !== text) {
    throw new Error(`not a duration: ${text}`);
  }
  return parts.reduce((sum, part) => sum + Number(part[1]) * (units[part[2] ?? ''] ?? Number.NaN), 0);
}
