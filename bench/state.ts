/**
 * `npm run bench -- state`: what the dedupe memory costs in Redis, the current layout and the one it
 * replaced side by side in one run, on a private redis-server (so that `used_memory` is this run's).
 *
 * Events go through the dedupe layer as the pipeline drives it: per partition, fetched batches of
 * BATCH events; each batch is looked up in one call (the first batch of a partition also reads its
 * finished offsets), marked finished in one flush, and committed, which trims the partition's finished
 * offsets. Ids are UUIDs (36 characters) under a tenant. Three variants, each on an emptied server:
 *
 * - window on: AQUEDUCT_IDEMPOTENCY_WINDOW_SECONDS at its default (a day);
 * - window off: only the finished offsets, which the commits trim (bounded: work in flight);
 * - legacy: one key `<prefix>:{done}:<id>` per event with a 7-day expiry (bench/legacy-lua), checked
 *   and marked per batch as before.
 *
 * Writes bench/results/state.json; every run is kept in `runs`, and the top-level fields are the last
 * run's. BENCH_STATE_EVENTS (default 1 000 000) sets the events per variant.
 */
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { DoneStore, type PartitionRef } from '../src/pipeline/done-store.ts';
import { spliceIncludes } from '../src/redis/scripts.ts';
import { LocalRedis } from '../src/services/index.ts';
import { RESULTS_DIR } from './burst.ts';
import { machine } from './machine.ts';

const EVENTS = Number(process.env.BENCH_STATE_EVENTS ?? 1_000_000);
const PARTITIONS = 12;
/** Events per fetched batch: about what one fetch of a partition holds at the default fetch size. */
const BATCH = 500;
const WINDOW_SECONDS = 86_400;
const LEGACY_TTL_SECONDS = 7 * 86_400;
const TENANT = 'acme';

/** What one variant cost. */
interface VariantFigures {
  events: number;
  usedMemoryDeltaBytes: number;
  bytesPerEvent: number;
  scriptCalls: number;
  redisCallsPerPush: number;
  /** Redis server CPU (user + system) for the whole variant, in seconds. */
  redisCpuSeconds: number;
  seconds: number;
}

interface StateRun {
  measuredAt: string;
  events: number;
  bytesPerEventWindowOn: number;
  memoryDeltaWindowOffBytes: number;
  redisCallsPerPush: number;
  windowOn: VariantFigures & { finishedOffsetsLeft: number };
  windowOff: VariantFigures & { finishedOffsetsLeft: number };
  legacy: VariantFigures;
  targets: Record<string, { target: string; value: number; met: boolean }>;
}

export interface StateResult extends Omit<StateRun, 'measuredAt'> {
  scenario: 'state';
  command: string;
  setup: Record<string, unknown>;
  runs: StateRun[];
}

/** Counters of the private server: memory, script calls and CPU. */
async function serverFigures(redis: Redis): Promise<{ usedMemory: number; calls: number; cpu: number }> {
  const memory = await redis.info('memory');
  const stats = await redis.info('commandstats');
  const cpu = await redis.info('cpu');
  const field = (text: string, name: string) =>
    Number(new RegExp(`^${name}:([\\d.]+)`, 'm').exec(text)?.[1] ?? 0);
  let calls = 0;
  for (const match of stats.matchAll(/^cmdstat_(evalsha|eval|evalsha_ro|eval_ro):calls=(\d+)/gm))
    calls += Number(match[2]);
  return {
    usedMemory: field(memory, 'used_memory'),
    calls,
    cpu: field(cpu, 'used_cpu_user') + field(cpu, 'used_cpu_sys'),
  };
}

/** A batch's idempotency keys and the partition it came from. */
function* batches(events: number): Generator<{ ref: PartitionRef; first: number; keys: string[] }> {
  const next = new Array<number>(PARTITIONS).fill(0);
  for (let sent = 0, p = 0; sent < events; p = (p + 1) % PARTITIONS) {
    const size = Math.min(BATCH, events - sent);
    const keys = Array.from({ length: size }, () => `${TENANT} ${randomUUID()}`);
    yield { ref: { topic: 'notifications', partition: p }, first: next[p] as number, keys };
    next[p] = (next[p] as number) + size;
    sent += size;
  }
}

function progress(variant: string, done: number): void {
  if (done % 100_000 < BATCH) console.error(`  ${variant}: ${done} / ${EVENTS} events`);
}

/** The current layout, driven as the pipeline drives it. */
async function runStore(
  redis: Redis,
  windowSeconds: number,
  variant: string,
): Promise<VariantFigures & { finishedOffsetsLeft: number }> {
  const store = new DoneStore(redis, {
    prefix: 'bench',
    groupId: 'bench',
    windowSeconds,
    markCoalesceMs: 0,
  });
  const read = new Set<number>();
  const ends = new Map<number, number>();
  const started = performance.now();
  let done = 0;
  for (const { ref, first, keys } of batches(EVENTS)) {
    const reading = await store.lookup(keys, read.has(ref.partition) ? [] : [ref]);
    read.add(ref.partition);
    if (reading.done.size > 0) throw new Error(`${reading.done.size} fresh ids were found in the window`);
    // The commit of the partition's previous batch lands while this one is handled (kafkajs commits
    // once a second), so its trim goes out with this batch's marks.
    store.committed(ref, String(first));
    await store.mark(
      keys.map((key, i) => ({
        ...ref,
        offset: String(first + i),
        final: { key, outcome: 'delivered' as const },
      })),
    );
    ends.set(ref.partition, first + keys.length);
    done += keys.length;
    progress(variant, done);
  }
  for (const [partition, end] of ends) store.committed({ topic: 'notifications', partition }, String(end));
  await store.settled();
  let finishedOffsetsLeft = 0;
  for (let p = 0; p < PARTITIONS; p++)
    finishedOffsetsLeft += await redis.zcard(store.partitionKey({ topic: 'notifications', partition: p }));
  return { ...(await figuresSince(redis, started)), finishedOffsetsLeft };
}

/** The layout before: a key per event, checked and marked per batch by the legacy scripts. */
async function runLegacy(redis: Redis): Promise<VariantFigures> {
  const includes = new URL('../lua/includes/', import.meta.url);
  const lua = async (name: string) =>
    spliceIncludes(await readFile(new URL(`./legacy-lua/${name}`, import.meta.url), 'utf8'), (include) =>
      readFileSync(new URL(`${include}.lua`, includes), 'utf8'),
    );
  redis.defineCommand('legacyCheck', { lua: await lua('done-check.lua') });
  redis.defineCommand('legacyMark', { lua: await lua('done-mark.lua') });
  const call = redis as unknown as Record<
    'legacyCheck' | 'legacyMark',
    (...args: Array<string | number>) => Promise<unknown>
  >;
  const started = performance.now();
  let done = 0;
  for (const { keys } of batches(EVENTS)) {
    const redisKeys = keys.map((key) => `bench:{done}:${key}`);
    await call.legacyCheck(redisKeys.length, ...redisKeys);
    await call.legacyMark(
      redisKeys.length,
      ...redisKeys,
      LEGACY_TTL_SECONDS,
      ...redisKeys.map(() => 'delivered'),
    );
    done += keys.length;
    progress('legacy', done);
  }
  return figuresSince(redis, started);
}

let baseline = { usedMemory: 0, calls: 0, cpu: 0 };

async function figuresSince(redis: Redis, started: number): Promise<VariantFigures> {
  const now = await serverFigures(redis);
  const delta = now.usedMemory - baseline.usedMemory;
  const calls = now.calls - baseline.calls;
  return {
    events: EVENTS,
    usedMemoryDeltaBytes: delta,
    bytesPerEvent: round(delta / EVENTS, 2),
    scriptCalls: calls,
    redisCallsPerPush: round(calls / EVENTS, 5),
    redisCpuSeconds: round(now.cpu - baseline.cpu, 2),
    seconds: round((performance.now() - started) / 1000, 1),
  };
}

async function emptied(redis: Redis): Promise<void> {
  await redis.flushall(); // the bench's own private server
  await redis.memory('PURGE');
  baseline = await serverFigures(redis);
}

function round(value: number, digits: number): number {
  const f = 10 ** digits;
  return Math.round(value * f) / f;
}

export async function main(): Promise<void> {
  const server = await LocalRedis.start();
  const redis = new Redis(server.url);
  try {
    console.error(`state: ${EVENTS} events per variant, ${PARTITIONS} partitions, batches of ${BATCH}`);
    await emptied(redis);
    const windowOn = await runStore(redis, WINDOW_SECONDS, 'window on');
    await emptied(redis);
    const windowOff = await runStore(redis, 0, 'window off');
    await emptied(redis);
    const legacy = await runLegacy(redis);
    const run: StateRun = {
      measuredAt: new Date().toISOString(),
      events: EVENTS,
      bytesPerEventWindowOn: windowOn.bytesPerEvent,
      memoryDeltaWindowOffBytes: windowOff.usedMemoryDeltaBytes,
      redisCallsPerPush: windowOn.redisCallsPerPush,
      windowOn,
      windowOff,
      legacy,
      targets: {
        bytesPerEventWindowOn: {
          target: '<= 40',
          value: windowOn.bytesPerEvent,
          met: windowOn.bytesPerEvent <= 40,
        },
        memoryDeltaWindowOffBytes: {
          target: '<= 1048576',
          value: windowOff.usedMemoryDeltaBytes,
          met: windowOff.usedMemoryDeltaBytes <= 1_048_576,
        },
        events: { target: '>= 1000000', value: EVENTS, met: EVENTS >= 1_000_000 },
      },
    };
    const file = join(RESULTS_DIR, 'state.json');
    const before = await readFile(file, 'utf8')
      .then((text) => JSON.parse(text) as StateResult)
      .catch(() => undefined);
    const { measuredAt: _, ...latest } = run;
    const result: StateResult = {
      scenario: 'state',
      command: 'npm run bench -- state',
      setup: {
        machine: machine(),
        partitions: PARTITIONS,
        batch: BATCH,
        windowSeconds: WINDOW_SECONDS,
        shards: 8192,
        legacyTtlSeconds: LEGACY_TTL_SECONDS,
        ids: `"${TENANT} " + a UUID (36 characters)`,
      },
      ...latest,
      runs: [...(before?.runs ?? []), run],
    };
    await writeFile(file, `${JSON.stringify(result, null, 2)}\n`);
    console.log(stateTable(result));
  } finally {
    redis.disconnect();
    await server.stop();
  }
}

/** Every run's figures (rendered into docs/benchmarks.md by bench/readme.ts). */
export function stateTable(result: StateResult): string {
  return [
    '| run | events | window on: bytes/event | window off: used_memory delta (finished offsets left) | legacy: bytes/event | script calls per push: now / legacy | Redis CPU s: window on / off / legacy |',
    '| --- | ---: | ---: | ---: | ---: | --- | --- |',
    ...result.runs.map(
      (run, i) =>
        `| ${i + 1} (${run.measuredAt.slice(0, 16)}) | ${run.events} | ${run.bytesPerEventWindowOn} | ${run.memoryDeltaWindowOffBytes} B (${run.windowOff.finishedOffsetsLeft}) | ${run.legacy.bytesPerEvent} | ${run.redisCallsPerPush} / ${run.legacy.redisCallsPerPush} | ${run.windowOn.redisCpuSeconds} / ${run.windowOff.redisCpuSeconds} / ${run.legacy.redisCpuSeconds} |`,
    ),
  ].join('\n');
}
