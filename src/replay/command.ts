import { type Command, InvalidArgumentError } from 'commander';
import { idempotencyWindowOf, loadConfig, topicsOf } from '../config.ts';
import { createKafka } from '../kafka/client.ts';
import { connectionNotice } from '../kafka/connection-notice.ts';
import { kafkaSecurity } from '../kafka/security.ts';
import { missingTopics } from '../kafka/topics.ts';
import { stopOnSignal } from '../lifecycle.ts';
import { DoneStore } from '../pipeline/done-store.ts';
import { DEAD_LETTER_KINDS } from '../pipeline/outcomes.ts';
import { createRedis } from '../redis/client.ts';
import { exitOnConfigError } from '../settings-exit.ts';
import { kafkaSecurityOptions, redisConnectionOptions } from '../settings-options.ts';
import { type ReplaySummary, replayDeadLetters } from './replay.ts';

interface ReplayFlags {
  kind?: string[];
  fromBeginning: boolean;
  dryRun: boolean;
  config?: string;
  quiet: boolean;
}

/** `--kind a,b`: each one a reason kind a dead letter can carry (a typo would quietly match nothing). */
function reasonKinds(value: string): string[] {
  const kinds = value
    .split(',')
    .map((k) => k.trim())
    .filter(Boolean);
  const unknown = kinds.filter((k) => !DEAD_LETTER_KINDS.includes(k));
  if (kinds.length === 0 || unknown.length > 0)
    throw new InvalidArgumentError(
      `${unknown.length > 0 ? `unknown ${unknown.join(', ')}; ` : ''}the reason kinds are ${DEAD_LETTER_KINDS.join(', ')}`,
    );
  return kinds;
}

/**
 * `aqueduct replay`: republishes the dead-letter topic into the main topic (see replayDeadLetters), with
 * the consumer's own settings (brokers, SASL/TLS, Redis, topic, group, key prefix).
 */
export function registerReplayCommand(program: Command): void {
  program
    .command('replay')
    .description('republish dead letters (<topic>.dlq) to the main topic, original key, value and headers')
    .option(
      '--kind <kinds>',
      'only these reason kinds, comma-separated (e.g. max-attempts,rejected)',
      reasonKinds,
    )
    .option('--from-beginning', 'read the dead-letter topic from its start, not from the last replay', false)
    .option('--dry-run', 'count what would be replayed; publish and change nothing', false)
    .option('--config <file>', 'JSON file with the consumer settings (environment variables win)')
    .option('-q, --quiet', 'no progress output', false)
    .addHelpText(
      'after',
      [
        '',
        'Reads the consumer settings (KAFKA_*, REDIS_*, AQUEDUCT_TOPIC, AQUEDUCT_GROUP_ID, AQUEDUCT_REDIS_PREFIX).',
        'Progress is remembered in the consumer group <AQUEDUCT_GROUP_ID>.replay: a second replay goes on',
        'after the first.',
        `Reason kinds: ${DEAD_LETTER_KINDS.join(', ')}.`,
        'A too-large dead letter keeps only what was within the limits: one refused for its headers is',
        'replayed without them; one refused for its value is not replayable.',
      ].join('\n'),
    )
    .action(async (flags: ReplayFlags) => {
      const config = await exitOnConfigError('replay', () => loadConfig(process.env, flags.config));
      const kafka = createKafka({
        brokers: config.KAFKA_BROKERS,
        clientId: `${config.KAFKA_CLIENT_ID}-replay`,
        extra: kafkaSecurity(kafkaSecurityOptions(config)),
        onConnectionError: connectionNotice({ verb: 'replay', brokers: config.KAFKA_BROKERS }),
      });
      const topics = topicsOf(config);
      const missing = await missingTopics(kafka, [topics.deadLetter, topics.main]);
      if (missing.length > 0) {
        console.error(
          `aqueduct replay: ${missing.map((t) => `"${t}"`).join(' and ')} ${missing.length > 1 ? 'do' : 'does'} not exist: check AQUEDUCT_TOPIC (now "${topics.main}"); a consumer creates the dead-letter topic when it starts`,
        );
        process.exit(1);
      }
      const redis = createRedis(redisConnectionOptions(config), { maxRetriesPerRequest: 2 });
      redis.on('error', () => {}); // reported where a command fails
      // Ctrl-C (or SIGTERM) stops after the part being published, committed, so that a second replay
      // goes on from there.
      const stop = stopOnSignal(flags.quiet ? undefined : 'stopping after the part in progress');
      const progress = (s: ReplaySummary) => {
        if (!flags.quiet)
          console.error(`read ${s.read}, ${flags.dryRun ? 'would replay' : 'replayed'} ${s.replayed}`);
      };
      try {
        const summary = await replayDeadLetters({
          kafka,
          topics,
          doneStore: new DoneStore(redis, {
            prefix: config.AQUEDUCT_REDIS_PREFIX,
            groupId: config.AQUEDUCT_GROUP_ID,
            windowSeconds: idempotencyWindowOf(config),
            shards: config.AQUEDUCT_IDEMPOTENCY_SHARDS,
          }),
          groupId: `${config.AQUEDUCT_GROUP_ID}.replay`,
          ...(flags.kind ? { kinds: flags.kind } : {}),
          fromBeginning: flags.fromBeginning,
          dryRun: flags.dryRun,
          onProgress: progress,
          signal: stop.signal,
        });
        console.log(
          JSON.stringify({ from: topics.deadLetter, to: topics.main, dryRun: flags.dryRun, ...summary }),
        );
        if (summary.interrupted) process.exitCode = stop.exitCode();
      } finally {
        redis.disconnect();
      }
    });
}
