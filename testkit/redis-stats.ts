import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Cluster, Redis } from 'ioredis';
import type { RedisClient } from '../src/redis/client.ts';

/**
 * Commands that Aqueduct's Lua scripts run inside Redis (read from the scripts themselves, so that a
 * script calling a new command does not count as more round trips). `INFO commandstats` lists them too,
 * but they are not round trips; everything else the clients sent is. `info` and `config` are the
 * measuring side's own calls (and ioredis' ready check) and are left out as well, and so are a
 * connection's handshake (`hello`, `client setname`): once per connection, not per push, and a Cluster
 * client opens one per master; and `exists`, the readiness poll of a Cluster's hash tags: every 2 s,
 * however many pushes.
 */
const NOT_ROUND_TRIPS = new Set([
  ...commandsCalledByScripts(),
  'info',
  'config',
  'hello',
  'client',
  'exists',
]);

/** Every command named in a `redis.call` or `redis.pcall` of `lua/` (includes too), lower case. */
function commandsCalledByScripts(): Set<string> {
  const dir = fileURLToPath(new URL('../lua/', import.meta.url));
  const commands = new Set<string>();
  for (const file of readdirSync(dir, { recursive: true, encoding: 'utf8' })) {
    if (!file.endsWith('.lua')) continue;
    const source = readFileSync(join(dir, file), 'utf8');
    for (const match of source.matchAll(/redis\.p?call\(\s*['"]([A-Za-z]+)['"]/g))
      commands.add((match[1] ?? '').toLowerCase());
  }
  return commands;
}

/** Calls per command since the last `CONFIG RESETSTAT`, from `INFO commandstats`. */
export async function commandStats(redis: Redis): Promise<Map<string, number>> {
  const text = await redis.info('commandstats');
  const stats = new Map<string, number>();
  for (const match of text.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
    stats.set(match[1] ?? '', Number(match[2]));
  }
  return stats;
}

/** True for a command a client sends itself (a round trip), false for one run inside a script. */
export function isRoundTrip(command: string): boolean {
  return !NOT_ROUND_TRIPS.has(command.split('|')[0] ?? command);
}

/** Round trips between two {@link commandStats} readings of the same server. */
export function roundTripsBetween(before: Map<string, number>, after: Map<string, number>): number {
  let total = 0;
  for (const [command, calls] of after) if (isRoundTrip(command)) total += calls - (before.get(command) ?? 0);
  return total;
}

/** The servers behind a client: itself, or every master of a Cluster (where the commands run). */
function serversOf(redis: RedisClient): Redis[] {
  return redis.isCluster ? (redis as Cluster).nodes('master') : [redis as Redis];
}

/** `CONFIG RESETSTAT` on the client's server, or on every master of a Cluster. */
export async function resetStats(redis: RedisClient): Promise<void> {
  await Promise.all(serversOf(redis).map((server) => server.config('RESETSTAT')));
}

/**
 * Top-level calls (round trips) since the last `CONFIG RESETSTAT` (on a Cluster, summed over its
 * masters), with the per-command breakdown.
 */
export async function roundTrips(
  redis: RedisClient,
): Promise<{ total: number; byCommand: Record<string, number> }> {
  const byCommand: Record<string, number> = {};
  let total = 0;
  for (const server of serversOf(redis)) {
    for (const [command, calls] of await commandStats(server)) {
      if (!isRoundTrip(command)) continue;
      byCommand[command] = (byCommand[command] ?? 0) + calls;
      total += calls;
    }
  }
  return { total, byCommand };
}
