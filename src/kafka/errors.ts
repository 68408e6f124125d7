import { setTimeout as sleep } from 'node:timers/promises';
import kafkajs from 'kafkajs';

// kafkajs is CommonJS and spreads its error classes into `module.exports`, which Node's named-export
// detection cannot see: they are read off the default export.
const {
  KafkaJSAggregateError,
  KafkaJSBrokerNotFound,
  KafkaJSConnectionError,
  KafkaJSError,
  KafkaJSGroupCoordinatorNotFound,
  KafkaJSNumberOfRetriesExceeded,
  KafkaJSRequestTimeoutError,
} = kafkajs;

/**
 * True for kafkajs' own errors: `KafkaJSError` and its subclasses (a rebalance, a lost coordinator), and
 * `KafkaJSAggregateError`, the one kafkajs error class that does not extend it.
 */
export function isKafkaJsError(error: unknown): boolean {
  return error instanceof KafkaJSError || error instanceof KafkaJSAggregateError;
}

/**
 * True for the errors by which the group coordinator says this member's assignment is over (a
 * rebalance is under way, or this member's generation is gone): kafkajs' own `isRebalancing` test, which
 * its public API does not export.
 */
export function isRebalancing(error: unknown): boolean {
  const type = (error as { type?: unknown } | null)?.type;
  return (
    isKafkaJsError(error) &&
    (type === 'REBALANCE_IN_PROGRESS' ||
      type === 'NOT_COORDINATOR_FOR_GROUP' ||
      type === 'ILLEGAL_GENERATION')
  );
}

/** kafkajs errors that a reachable broker would cure (`KafkaJSConnectionClosedError` is a connection error). */
const BROKER_UNREACHABLE = [
  KafkaJSGroupCoordinatorNotFound,
  KafkaJSConnectionError,
  KafkaJSRequestTimeoutError,
  KafkaJSBrokerNotFound,
];

/**
 * True for the crashes kafkajs does not restart from although a reachable broker would cure them: the
 * group coordinator could not be found, or the cause is a connection that failed or closed.
 */
export function brokerUnreachable(error: unknown): boolean {
  let e: unknown = error;
  for (let depth = 0; depth < 10 && e instanceof Error; depth++) {
    if (BROKER_UNREACHABLE.some((type) => e instanceof type) || /group coordinator/i.test(e.message)) {
      return true;
    }
    e = (e as Error & { cause?: unknown }).cause;
  }
  return false;
}

/**
 * The crashes the consumer restarts from in-process: those kafkajs itself would restart from (its
 * retries ran out, or the root cause is retriable), and a broker that could not be reached.
 */
export function restartable(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  if (error instanceof KafkaJSNumberOfRetriesExceeded || brokerUnreachable(error)) return true;
  let cause: Error = error;
  for (let depth = 0; depth < 10 && cause.cause instanceof Error; depth++) cause = cause.cause;
  return (cause as { retriable?: unknown }).retriable === true;
}

/**
 * Runs a kafkajs admin call again while it fails with a retriable error. Group calls such as
 * `fetchOffsets` are not retried by kafkajs itself, and a broker that has just started (or moved a
 * group's coordinator) answers NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS for a few seconds.
 */
export async function retryRetriable<T>(
  call: () => Promise<T>,
  attempts = 10,
  firstDelayMs = 200,
): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await call();
    } catch (error) {
      const retriable = (error as { retriable?: unknown }).retriable === true;
      if (!retriable || attempt >= attempts) throw error;
      await sleep(Math.min(5000, firstDelayMs * 2 ** (attempt - 1)));
    }
  }
}
