import type { PushOutcome } from './types.ts';

/**
 * Refusals a provider gives a wrong configuration exactly as it gives a dead token: APNs answers
 * `BadDeviceToken` and `DeviceTokenNotForTopic` to a token of the other environment (sandbox against
 * production: APNS_PRODUCTION) or of another app (APNS_TOPIC), and FCM `SENDER_ID_MISMATCH` to every
 * token when the credentials are another project's.
 */
const AMBIGUOUS_REFUSALS = new Set(['BadDeviceToken', 'DeviceTokenNotForTopic', 'SENDER_ID_MISMATCH']);

/** Refusals in a row, without a delivery between, from which they are taken for a configuration fault. */
export const CONFIGURATION_FAULT_RUN = 20;

/**
 * Tells a configuration fault from dead tokens. Reported as invalid, a wrong environment or project
 * would have upstream delete every device token of the fleet. A fleet's dead tokens are a few percent
 * of its pushes, so a run of {@link CONFIGURATION_FAULT_RUN} such refusals with no delivery between is
 * not them: from then until the next delivery, each is a `retry` naming the settings to check (its
 * attempts spent, then dead-lettered, and replayable once the configuration is fixed), not an
 * `invalid-token`. One guard per provider client (per environment and credentials).
 */
export class TokenRefusalGuard {
  private run = 0;
  private readonly threshold: number;
  private readonly settings: string;

  /** `settings`: what to check, named in the reason (`APNS_PRODUCTION and APNS_TOPIC`). */
  constructor(settings: string, threshold = CONFIGURATION_FAULT_RUN) {
    this.settings = settings;
    this.threshold = threshold;
  }

  /** The outcome to report for a provider's answer: `outcome` itself, unless it looks like a configuration fault. */
  check(outcome: PushOutcome): PushOutcome {
    if (outcome.kind === 'delivered') {
      this.run = 0;
      return outcome;
    }
    if (outcome.kind !== 'invalid-token' || !AMBIGUOUS_REFUSALS.has(outcome.reason)) return outcome;
    this.run += 1;
    if (this.run <= this.threshold) return outcome;
    return {
      kind: 'retry',
      reason: `${outcome.reason} for over ${this.threshold} tokens in a row, none delivered: check ${this.settings}`,
      throttled: false,
      ...(outcome.httpStatus === undefined ? {} : { httpStatus: outcome.httpStatus }),
    };
  }
}
