/**
 * `npm run demo`: the foundation's smoke demo. It starts (or finds) Kafka and Redis through the service
 * switch, creates a topic, publishes a handful of events, consumes them back and prints what happened.
 * The pipeline issues grow this into the full viral-burst demo.
 */
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { Kafka, logLevel, Partitioners } from 'kafkajs';
import { SetupError } from '../services/errors.ts';
import { startServices } from '../services/index.ts';

const { values } = parseArgs({
  options: { events: { type: 'string', default: '10' }, json: { type: 'boolean', default: false } },
});
const events = Number(values.events);
if (!Number.isInteger(events) || events < 1) {
  console.error(`--events must be a positive whole number, got "${values.events}"`);
  process.exit(2);
}
const say = (message: string) => console.log(values.json ? `# ${message}` : message);

const started = Date.now();
let services: Awaited<ReturnType<typeof startServices>>;
try {
  services = await startServices({ log: say });
} catch (error) {
  if (error instanceof SetupError) {
    console.error(`demo: ${error.message}`);
    process.exit(2);
  }
  throw error;
}
const stopOnSignal = () => void services.stop().finally(() => process.exit(130));
process.once('SIGINT', stopOnSignal);
process.once('SIGTERM', stopOnSignal);

try {
  const kafka = new Kafka({
    clientId: 'aqueduct-demo',
    brokers: services.kafkaBrokers,
    logLevel: logLevel.NOTHING,
  });
  const topic = `aqueduct-demo-${Date.now()}`;
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic, numPartitions: 6 }], waitForLeaders: true });
  await admin.disconnect();

  const producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner });
  await producer.connect();
  await producer.send({
    topic,
    messages: Array.from({ length: events }, (_, i) => ({
      key: `device-${i}`,
      value: JSON.stringify({ id: i }),
    })),
  });
  await producer.disconnect();
  say(`published ${events} events to ${topic} (6 partitions)`);

  const redis = new Redis(services.redisUrl);
  const counter = `aqueduct:demo:${topic}:consumed`;
  const consumer = kafka.consumer({ groupId: `${topic}-group` });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  const consumed = await new Promise<number>((resolve, reject) => {
    let count = 0;
    consumer
      .run({
        eachMessage: async () => {
          count = await redis.incr(counter);
          if (count === events) resolve(count);
        },
      })
      .catch(reject);
  });
  await consumer.disconnect();
  await redis.del(counter);
  redis.disconnect();

  const summary = {
    published: events,
    consumed,
    lost: events - consumed,
    seconds: Number(((Date.now() - started) / 1000).toFixed(2)),
    kafka: services.source.kafka,
    redis: services.source.redis,
  };
  say(`consumed ${consumed} of ${events} through a consumer group; counted in Redis`);
  console.log(values.json ? JSON.stringify(summary) : summary);
} finally {
  await services.stop();
}
