import { type Batch, type EachBatchPayload, KafkaJSError, type KafkaMessage } from 'kafkajs';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { NotificationEventInput, Platform } from '../../src/events/event.ts';
import { messageKey } from '../../src/events/message-key.ts';
import { HEADER } from '../../src/kafka/headers.ts';
import { type PoolBucket, TokenPool, type TokenSource } from '../../src/limiter/token-pool.ts';
import {
  BatchProcessor,
  type BatchProcessorOptions,
  type DoneMarks,
} from '../../src/pipeline/batch-processor.ts';
import type { DoneMark, DoneReading, FinalOutcome, PartitionRef } from '../../src/pipeline/done-store.ts';
import type { KeyInput } from '../../src/pipeline/idempotency-key.ts';
import type { PipelineObserver } from '../../src/pipeline/observer.ts';
import type { OutcomeRecord } from '../../src/pipeline/outcome-writer.ts';
import { Parking } from '../../src/pipeline/parking.ts';
import { TenantShares } from '../../src/pipeline/tenant-shares.ts';
import type { PushOutcome, PushProvider, PushRequest } from '../../src/providers/types.ts';

/**
 * The batch processor driven as kafkajs drives it: fake `eachBatch` payloads (a batch of messages,
 * resolveOffset, commitOffsetsIfNecessary, heartbeat, isRunning, isStale), with its boundaries (the
 * providers, the Redis token bucket under a real TokenPool, the done-marks, the outcome topics) in
 * memory. test/integration/pipeline.test.ts and faults.test.ts run the same paths against Kafka and Redis.
 */

const TOPIC = 'notifications';
const RETRY_TOPIC = 'notifications.retry';
const DEFERRED_TOPIC = 'notifications.deferred';

/** The dedupe memory in memory, behind the interface the processor uses. */
class MemoryDoneStore implements DoneMarks {
  /** The idempotency window: (tenant, id) → final outcome. */
  readonly marks = new Map<string, string>();
  /** Finished offsets, as `topic:partition:offset`. */
  readonly finished = new Set<string>();
  /** Partitions whose finished offsets were read, in order. */
  readonly partitionReads: string[] = [];
  async lookup(keys: readonly KeyInput[], partitions: readonly PartitionRef[] = []): Promise<DoneReading> {
    return this.read(keys, partitions);
  }
  async check(keys: readonly KeyInput[], partitions: readonly PartitionRef[] = []): Promise<DoneReading> {
    return this.read(keys, partitions);
  }
  isDoneLocally(key: KeyInput): boolean {
    return this.marks.has(String(key));
  }
  async mark(marks: readonly DoneMark[]): Promise<void> {
    for (const { topic, partition, offset, final } of marks) {
      this.finished.add(`${topic}:${partition}:${offset}`);
      if (final) this.marks.set(String(final.key), final.outcome);
    }
  }
  committed(): void {}
  settledCalls = 0;
  async settled(): Promise<void> {
    this.settledCalls++;
  }
  private read(keys: readonly KeyInput[], partitions: readonly PartitionRef[]): DoneReading {
    const done = new Map<string, FinalOutcome>();
    for (const key of keys.map(String)) {
      const outcome = this.marks.get(key);
      if (outcome !== undefined) done.set(key, outcome as FinalOutcome);
    }
    const finished = new Map<string, Set<string>>();
    for (const { topic, partition } of partitions) {
      const prefix = `${topic}:${partition}:`;
      this.partitionReads.push(`${topic}:${partition}`);
      finished.set(
        `${topic}:${partition}`,
        new Set([...this.finished].filter((f) => f.startsWith(prefix)).map((f) => f.slice(prefix.length))),
      );
    }
    return { done, finished };
  }
}

/** The outcome topics in memory; `failingCalls` names the write calls (1-based) that fail. */
class MemoryOutcomeWriter {
  readonly records: OutcomeRecord[] = [];
  private readonly failingCalls: readonly number[];
  private calls = 0;
  constructor(failingCalls: readonly number[] = []) {
    this.failingCalls = failingCalls;
  }
  async write(records: readonly OutcomeRecord[]): Promise<void> {
    this.calls++;
    if (this.failingCalls.includes(this.calls)) throw new Error('outcome topic not writable');
    this.records.push(...records);
  }
}

/** A provider that answers each request with `answer` and remembers what it was sent. */
function fakeProvider(
  platform: Platform,
  answer: (request: PushRequest) => PushOutcome = (request) => ({
    kind: 'delivered',
    messageId: `m-${request.event.id}`,
    httpStatus: 200,
  }),
): PushProvider & { sent: string[] } {
  const sent: string[] = [];
  return {
    platform,
    sent,
    async send(batch) {
      sent.push(...batch.map((request) => request.event.id));
      return batch.map(answer);
    },
    async close() {},
  };
}

/** The Redis token bucket in memory: grants what it holds, and says "wait 30 ms" when short. */
class MemoryTokenSource implements TokenSource {
  readonly blocks: Array<{ buckets: string[]; retryAfterMs: number }> = [];
  tokens: number;
  /** The wait a short grant is told. */
  private readonly dryWaitMs: number;
  constructor(tokens: number, dryWaitMs = 30) {
    this.tokens = tokens;
    this.dryWaitMs = dryWaitMs;
  }
  async acquire(_buckets: PoolBucket[], n: number) {
    const granted = Math.min(n, this.tokens);
    this.tokens -= granted;
    return { granted, waitMs: granted < n ? this.dryWaitMs : 0 };
  }
  async blockUntil(buckets: PoolBucket[], retryAfterMs: number) {
    this.blocks.push({ buckets: buckets.map((bucket) => bucket.name), retryAfterMs });
  }
  async refund(_buckets: PoolBucket[], n: number) {
    this.tokens += n;
  }
}

function event(id: string, platform: Platform = 'fcm'): NotificationEventInput {
  // APNs tokens are hex: the hex of the id, padded to 64 digits.
  const token =
    platform === 'apns' ? Buffer.from(id).toString('hex').padEnd(64, '0').slice(0, 200) : `token-${id}`;
  return { id, platform, token, notification: { title: 't', body: 'b' } };
}

function message(offset: number, value: unknown, headers: Record<string, string> = {}): KafkaMessage {
  return {
    key: null,
    value: Buffer.from(typeof value === 'string' ? value : JSON.stringify(value)),
    timestamp: String(Date.now()),
    attributes: 0,
    offset: String(offset),
    headers: Object.fromEntries(Object.entries(headers).map(([k, v]) => [k, Buffer.from(v)])),
  };
}

/** A kafkajs `eachBatch` payload over `messages`, recording what the handler does with it. */
function payloadOf(topic: string, messages: KafkaMessage[], offsetLag = '0') {
  const calls = { resolved: [] as string[], commits: 0, heartbeats: 0 };
  const last = messages.at(-1)?.offset ?? '-1';
  const batch: Batch = {
    topic,
    partition: 0,
    highWatermark: String(Number(last) + 1),
    messages,
    isEmpty: () => messages.length === 0,
    firstOffset: () => messages[0]?.offset ?? null,
    lastOffset: () => last,
    offsetLag: () => offsetLag,
    offsetLagLow: () => offsetLag,
  };
  const payload: EachBatchPayload = {
    batch,
    resolveOffset: (offset) => {
      calls.resolved.push(offset);
    },
    heartbeat: async () => {
      calls.heartbeats++;
    },
    pause: () => () => {},
    commitOffsetsIfNecessary: async () => {
      calls.commits++;
    },
    uncommittedOffsets: () => ({ topics: [] }),
    isRunning: () => true,
    isStale: () => false,
  };
  return { payload, calls };
}

interface RigOptions {
  tokens?: number;
  /** The wait the pool's source tells a short grant, in ms. */
  dryWaitMs?: number;
  /** APNs events draw from a pool of their own, over a source with these tokens. */
  apnsTokens?: number;
  answer?: (request: PushRequest) => PushOutcome;
  failingWrites?: number[];
  options?: Partial<BatchProcessorOptions>;
  /** Tenant fairness on, with these shares (and the deferred topic). */
  shares?: TenantShares;
  /** The FCM pool's wake lead (TokenPoolOptions.wakeLeadMs). */
  wakeLeadMs?: number;
}

const processors: BatchProcessor[] = [];
const pools: TokenPool[] = [];
afterEach(async () => {
  for (const processor of processors.splice(0)) processor.reset({ unpause: false });
  await Promise.all(pools.splice(0).map((pool) => pool.close()));
});

function rig({
  tokens = 1000,
  dryWaitMs,
  apnsTokens,
  answer,
  failingWrites = [],
  options = {},
  shares,
  wakeLeadMs,
}: RigOptions = {}) {
  const providers = { fcm: fakeProvider('fcm', answer), apns: fakeProvider('apns', answer) };
  const doneStore = new MemoryDoneStore();
  const outcomes = new MemoryOutcomeWriter(failingWrites);
  const source = new MemoryTokenSource(tokens, dryWaitMs);
  const pool = new TokenPool(source, [{ name: 'fcm', rate: 1000, capacity: 1000 }], {
    chunk: 1,
    window: 16,
    ...(wakeLeadMs === undefined ? {} : { wakeLeadMs }),
  });
  pools.push(pool);
  const apnsPool =
    apnsTokens === undefined
      ? pool
      : new TokenPool(new MemoryTokenSource(apnsTokens), [{ name: 'apns', rate: 1000, capacity: 1000 }], {
          chunk: 1,
          window: 16,
        });
  if (apnsPool !== pool) pools.push(apnsPool);
  const events: string[] = [];
  const pauses: string[] = [];
  const priorities: string[] = [];
  const observer: PipelineObserver = {
    acquire: (_pool, _requested, take) => take(),
    send: (_context, send) => send(),
    paused: () => events.push('paused'),
    resumed: () => events.push('resumed'),
    duplicateSkipped: (item) => events.push(`duplicate ${item.dedupeKey}`),
    deadLettered: (kind, item) => events.push(`dead-lettered ${kind} ${item.dedupeKey}`),
    retried: (_outcome, e) => events.push(`retried ${e.id}`),
    stepFailed: (error) => events.push(`step failed: ${(error as Error).message}`),
  };
  const processor = new BatchProcessor(
    {
      providers,
      doneStore,
      outcomes,
      poolFor: (e, priority) => {
        priorities.push(priority);
        return e.platform === 'apns' ? apnsPool : pool;
      },
      ...(shares ? { parking: new Parking(shares, { retry: RETRY_TOPIC, deferred: DEFERRED_TOPIC }) } : {}),
      pause: (topic, partition) => pauses.push(`pause ${topic}:${partition}`),
      resume: (topic, partition) => pauses.push(`resume ${topic}:${partition}`),
      observer,
    },
    {
      retryTopic: RETRY_TOPIC,
      maxMessageBytes: 16 * 1024,
      maxHeaderBytes: 16 * 1024,
      maxAttempts: 3,
      maxThrottles: 20,
      retryBaseMs: 1000,
      maxRetryDelayMs: 3_600_000,
      maxFleetBlockMs: 60_000,
      maxPerStep: 2000,
      failOpen: false,
      ...options,
    },
  );
  processors.push(processor);
  return { processor, providers, doneStore, outcomes, source, pool, events, pauses, priorities };
}

/** Waits for what a timer in the processor does; the bound only ends a test that would hang (a loaded machine runs timers late). */
async function until(condition: () => boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('timed out waiting');
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

describe('BatchProcessor', () => {
  it('stops sending before the next window once a heartbeat says the group moved on, and records what was answered', async () => {
    const r = rig({
      answer: (request): PushOutcome =>
        request.event.id === 'e3'
          ? { kind: 'invalid-token', reason: 'Unregistered', httpStatus: 410 }
          : { kind: 'delivered', messageId: `m-${request.event.id}`, httpStatus: 200 },
    });
    const { payload, calls } = payloadOf(
      TOPIC,
      Array.from({ length: 40 }, (_, i) => message(i, event(`e${i}`))),
    );
    // The member's session expired while it was cut off: the first heartbeat after the first window is
    // its first word of it.
    const expelled = new KafkaJSError('The coordinator is not aware of this member', { retriable: false });
    let heartbeats = 0;
    payload.heartbeat = async () => {
      heartbeats += 1;
      if (heartbeats > 1) throw expelled;
    };
    await expect(r.processor.eachBatch(payload)).rejects.toBe(expelled);
    await r.processor.marksSettled();

    // One window of 16 went out; the other 24 are left to the partition's next owner.
    expect(r.providers.fcm.sent).toEqual(Array.from({ length: 16 }, (_, i) => `e${i}`));
    expect(r.outcomes.records.map((record) => record.kind)).toEqual(['invalid-token']);
    expect(calls.resolved).toEqual(['15']);
  });

  it('delivers every event of a batch, marks them done and resolves the whole batch', async () => {
    const r = rig();
    const { payload, calls } = payloadOf(
      TOPIC,
      [0, 1, 2, 3].map((i) => message(i, event(`e${i}`))),
    );
    await r.processor.eachBatch(payload);
    await r.processor.marksSettled();

    expect(r.providers.fcm.sent).toEqual(['e0', 'e1', 'e2', 'e3']);
    expect(calls.resolved).toEqual(['3']);
    expect(calls.commits).toBeGreaterThan(0);
    expect(calls.heartbeats).toBeGreaterThan(0);
    expect([...r.doneStore.marks]).toEqual(['e0', 'e1', 'e2', 'e3'].map((id) => [id, 'delivered']));
    expect(r.outcomes.records).toEqual([]);
    expect(r.pauses).toEqual([]);
  });

  it("keys outcomes by (tenant, id): two tenants' order-42 are both pushed, one tenant's second copy is skipped", async () => {
    const r = rig();
    const { payload, calls } = payloadOf(TOPIC, [
      message(0, { ...event('order-42'), tenant: 'acme' }),
      message(1, { ...event('order-42'), tenant: 'globex' }),
      message(2, event('order-42')),
      message(3, { ...event('order-42'), tenant: 'acme' }),
    ]);
    await r.processor.eachBatch(payload);
    await r.processor.marksSettled();

    expect(r.providers.fcm.sent).toEqual(['order-42', 'order-42', 'order-42']);
    expect(calls.resolved.at(-1)).toBe('3'); // the second copy waits a step for the first one's mark
    expect(Object.fromEntries(r.doneStore.marks)).toEqual({
      'acme order-42': 'delivered',
      'globex order-42': 'delivered',
      'order-42': 'delivered',
    });
  });

  it('dead-letters a message that is not an event, under its coordinates, and resolves past it', async () => {
    const r = rig();
    const { payload, calls } = payloadOf(TOPIC, [
      message(0, event('e0')),
      message(1, '{not json'),
      message(2, event('e2', 'apns')),
    ]);
    await r.processor.eachBatch(payload);
    await r.processor.marksSettled();

    expect(r.outcomes.records).toMatchObject([
      {
        kind: 'dead-letter',
        reasonKind: 'invalid-json',
        origin: { topic: TOPIC, partition: 0, offset: '1' },
      },
    ]);
    expect(r.doneStore.finished.has(`${TOPIC}:0:1`)).toBe(true);
    expect(r.doneStore.marks.has(`@${TOPIC}:0:1`)).toBe(false); // no (tenant, id) to remember
    expect(r.events).toContain(`dead-lettered invalid-json @${TOPIC}:0:1`);
    expect([...r.providers.fcm.sent, ...r.providers.apns.sent]).toEqual(['e0', 'e2']);
    expect(calls.resolved).toEqual(['2']);
  });

  it('dead-letters a message that is not an event even when an event delivered before has its coordinates for an id', async () => {
    const r = rig();
    const id = `@${TOPIC}:0:1`; // printable ASCII: a valid id
    await r.processor.eachBatch(payloadOf(TOPIC, [message(0, { ...event(id), token: 'token-a' })]).payload);
    await r.processor.eachBatch(payloadOf(TOPIC, [message(1, '{not json')]).payload);
    await r.processor.marksSettled();

    expect(r.providers.fcm.sent).toEqual([id]);
    expect(r.outcomes.records).toMatchObject([{ kind: 'dead-letter', reasonKind: 'invalid-json' }]);
  });

  it('skips an event whose outcome is already recorded (a redelivery) without sending it', async () => {
    const r = rig();
    r.doneStore.marks.set('e1', 'delivered');
    const { payload, calls } = payloadOf(
      TOPIC,
      [0, 1, 2].map((i) => message(i, event(`e${i}`))),
    );
    await r.processor.eachBatch(payload);

    expect(r.providers.fcm.sent).toEqual(['e0', 'e2']);
    expect(r.events).toContain('duplicate e1');
    expect(calls.resolved).toEqual(['2']);
  });

  it('skips a message whose offset an earlier owner finished, reading the finished offsets once per assignment', async () => {
    const r = rig();
    r.doneStore.finished.add(`${TOPIC}:0:1`); // finished out of order above the commit, then the owner crashed
    r.doneStore.finished.add(`${TOPIC}:0:4`);
    const first = payloadOf(
      TOPIC,
      [0, 1, 2].map((i) => message(i, event(`e${i}`))),
    );
    await r.processor.eachBatch(first.payload);
    const second = payloadOf(
      TOPIC,
      [3, 4, 5].map((i) => message(i, event(`e${i}`))),
    );
    await r.processor.eachBatch(second.payload);

    expect(r.providers.fcm.sent).toEqual(['e0', 'e2', 'e3', 'e5']);
    expect(r.events).toContain('duplicate e1');
    expect(r.events).toContain('duplicate e4');
    expect(r.doneStore.partitionReads).toEqual([`${TOPIC}:0`]);
    expect(second.calls.resolved.at(-1)).toBe('5');
  });

  it('pauses a partition its pool cannot serve, resumes it when the pool has refilled, and sends then', async () => {
    const r = rig({ tokens: 0 });
    const messages = [0, 1, 2].map((i) => message(i, event(`e${i}`)));
    const first = payloadOf(TOPIC, messages);
    await r.processor.eachBatch(first.payload);

    expect(r.providers.fcm.sent).toEqual([]);
    expect(first.calls.resolved).toEqual([]);
    expect(r.pauses).toEqual([`pause ${TOPIC}:0`]);
    expect(r.processor.pausedCount()).toBe(1);

    r.source.tokens = 10;
    await until(() => r.pauses.length === 2);
    expect(r.pauses[1]).toBe(`resume ${TOPIC}:0`);
    expect(r.events).toEqual(['paused', 'resumed']);

    // kafkajs reads the partition again from its first unresolved offset.
    const again = payloadOf(TOPIC, messages);
    await r.processor.eachBatch(again.payload);
    expect(r.providers.fcm.sent).toEqual(['e0', 'e1', 'e2']);
    expect(again.calls.resolved).toEqual(['2']);
    expect(r.processor.pausedCount()).toBe(0);
  });

  it("lets a fetched batch's first take wait for a refill due within the pool's wake lead (its partition may have been woken that early), and ends the step at a later dry take", async () => {
    const r = rig({ tokens: 0, dryWaitMs: 300, wakeLeadMs: 10_000 });
    expect(await r.pool.take(1)).toBe(0); // dry for 300 ms
    r.source.tokens = 1; // what the refill finds
    const batch = payloadOf(
      TOPIC,
      [0, 1, 2].map((i) => message(i, event(`e${i}`))),
    );
    await r.processor.eachBatch(batch.payload);
    // The first window waited for the refill and got its one token; the next one found the pool dry.
    expect(r.providers.fcm.sent).toEqual(['e0']);
    expect(batch.calls.resolved).toEqual(['0']);
    // (Its wake-up, the lead before the next refill, may already have resumed it.)
    expect(r.pauses[0]).toBe(`pause ${TOPIC}:0`);
  });

  it("lets only a batch's first step wait for its turn: a later step that finds the pool dry pauses the partition rather than holding the fetch", async () => {
    const r = rig({ tokens: 0, dryWaitMs: 50, wakeLeadMs: 10_000 });
    expect(await r.pool.take(1)).toBe(0); // dry for 50 ms
    // From now on every ask finds one token: each refill, waited for, would send one more event.
    const acquire = r.source.acquire.bind(r.source);
    r.source.acquire = async (buckets, n) => {
      r.source.tokens = 1;
      return acquire(buckets, n);
    };
    const batch = payloadOf(
      TOPIC,
      [0, 1, 2, 3].map((i) => message(i, event(`e${i}`))),
    );
    await r.processor.eachBatch(batch.payload);
    expect(r.providers.fcm.sent).toEqual(['e0']);
    expect(batch.calls.resolved).toEqual(['0']);
    expect(r.pauses[0]).toBe(`pause ${TOPIC}:0`);
  });

  it("reads a partition read to its end again soon while another of its pools could send, not only at the starved pool's refill", async () => {
    // FCM's pool is dry for a minute; APNs' has tokens.
    const r = rig({ tokens: 0, dryWaitMs: 60_000, apnsTokens: 100 });
    const first = [message(0, event('e0')), message(1, event('a0', 'apns'))];
    await r.processor.eachBatch(payloadOf(TOPIC, first).payload);
    expect(r.providers.apns.sent).toEqual(['a0']);
    expect(r.pauses).toEqual([`pause ${TOPIC}:0`]);

    // Read again long before FCM's refill: what was appended since goes out with APNs' tokens.
    await until(() => r.pauses.length === 2);
    expect(r.pauses[1]).toBe(`resume ${TOPIC}:0`);
    const again = payloadOf(TOPIC, [...first, message(2, event('a1', 'apns'))]);
    await r.processor.eachBatch(again.payload);
    expect(r.providers.apns.sent).toEqual(['a0', 'a1']);
    expect(r.providers.fcm.sent).toEqual([]);
    expect(again.calls.resolved).toEqual([]);
    expect(r.pauses.at(-1)).toBe(`pause ${TOPIC}:0`);
  });

  it('waits for the starved pool when the batch did not reach the end of its partition (a re-read brings nothing new)', async () => {
    const r = rig({ tokens: 0, dryWaitMs: 60_000, apnsTokens: 100 });
    const first = [message(0, event('e0')), message(1, event('a0', 'apns'))];
    await r.processor.eachBatch(payloadOf(TOPIC, first, '500').payload);
    expect(r.pauses).toEqual([`pause ${TOPIC}:0`]);
    await new Promise((resolve) => setTimeout(resolve, 600));
    expect(r.pauses).toEqual([`pause ${TOPIC}:0`]);
  });

  it('stops sending a step window by window once its partition is revoked (a rebalance began), leaving the rest to the next owner', async () => {
    let revokeOnSend = true;
    const r = rig({
      answer: (request) => {
        // The rebalance begins while the first window is with the provider.
        if (revokeOnSend) r.processor.revoke([TOPIC]);
        revokeOnSend = false;
        return { kind: 'delivered', messageId: `m-${request.event.id}`, httpStatus: 200 };
      },
    });
    const messages = Array.from({ length: 40 }, (_, i) => message(i, event(`e${i}`)));
    const first = payloadOf(TOPIC, messages);
    await r.processor.eachBatch(first.payload);

    // One window of the pool (16) went out; the other 24 are neither sent, nor resolved, nor paused for.
    expect(r.providers.fcm.sent).toEqual(messages.slice(0, 16).map((_, i) => `e${i}`));
    expect(first.calls.resolved).toEqual(['15']);
    expect(r.pauses).toEqual([]);
    // Its done-marks were in the store before the batch handed the partition back to kafkajs.
    expect(r.doneStore.settledCalls).toBe(1);

    // After the rejoin (the partition stayed with this member) the rest goes out once.
    r.processor.reset({ unpause: true });
    const again = payloadOf(TOPIC, messages.slice(16));
    await r.processor.eachBatch(again.payload);
    expect(r.providers.fcm.sent).toEqual(messages.map((_, i) => `e${i}`));
    expect(again.calls.resolved).toEqual(['39']);
  });

  it('stops sending a step once kafkajs stops running the consumer (a crash, a stop)', async () => {
    let running = true;
    const r = rig({
      answer: (request) => {
        running = false;
        return { kind: 'delivered', messageId: `m-${request.event.id}`, httpStatus: 200 };
      },
    });
    const messages = Array.from({ length: 40 }, (_, i) => message(i, event(`e${i}`)));
    const batch = payloadOf(TOPIC, messages);
    batch.payload.isRunning = () => running;
    await r.processor.eachBatch(batch.payload);
    expect(r.providers.fcm.sent).toHaveLength(16);
  });

  it("keys a retry copy by the device when the message has no key, and keeps a message's own key", async () => {
    const r = rig({
      answer: () => ({ kind: 'retry', reason: 'unavailable', httpStatus: 503, throttled: false }),
    });
    const keyed = { ...message(1, event('e1')), key: Buffer.from('producer-key') };
    const { payload } = payloadOf(TOPIC, [message(0, event('e0')), keyed]);
    await r.processor.eachBatch(payload);

    const keys = r.outcomes.records.map((record) => (record.kind === 'retry' ? record.key : undefined));
    expect(keys).toEqual([messageKey(event('e0')), Buffer.from('producer-key')]);
  });

  it('writes a transient failure to the retry topic with the next attempt and a not-before', async () => {
    const r = rig({
      answer: () => ({ kind: 'retry', reason: 'unavailable', httpStatus: 503, throttled: false }),
    });
    const before = Date.now();
    const { payload, calls } = payloadOf(TOPIC, [message(0, event('e0'))]);
    await r.processor.eachBatch(payload);
    await r.processor.marksSettled();

    expect(r.outcomes.records).toHaveLength(1);
    const [record] = r.outcomes.records;
    expect(record).toMatchObject({ kind: 'retry', attempt: 2, reason: 'unavailable' });
    // The first retry waits retryBaseMs, ±25 % jitter.
    const notBefore = record?.kind === 'retry' ? record.notBefore : 0;
    expect(notBefore).toBeGreaterThanOrEqual(before + 750);
    expect(notBefore).toBeLessThanOrEqual(Date.now() + 1250);
    expect(r.doneStore.marks.has('e0')).toBe(false);
    expect(r.events).toContain('retried e0');
    expect(calls.resolved).toEqual(['0']);
  });

  it('blocks the whole fleet on a throttled answer, until its Retry-After', async () => {
    const r = rig({
      answer: () => ({
        kind: 'retry',
        reason: 'quota',
        httpStatus: 429,
        retryAfterMs: 2000,
        throttled: true,
      }),
    });
    const before = Date.now();
    const { payload } = payloadOf(TOPIC, [message(0, event('e0'))]);
    await r.processor.eachBatch(payload);

    expect(r.source.blocks).toHaveLength(1);
    expect(r.source.blocks[0]?.buckets).toEqual(['fcm']);
    expect(r.source.blocks[0]?.retryAfterMs).toBeGreaterThan(1900);
    expect(r.pool.blockedUntilMs).toBeGreaterThanOrEqual(before + 2000);
    // A throttle spends no attempt; it is counted on its own.
    expect(r.outcomes.records).toMatchObject([{ kind: 'retry', attempt: 1, throttles: 1 }]);
    const [record] = r.outcomes.records;
    expect(record?.kind === 'retry' && record.notBefore).toBeGreaterThanOrEqual(before + 2000);
  });

  it('doubles the fleet block for each further wave of throttles without Retry-After, until a push is delivered', async () => {
    let throttling = true;
    const r = rig({
      answer: (request) =>
        throttling
          ? { kind: 'retry', reason: 'QUOTA_EXCEEDED', httpStatus: 429, throttled: true }
          : { kind: 'delivered', messageId: `m-${request.event.id}`, httpStatus: 200 },
    });
    let offset = 0;
    /** The fleet block set by one batch of two events, sent once every earlier block has passed. */
    const blockOfNextWave = async (): Promise<number | undefined> => {
      vi.setSystemTime(Date.now() + 120_000);
      const blocks = r.source.blocks.length;
      const ids = [offset++, offset++];
      await r.processor.eachBatch(
        payloadOf(
          TOPIC,
          ids.map((i) => message(i, event(`e${i}`))),
        ).payload,
      );
      expect(r.source.blocks.length - blocks).toBeLessThanOrEqual(1);
      return r.source.blocks.length > blocks ? r.source.blocks.at(-1)?.retryAfterMs : undefined;
    };
    vi.useFakeTimers({ toFake: ['Date'] });
    try {
      // Two throttles of one wave count once: 1 s; then 2 s and 4 s for the waves sent after each block.
      expect(await blockOfNextWave()).toBe(1000);
      expect(await blockOfNextWave()).toBe(2000);
      expect(await blockOfNextWave()).toBe(4000);
      throttling = false;
      expect(await blockOfNextWave()).toBeUndefined();
      throttling = true;
      expect(await blockOfNextWave()).toBe(1000);
    } finally {
      vi.useRealTimers();
    }
  });

  it('never blocks the fleet longer than maxFleetBlockMs, nor delays a retry beyond maxRetryDelayMs', async () => {
    const r = rig({
      answer: () => ({
        kind: 'retry',
        reason: 'quota',
        httpStatus: 429,
        retryAfterMs: 1e12,
        throttled: true,
      }),
      options: { maxFleetBlockMs: 3000, maxRetryDelayMs: 5000 },
    });
    const before = Date.now();
    await r.processor.eachBatch(payloadOf(TOPIC, [message(0, event('e0'))]).payload);
    expect(r.source.blocks).toHaveLength(1);
    expect(r.source.blocks[0]?.retryAfterMs).toBeLessThanOrEqual(3000);
    expect(r.pool.blockedUntilMs).toBeLessThanOrEqual(Date.now() + 3000);
    const [record] = r.outcomes.records;
    expect(record?.kind === 'retry' && record.notBefore).toBeGreaterThanOrEqual(before + 5000);
    expect(record?.kind === 'retry' && record.notBefore).toBeLessThanOrEqual(Date.now() + 5000);
  });

  it("sends a paced device's due event first when the pool is short (its slot is spent once decided)", async () => {
    const hotToken = 'token-hot';
    const hot = (id: string) => ({ ...event(id), token: hotToken });
    let hotCalls = 0;
    const r = rig({
      answer: (request) =>
        request.event.token === hotToken && hotCalls++ === 0
          ? { kind: 'retry', reason: 'TooManyRequests', httpStatus: 429, throttled: true, scope: 'device' }
          : { kind: 'delivered', messageId: `m-${request.event.id}`, httpStatus: 200 },
    });
    await r.processor.eachBatch(payloadOf(TOPIC, [message(0, hot('h0'))]).payload);
    // The device is paced now; once its block has passed, a batch meets a pool with one token left.
    vi.useFakeTimers({ toFake: ['Date'] });
    vi.setSystemTime(Date.now() + 1000);
    r.source.tokens = 1;
    await r.processor.eachBatch(
      payloadOf(TOPIC, [message(1, event('o1')), message(2, event('o2')), message(3, hot('h3'))]).payload,
    );
    vi.useRealTimers();
    expect(r.providers.fcm.sent).toEqual(['h0', 'h3']);
  });

  it('backs off only the device a device-scoped 429 names: no fleet block, the others delivered, its later events deferred without an attempt', async () => {
    const hotToken = 'token-hot';
    const hot = (id: string) => ({ ...event(id), token: hotToken });
    const r = rig({
      answer: (request) =>
        request.event.token === hotToken
          ? { kind: 'retry', reason: 'TooManyRequests', httpStatus: 429, throttled: true, scope: 'device' }
          : { kind: 'delivered', messageId: `m-${request.event.id}`, httpStatus: 200 },
      options: { maxAttempts: 5 },
    });
    const first = payloadOf(TOPIC, [
      message(0, hot('h0')),
      ...[1, 2, 3, 4, 5].map((i) => message(i, event(`o${i}`))),
      message(6, hot('h6')),
      ...[7, 8, 9].map((i) => message(i, event(`o${i}`))),
    ]);
    await r.processor.eachBatch(first.payload);
    await r.processor.marksSettled();
    expect(r.source.blocks).toEqual([]);
    expect(r.pool.blockedUntilMs).toBe(0);
    // Every other device's event was sent and delivered, after the 429s as before them.
    for (const i of [1, 2, 3, 4, 5, 7, 8, 9]) expect(r.doneStore.marks.get(`o${i}`)).toBe('delivered');
    // The hot device's events went out before anything was known of it: both retried, throttled once,
    // no attempt spent.
    expect(r.outcomes.records).toMatchObject([
      { kind: 'retry', attempt: 1, throttles: 1 },
      { kind: 'retry', attempt: 1, throttles: 1 },
    ]);
    expect(first.calls.resolved.at(-1)).toBe('9');

    // Later events for the hot device wait for its slot: deferred to the retry topic, no attempt spent,
    // not sent; another device's event in the same batch goes out at once.
    const before = Date.now();
    const second = payloadOf(TOPIC, [
      message(10, hot('h10')),
      message(11, hot('h11')),
      message(12, event('o12')),
    ]);
    await r.processor.eachBatch(second.payload);
    expect(r.providers.fcm.sent.filter((id) => id.startsWith('h'))).toEqual(['h0', 'h6']);
    expect(r.doneStore.marks.get('o12')).toBe('delivered');
    const deferred = r.outcomes.records.slice(2);
    expect(deferred).toHaveLength(2);
    for (const record of deferred) {
      expect(record).toMatchObject({ kind: 'retry', attempt: 1, throttles: 0 });
      // Not before the device's block (one spacing: 250 ms, as APNs gave no Retry-After) has passed.
      expect(record.kind === 'retry' && record.notBefore).toBeGreaterThanOrEqual(before + 200);
    }
    // The device's queue comes back in the order it was deferred, the second after the first.
    const [a, b] = deferred.map((record) => (record.kind === 'retry' ? record.notBefore : 0));
    expect(b ?? 0).toBeGreaterThan(a ?? 0);
    expect(second.calls.resolved.at(-1)).toBe('12');
    expect(r.source.blocks).toEqual([]);
  });

  describe("a throttle documented as one device's (APNs TooManyRequests) that does not name the device", () => {
    const assumed = {
      kind: 'retry',
      reason: 'TooManyRequests',
      httpStatus: 429,
      throttled: true,
      scope: 'device',
      deviceScopeAssumed: true,
    } as const;
    const HOT_APNS_TOKEN = 'ab'.repeat(32);

    it("is the sender's when it answers three devices' first pushes: the fleet is blocked, the rest of the step not sent", async () => {
      const r = rig({ answer: () => assumed });
      r.source.tokens = 3;
      const { payload } = payloadOf(
        TOPIC,
        [0, 1, 2, 3].map((i) => message(i, event(`e${i}`, 'apns'))),
      );
      await r.processor.eachBatch(payload);
      expect(r.source.blocks).toHaveLength(1);
      expect(r.pool.blockedUntilMs).toBeGreaterThan(Date.now());
      expect(r.providers.apns.sent).toEqual(['e0', 'e1', 'e2']);
      // Refused for the sender, retried with a throttle counted, no attempt spent.
      expect(r.outcomes.records.slice(0, 3)).toMatchObject([
        { kind: 'retry', attempt: 1, throttles: 1 },
        { kind: 'retry', attempt: 1, throttles: 1 },
        { kind: 'retry', attempt: 1, throttles: 1 },
      ]);
    });

    it("stays the device's when it answers two devices' first pushes alone: two devices flooded from every process can each be refused once", async () => {
      const r = rig({ answer: () => assumed });
      r.source.tokens = 2;
      await r.processor.eachBatch(
        payloadOf(TOPIC, [message(0, event('e0', 'apns')), message(1, event('e1', 'apns'))]).payload,
      );
      expect(r.providers.apns.sent).toEqual(['e0', 'e1']);
      expect(r.source.blocks).toEqual([]);
      expect(r.pool.blockedUntilMs).toBe(0);
    });

    it("stays the device's when it answers one device's first push alone: another process may have spent that device's limit", async () => {
      const r = rig({
        answer: (request) =>
          request.event.token === HOT_APNS_TOKEN
            ? assumed
            : { kind: 'delivered', messageId: `m-${request.event.id}`, httpStatus: 200 },
      });
      const hot = (id: string) => ({ ...event(id, 'apns'), token: HOT_APNS_TOKEN });
      await r.processor.eachBatch(
        payloadOf(TOPIC, [
          message(0, hot('h0')),
          message(1, event('o1', 'apns')),
          message(2, event('o2', 'apns')),
        ]).payload,
      );
      expect(r.providers.apns.sent).toEqual(['h0', 'o1', 'o2']);
      expect(r.source.blocks).toEqual([]);
    });

    it("stays the device's when the devices are flooded (more than one event each in the step): other processes may have spent their limits", async () => {
      const hotTokens = ['ab'.repeat(32), 'cd'.repeat(32), 'ef'.repeat(32)];
      const r = rig({
        answer: (request) =>
          hotTokens.includes(request.event.token)
            ? assumed
            : { kind: 'delivered', messageId: `m-${request.event.id}`, httpStatus: 200 },
      });
      const hot = (id: string, device: number) => ({ ...event(id, 'apns'), token: hotTokens[device] });
      await r.processor.eachBatch(
        payloadOf(TOPIC, [
          message(0, hot('a0', 0)),
          message(1, hot('b0', 1)),
          message(2, hot('c0', 2)),
          message(3, event('o3', 'apns')),
          message(4, hot('a1', 0)),
          message(5, hot('b1', 1)),
          message(6, hot('c1', 2)),
        ]).payload,
      );
      expect(r.providers.apns.sent).toEqual(['a0', 'b0', 'c0', 'o3', 'a1', 'b1', 'c1']);
      expect(r.source.blocks).toEqual([]);
      expect(r.pool.blockedUntilMs).toBe(0);
    });

    it("stays the device's when the device had a push lately, or when the push is a retry copy's", async () => {
      const r = rig({
        answer: (request) =>
          request.event.id === 'h0'
            ? { kind: 'delivered', messageId: `m-${request.event.id}`, httpStatus: 200 }
            : assumed,
      });
      const hot = (id: string) => ({ ...event(id, 'apns'), token: HOT_APNS_TOKEN });
      const batch = (topic: string, offset: number, value: NotificationEventInput) =>
        r.processor.eachBatch(payloadOf(topic, [message(offset, value)]).payload);
      await batch(TOPIC, 0, hot('h0'));
      // Two first pushes refused (f1, f2) between two that prove nothing: a third would block the fleet.
      await batch(TOPIC, 1, event('f1', 'apns'));
      await batch(TOPIC, 2, hot('h1'));
      // A retry copy's push proves nothing: the device's earlier pushes may have been another process's.
      await batch(RETRY_TOPIC, 0, event('r0', 'apns'));
      await batch(TOPIC, 3, event('f2', 'apns'));
      expect(r.providers.apns.sent).toEqual(['h0', 'f1', 'h1', 'r0', 'f2']);
      expect(r.source.blocks).toEqual([]);
      expect(r.pool.blockedUntilMs).toBe(0);
    });
  });

  it("sends at most 8 events to one device per step, so a flood's first wave is 8 pushes, not a batch", async () => {
    const hotToken = 'token-flood';
    const r = rig({
      answer: (request) =>
        request.event.token === hotToken
          ? { kind: 'retry', reason: 'TooManyRequests', httpStatus: 429, throttled: true, scope: 'device' }
          : { kind: 'delivered', messageId: `m-${request.event.id}`, httpStatus: 200 },
    });
    const messages = Array.from({ length: 30 }, (_, i) =>
      message(i, i % 6 === 5 ? event(`o${i}`) : { ...event(`h${i}`), token: hotToken }),
    );
    const { payload, calls } = payloadOf(TOPIC, messages);
    await r.processor.eachBatch(payload);
    expect(r.providers.fcm.sent.filter((id) => id.startsWith('h'))).toHaveLength(8);
    expect(r.providers.fcm.sent.filter((id) => id.startsWith('o'))).toHaveLength(5);
    // The 8 refused are retried, throttled once; the other 17 wait for the device's slots. None spent
    // an attempt.
    const throttles = r.outcomes.records.map((record) => (record.kind === 'retry' ? record.throttles : -1));
    expect(throttles.filter((t) => t === 1)).toHaveLength(8);
    expect(throttles.filter((t) => t === 0)).toHaveLength(17);
    expect(r.outcomes.records.every((record) => record.kind === 'retry' && record.attempt === 1)).toBe(true);
    expect(calls.resolved.at(-1)).toBe('29');
    expect(r.source.blocks).toEqual([]);
  });

  it('retries a push refused for provider-token updates later, without blocking the fleet', async () => {
    const r = rig({
      answer: () => ({
        kind: 'retry',
        reason: 'TooManyProviderTokenUpdates',
        httpStatus: 429,
        throttled: true,
        scope: 'credentials',
      }),
    });
    await r.processor.eachBatch(payloadOf(TOPIC, [message(0, event('e0')), message(1, event('e1'))]).payload);
    expect(r.source.blocks).toEqual([]);
    expect(r.providers.fcm.sent).toEqual(['e0', 'e1']);
    expect(r.outcomes.records).toMatchObject([
      { kind: 'retry', attempt: 1, throttles: 1 },
      { kind: 'retry', attempt: 1, throttles: 1 },
    ]);
  });

  it('retries a throttled event without spending an attempt, backing off per throttle, and dead-letters it after maxThrottles', async () => {
    const r = rig({
      answer: () => ({ kind: 'retry', reason: 'QUOTA_EXCEEDED', httpStatus: 429, throttled: true }),
      options: { maxThrottles: 4 },
    });
    const retried = (throttles: number) => ({
      [HEADER.attempt]: '3',
      [HEADER.throttles]: String(throttles),
      [HEADER.notBefore]: '0',
    });
    const before = Date.now();
    const { payload } = payloadOf(RETRY_TOPIC, [
      message(0, event('e0'), { [HEADER.attempt]: '3' }),
      message(1, event('e1'), retried(2)),
      message(2, event('e2'), retried(3)),
    ]);
    await r.processor.eachBatch(payload);
    // On its last attempt, a throttle still spends none: tried again, after a back-off doubling per
    // throttle (1 s, then 4 s at the third, ± 25 %).
    const [first, third, fourth] = r.outcomes.records;
    expect(first).toMatchObject({ kind: 'retry', attempt: 3, throttles: 1 });
    expect(first?.kind === 'retry' && first.notBefore).toBeGreaterThanOrEqual(before + 750);
    expect(first?.kind === 'retry' && first.notBefore).toBeLessThanOrEqual(Date.now() + 1250);
    expect(third).toMatchObject({ kind: 'retry', attempt: 3, throttles: 3 });
    expect(third?.kind === 'retry' && third.notBefore).toBeGreaterThanOrEqual(before + 3000);
    expect(fourth).toMatchObject({
      kind: 'dead-letter',
      reasonKind: 'max-throttles',
      reason: 'gave up after 4 throttles; last: QUOTA_EXCEEDED',
    });
    expect(r.events).toContain('dead-lettered max-throttles e2');
  });

  it("waits at least the provider's documented first back-off for a throttle without Retry-After", async () => {
    const r = rig({
      answer: () => ({
        kind: 'retry',
        reason: 'QUOTA_EXCEEDED',
        httpStatus: 429,
        throttled: true,
        backoffBaseMs: 60_000,
      }),
    });
    const before = Date.now();
    await r.processor.eachBatch(payloadOf(TOPIC, [message(0, event('e0'))]).payload);
    const [record] = r.outcomes.records;
    expect(record?.kind === 'retry' && record.notBefore).toBeGreaterThanOrEqual(before + 45_000);
  });

  it('after a failed step pauses for a back-off and resolves nothing past the first unfinished offset', async () => {
    // One send per step, so that the batch takes several steps; the second write of outcomes fails.
    const r = rig({ failingWrites: [2], options: { maxPerStep: 1 } });
    const retryHeaders = (notBefore: number) => ({
      [HEADER.attempt]: '2',
      [HEADER.notBefore]: String(notBefore),
    });
    const { payload, calls } = payloadOf(RETRY_TOPIC, [
      message(0, event('e0'), retryHeaders(Date.now() + 60_000)), // not due yet: the gap
      message(1, event('e1'), retryHeaders(0)),
      message(2, '{not json'),
      message(3, event('e3'), retryHeaders(0)),
    ]);
    await r.processor.eachBatch(payload);

    // Step 1 finished offsets 1 and 2, step 2 sent e3 and failed to record it.
    expect(r.providers.fcm.sent).toEqual(['e1', 'e3']);
    expect(r.events).toContain('step failed: outcome topic not writable');
    expect(calls.resolved).toEqual([]);
    expect(r.pauses).toEqual([`pause ${RETRY_TOPIC}:0`]);
    // The first back-off is half a second.
    await until(() => r.pauses.length === 2);
    expect(r.pauses[1]).toBe(`resume ${RETRY_TOPIC}:0`);
  });

  it("dead-letters an event whose TTL ran out before it could be pushed, and gives the provider what is left of the others'", async () => {
    const requests: PushRequest[] = [];
    const r = rig({
      answer: (request) => {
        requests.push(request);
        return { kind: 'delivered', messageId: `m-${request.event.id}`, httpStatus: 200 };
      },
    });
    const publishedAt = Date.now() - 120_000;
    const published = (offset: number, id: string, ttlSeconds?: number) => ({
      ...message(offset, { ...event(id), ...(ttlSeconds === undefined ? {} : { ttlSeconds }) }),
      timestamp: String(publishedAt),
    });
    await r.processor.eachBatch(
      payloadOf(TOPIC, [published(0, 'gone', 60), published(1, 'kept', 600), published(2, 'plain')]).payload,
    );
    // A retried copy, written a moment ago, counts from when its original was published.
    await r.processor.eachBatch(
      payloadOf(RETRY_TOPIC, [
        message(
          0,
          { ...event('retried-gone'), ttlSeconds: 60 },
          {
            [HEADER.attempt]: '2',
            [HEADER.originTimestamp]: String(publishedAt),
          },
        ),
      ]).payload,
    );
    expect(r.providers.fcm.sent).toEqual(['kept', 'plain']);
    expect(requests.find((request) => request.event.id === 'kept')?.expiresAtMs).toBe(publishedAt + 600_000);
    expect(requests.find((request) => request.event.id === 'plain')).not.toHaveProperty('expiresAtMs');
    expect(r.outcomes.records).toMatchObject([
      {
        kind: 'dead-letter',
        reasonKind: 'expired',
        reason: `its ttlSeconds (60) ran out at ${new Date(publishedAt + 60_000).toISOString()}, before it could be pushed`,
      },
      { kind: 'dead-letter', reasonKind: 'expired' },
    ]);
    expect(r.events).toContain('dead-lettered expired gone');
    expect(r.events).toContain('dead-lettered expired retried-gone');
  });

  it('never gives the provider more TTL than the event asked for, whatever its publish time says', async () => {
    const requests: PushRequest[] = [];
    const r = rig({
      answer: (request) => {
        requests.push(request);
        return { kind: 'delivered', messageId: `m-${request.event.id}`, httpStatus: 200 };
      },
    });
    // A producer's clock an hour ahead (or a timestamp it set itself).
    const before = Date.now();
    await r.processor.eachBatch(
      payloadOf(TOPIC, [
        {
          ...message(0, { ...event('ahead'), ttlSeconds: 2_419_200 }),
          timestamp: String(before + 3_600_000),
        },
      ]).payload,
    );
    const expiresAt = requests[0]?.expiresAtMs as number;
    expect(expiresAt).toBeGreaterThanOrEqual(before + 2_419_200_000);
    expect(expiresAt).toBeLessThanOrEqual(Date.now() + 2_419_200_000);
  });

  it('dead-letters an event that failed its last attempt', async () => {
    const r = rig({
      answer: () => ({ kind: 'retry', reason: 'unavailable', httpStatus: 503, throttled: false }),
    });
    const { payload, calls } = payloadOf(RETRY_TOPIC, [message(0, event('e0'), { [HEADER.attempt]: '3' })]);
    await r.processor.eachBatch(payload);
    await r.processor.marksSettled();

    expect(r.outcomes.records).toMatchObject([
      {
        kind: 'dead-letter',
        reasonKind: 'max-attempts',
        reason: 'gave up after 3 attempts; last: unavailable',
      },
    ]);
    expect(r.doneStore.marks.get('e0')).toBe('dead-lettered');
    expect(r.events).toContain('dead-lettered max-attempts e0');
    expect(calls.resolved).toEqual(['0']);
  });

  describe('tenant fairness', () => {
    const tenantEvent = (tenant: string, id: string) => ({ ...event(id), tenant });

    it("parks a message without a key keyed by its device, and keeps a message's own key", async () => {
      const r = rig({ tokens: 10, shares: new TenantShares() });
      const messages = [
        ...Array.from({ length: 20 }, (_, i) => message(i, tenantEvent('A', `a${i}`))),
        { ...message(20, tenantEvent('A', 'a20')), key: Buffer.from('producer-key') },
        message(21, tenantEvent('B', 'b0')),
      ];
      await r.processor.eachBatch(payloadOf(TOPIC, messages).payload);

      const parked = r.outcomes.records.flatMap((record) => (record.kind === 'parked' ? [record] : []));
      expect(parked.map((record) => record.key)).toEqual([
        ...Array.from({ length: 10 }, (_, i) => messageKey(tenantEvent('A', `a${10 + i}`))),
        Buffer.from('producer-key'),
      ]);
    });

    it("parks the events of a tenant over its share that got no token, so the other tenant's events behind them go on", async () => {
      const r = rig({ tokens: 10, shares: new TenantShares() });
      const messages = [
        ...Array.from({ length: 50 }, (_, i) => message(i, tenantEvent('A', `a${i}`))),
        message(50, tenantEvent('B', 'b0')),
        message(51, tenantEvent('B', 'b1')),
      ];
      const { payload, calls } = payloadOf(TOPIC, messages);
      await r.processor.eachBatch(payload);

      expect(r.providers.fcm.sent).toEqual(Array.from({ length: 10 }, (_, i) => `a${i}`));
      const parked = r.outcomes.records.filter((record) => record.kind === 'parked');
      expect(parked.map((record) => record.message.offset)).toEqual(
        Array.from({ length: 40 }, (_, i) => String(10 + i)),
      );
      // B is under its share: it waits for tokens (the partition paused), not parked.
      expect(r.pauses).toEqual([`pause ${TOPIC}:0`]);
      expect(calls.resolved).toEqual(['49']);

      r.source.tokens = 10;
      await until(() => r.pauses.length === 2);
      const again = payloadOf(TOPIC, messages.slice(50));
      await r.processor.eachBatch(again.payload);
      expect(r.providers.fcm.sent.slice(10)).toEqual(['b0', 'b1']);
      expect(again.calls.resolved).toEqual(['51']);
    });

    it('from then on parks the tenant at once, without taking tokens for it', async () => {
      const shares = new TenantShares();
      const r = rig({ tokens: 5, shares });
      const first = payloadOf(
        TOPIC,
        Array.from({ length: 30 }, (_, i) => message(i, tenantEvent('A', `a${i}`))),
      );
      await r.processor.eachBatch(first.payload);
      expect(r.providers.fcm.sent).toHaveLength(5);
      expect(r.outcomes.records.filter((record) => record.kind === 'parked')).toHaveLength(25);

      // Tokens there again (the pool's dry spell over): the tenant is parked all the same.
      r.source.tokens = 1000;
      await new Promise((resolve) => setTimeout(resolve, 50));
      const second = payloadOf(
        TOPIC,
        Array.from({ length: 30 }, (_, i) => message(30 + i, tenantEvent('A', `a${30 + i}`))),
      );
      await r.processor.eachBatch(second.payload);
      expect(r.providers.fcm.sent).toHaveLength(5);
      expect(second.calls.resolved).toEqual(['59']);
      expect(r.outcomes.records.filter((record) => record.kind === 'parked')).toHaveLength(55);
    });

    it('never parks events without a tenant, nor from the retry topic', async () => {
      const r = rig({ tokens: 3, shares: new TenantShares() });
      const { payload } = payloadOf(
        TOPIC,
        Array.from({ length: 20 }, (_, i) => message(i, event(`e${i}`))),
      );
      await r.processor.eachBatch(payload);
      expect(r.outcomes.records).toEqual([]);
      expect(r.pauses).toEqual([`pause ${TOPIC}:0`]);

      // A tenant over its share: its events on the retry topic still wait for tokens there.
      const shares = new TenantShares();
      const t = rig({ tokens: 3, shares });
      await t.processor.eachBatch(
        payloadOf(
          TOPIC,
          Array.from({ length: 20 }, (_, i) => message(i, tenantEvent('A', `a${i}`))),
        ).payload,
      );
      expect(shares.isOverShare('fcm', 'A')).toBe(true);
      const parkedBefore = t.outcomes.records.length;
      const retries = payloadOf(
        RETRY_TOPIC,
        Array.from({ length: 5 }, (_, i) =>
          message(i, tenantEvent('A', `r${i}`), { [HEADER.attempt]: '2', [HEADER.notBefore]: '0' }),
        ),
      );
      await t.processor.eachBatch(retries.payload);
      expect(t.outcomes.records.length).toBe(parkedBefore);
      expect(t.pauses).toContain(`pause ${RETRY_TOPIC}:0`);
    });

    it('reads parked events back with low-priority tokens, splitting a short grant among the tenants', async () => {
      const r = rig({ tokens: 4, shares: new TenantShares() });
      const { payload } = payloadOf(DEFERRED_TOPIC, [
        ...Array.from({ length: 6 }, (_, i) => message(i, tenantEvent('A', `a${i}`))),
        message(6, tenantEvent('B', 'b0')),
        message(7, tenantEvent('B', 'b1')),
      ]);
      await r.processor.eachBatch(payload);
      expect(r.providers.fcm.sent).toEqual(['a0', 'b0', 'a1', 'b1']);
      expect(new Set(r.priorities)).toEqual(new Set(['low']));
      // Nothing read back is parked again.
      expect(r.outcomes.records).toEqual([]);
    });

    it('writes what it parks with its origin, to be read back from the deferred topic', async () => {
      const r = rig({ tokens: 2, shares: new TenantShares() });
      const { payload } = payloadOf(
        TOPIC,
        Array.from({ length: 12 }, (_, i) => message(i, tenantEvent('A', `a${i}`))),
      );
      await r.processor.eachBatch(payload);
      const parked = r.outcomes.records.find((record) => record.kind === 'parked');
      expect(parked).toMatchObject({ kind: 'parked', origin: { topic: TOPIC, partition: 0, offset: '2' } });
    });
  });
});
