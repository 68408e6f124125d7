import { readFileSync } from 'node:fs';
import type { Config } from './config.ts';
import type { Platform } from './events/event.ts';
import type { KafkaSecurityOptions } from './kafka/security.ts';
import type { TopicDurability } from './kafka/topics.ts';
import {
  type ApnsProviderOptions,
  type Endpoint,
  type FcmProviderOptions,
  LOCAL_APNS_KEY_ID,
  LOCAL_APNS_TEAM_ID,
  LOCAL_FCM_ACCESS_TOKEN,
  ProviderConfigError,
  type ProvidersOptions,
  parseEndpoint,
  throwAwaySigningKey,
} from './providers/index.ts';
import { type RedisConnectionOptions, redisNodeAddresses } from './redis/client.ts';
import { ConfigError } from './settings.ts';
import { type TlsOptions, tlsWhenWanted } from './tls.ts';

/**
 * The settings (environment variables or `--config` keys, validated by `loadConfig`) turned into the
 * typed options of the clients the verbs build: Kafka security, the Redis connection, the topics'
 * durability and the providers. Below this module (src/kafka, src/redis, src/providers, src/pipeline,
 * src/limiter) no setting name is read. A setting that cannot work is refused here, in a message that
 * names it; file contents (PEM files) are read here too, so that such a message can name its setting.
 */

/** The settings {@link kafkaSecurityOptions} reads. */
export type KafkaSecuritySettings = Pick<
  Config,
  | 'KAFKA_SASL_MECHANISM'
  | 'KAFKA_SASL_USERNAME'
  | 'KAFKA_SASL_PASSWORD'
  | 'KAFKA_TLS'
  | 'KAFKA_TLS_CA_FILE'
  | 'KAFKA_TLS_CERT_FILE'
  | 'KAFKA_TLS_KEY_FILE'
  | 'KAFKA_TLS_REJECT_UNAUTHORIZED'
>;

/**
 * Kafka security from the settings: TLS when KAFKA_TLS is on or a TLS file is given (CA, client
 * certificate and key read from their PEM files), SASL PLAIN or SCRAM when KAFKA_SASL_MECHANISM is set.
 * The result holds the password: hand it to `kafkaSecurity`, never to a logger.
 */
export function kafkaSecurityOptions(settings: KafkaSecuritySettings): KafkaSecurityOptions {
  const options: KafkaSecurityOptions = {};
  const tls = tlsFromSettings('KAFKA', settings.KAFKA_TLS, settings);
  if (tls) options.tls = tls;
  const mechanism = settings.KAFKA_SASL_MECHANISM;
  if (mechanism) {
    const username = settings.KAFKA_SASL_USERNAME;
    const password = settings.KAFKA_SASL_PASSWORD;
    if (!username || !password) {
      throw new ConfigError('KAFKA_SASL_MECHANISM needs KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD');
    }
    options.sasl = { mechanism, username, password };
  }
  return options;
}

type TlsSettingSuffix = 'CA_FILE' | 'CERT_FILE' | 'KEY_FILE' | 'REJECT_UNAUTHORIZED';

/**
 * TLS from a client's four TLS settings (`<prefix>_TLS_CA_FILE`, `_CERT_FILE`, `_KEY_FILE`,
 * `_REJECT_UNAUTHORIZED`), when `wanted` or a file is given; a file that cannot be read names its setting.
 */
function tlsFromSettings<P extends 'KAFKA' | 'REDIS'>(
  prefix: P,
  wanted: boolean,
  settings: Pick<Config, `${P}_TLS_${TlsSettingSuffix}`>,
): TlsOptions | undefined {
  const ca = `${prefix}_TLS_CA_FILE` as const;
  const cert = `${prefix}_TLS_CERT_FILE` as const;
  const key = `${prefix}_TLS_KEY_FILE` as const;
  return tlsWhenWanted(wanted, {
    caFile: settings[ca],
    certFile: settings[cert],
    keyFile: settings[key],
    rejectUnauthorized: settings[`${prefix}_TLS_REJECT_UNAUTHORIZED`],
    names: { ca, cert, key },
  });
}

/** The settings {@link redisConnectionOptions} reads. */
export type RedisConnectionSettings = Pick<
  Config,
  | 'REDIS_URL'
  | 'REDIS_CLUSTER_NODES'
  | 'REDIS_USERNAME'
  | 'REDIS_PASSWORD'
  | 'REDIS_TLS'
  | 'REDIS_TLS_CA_FILE'
  | 'REDIS_TLS_CERT_FILE'
  | 'REDIS_TLS_KEY_FILE'
  | 'REDIS_TLS_REJECT_UNAUTHORIZED'
>;

/**
 * The Redis connection from the settings: REDIS_URL, or the Redis Cluster of REDIS_CLUSTER_NODES
 * instead of it; the ACL user and password when given apart from the URL; and TLS (CA, client
 * certificate and key from their PEM files) when REDIS_TLS is on, the URL is `rediss://`, or a TLS file
 * is given. The result holds the password: never log it.
 * @throws ConfigError when REDIS_CLUSTER_NODES is set and REDIS_URL carries credentials or `rediss://`,
 * which the cluster connection would silently go without
 */
export function redisConnectionOptions(settings: RedisConnectionSettings): RedisConnectionOptions {
  const clusterNodes = settings.REDIS_CLUSTER_NODES;
  const options: RedisConnectionOptions = { url: settings.REDIS_URL };
  if (clusterNodes) {
    const url = new URL(settings.REDIS_URL);
    if (url.username || url.password || url.protocol === 'rediss:') {
      throw new ConfigError(
        'REDIS_CLUSTER_NODES is set, so REDIS_URL is not used, yet it carries credentials or rediss://: give the user and password as REDIS_USERNAME/REDIS_PASSWORD and TLS as REDIS_TLS, and drop REDIS_URL',
      );
    }
    options.clusterNodes = redisNodeAddresses(clusterNodes);
  }
  if (settings.REDIS_USERNAME) options.username = settings.REDIS_USERNAME;
  if (settings.REDIS_PASSWORD) options.password = settings.REDIS_PASSWORD;
  const tls = tlsFromSettings(
    'REDIS',
    settings.REDIS_TLS || (!clusterNodes && settings.REDIS_URL.startsWith('rediss:')),
    settings,
  );
  if (tls) options.tls = tls;
  return options;
}

/** The durability the settings ask for (AQUEDUCT_TOPIC_REPLICATION_FACTOR, AQUEDUCT_TOPIC_MIN_INSYNC_REPLICAS). */
export function topicDurabilityOf(
  settings: Pick<Config, 'AQUEDUCT_TOPIC_REPLICATION_FACTOR' | 'AQUEDUCT_TOPIC_MIN_INSYNC_REPLICAS'>,
): TopicDurability {
  return {
    replicationFactor: settings.AQUEDUCT_TOPIC_REPLICATION_FACTOR,
    minInsyncReplicas: settings.AQUEDUCT_TOPIC_MIN_INSYNC_REPLICAS,
  };
}

/** The settings {@link providersOptions} reads. */
export type ProviderSettings = Pick<
  Config,
  | 'FCM_PROJECT_ID'
  | 'GOOGLE_APPLICATION_CREDENTIALS'
  | 'FCM_ENDPOINT'
  | 'FCM_CA_FILE'
  | 'APNS_KEY_FILE'
  | 'APNS_KEY_ID'
  | 'APNS_TEAM_ID'
  | 'APNS_TOPIC'
  | 'APNS_PRODUCTION'
  | 'APNS_ENDPOINT'
  | 'APNS_CA_FILE'
>;

/** Provider options that are not settings of their own. */
export interface ProviderTuning {
  /** Requests in flight at once per provider (e.g. AQUEDUCT_SEND_CONCURRENCY). Default 64. */
  maxInFlight?: number;
  /** APNs answer timeout; firebase-admin's is fixed at 15 s. Default 5000 ms. */
  apnsRequestTimeoutMs?: number;
}

/** Why APNs pushes are `rejected` when neither a key nor an endpoint is configured. */
const APNS_UNCONFIGURED =
  'apns is not configured: set APNS_KEY_FILE, APNS_KEY_ID and APNS_TEAM_ID (or APNS_ENDPOINT for a simulator)';

/**
 * Both providers' options from the settings (see {@link fcmProviderOptions} and
 * {@link apnsProviderOptions}); without APNs settings, APNs is left unconfigured and every APNs push
 * is `rejected` with a reason that says what to set.
 */
export function providersOptions(settings: ProviderSettings, tuning: ProviderTuning = {}): ProvidersOptions {
  const fcm = fcmProviderOptions(settings, tuning);
  const apns = apnsProviderOptions(settings, tuning);
  return apns ? { fcm, apns } : { fcm, apnsUnconfigured: APNS_UNCONFIGURED };
}

/**
 * FCM: GOOGLE_APPLICATION_CREDENTIALS (a service-account file) or else Application Default Credentials;
 * FCM_PROJECT_ID; FCM_ENDPOINT + FCM_CA_FILE to use another server. With FCM_ENDPOINT and no credentials
 * file, a fixed local token is sent and Google is never asked for one.
 *
 * @throws ProviderConfigError for a malformed FCM_ENDPOINT or an FCM_CA_FILE that is no readable PEM file
 */
export function fcmProviderOptions(
  settings: ProviderSettings,
  tuning: ProviderTuning = {},
): FcmProviderOptions {
  const endpointUrl = nonEmpty(settings.FCM_ENDPOINT);
  const credentialsFile = nonEmpty(settings.GOOGLE_APPLICATION_CREDENTIALS);
  const projectId = nonEmpty(settings.FCM_PROJECT_ID);
  const caFile = nonEmpty(settings.FCM_CA_FILE);
  return {
    ...(projectId ? { projectId } : {}),
    ...(endpointUrl ? { endpoint: overrideEndpoint('fcm', endpointUrl, caFile) } : {}),
    ...(credentialsFile ? { serviceAccountFile: credentialsFile } : {}),
    ...(endpointUrl && !credentialsFile ? { accessToken: LOCAL_FCM_ACCESS_TOKEN } : {}),
    ...(caFile ? { caPem: readPem('fcm', caFile, 'FCM_CA_FILE') } : {}),
    ...(tuning.maxInFlight ? { maxInFlight: tuning.maxInFlight } : {}),
  };
}

/**
 * FCM_ENDPOINT or APNS_ENDPOINT, parsed. A CA file says whom to trust over TLS, so next to a plain-text
 * endpoint it is a mistake in the settings (a forgotten https://, most likely), not something to ignore.
 */
function overrideEndpoint(platform: Platform, url: string, caFile: string | undefined): Endpoint {
  const prefix = platform === 'fcm' ? 'FCM' : 'APNS';
  const endpoint = parseEndpoint(platform, url, `${prefix}_ENDPOINT`);
  if (endpoint.scheme === 'http' && caFile) {
    throw new ProviderConfigError(
      platform,
      `${prefix}_CA_FILE is set but ${prefix}_ENDPOINT is a plain-text http:// URL: use https:// or unset ${prefix}_CA_FILE`,
      { setting: `${prefix}_CA_FILE` },
    );
  }
  return endpoint;
}

/**
 * APNs: APNS_KEY_FILE + APNS_KEY_ID + APNS_TEAM_ID (all three), APNS_TOPIC, APNS_PRODUCTION;
 * APNS_ENDPOINT + APNS_CA_FILE to use another server. With APNS_ENDPOINT and no key, a throw-away key
 * signs the tokens (simulators accept any well-formed one). With neither: undefined, APNs is not
 * configured.
 *
 * @throws ProviderConfigError for half an APNs key, a malformed APNS_ENDPOINT, or a key or CA file that
 *   is no readable PEM file
 */
export function apnsProviderOptions(
  settings: ProviderSettings,
  tuning: ProviderTuning = {},
): ApnsProviderOptions | undefined {
  const endpointUrl = nonEmpty(settings.APNS_ENDPOINT);
  const keyFile = nonEmpty(settings.APNS_KEY_FILE);
  const keyId = nonEmpty(settings.APNS_KEY_ID);
  const teamId = nonEmpty(settings.APNS_TEAM_ID);
  const caFile = nonEmpty(settings.APNS_CA_FILE);
  const keyParts = [keyFile, keyId, teamId].filter((value) => value !== undefined).length;
  if (keyParts > 0 && keyParts < 3) {
    const missing = Object.entries({ APNS_KEY_FILE: keyFile, APNS_KEY_ID: keyId, APNS_TEAM_ID: teamId })
      .filter(([, value]) => value === undefined)
      .map(([name]) => name);
    throw new ProviderConfigError(
      'apns',
      `token authentication needs APNS_KEY_FILE, APNS_KEY_ID and APNS_TEAM_ID; missing ${missing.join(', ')}`,
      { setting: missing[0] as string },
    );
  }
  if (keyParts === 0 && !endpointUrl) return undefined;
  const key =
    keyFile && keyId && teamId
      ? { keyPem: readPem('apns', keyFile, 'APNS_KEY_FILE'), keyId, teamId }
      : { keyPem: throwAwaySigningKey(), keyId: LOCAL_APNS_KEY_ID, teamId: LOCAL_APNS_TEAM_ID };
  const endpoint = endpointUrl ? overrideEndpoint('apns', endpointUrl, caFile) : undefined;
  const caPem = caFile ? readPem('apns', caFile, 'APNS_CA_FILE') : undefined;
  return {
    ...key,
    topic: nonEmpty(settings.APNS_TOPIC) ?? 'dev.aqueduct.app',
    production: settings.APNS_PRODUCTION,
    ...(endpoint ? { endpoint } : {}),
    ...(caPem ? { caPem } : {}),
    ...(tuning.maxInFlight ? { maxInFlight: tuning.maxInFlight } : {}),
    ...(tuning.apnsRequestTimeoutMs ? { requestTimeoutMs: tuning.apnsRequestTimeoutMs } : {}),
  };
}

/** A PEM file's text; one that cannot be read or holds no PEM block is refused without being quoted. */
function readPem(platform: Platform, file: string, setting: string): string {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (error) {
    throw new ProviderConfigError(
      platform,
      `${setting} cannot be read (${(error as NodeJS.ErrnoException).code ?? 'error'})`,
      { setting, cause: error },
    );
  }
  if (!text.includes('-----BEGIN '))
    throw new ProviderConfigError(platform, `${setting} is not a PEM file`, { setting });
  return text;
}

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value.trim() === '' ? undefined : value.trim();
}
