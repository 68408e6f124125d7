import { spawn } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { CompressionTypes, type Kafka } from 'kafkajs';
import { afterEach, describe, expect, inject, it, vi } from 'vitest';
import { createProducer } from '../../src/kafka/client.ts';
import { HEADER, headerString } from '../../src/kafka/headers.ts';
import { ensureTopics, SINGLE_BROKER_DURABILITY } from '../../src/kafka/topics.ts';
import { generateEvents } from '../../src/publish/generate.ts';
import { kafkaClasspath } from '../../src/services/kafka-classpath.ts';
import { kafkaVersion } from '../../src/services/kafka-version.ts';
import { readTopic } from '../../testkit/topics.ts';
import { type Rig, startRig } from '../helpers/pipeline.ts';

// What Apache Kafka's own Java client (the jars of the run's broker version) writes, Aqueduct reads,
// and the other way round: each of Kafka's compression types, and transactions.

const JAVA_CLIENT = fileURLToPath(new URL('../fixtures/KafkaJavaClient.java', import.meta.url));
const COMPRESSION_TYPES = ['none', 'gzip', 'snappy', 'lz4', 'zstd'] as const;
const TRACEPARENT = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';

/** Runs the Java client with `args`, `input` on its stdin; resolves to its stdout lines. */
async function javaClient(args: string[], input = ''): Promise<string[]> {
  const classpath = await kafkaClasspath(kafkaVersion());
  return new Promise((resolve, reject) => {
    const child = spawn('java', ['-cp', classpath, JAVA_CLIENT, ...args], {
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => {
      stdout += chunk.toString('utf8');
    });
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString('utf8');
    });
    child.on('error', reject);
    child.on('close', (code) => {
      if (code === 0) resolve(stdout.split('\n').filter((line) => line !== ''));
      else reject(new Error(`the Java client exited with ${code}: ${stderr.slice(-2000)}`));
    });
    child.stdin.end(input);
  });
}

let rig: Rig | undefined;
afterEach(async () => {
  await rig?.close();
  rig = undefined;
});

describe("Apache Kafka's Java client: compression types and transactions", () => {
  it('delivers every event a Java producer wrote in each compression type (with a traceparent header), once', async () => {
    rig = await startRig({ partitions: 2, rate: 100_000, burst: 100_000, redis: 'single' });
    const lines: string[] = [];
    const published: string[] = [];
    for (const compression of COMPRESSION_TYPES) {
      for (const event of generateEvents({ count: 40, tenants: ['acme'] })) {
        lines.push(`${compression}\t${JSON.stringify(event)}`);
        published.push(event.id);
      }
    }
    const brokers = inject('kafkaBrokers').join(',');
    expect(await javaClient(['produce', brokers, rig.topic, TRACEPARENT], lines.join('\n'))).toEqual([
      `produced ${lines.length}`,
    ]);

    await rig.startConsumer('a');
    const ledger = await rig.settle(published);
    expect(new Set(ledger.delivered)).toEqual(new Set(published));
    expect(ledger.acceptedTotal).toBe(published.length);
    expect(ledger.deadLettered).toEqual([]);
  });

  it('writes batches in each compression type that the Java consumer reads', async () => {
    rig = await startRig({ partitions: 1, rate: 100_000, burst: 100_000, redis: 'single' });
    const topic = `${rig.topic}-written`;
    const admin = rig.kafka.admin();
    await admin.connect();
    await ensureTopics(admin, [{ topic, numPartitions: 1 }], SINGLE_BROKER_DURABILITY);
    await admin.disconnect();
    const producer = createProducer(rig.kafka);
    await producer.connect();
    const sent: string[] = [];
    for (const [name, compression] of Object.entries({
      gzip: CompressionTypes.GZIP,
      snappy: CompressionTypes.Snappy,
      lz4: CompressionTypes.LZ4,
      zstd: CompressionTypes.ZSTD,
    })) {
      // Repetitive values, so that each batch really is compressed; 300 of them, more than one block.
      const values = Array.from({ length: 300 }, (_, i) => `${name}-${i} ${'notification '.repeat(20)}`);
      await producer.send({ topic, compression, messages: values.map((value) => ({ value })) });
      sent.push(...values);
    }
    await producer.disconnect();
    const read = await javaClient(['consume', inject('kafkaBrokers').join(','), topic, String(sent.length)]);
    expect(read).toEqual(sent);
  });

  it('delivers what a transactional Java producer committed, nothing it aborted, and commits offsets past the markers', async () => {
    rig = await startRig({ partitions: 1, rate: 100_000, burst: 100_000, redis: 'single' });
    const runs: Array<['commit' | 'abort', number]> = [
      ['commit', 20],
      ['abort', 10],
      ['commit', 20],
      ['abort', 5],
    ];
    const lines: string[] = [];
    const committed: string[] = [];
    const aborted: string[] = [];
    for (const [kind, count] of runs) {
      for (const event of generateEvents({ count, tenants: ['acme'] })) {
        lines.push(`${kind}\t${JSON.stringify(event)}`);
        (kind === 'commit' ? committed : aborted).push(event.id);
      }
    }
    const brokers = inject('kafkaBrokers').join(',');
    expect(await javaClient(['produce-transactional', brokers, rig.topic], lines.join('\n'))).toEqual([
      'committed 40 aborted 15',
    ]);

    await rig.startConsumer('a');
    const ledger = await rig.settle(committed);
    expect(new Set(ledger.delivered)).toEqual(new Set(committed));
    expect(ledger.acceptedTotal).toBe(committed.length);
    expect(ledger.deadLettered).toEqual([]);

    // The log ends in an abort marker: the group's committed offset reaches the end of the log (so its
    // lag, which KEDA scales on, falls to 0) rather than stopping at the last record it delivered.
    const { end, committed: offset } = await committedToEnd(rig);
    expect(end).toBeGreaterThan(lines.length); // records plus the markers
    expect(offset).toBe(end);
    expect(aborted.some((id) => ledger.delivered.has(id))).toBe(false);
  });

  it('commits past a transaction aborted right after a committed one while it is running', async () => {
    rig = await startRig({ partitions: 1, rate: 100_000, burst: 100_000, redis: 'single' });
    await rig.startConsumer('a');
    const lines: string[] = [];
    const committed: string[] = [];
    for (const [kind, count] of [
      ['commit', 5],
      ['abort', 5],
    ] as const) {
      for (const event of generateEvents({ count, tenants: ['acme'] })) {
        lines.push(`${kind}\t${JSON.stringify(event)}`);
        if (kind === 'commit') committed.push(event.id);
      }
    }
    const brokers = inject('kafkaBrokers').join(',');
    expect(await javaClient(['produce-transactional', brokers, rig.topic], lines.join('\n'))).toEqual([
      'committed 5 aborted 5',
    ]);
    const ledger = await rig.settle(committed);
    expect(ledger.acceptedTotal).toBe(committed.length);
    // The fetch after the committed records holds only the aborted ones and the markers, which kafkajs
    // never hands to eachBatch; the commit must still pass them.
    const { end, committed: offset } = await committedToEnd(rig);
    expect(end).toBe(lines.length + 2);
    expect(offset).toBe(end);
  });

  it('dead-letters a record with a null header value and a header named __proto__, keeping both, and goes on', async () => {
    rig = await startRig({ partitions: 1, rate: 100_000, burst: 100_000, redis: 'single' });
    const [event] = generateEvents({ count: 1, tenants: ['acme'] });
    if (!event) throw new Error('no event generated');
    const brokers = inject('kafkaBrokers').join(',');
    expect(
      await javaClient(
        ['produce', brokers, rig.topic, '-', 'flag', '__proto__=zzz', 'kept=1'],
        `none\tnot json\nnone\t${JSON.stringify(event)}`,
      ),
    ).toEqual(['produced 2']);
    await rig.startConsumer('a');
    const ledger = await rig.settle([event.id]);
    expect(ledger.delivered.has(event.id)).toBe(true);
    await vi.waitFor(
      async () => expect(await readTopic(rig?.kafka as Kafka, `${rig?.topic}.dlq`)).toHaveLength(1),
      {
        timeout: 20_000,
        interval: 500,
      },
    );
    const [dead] = await readTopic(rig.kafka, `${rig.topic}.dlq`);
    expect(headerString(dead?.headers, HEADER.reasonKind)).toBe('invalid-json');
    const headers = dead?.headers ?? {};
    // Kafka allows a null header value; kafkajs cannot write one, so the copy holds an empty value.
    expect(Object.hasOwn(headers, 'flag') && String(headers.flag)).toBe('');
    // kafkajs reads a header named __proto__ as [Object.prototype, its value]: the written value is the Buffer.
    expect(
      [Object.getOwnPropertyDescriptor(headers, '__proto__')?.value]
        .flat()
        .filter(Buffer.isBuffer)
        .map(String),
    ).toEqual(['zzz']);
    expect(String(headers.kept)).toBe('1');
  });
});

/**
 * Waits (20 s at most) until the rig's group has committed its one partition up to the end of the log;
 * says where the log ends and where the commit is.
 */
async function committedToEnd(rig: Rig): Promise<{ end: number; committed: number }> {
  const admin = rig.kafka.admin();
  await admin.connect();
  try {
    const [partition] = await admin.fetchTopicOffsets(rig.topic);
    const end = Number(partition?.high);
    const deadline = Date.now() + 20_000;
    let committed = -1;
    while (Date.now() < deadline) {
      const [group] = await admin.fetchOffsets({
        groupId: rig.env.AQUEDUCT_GROUP_ID as string,
        topics: [rig.topic],
      });
      committed = Number(group?.partitions[0]?.offset ?? -1);
      if (committed === end) break;
      await sleep(500);
    }
    return { end, committed };
  } finally {
    await admin.disconnect();
  }
}
