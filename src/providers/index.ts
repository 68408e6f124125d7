import { generateKeyPairSync } from 'node:crypto';
import type { Platform } from '../events/event.ts';
import { ApnsProvider, type ApnsProviderOptions } from './apns.ts';
import { FcmProvider, type FcmProviderOptions } from './fcm.ts';
import type { PushOutcome, PushProvider, PushRequest } from './types.ts';

export { ApnsProvider, type ApnsProviderOptions, toApnsNotification } from './apns.ts';
export { classifyApnsFailure, describeApnsFailure } from './apns-classification.ts';
export { type Endpoint, parseEndpoint } from './endpoint.ts';
export { ProviderConfigError } from './errors.ts';
export { FcmProvider, type FcmProviderOptions, toFcmMessage } from './fcm.ts';
export { classifyFcmFailure, describeFcmError } from './fcm-classification.ts';
export * from './types.ts';

/** What {@link createProviders} builds: each provider's options, already read and checked. */
export interface ProvidersOptions {
  /** FCM's project, credentials, endpoint and concurrency. */
  fcm: FcmProviderOptions;
  /** APNs' key, topic, endpoint and concurrency. Absent: APNs is not configured (see `apnsUnconfigured`). */
  apns?: ApnsProviderOptions | undefined;
  /**
   * Without `apns`, every APNs push is `rejected` with this reason: say what would configure it.
   * Default "apns is not configured".
   */
  apnsUnconfigured?: string | undefined;
}

/**
 * The bearer token Aqueduct sends to an FCM endpoint override when no Google credentials are configured:
 * simulators accept any token.
 */
export const LOCAL_FCM_ACCESS_TOKEN = 'aqueduct-local-token';
/** Key and team id of the throw-away APNs signing key used with an endpoint override and no key of its own. */
export const LOCAL_APNS_KEY_ID = 'AQDLOCALKY';
export const LOCAL_APNS_TEAM_ID = 'AQDLOCALTM';

/**
 * Builds both providers. Without APNs options every APNs push is `rejected` with a reason that says so.
 * Throws {@link ProviderConfigError} for options that cannot work (a key that cannot sign, a fixed
 * access token without an endpoint override, an unreadable service-account file); FCM is closed again
 * when APNs fails.
 */
export function createProviders(options: ProvidersOptions): Record<Platform, PushProvider> {
  const fcm = new FcmProvider(options.fcm);
  try {
    return {
      fcm,
      apns: options.apns
        ? new ApnsProvider(options.apns)
        : new UnconfiguredProvider('apns', options.apnsUnconfigured ?? 'apns is not configured'),
    };
  } catch (error) {
    void fcm.close();
    throw error;
  }
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
