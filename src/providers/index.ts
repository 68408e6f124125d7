import { generateKeyPairSync } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { Platform } from '../events/event.ts';
import { ApnsProvider } from './apns.ts';
import { parseEndpoint } from './endpoint.ts';
import { ProviderConfigError } from './errors.ts';
import { FcmProvider } from './fcm.ts';
import type { PushOutcome, PushProvider, PushRequest } from './types.ts';

export { ApnsProvider, type ApnsProviderOptions, toApnsNotification } from './apns.ts';
export { classifyApnsFailure, describeApnsFailure } from './apns-classification.ts';
export { type Endpoint, parseEndpoint } from './endpoint.ts';
export { ProviderConfigError } from './errors.ts';
export { FcmProvider, type FcmProviderOptions, toFcmMessage } from './fcm.ts';
export { classifyFcmFailure, describeFcmError } from './fcm-classification.ts';
export * from './types.ts';

/**
 * The provider settings, under the names of the configuration contract (environment variables, or the
 * same keys of `--config file.json`). `process.env` and the consumer's validated config both fit.
 */
export interface ProviderSettings {
  FCM_PROJECT_ID?: string | undefined;
  GOOGLE_APPLICATION_CREDENTIALS?: string | undefined;
  FCM_ENDPOINT?: string | undefined;
  FCM_CA_FILE?: string | undefined;
  APNS_KEY_FILE?: string | undefined;
  APNS_KEY_ID?: string | undefined;
  APNS_TEAM_ID?: string | undefined;
  APNS_TOPIC?: string | undefined;
  APNS_PRODUCTION?: boolean | string | undefined;
  APNS_ENDPOINT?: string | undefined;
  APNS_CA_FILE?: string | undefined;
}

/** Options of {@link createProviders} that are not part of the configuration contract. */
export interface CreateProvidersOptions {
  /** Requests in flight at once per provider (e.g. AQUEDUCT_SEND_CONCURRENCY). Default 64. */
  maxInFlight?: number;
  /** APNs answer timeout; firebase-admin's is fixed at 15 s. Default 5000 ms. */
  apnsRequestTimeoutMs?: number;
}

/**
 * The bearer token Aqueduct sends to an FCM endpoint override when no Google credentials are configured
 * (FCM_ENDPOINT set, GOOGLE_APPLICATION_CREDENTIALS not): simulators accept any token.
 */
export const LOCAL_FCM_ACCESS_TOKEN = 'aqueduct-local-token';
/** Key and team id of the throw-away APNs signing key used with APNS_ENDPOINT and no APNS_KEY_FILE. */
export const LOCAL_APNS_KEY_ID = 'AQDLOCALKY';
export const LOCAL_APNS_TEAM_ID = 'AQDLOCALTM';

/**
 * Builds both providers from the configuration.
 *
 * - FCM: GOOGLE_APPLICATION_CREDENTIALS (a service-account file) or else Application Default
 *   Credentials; FCM_PROJECT_ID; FCM_ENDPOINT + FCM_CA_FILE to use another server. With FCM_ENDPOINT and
 *   no credentials file, a fixed local token is sent and Google is never asked for one.
 * - APNs: APNS_KEY_FILE + APNS_KEY_ID + APNS_TEAM_ID (all three), APNS_TOPIC, APNS_PRODUCTION;
 *   APNS_ENDPOINT + APNS_CA_FILE to use another server. With APNS_ENDPOINT and no key, a throw-away key
 *   signs the tokens (simulators accept any well-formed one). With neither, APNs is not configured and
 *   every APNs push is `rejected` with a reason that says so.
 *
 * Throws {@link ProviderConfigError} for settings that cannot work (unreadable files, half an APNs key,
 * a malformed endpoint).
 */
export function createProviders(
  settings: ProviderSettings = process.env,
  options: CreateProvidersOptions = {},
): Record<Platform, PushProvider> {
  const fcm = createFcmProvider(settings, options);
  try {
    return { fcm, apns: createApnsProvider(settings, options) };
  } catch (error) {
    void fcm.close();
    throw error;
  }
}

export function createFcmProvider(
  settings: ProviderSettings,
  options: CreateProvidersOptions = {},
): FcmProvider {
  const endpointUrl = nonEmpty(settings.FCM_ENDPOINT);
  const credentialsFile = nonEmpty(settings.GOOGLE_APPLICATION_CREDENTIALS);
  const projectId = nonEmpty(settings.FCM_PROJECT_ID);
  const caFile = nonEmpty(settings.FCM_CA_FILE);
  return new FcmProvider({
    ...(projectId ? { projectId } : {}),
    ...(endpointUrl ? { endpoint: parseEndpoint('fcm', endpointUrl, 'FCM_ENDPOINT') } : {}),
    ...(credentialsFile ? { serviceAccountFile: credentialsFile } : {}),
    ...(endpointUrl && !credentialsFile ? { accessToken: LOCAL_FCM_ACCESS_TOKEN } : {}),
    ...(caFile ? { caPem: readPem('fcm', caFile, 'FCM_CA_FILE') } : {}),
    ...(options.maxInFlight ? { maxInFlight: options.maxInFlight } : {}),
  });
}

export function createApnsProvider(
  settings: ProviderSettings,
  options: CreateProvidersOptions = {},
): ApnsProvider | UnconfiguredProvider {
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
      {
        setting: missing[0] as string,
      },
    );
  }
  if (keyParts === 0 && !endpointUrl) {
    return new UnconfiguredProvider(
      'apns',
      'apns is not configured: set APNS_KEY_FILE, APNS_KEY_ID and APNS_TEAM_ID (or APNS_ENDPOINT for a simulator)',
    );
  }
  const key =
    keyFile && keyId && teamId
      ? { keyPem: readPem('apns', keyFile, 'APNS_KEY_FILE'), keyId, teamId }
      : { keyPem: throwAwaySigningKey(), keyId: LOCAL_APNS_KEY_ID, teamId: LOCAL_APNS_TEAM_ID };
  const caPem = caFile ? readPem('apns', caFile, 'APNS_CA_FILE') : undefined;
  return new ApnsProvider({
    ...key,
    topic: nonEmpty(settings.APNS_TOPIC) ?? 'dev.aqueduct.app',
    production: parseBoolean(settings.APNS_PRODUCTION),
    ...(endpointUrl ? { endpoint: parseEndpoint('apns', endpointUrl, 'APNS_ENDPOINT') } : {}),
    ...(caPem ? { caPem } : {}),
    ...(options.maxInFlight ? { maxInFlight: options.maxInFlight } : {}),
    ...(options.apnsRequestTimeoutMs ? { requestTimeoutMs: options.apnsRequestTimeoutMs } : {}),
  });
}

/** Stands in for a provider that has no configuration: every push is `rejected`, saying what to set. */
export class UnconfiguredProvider implements PushProvider {
  readonly platform: Platform;
  readonly configured = false;
  private readonly reason: string;

  constructor(platform: Platform, reason: string) {
    this.platform = platform;
    this.reason = reason;
  }

  async send(batch: readonly PushRequest[]): Promise<PushOutcome[]> {
    return batch.map(() => ({ kind: 'rejected', reason: this.reason }));
  }

  async close(): Promise<void> {}
}

/** An EC P-256 key in PKCS#8 PEM: the format of Apple's .p8 files. */
export function throwAwaySigningKey(): string {
  const { privateKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  return privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
}

function readPem(platform: Platform, file: string, setting: string): string {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (error) {
    throw new ProviderConfigError(
      platform,
      `${setting} cannot be read (${(error as NodeJS.ErrnoException).code ?? 'error'})`,
      {
        setting,
        cause: error,
      },
    );
  }
  if (!text.includes('-----BEGIN '))
    throw new ProviderConfigError(platform, `${setting} is not a PEM file`, { setting });
  return text;
}

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value.trim() === '' ? undefined : value.trim();
}

function parseBoolean(value: boolean | string | undefined): boolean {
  if (typeof value === 'boolean') return value;
  if (value === undefined || value.trim() === '') return false;
  const text = value.trim().toLowerCase();
  if (['true', '1', 'yes'].includes(text)) return true;
  if (['false', '0', 'no'].includes(text)) return false;
  throw new ProviderConfigError('apns', 'APNS_PRODUCTION must be true or false', {
    setting: 'APNS_PRODUCTION',
  });
}
