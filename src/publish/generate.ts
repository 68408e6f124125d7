import { randomBytes } from 'node:crypto';
import type { NotificationEventInput } from '../events/event.ts';

/** Options of {@link generateEvents}. */
export interface GenerateOptions {
  /** How many events. */
  count: number;
  /**
   * Share of events whose device token is dead (prefix `dead-`, which the simulators reject as
   * unregistered); those are FCM events, whose token alphabet has room for the prefix.
   */
  deadTokenRatio?: number;
  /** Tenants to spread events over (round-robin); none: events carry no tenant. */
  tenants?: readonly string[];
  /** Share of APNs events (the rest are FCM). Default 0.5. */
  apnsRatio?: number;
  /** Prefix of generated ids, unique per run by default. */
  idPrefix?: string;
  /** Random source in [0, 1), for reproducible runs. */
  random?: () => number;
}

/** The token prefix the simulators treat as an unregistered device. */
export const DEAD_TOKEN_PREFIX = 'dead-';

/** Synthetic events for demos and load: mixed platforms and tenants, some dead tokens on request. */
export function* generateEvents(options: GenerateOptions): Generator<NotificationEventInput> {
  const random = options.random ?? Math.random;
  const prefix = options.idPrefix ?? `gen-${randomBytes(4).toString('hex')}`;
  const tenants = options.tenants ?? [];
  const apnsRatio = options.apnsRatio ?? 0.5;
  const deadRatio = options.deadTokenRatio ?? 0;
  const createdAt = new Date().toISOString();
  for (let i = 0; i < options.count; i++) {
    const dead = random() < deadRatio;
    // A dead token carries the simulators' `dead-` prefix, which only FCM's alphabet has room for (an
    // APNs token is hex): dead tokens are FCM tokens.
    const platform = !dead && random() < apnsRatio ? 'apns' : 'fcm';
    // APNs device tokens are 64 hex characters; FCM registration tokens are longer opaque strings.
    const body = platform === 'apns' ? randomHex(32) : `${randomHex(11)}:APA91b${randomHex(60)}`;
    const tenant = tenants.length > 0 ? tenants[i % tenants.length] : undefined;
    yield {
      id: `${prefix}-${i}`,
      platform,
      token: dead ? `${DEAD_TOKEN_PREFIX}${body}` : body,
      notification: { title: 'Flash sale', body: `Item ${i % 997} is back in stock` },
      data: { campaign: 'viral-burst', n: String(i) },
      ...(tenant ? { tenant } : {}),
      priority: i % 10 === 0 ? 'high' : 'normal',
      ttlSeconds: 3600,
      createdAt,
    };
  }
}

function randomHex(bytes: number): string {
  return randomBytes(bytes).toString('hex');
}
