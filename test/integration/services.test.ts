import { Partitioners } from 'kafkajs';
import { describe, expect, it } from 'vitest';
import { parseBrokers, SetupError, startServices } from '../../src/services/index.ts';
import { testKafka, uniqueTopic } from '../helpers/kafka.ts';
import { testRedis } from '../helpers/redis.ts';

describe('the real Kafka broker', () => {
  it('round-trips messages through a topic with several partitions', async () => {
    const kafka = testKafka();
    const topic = uniqueTopic('roundtrip');
    const admin = kafka.admin();
    await admin.connect();
    await admin.createTopics({ topics: [{ topic, numPartitions: 3 }], waitForLeaders: true });
    await admin.disconnect();

    // Idempotent, as every producer of Aqueduct's: kafkajs resends a whole request when one partition in
    // it fails, and only idempotence keeps the partitions that were written from getting a second copy.
    const producer = kafka.producer({
      createPartitioner: Partitioners.DefaultPartitioner,
      idempotent: true,
      maxInFlightRequests: 1,
    });
    await producer.connect();
    const sent = Array.from({ length: 30 }, (_, i) => ({ key: `k${i % 7}`, value: `event-${i}` }));
    await producer.send({ topic, messages: sent });
    await producer.disconnect();

    const consumer = kafka.consumer({ groupId: `${topic}-group` });
    await consumer.connect();
    await consumer.subscribe({ topic, fromBeginning: true });
    const received: string[] = [];
    const partitions = new Set<number>();
    await new Promise<void>((resolve, reject) => {
      consumer
        .run({
          eachMessage: async ({ partition, message }) => {
            received.push(message.value?.toString() ?? '');
            partitions.add(partition);
            if (received.length === sent.length) resolve();
          },
        })
        .catch(reject);
    });
    await consumer.disconnect();

    expect(received.sort()).toEqual(sent.map((m) => m.value).sort());
    expect(partitions.size).toBeGreaterThan(1);
  });
});

describe('the real Redis server', () => {
  it('runs a Lua script by its SHA (EVALSHA) after loading it', async () => {
    const redis = testRedis('evalsha');
    try {
      const sha = (await redis.client.script(
        'LOAD',
        "return redis.call('INCRBY', KEYS[1], ARGV[1])",
      )) as string;
      const key = `${redis.prefix}counter`;
      expect(await redis.client.evalsha(sha, 1, key, 5)).toBe(5);
      expect(await redis.client.evalsha(sha, 1, key, 7)).toBe(12);
    } finally {
      await redis.cleanup();
    }
  });
});

describe('the runtime', () => {
  it('is Node 22 or newer (npm scripts put node_modules/.bin/node first on PATH)', () => {
    expect(Number(process.versions.node.split('.')[0])).toBeGreaterThanOrEqual(22);
  });
});

describe('the service switch', () => {
  it('rejects a malformed KAFKA_BROKERS with the fix in the message', () => {
    expect(() => parseBrokers('localhost')).toThrow(SetupError);
    expect(() => parseBrokers('localhost')).toThrow(/host:port/);
    expect(parseBrokers(' a:1 , b:2 ')).toEqual(['a:1', 'b:2']);
  });

  it('names the cause and the fix when REDIS_URL is unreachable', async () => {
    const attempt = startServices({
      env: { REDIS_URL: 'redis://:hunter2@127.0.0.1:1', KAFKA_BROKERS: 'x:1' },
    });
    await expect(attempt).rejects.toThrow(SetupError);
    await expect(attempt).rejects.toThrow(/unreachable at REDIS_URL=redis:\/\/:\*\*\*@127\.0\.0\.1:1/);
    await expect(attempt).rejects.not.toThrow(/hunter2/);
  });

  it('uses services named by the environment without starting any', async () => {
    const services = await startServices({
      env: { REDIS_URL: testRedisUrl(), KAFKA_BROKERS: '127.0.0.1:9' },
    });
    expect(services.source).toEqual({ kafka: 'env', redis: 'env' });
    expect(services.localKafka).toBeUndefined();
    expect(services.localRedis).toBeUndefined();
    await services.stop();
  });
});

function testRedisUrl(): string {
  const redis = testRedis('url');
  const url = `redis://${redis.client.options.host}:${redis.client.options.port}`;
  redis.client.disconnect();
  return url;
}
