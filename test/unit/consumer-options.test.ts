import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.ts';
import { consumerOptions } from '../../src/consume/options.ts';
import { CONSUMER_TUNING_DEFAULTS, withTuningDefaults } from '../../src/pipeline/consumer-options.ts';

/** The consumer's options come from the settings at the edge; the tuning the settings do not name keeps its defaults. */
describe('consumerOptions', () => {
  it('maps the settings onto the options', () => {
    const options = consumerOptions(
      loadConfig({
        AQUEDUCT_TOPIC: 'orders',
        AQUEDUCT_FCM_RATE: '120',
        AQUEDUCT_APNS_BURST: '300',
        AQUEDUCT_TENANT_RATE: '5',
        AQUEDUCT_LIMITER_FAILURE_POLICY: 'open',
        AQUEDUCT_SHUTDOWN_TIMEOUT_MS: '9000',
      }),
    );
    expect(options.topics).toEqual({
      main: 'orders',
      retry: 'orders.retry',
      deferred: 'orders.deferred',
      deadLetter: 'orders.dlq',
      invalidTokens: 'orders.invalid-tokens',
    });
    expect(options.limits).toMatchObject({
      enabled: true,
      fcm: { rate: 120, burst: 2000 },
      apns: { rate: 800, burst: 300 },
      tenantRate: 5,
      tenantBurst: undefined,
      acquireChunk: undefined,
      sendConcurrency: 64,
    });
    expect(options.failurePolicy).toBe('open');
    expect(options.shutdownTimeoutMs).toBe(9000);
  });

  it('shares the limit among tenants fairly by default, with the weights given', () => {
    expect(consumerOptions(loadConfig({})).fairness).toEqual({ enabled: true, weights: new Map() });
    const options = consumerOptions(
      loadConfig({ AQUEDUCT_TENANT_FAIRNESS: 'false', AQUEDUCT_TENANT_WEIGHTS: 'acme=2, globex=0.5' }),
    );
    expect(options.fairness).toEqual({
      enabled: false,
      weights: new Map([
        ['acme', 2],
        ['globex', 0.5],
      ]),
    });
  });

  it.each(['acme', 'acme=0', 'acme=-1', 'acme=two', 'a b=1', 'acme=1e400'])(
    'refuses the tenant weights %j, naming the setting',
    (weights) => {
      expect(() => loadConfig({ AQUEDUCT_TENANT_WEIGHTS: weights })).toThrow(/AQUEDUCT_TENANT_WEIGHTS/);
    },
  );

  it('keeps the tuning defaults unless an option says otherwise', () => {
    const options = consumerOptions(loadConfig({}));
    expect(withTuningDefaults(options)).toMatchObject({
      maxPerStep: 2000,
      partitionsConsumedConcurrently: 8,
      heartbeatIntervalMs: 1000,
      maxWaitTimeMs: 100,
      rebalanceTimeoutMs: 60_000,
      autoCommitIntervalMs: 1000,
      recheckAfterRejoinMs: 10_000,
    });
    expect(withTuningDefaults({ ...options, maxPerStep: 50 })).toMatchObject({
      ...CONSUMER_TUNING_DEFAULTS,
      maxPerStep: 50,
    });
  });
});
