/** Kafka could not acknowledge a write in time; nothing of it may be reported as accepted. */
export class KafkaUnavailableError extends Error {
  override readonly name = 'KafkaUnavailableError';
  readonly retriable = true;
  /** The topic written to. */
  readonly topic: string;
  constructor(topic: string, message: string, options?: { cause?: unknown }) {
    super(`Kafka write to ${topic} failed: ${message}`, options);
    this.topic = topic;
  }
}
