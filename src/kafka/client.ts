import { createRequire } from 'node:module';
import {
  Kafka,
  type KafkaConfig,
  type logCreator,
  logLevel,
  type Producer,
  type ProducerConfig,
} from 'kafkajs';
import type { Logger } from '../log.ts';
import { registerCompressionCodecs } from './compression.ts';
import { kafkaPartitioner } from './partitioner.ts';

/**
 * kafkajs 2.2.4 sets a timer with a negative delay in its request queue on current Node versions, which
 * prints a TimeoutNegativeWarning on every connection (tulios/kafkajs#1751). It is harmless (Node uses
 * 1 ms) but drowns real warnings, so exactly that warning is filtered out.
 */
let warningFilterInstalled = false;
function filterKafkajsTimeoutWarning(): void {
  if (warningFilterInstalled) return;
  warningFilterInstalled = true;
  const listeners = process.listeners('warning');
  process.removeAllListeners('warning');
  process.on('warning', (warning) => {
    if (warning.name === 'TimeoutNegativeWarning') return;
    for (const listener of listeners) listener(warning);
  });
}

type LogLevel = 'error' | 'warn' | 'info' | 'debug';

const LEVELS: Record<number, LogLevel> = {
  [logLevel.ERROR]: 'error',
  [logLevel.WARN]: 'warn',
  [logLevel.INFO]: 'info',
  [logLevel.DEBUG]: 'debug',
};

const require = createRequire(import.meta.url);
const { errorCodes } = require('kafkajs/src/protocol/error') as {
  errorCodes: ReadonlyArray<{ type: string; message: string; retriable: boolean }>;
};

/**
 * The messages of the Kafka protocol errors kafkajs recovers from on its own: the ones it retries (a
 * leader election, a coordinator loading after a broker start) and a rebalance under way, which every
 * member's heartbeat is told and answers by joining again (the consumer logs the join). kafkajs logs each
 * refused request at the error level first; if its retries run out, the caller gets the error and says
 * so itself.
 */
const ROUTINE_PROTOCOL_ERRORS = new Set(
  errorCodes
    .filter((code) => code.retriable || code.type === 'REBALANCE_IN_PROGRESS')
    .map((code) => code.message),
);

/**
 * kafkajs warns about this on every idempotent producer with bounded retries. Aqueduct bounds them on
 * purpose: a write must fail within the time its caller waits, and the writer that sees it fail deals
 * with what it may have left (the gateway retires the producer, src/gateway/kafka-writer.ts; the
 * consumer does not commit past an event whose write failed).
 */
const BOUNDED_RETRIES_WARNING = 'Limiting retries for the idempotent producer may invalidate EoS guarantees';

/**
 * The pino level of one of kafkajs' log lines: info and below become debug (kafkajs is chatty), and so
 * do a request refused with a protocol error kafkajs recovers from and the bounded-retries warning,
 * which would otherwise show as errors and warnings on every start and rebalance.
 */
export function kafkajsLogLevel(level: number, log: { message?: unknown; error?: unknown }): LogLevel {
  const pinoLevel = LEVELS[level] ?? 'debug';
  if (pinoLevel === 'info') return 'debug';
  if (pinoLevel === 'error' && typeof log.error === 'string' && ROUTINE_PROTOCOL_ERRORS.has(log.error))
    return 'debug';
  if (pinoLevel === 'warn' && log.message === BOUNDED_RETRIES_WARNING) return 'debug';
  return pinoLevel;
}

/** Routes kafkajs's own log lines into pino, at the level {@link kafkajsLogLevel} gives. */
function pinoLogCreator(logger: Logger): logCreator {
  return () =>
    ({ level, log }) => {
      const { message, ...extra } = log;
      logger[kafkajsLogLevel(level, log)]({ kafkajs: extra }, message);
    };
}

/** Options of {@link createKafka}. */
export interface CreateKafkaOptions {
  brokers: string[];
  clientId: string;
  logger?: Logger;
  /** Extra kafkajs settings (SASL, TLS, retry). */
  extra?: Partial<KafkaConfig>;
  /**
   * Called with kafkajs' reason each time a connection to a broker fails (kafkajs retries it on its
   * own; see connectionNotice for what the one-shot verbs make of it).
   */
  onConnectionError?: (reason: string) => void;
}

/**
 * kafkajs' error lines about reaching a broker (its Connection and BrokerPool namespaces also log
 * refused requests at the error level, which are not).
 */
const CONNECTION_FAILURE =
  /^(Failed to connect to (seed )?broker|Connection error|Connection timeout|Closed connection)/;

/**
 * How kafkajs retries a failed request or connection: back-offs doubling from 300 ms (±20 %) up to 3 s,
 * then every 3 s, for about a minute in all. kafkajs' own cap is 30 s, with which a write or a join
 * waiting through a broker outage went on sleeping for up to half a minute after the broker was back:
 * long enough for a consumer stuck in a step to outlive its session, be expelled without knowing it,
 * and have its partitions read again by another member while it still worked on them. Every field is
 * set, since kafkajs takes other defaults when NODE_ENV is `test`.
 */
export const KAFKA_RETRY = {
  initialRetryTime: 300,
  maxRetryTime: 3000,
  multiplier: 2,
  factor: 0.2,
  retries: 25,
} as const;

export function createKafka(options: CreateKafkaOptions): Kafka {
  filterKafkajsTimeoutWarning();
  registerCompressionCodecs();
  process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1';
  const { logger, onConnectionError } = options;
  const toLogger = logger ? pinoLogCreator(logger) : undefined;
  const creator: logCreator | undefined =
    onConnectionError || toLogger
      ? (level) => {
          const log = toLogger?.(level);
          return (entry) => {
            log?.(entry);
            const message = String(entry.log.message);
            if (onConnectionError && entry.level === logLevel.ERROR && CONNECTION_FAILURE.test(message))
              onConnectionError(message);
          };
        }
      : undefined;
  return new Kafka({
    clientId: options.clientId,
    brokers: options.brokers,
    logLevel: logger ? logLevel.WARN : onConnectionError ? logLevel.ERROR : logLevel.NOTHING,
    ...(creator ? { logCreator: creator } : {}),
    retry: KAFKA_RETRY,
    ...options.extra,
  });
}

/**
 * The producer every Aqueduct writer uses: idempotent with one request in flight, so that a write
 * kafkajs retries is neither duplicated nor reordered, and keys hashed by {@link kafkaPartitioner}.
 */
export function createProducer(
  kafka: Kafka,
  options: Omit<ProducerConfig, 'idempotent' | 'maxInFlightRequests' | 'createPartitioner'> = {},
): Producer {
  return kafka.producer({
    ...options,
    idempotent: true,
    maxInFlightRequests: 1,
    createPartitioner: kafkaPartitioner,
  });
}
