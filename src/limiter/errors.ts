import { mapScriptError, ScriptArgumentError } from '../redis/script-errors.ts';

/**
 * A call to the limiter was malformed: a rate that is not a positive finite number, a capacity below 1,
 * a negative or fractional token count, buckets whose names do not share a hash tag, and so on. Retrying
 * the same call cannot succeed, so `retriable` is false; `argument` names what to fix.
 */
export class LimiterArgumentError extends ScriptArgumentError {
  // `argument` is one of `buckets`, `name`, `rate`, `capacity`, `n`, `waitFor`, `retryAfterMs`, …
  override readonly name = 'LimiterArgumentError';
}

/**
 * Redis could not answer the limiter: a connection error, a timeout, or an error reply that is not one
 * of the limiter's own argument errors. Retrying later may succeed (`retriable` is true). Whether the
 * caller pauses (fail closed, the default) or sends anyway (fail open) is `LimiterOptions.failurePolicy`.
 */
export class LimiterUnavailableError extends Error {
  override readonly name = 'LimiterUnavailableError';
  readonly retriable = true;
  /** The limiter operation that failed. */
  readonly operation: 'acquire' | 'refund' | 'blockUntil' | 'inspect';

  constructor(
    operation: LimiterUnavailableError['operation'],
    message: string,
    options?: { cause?: unknown },
  ) {
    super(`limiter ${operation} failed, Redis unavailable: ${message}`, options);
    this.operation = operation;
  }
}

/**
 * Maps whatever a limiter call to Redis threw to the limiter's typed errors: the scripts' argument
 * error replies (`AQUEDUCT_ARGUMENT <argument> <message>`) become {@link LimiterArgumentError}, everything
 * else (connection errors, timeouts, other error replies) {@link LimiterUnavailableError}.
 */
export function toLimiterError(
  error: unknown,
  operation: LimiterUnavailableError['operation'],
): LimiterArgumentError | LimiterUnavailableError {
  return mapScriptError(
    error,
    LimiterArgumentError,
    LimiterUnavailableError,
    (message, cause) => new LimiterUnavailableError(operation, message, { cause }),
  );
}
