/**
 * One side of `npm run bench -- overhead`, in a process of its own so that its peak RSS is its own.
 *   node bench/overhead-worker.ts raw|aqueduct|aqueduct-http <count>
 * Environment: KAFKA_BROKERS, REDIS_URL, AQUEDUCT_TOPIC, AQUEDUCT_GROUP_ID (and the simulators' for
 * aqueduct-http). Prints one JSON line: { messages, seconds, messagesPerSecond, cpuSeconds, peakRssMiB }.
 */
import { Redis } from 'ioredis';
import { loadConfig } from '../src/config.ts';
import { consumerOptions } from '../src/consume/options.ts';
import type { Platform } from '../src/events/event.ts';
import { createKafka } from '../src/kafka/client.ts';
import { TokenBucketLimiter } from '../src/limiter/index.ts';
import { createLogger } from '../src/log.ts';
import { NotificationConsumer } from '../src/pipeline/consumer.ts';
import { createProviders } from '../src/providers/index.ts';
import type { PushOutcome, PushProvider, PushRequest } from '../src/providers/types.ts';
import { providersOptions } from '../src/settings-options.ts';

const [mode = 'raw', countText = '0'] = process.argv.slice(2);
const count = Number(countText);
const config = loadConfig();
const kafka = createKafka({ brokers: config.KAFKA_BROKERS, clientId: `overhead-${mode}` });

let handled = 0;
let firstAt = 0;
let lastAt = 0;
/** CPU time of this process (all its threads) from the first message handled to the last. */
let cpuAtFirst: NodeJS.CpuUsage | undefined;
let cpuInWindow: NodeJS.CpuUsage | undefined;
let finish: () => void = () => {};
const finished = new Promise<void>((resolve) => {
  finish = resolve;
});
const tally = (n: number) => {
  const now = performance.now();
  if (firstAt === 0) {
    firstAt = now;
    cpuAtFirst = process.cpuUsage();
  }
  handled += n;
  lastAt = now;
  if (handled >= count) {
    cpuInWindow ??= process.cpuUsage(cpuAtFirst);
    finish();
  }
};

if (mode === 'raw') {
  // The floor: kafkajs eachBatch that only decodes each message.
  const consumer = kafka.consumer({
    groupId: config.AQUEDUCT_GROUP_ID,
    maxBytesPerPartition: config.AQUEDUCT_FETCH_MAX_BYTES_PER_PARTITION,
  });
  await consumer.connect();
  await consumer.subscribe({ topic: config.AQUEDUCT_TOPIC, fromBeginning: true });
  let decoded = 0;
  await consumer.run({
    partitionsConsumedConcurrently: 8,
    eachBatch: async ({ batch }) => {
      for (const message of batch.messages)
        if (message.value && JSON.parse(message.value.toString()).id) decoded++;
      tally(batch.messages.length);
    },
  });
  await finished;
  await consumer.disconnect();
  if (decoded < count) throw new Error('decoded fewer than consumed');
} else {
  const redis = new Redis(config.REDIS_URL);
  const logger = createLogger('warn');
  const providers: Record<Platform, PushProvider> =
    mode === 'aqueduct-http'
      ? createProviders(providersOptions(config, { maxInFlight: config.AQUEDUCT_SEND_CONCURRENCY }))
      : { fcm: noopProvider('fcm'), apns: noopProvider('apns') };
  const counting = Object.fromEntries(
    Object.entries(providers).map(([platform, provider]) => [
      platform,
      {
        platform: provider.platform,
        close: () => provider.close(),
        async send(batch: readonly PushRequest[]) {
          const outcomes = await provider.send(batch);
          tally(batch.length);
          return outcomes;
        },
      } satisfies PushProvider,
    ]),
  ) as Record<Platform, PushProvider>;
  const limiter = new TokenBucketLimiter(redis, { keyPrefix: config.AQUEDUCT_REDIS_PREFIX });
  const consumer = await NotificationConsumer.start(consumerOptions(config), {
    kafka,
    redis,
    providers: counting,
    tokenSource: limiter,
    logger,
  });
  await finished;
  await consumer.stop();
  await Promise.all([providers.fcm.close(), providers.apns.close()]);
  redis.disconnect();
}

const seconds = (lastAt - firstAt) / 1000;
console.log(
  JSON.stringify({
    mode,
    messages: handled,
    seconds: Number(seconds.toFixed(3)),
    messagesPerSecond: Math.round(handled / seconds),
    cpuSeconds: Number((((cpuInWindow?.user ?? 0) + (cpuInWindow?.system ?? 0)) / 1e6).toFixed(3)),
    peakRssMiB: Math.round(process.resourceUsage().maxRSS / 1024),
  }),
);
process.exit(0);

/** A provider that accepts everything at once: what is left to measure is the pipeline itself. */
function noopProvider(platform: Platform): PushProvider {
  let id = 0;
  return {
    platform,
    async send(batch: readonly PushRequest[]): Promise<PushOutcome[]> {
      return batch.map(() => ({ kind: 'delivered', messageId: String(++id), httpStatus: 200 }));
    },
    async close() {},
  };
}
