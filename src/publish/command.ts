import { constants, createReadStream } from 'node:fs';
import { access, stat } from 'node:fs/promises';
import { type Command, InvalidArgumentError } from 'commander';
import { configSchema, loadConfig } from '../config.ts';
import { notificationEventSchema } from '../events/event.ts';
import { createKafka } from '../kafka/client.ts';
import { connectionNotice } from '../kafka/connection-notice.ts';
import { kafkaSecurity } from '../kafka/security.ts';
import { ensureTopicFamily, missingTopics } from '../kafka/topics.ts';
import { stopOnSignal } from '../lifecycle.ts';
import { exitOnConfigError } from '../settings-exit.ts';
import { kafkaSecurityOptions, topicDurabilityOf } from '../settings-options.ts';
import { startTracing } from '../telemetry/tracing.ts';
import { generateEvents } from './generate.ts';
import { byteLines, isBlank } from './lines.ts';
import { type InvalidEventError, publishEvents } from './publisher.ts';

interface PublishFlags {
  generate?: number;
  deadTokenRatio: number;
  tenants?: string[];
  topic?: string;
  partitions: number;
  createTopic: boolean;
  validate: boolean;
  config?: string;
  quiet: boolean;
}

const count = (value: string) => {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError('a positive whole number');
  return n;
};
const ratio = (value: string) => {
  const n = Number(value);
  if (!(n >= 0 && n <= 1)) throw new InvalidArgumentError('a number from 0 to 1');
  return n;
};
/** --tenants: each a tenant as the event contract takes it, so that no generated event is refused. */
const tenantList = (value: string) => {
  const tenants = value
    .split(',')
    .map((tenant) => tenant.trim())
    .filter(Boolean);
  const refused = tenants.find((tenant) => !notificationEventSchema.shape.tenant.safeParse(tenant).success);
  if (refused !== undefined || tenants.length === 0)
    throw new InvalidArgumentError(
      'comma-separated tenants, each of letters, digits, dot, dash and underscore (at most 64)',
    );
  return tenants;
};
/** --topic: a topic name as AQUEDUCT_TOPIC takes it. */
const topicName = (value: string) => {
  if (!configSchema.shape.AQUEDUCT_TOPIC.safeParse(value).success)
    throw new InvalidArgumentError(
      'a Kafka topic name: letters, digits, dot, dash and underscore (at most 200)',
    );
  return value;
};

/** `aqueduct publish`: events from a JSON-lines file, stdin, or a generator, onto the topic. */
export function registerPublishCommand(program: Command): void {
  program
    .command('publish')
    .description(
      'publish notification events (JSON lines from a file or stdin, or --generate N) to the topic',
    )
    .argument('[file]', 'JSON-lines file, one event per line ("-" or nothing: stdin)')
    .option('--generate <n>', 'publish N synthetic events instead (mixed platforms and tenants)', count)
    .option('--dead-token-ratio <r>', 'with --generate: share of events with a dead device token', ratio, 0)
    .option('--tenants <list>', 'with --generate: comma-separated tenants to spread events over', tenantList)
    .option('--topic <name>', 'topic (default: AQUEDUCT_TOPIC or "notifications")', topicName)
    .option('--partitions <n>', 'with --create-topic: partition count', count, 6)
    .option(
      '--create-topic',
      'create the topic (and its retry/deferred/dlq/invalid-tokens topics) if missing',
      false,
    )
    .option('--no-validate', 'send lines as they are (for testing the consumer with bad input)')
    .option('--config <file>', 'JSON file with the settings (environment variables win)')
    .option('-q, --quiet', 'no progress output', false)
    .addHelpText(
      'after',
      "\nMessage key: a hash of platform + device token, so one device's notifications stay in order.\nEnvironment: KAFKA_BROKERS, the KAFKA_SASL_* and KAFKA_TLS* settings, AQUEDUCT_TOPIC, for --create-topic AQUEDUCT_TOPIC_REPLICATION_FACTOR and AQUEDUCT_TOPIC_MIN_INSYNC_REPLICAS (1 and 1 for a single broker), and the OTEL_* variables (a PRODUCER span per event, its traceparent in the headers).",
    )
    .action(async (file: string | undefined, flags: PublishFlags) => {
      const config = await exitOnConfigError('publish', () => loadConfig(process.env, flags.config));
      if (file !== undefined && flags.generate !== undefined) {
        console.error('aqueduct publish: give a file or --generate N, not both');
        process.exit(2);
      }
      if (file !== undefined && file !== '-') await exitUnlessReadable(file);
      // Each event starts its own trace (when tracing is configured); the consumer continues it.
      const tracing = await startTracing('aqueduct-publish');
      const topic = flags.topic ?? config.AQUEDUCT_TOPIC;
      const kafka = createKafka({
        brokers: config.KAFKA_BROKERS,
        clientId: `${config.KAFKA_CLIENT_ID}-publish`,
        extra: kafkaSecurity(kafkaSecurityOptions(config)),
        onConnectionError: connectionNotice({ verb: 'publish', brokers: config.KAFKA_BROKERS }),
      });
      if (flags.createTopic) {
        const created = await ensureTopicFamily(kafka, topic, flags.partitions, topicDurabilityOf(config));
        if (created.length > 0 && !flags.quiet) console.error(`created ${created.join(', ')}`);
      } else if ((await missingTopics(kafka, [topic])).length > 0) {
        await tracing.shutdown();
        console.error(
          `aqueduct publish: topic "${topic}" does not exist: add --create-topic (and --partitions N), or name another with --topic or AQUEDUCT_TOPIC`,
        );
        process.exit(1);
      }

      // Ctrl-C (or SIGTERM) ends the input: what was read is published, and the summary says how far
      // that got.
      const stop = stopOnSignal(flags.quiet ? undefined : 'stopping: publishing what was read');
      const source = eventSource(file, flags, stop.signal);
      const total = flags.generate;
      const started = Date.now();
      let lastReport = 0;
      const result = await publishEvents(kafka, source.events, {
        topic,
        validate: flags.validate,
        onProgress: (published) => {
          if (flags.quiet || Date.now() - lastReport < 1000) return;
          lastReport = Date.now();
          const rate = Math.round(published / ((Date.now() - started) / 1000));
          console.error(`published ${published}${total ? ` of ${total}` : ''} (${rate}/s)`);
        },
        onInvalid: (error) => console.error(`skipped ${source.where(error)}: ${error.reason}`),
      }).finally(() => tracing.shutdown());
      const seconds = (Date.now() - started) / 1000;
      if (!flags.quiet)
        console.error(`published ${result.published} events to ${topic} in ${seconds.toFixed(1)} s`);
      console.log(
        JSON.stringify({
          published: result.published,
          invalid: result.invalid,
          topic,
          seconds,
          interrupted: source.cut(),
          ...source.position(),
        }),
      );
      if (result.invalid > 0) process.exitCode = 1;
      if (source.cut()) process.exitCode = stop.exitCode();
    });
}

/** A file that cannot be read is said at once (exit 2), before anything connects to Kafka. */
async function exitUnlessReadable(file: string): Promise<void> {
  let problem: string | undefined;
  try {
    if ((await stat(file)).isDirectory()) problem = 'it is a directory';
    else await access(file, constants.R_OK);
  } catch (error) {
    problem = (error as Error).message;
  }
  if (problem === undefined) return;
  console.error(`aqueduct publish: cannot read ${file}: ${problem}`);
  process.exit(2);
}

/**
 * The events to publish, how to name a refused one (its line in a file or stdin, else its number), and
 * how far the input was read. `signal` ends the input early (`cut`): what was read is still published.
 */
function eventSource(
  file: string | undefined,
  flags: PublishFlags,
  signal: AbortSignal,
): {
  events: AsyncIterable<Buffer> | Iterable<unknown>;
  where(error: InvalidEventError): string;
  /** For a file or stdin: the lines read, blank ones included (a stopped run resumes after them). */
  position(): { lines?: number };
  /** True when `signal` ended the input before its end. */
  cut(): boolean;
} {
  let cut = false;
  if (flags.generate !== undefined) {
    const events = generateEvents({
      count: flags.generate,
      deadTokenRatio: flags.deadTokenRatio,
      ...(flags.tenants ? { tenants: flags.tenants } : {}),
    });
    function* untilStopped(): Generator<unknown> {
      for (const event of events) {
        cut = signal.aborted;
        if (cut) return;
        yield event;
      }
    }
    return {
      events: untilStopped(),
      where: (error) => `event ${error.index}`,
      position: () => ({}),
      cut: () => cut,
    };
  }
  // Blank lines are skipped but counted, so that a refusal names the line an editor shows; publishEvents
  // checks each line as soon as it is read, so the line read last is the one refused.
  let current = 0;
  async function* lines(): AsyncGenerator<Buffer> {
    const fromStdin = !file || file === '-';
    // Typed at a terminal, a verb reading stdin looks hung: say what it waits for.
    if (fromStdin && process.stdin.isTTY)
      console.error(
        'reading events from stdin, one JSON object per line; Ctrl-D ends (or give a file, or --generate N)',
      );
    const input = fromStdin ? process.stdin : createReadStream(file);
    // Ends a read that waits for input (stdin) as well; a line not read whole is not published.
    const end = () => input.destroy();
    signal.addEventListener('abort', end, { once: true });
    try {
      for await (const line of byteLines(input)) {
        cut = signal.aborted;
        if (cut) return;
        current++;
        if (!isBlank(line)) yield line;
      }
    } catch (error) {
      cut = signal.aborted;
      if (!cut) throw error;
    } finally {
      signal.removeEventListener('abort', end);
    }
  }
  return {
    events: lines(),
    where: () => `line ${current}`,
    position: () => ({ lines: current }),
    cut: () => cut,
  };
}
