import type { Cluster, Redis } from 'ioredis';
import type { RedisClient } from '../redis/client.ts';
import { replyFields } from '../redis/scripts.ts';
import { execScriptCalls } from '../redis/slot-pipelines.ts';
import { bucketNameFromKey, bucketScan, bucketTag } from './keys.ts';
import type { BucketState } from './types.ts';

/** Most keys in one inspect.lua call. */
const KEYS_PER_CALL = 500;

/** inspect.lua's fields per key: present, tokensNow, rate, capacity, blockedUntilMs, pttlMs, held, rateFactor. */
const FIELDS_PER_KEY = 8;

/**
 * Every bucket under `keyPrefix` whose name matches `pattern` (a Redis glob on names), as it is at the
 * Redis server's current time, sorted by name. Uses SCAN, never KEYS (on a Cluster, on every master);
 * then one inspect.lua call per hash tag (one slot) and at most {@link KEYS_PER_CALL} keys, all in one
 * pipeline (on a Cluster, one per hash tag). `bounded` puts the caller's timeout on each round trip.
 */
export async function inspectBuckets(
  redis: RedisClient,
  keyPrefix: string,
  pattern: string,
  bounded: <T>(reply: Promise<T>) => Promise<T>,
): Promise<BucketState[]> {
  const { match, matches } = bucketScan(keyPrefix, pattern);
  const byTag = new Map<string, Map<string, string>>();
  // A Cluster's keys are spread over its masters, and SCAN walks one server's keys only.
  const servers = redis.isCluster ? (redis as Cluster).nodes('master') : [redis as Redis];
  if (redis.isCluster) await assertEveryMasterScanned(redis as Cluster, servers, bounded);
  for (const server of servers) {
    let cursor = '0';
    do {
      const [next, keys] = await bounded(server.scan(cursor, 'MATCH', match, 'COUNT', 1000));
      cursor = next;
      for (const key of keys) {
        const name = bucketNameFromKey(keyPrefix, key);
        if (name === undefined || !matches(name)) continue;
        const tag = bucketTag(name);
        let group = byTag.get(tag);
        if (!group) {
          group = new Map();
          byTag.set(tag, group);
        }
        group.set(key, name); // SCAN may return a key twice
      }
    } while (cursor !== '0');
  }

  const batches: Array<Array<[string, string]>> = [];
  for (const group of byTag.values()) {
    const entries = [...group.entries()];
    for (let i = 0; i < entries.length; i += KEYS_PER_CALL) batches.push(entries.slice(i, i + KEYS_PER_CALL));
  }
  if (batches.length === 0) return [];
  const replies = await bounded(
    execScriptCalls(
      redis,
      batches.map((batch) => ({
        name: 'inspect' as const,
        args: [batch.length, ...batch.map(([key]) => key)],
        key: batch[0]?.[0] as string,
      })),
    ),
  );
  const states: BucketState[] = [];
  batches.forEach((batch, b) => {
    const [error, reply] = replies[b] ?? [new Error('no reply'), null];
    if (error) throw error;
    states.push(...bucketStates(batch, replyFields(reply)));
  });
  return states.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

/** The buckets of one inspect.lua reply (those still present), in the order of `batch`. */
function bucketStates(batch: ReadonlyArray<[string, string]>, fields: readonly string[]): BucketState[] {
  const serverTimeMs = Number(fields[0]) / 1000;
  const states: BucketState[] = [];
  batch.forEach(([key, name], i) => {
    const field = (f: number) => fields[1 + i * FIELDS_PER_KEY + f] ?? '';
    if (field(0) !== '1') return; // expired since SCAN found it
    const pttl = Number(field(5));
    states.push({
      name,
      key,
      tokens: numberOrNull(field(1)),
      rate: numberOrNull(field(2)),
      capacity: numberOrNull(field(3)),
      blockedUntilMs: numberOrNull(field(4)),
      ttlMs: pttl >= 0 ? pttl : null,
      held: Number(field(6)),
      rateFactor: Number(field(7)),
      serverTimeMs,
    });
  });
  return states;
}

function numberOrNull(text: string): number | null {
  return text === '' ? null : Number(text);
}

/**
 * Throws unless `servers` are every master that serves a slot and the slots are all served: the client
 * drops a master it lost from its list, and a listing without that master's buckets would look whole.
 */
async function assertEveryMasterScanned(
  cluster: Cluster,
  servers: readonly Redis[],
  bounded: <T>(reply: Promise<T>) => Promise<T>,
): Promise<void> {
  const ranges = (await bounded(cluster.cluster('SLOTS'))) as unknown as Array<
    [number, number, [string, number, ...unknown[]]?]
  >;
  const scanned = new Set(servers.map((server) => `${server.options.host}:${server.options.port}`));
  const missing = new Map<string, string[]>();
  let served = 0;
  for (const [from, to, master] of ranges) {
    served += to - from + 1;
    const address = master ? `${master[0]}:${master[1]}` : 'no master';
    if (scanned.has(address)) continue;
    missing.set(address, [...(missing.get(address) ?? []), `${from}-${to}`]);
  }
  if (served < 16_384)
    missing.set('no master', [...(missing.get('no master') ?? []), `${16_384 - served} slots`]);
  if (missing.size > 0) {
    const list = [...missing].map(([address, slots]) => `${address} (slots ${slots.join(', ')})`).join('; ');
    throw new Error(`not every master of the cluster can be read, so some buckets would be missing: ${list}`);
  }
}
