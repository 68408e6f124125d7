/**
 * What a one-shot verb (`aqueduct publish`, `aqueduct replay`) says while kafkajs cannot reach the
 * brokers. kafkajs retries a failed connection for about a minute before it gives up, and says nothing
 * meanwhile: without these lines a wrong KAFKA_BROKERS looks like a hang.
 */

/** kafkajs' prefix for a seed broker it could not reach; the reason follows it. */
const SEED_PREFIX = 'Failed to connect to seed broker, trying another broker from the list: ';

/** Options of {@link connectionNotice}. */
export interface ConnectionNoticeOptions {
  /** The verb, for the line's `aqueduct <verb>:` prefix. */
  verb: string;
  brokers: readonly string[];
  /** At most one line per this many ms after the first. Default 5000. */
  everyMs?: number;
  write?: (line: string) => void;
  now?: () => number;
}

/**
 * A handler for kafkajs' connection errors (see `onConnectionError` of createKafka): the first one is
 * reported at once, later ones at most every `everyMs`, each with how long the verb has been waiting.
 */
export function connectionNotice(options: ConnectionNoticeOptions): (reason: string) => void {
  const everyMs = options.everyMs ?? 5000;
  const write = options.write ?? ((line: string) => console.error(line));
  const now = options.now ?? Date.now;
  const where = `Kafka at ${options.brokers.join(',')}`;
  let firstAt: number | undefined;
  let lastAt = 0;
  return (reason) => {
    const at = now();
    const cause = reason.startsWith(SEED_PREFIX) ? reason.slice(SEED_PREFIX.length) : reason;
    if (firstAt === undefined) {
      firstAt = at;
      lastAt = at;
      write(
        `aqueduct ${options.verb}: waiting for ${where}: ${cause} (kafkajs retries for about a minute; Ctrl-C to stop)`,
      );
      return;
    }
    if (at - lastAt < everyMs) return;
    lastAt = at;
    write(
      `aqueduct ${options.verb}: still waiting for ${where}: ${cause} (${Math.round((at - firstAt) / 1000)} s)`,
    );
  };
}
