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

const LEVELS: Record<number, 'error' | 'warn' | 'info' | 'debug'> = {
  [logLevel.ERROR]: 'error',
  [logLevel.WARN]: 'warn',
  [logLevel.INFO]: 'info',
  [logLevel.DEBUG]: 'debug',
};

/** Routes kafkajs's own log lines into pino (info and below become debug: kafkajs is chatty). */
function pinoLogCreator(logger: Logger): logCreator {
  return () =>
    ({ level, log }) => {
      const { message, ...extra } = log;
      const pinoLevel = LEVELS[level] ?? 'debug';
      logger[pinoLevel === 'info' ? 'debug' : pinoLevel]({ kafkajs: extra }, message);
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
    retry: { initialRetryTime: 300, retries: 8 },
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
