import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createKafka } from '../../src/kafka/client.ts';
import { ensureTopicFamily, SINGLE_BROKER_DURABILITY } from '../../src/kafka/topics.ts';
import { generateEvents } from '../../src/publish/generate.ts';
import { publishEvents } from '../../src/publish/publisher.ts';
import { LocalKafka } from '../../src/services/index.ts';
import { type ConsumerProcess, fleetEnv, spawnConsumer } from '../../testkit/fleet.ts';
import { type Simulators, startSimulators } from '../../testkit/simulators.ts';
import { startSilentServer } from '../helpers/silent-server.ts';

/**
 * After SIGTERM, `aqueduct consume` exits by itself within AQUEDUCT_SHUTDOWN_TIMEOUT_MS, also right after
 * a broker restart, while kafkajs is still rejoining the group (a broker of its own: the suite's cannot
 * be restarted). kafkajs may still be rejoining when the drain's share of the bound runs out ("drain
 * timed out": the uncommitted tail is read again by the next owner); the hard bound of the whole stop must
 * never be what ends the process.
 */

const SHUTDOWN_TIMEOUT_MS = 10_000;

let kafka: LocalKafka;
let simulators: Simulators;
beforeAll(async () => {
  kafka = await LocalKafka.start();
  simulators = await startSimulators({ rate: 100_000, burst: 100_000 });
});
afterAll(async () => {
  await simulators?.close();
  await kafka?.stop();
});

/** A consumer of `topic` on this file's broker, at 100 events/s per provider. */
function consumerEnv(topic: string, extra: Record<string, string> = {}): Record<string, string> {
  return fleetEnv({
    kafkaBrokers: kafka.brokers,
    redisUrl: inject('redisUrl'),
    topic,
    redisPrefix: `aqt-exit-${randomUUID().slice(0, 8)}`,
    aqueduct: { rate: 100, burst: 100 },
    simulatorEnv: simulators.env,
    extra,
  });
}

function messages(consumer: ConsumerProcess): string[] {
  return consumer.logs.map((line) => String(line.msg));
}

/** A failure message: the log's messages, then whatever else the process printed (an uncaught stack). */
function story(consumer: ConsumerProcess): string {
  // A fatal line carries its error's stack: without it a crash says only that it happened.
  const lines = consumer.logs.map((line) =>
    line.err === undefined ? String(line.msg) : `${String(line.msg)} ${JSON.stringify(line.err)}`,
  );
  return [...lines, '--- other output:', ...consumer.otherOutput].join('\n');
}

async function waitForLog(consumer: ConsumerProcess, msg: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!messages(consumer).includes(msg)) {
    if (Date.now() > deadline) throw new Error(`no "${msg}" within ${timeoutMs} ms: ${messages(consumer)}`);
    await sleep(50);
  }
}

describe('aqueduct consume exits after SIGTERM', () => {
  // SIGTERM at several moments of the rejoin after the broker came back.
  it.each([0, 1500])(
    'after a broker restart, SIGTERM %i ms after the broker is back',
    async (delayMs) => {
      const topic = `test-exit-${randomUUID().slice(0, 8)}`;
      const client = createKafka({ brokers: kafka.brokers, clientId: 'aqueduct-test' });
      await ensureTopicFamily(client, topic, 4, SINGLE_BROKER_DURABILITY);
      await publishEvents(client, [...generateEvents({ count: 3000 })], { topic });
      // Throttled (100/s): the 3000 events take longer than the test, so the consumer is busy all along.
      const consumer = spawnConsumer(
        'exit',
        consumerEnv(topic, {
          AQUEDUCT_SHUTDOWN_TIMEOUT_MS: String(SHUTDOWN_TIMEOUT_MS),
          AQUEDUCT_SESSION_TIMEOUT_MS: '6000',
        }),
      );
      try {
        await consumer.joined();
        await kafka.halt();
        await sleep(3000);
        await kafka.resume();
        await sleep(delayMs);
        const stoppedAt = Date.now();
        const code = await Promise.race([
          consumer.stop(),
          sleep(SHUTDOWN_TIMEOUT_MS + 5000, 'still running'),
        ]);
        const tookMs = Date.now() - stoppedAt;
        expect(code, story(consumer)).toBe(0);
        expect(tookMs).toBeLessThanOrEqual(SHUTDOWN_TIMEOUT_MS + 1000);
        await waitForLog(consumer, 'stopped', 1000);
        const hardStops = consumer.logs.filter((line) => line.msg === 'shutdown bound exceeded; exiting');
        expect(hardStops, JSON.stringify(consumer.logs.slice(-12))).toEqual([]);
      } finally {
        if (consumer.ended === undefined) await consumer.kill();
      }
    },
    90_000,
  );
});

describe('aqueduct consume stopped while the broker is down', () => {
  it('exits within its bound with status 0, never by the hard bound', async () => {
    const topic = `test-exit-down-${randomUUID().slice(0, 8)}`;
    const client = createKafka({ brokers: kafka.brokers, clientId: 'aqueduct-test' });
    await ensureTopicFamily(client, topic, 4, SINGLE_BROKER_DURABILITY);
    await publishEvents(client, [...generateEvents({ count: 3000 })], { topic });
    const consumer = spawnConsumer(
      'exit-broker-down',
      consumerEnv(topic, { AQUEDUCT_SHUTDOWN_TIMEOUT_MS: String(SHUTDOWN_TIMEOUT_MS) }),
    );
    try {
      await consumer.joined();
      await sleep(1000);
      await kafka.halt();
      await sleep(1000);
      const stoppedAt = Date.now();
      const code = await Promise.race([consumer.stop(), sleep(SHUTDOWN_TIMEOUT_MS + 5000, 'still running')]);
      const tookMs = Date.now() - stoppedAt;
      expect(code, story(consumer)).toBe(0);
      expect(tookMs).toBeLessThanOrEqual(SHUTDOWN_TIMEOUT_MS + 1000);
      const hardStops = consumer.logs.filter((line) => line.msg === 'shutdown bound exceeded; exiting');
      expect(hardStops, story(consumer)).toEqual([]);
    } finally {
      if (consumer.ended === undefined) await consumer.kill();
      await kafka.resume();
    }
  }, 90_000);
});

describe('aqueduct consume stopped while Redis does not answer', () => {
  it('drains in its bound and leaves the group: its steps do not wait for Redis past their timeout', async () => {
    const topic = `test-no-redis-${randomUUID().slice(0, 8)}`;
    const client = createKafka({ brokers: kafka.brokers, clientId: 'aqueduct-test' });
    await ensureTopicFamily(client, topic, 4, SINGLE_BROKER_DURABILITY);
    await publishEvents(client, [...generateEvents({ count: 200 })], { topic });
    // A Redis that accepts connections and never answers (hung, or its replies lost on the way): ioredis
    // stays connecting and never flushes the calls it holds.
    const silent = await startSilentServer();
    const consumer = spawnConsumer('no-redis', {
      ...consumerEnv(topic),
      REDIS_URL: `redis://127.0.0.1:${silent.port}`,
    });
    try {
      await consumer.joined();
      await sleep(1000);
      const code = await Promise.race([consumer.stop(), sleep(40_000, 'still running')]);
      expect(code, story(consumer)).toBe(0);
      expect(messages(consumer), story(consumer)).toContain('drained and committed');
      expect(messages(consumer)).not.toContain('drain timed out');
    } finally {
      if (consumer.ended === undefined) await consumer.kill();
      await silent.close();
    }
  }, 120_000);
});

describe('aqueduct consume stopped while it starts', () => {
  it('finishes starting, leaves its group and exits 0, so that no member is left for the others to wait for', async () => {
    const topic = `test-early-${randomUUID().slice(0, 8)}`;
    const client = createKafka({ brokers: kafka.brokers, clientId: 'aqueduct-test' });
    await ensureTopicFamily(client, topic, 4, SINGLE_BROKER_DURABILITY);
    await publishEvents(client, [...generateEvents({ count: 3000 })], { topic });
    const first = spawnConsumer('early-first', consumerEnv(topic));
    let second: ConsumerProcess | undefined;
    const admin = client.admin();
    try {
      await first.joined();
      second = spawnConsumer('early-second', consumerEnv(topic));
      // Before the group join: the signal lands while the second process connects and joins.
      await waitForLog(second, 'provider connections opened', 30_000);
      const code = await Promise.race([second.stop(), sleep(40_000, 'still running')]);
      expect(code, story(second)).toBe(0);
      expect(messages(second)).toContain(
        'stop requested while starting: stopping once started (a second signal exits at once)',
      );
      expect(messages(second)).toContain('stopped');
      expect(messages(second)).not.toContain('shutdown bound exceeded; exiting');
      // Left, not expelled: the group is down to the first process well within a session (30 s).
      await admin.connect();
      const deadline = Date.now() + 15_000;
      let members = -1;
      while (Date.now() < deadline) {
        const [group] = (await admin.describeGroups([`${topic}-group`])).groups;
        members = group?.state === 'Stable' ? group.members.length : -1;
        if (members === 1) break;
        await sleep(250);
      }
      expect(members, story(second)).toBe(1);
    } finally {
      await admin.disconnect();
      for (const consumer of [first, second]) if (consumer?.ended === undefined) await consumer?.kill();
    }
  }, 120_000);
});

describe('aqueduct consume given a second signal', () => {
  it('exits at once, whichever signal came first: Ctrl-C, then SIGTERM', async () => {
    // Brokers that accept connections and never answer: the start, and so the stop, would take until
    // the drain bound.
    const silent = await startSilentServer();
    const consumer = spawnConsumer('second-signal', {
      ...consumerEnv('test-second-signal'),
      KAFKA_BROKERS: `127.0.0.1:${silent.port}`,
      AQUEDUCT_SHUTDOWN_TIMEOUT_MS: '20000',
    });
    try {
      await waitForLog(consumer, 'provider connections opened', 30_000);
      consumer.child.kill('SIGINT');
      await waitForLog(
        consumer,
        'stop requested while starting: stopping once started (a second signal exits at once)',
        5000,
      );
      const code = await Promise.race([consumer.stop(), sleep(5000, 'still running')]);
      expect(code, story(consumer)).toBe(143);
      expect(messages(consumer)).toContain('second signal: exiting at once, without finishing the drain');
    } finally {
      if (consumer.ended === undefined) await consumer.kill();
      await silent.close();
    }
  }, 60_000);
});

describe('aqueduct consume that cannot start', () => {
  it('says why in one line and exits 1 when its topic does not exist', async () => {
    const topic = `test-missing-${randomUUID().slice(0, 8)}`;
    const consumer = spawnConsumer('missing-topic', consumerEnv(topic));
    try {
      const code = await Promise.race([consumer.exited, sleep(60_000, 'still running')]);
      expect(code, story(consumer)).toBe(1);
      const fatal = consumer.logs.filter((line) => line.level === 60);
      expect(fatal.map((line) => line.msg)).toEqual([
        `consumer could not start: topic "${topic}" does not exist: create it (aqueduct publish --create-topic --partitions N) or set AQUEDUCT_TOPIC`,
      ]);
      // A setup problem, not a crash: no stack trace to wade through.
      expect(JSON.stringify(fatal)).not.toMatch(/\\n\s+at /);
      expect(consumer.otherOutput).toContain(
        `aqueduct consume: topic "${topic}" does not exist: create it (aqueduct publish --create-topic --partitions N) or set AQUEDUCT_TOPIC`,
      );
    } finally {
      if (consumer.ended === undefined) await consumer.kill();
    }
  }, 90_000);
});
