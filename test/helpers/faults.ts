import { inject } from 'vitest';
import type { FaultRunOptions } from '../../testkit/faults.ts';

/**
 * A fault run as the fault tests run it: two consumers on four partitions of the run's Kafka, held to
 * 60 pushes a second past a first 100 so that a fault injected after the first deliveries lands
 * mid-stream, and short session and drain timeouts so that a killed or stopped consumer's partitions
 * move on within the test's time. `run` names the rest (the scenario, Redis, how many events, when the
 * fault starts).
 */
export function throttledFaultRun(
  run: Pick<FaultRunOptions, 'name' | 'redisUrl' | 'events' | 'logDir'> & Partial<FaultRunOptions>,
): FaultRunOptions {
  return {
    kafkaBrokers: inject('kafkaBrokers'),
    partitions: 4,
    consumers: 2,
    provider: { rate: 60, burst: 100 },
    aqueduct: { rate: 60, burst: 50 },
    deadTokenRatio: 0.02,
    env: {
      AQUEDUCT_SESSION_TIMEOUT_MS: '6000',
      AQUEDUCT_ACQUIRE_CHUNK: '16',
      AQUEDUCT_SHUTDOWN_TIMEOUT_MS: '10000',
    },
    exportSpans: false,
    ...run,
  };
}
