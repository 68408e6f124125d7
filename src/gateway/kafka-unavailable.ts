/** Kafka could not acknowledge a write in time; nothing of it may be reported as accepted. */
export class KafkaUnavailableError extends Error {
  override readonly name = 'KafkaUnavailableError';
  readonly retriable = true;
  /** The topic written to. */
  readonly topic: string;
  /**
   * True when the events were sent and no answer came in time: the broker may have written them all the
   * same. False when they were never sent (no connection, or still queued at the deadline).
   */
  readonly outcomeUnknown: boolean;
  /**
   * Why Kafka refused the write outright, when it did (`topic "x" does not exist`): then nothing was
   * written, and the cause is one an operator must remove rather than one that passes by itself.
   */
  readonly refusal: string | undefined;
  constructor(
    topic: string,
    message: string,
    options?: { cause?: unknown; outcomeUnknown?: boolean; refusal?: string },
  ) {
    super(`Kafka write to ${topic} failed: ${message}`, options);
    this.topic = topic;
    this.outcomeUnknown = options?.outcomeUnknown ?? false;
    this.refusal = options?.refusal;
  }
}
