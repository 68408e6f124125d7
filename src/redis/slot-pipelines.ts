import type { RedisClient } from './client.ts';
import { queueScript, type ScriptArgument, type ScriptName, type ScriptPipeline } from './scripts.ts';

/** One script call to send pipelined: the script, its `numkeys, keys, argv`, and one of its keys. */
export interface PipelinedScriptCall {
  name: ScriptName;
  args: readonly ScriptArgument[];
  /** A key of the call: every key of one call shares its hash tag, so this one says the call's slot. */
  key: string;
}

/** A pipelined call's error, or its reply. */
export type PipelinedReply = [Error | null, unknown];

/**
 * The part of a key Redis Cluster hashes: what is between the first `{` and the first `}` after it
 * when that is not empty, else the whole key.
 */
export function hashTagOf(key: string): string {
  const open = key.indexOf('{');
  if (open === -1) return key;
  const close = key.indexOf('}', open + 1);
  return close > open + 1 ? key.slice(open + 1, close) : key;
}

/**
 * Runs script calls pipelined and answers their replies in the order of the calls. On one server they
 * go in one pipeline: one write, one round trip. A Cluster client refuses a pipeline whose keys live on
 * different nodes, so there the calls are grouped by hash tag (a group is one slot) and the groups'
 * pipelines run at once: one round trip per slot touched, in parallel. A pipeline that fails as a
 * whole makes the whole call reject.
 */
export async function execScriptCalls(
  redis: RedisClient,
  calls: readonly PipelinedScriptCall[],
): Promise<PipelinedReply[]> {
  if (!redis.isCluster) return execOne(redis, calls);
  const groups = new Map<string, number[]>();
  calls.forEach((call, i) => {
    const tag = hashTagOf(call.key);
    const group = groups.get(tag);
    if (group) group.push(i);
    else groups.set(tag, [i]);
  });
  if (groups.size === 1) return execOne(redis, calls);
  const replies = new Array<PipelinedReply>(calls.length);
  await Promise.all(
    [...groups.values()].map(async (indexes) => {
      const groupReplies = await execOne(
        redis,
        indexes.map((i) => calls[i] as PipelinedScriptCall),
      );
      indexes.forEach((callIndex, j) => {
        replies[callIndex] = groupReplies[j] ?? [new Error('no reply'), null];
      });
    }),
  );
  return replies;
}

async function execOne(redis: RedisClient, calls: readonly PipelinedScriptCall[]): Promise<PipelinedReply[]> {
  const pipeline = redis.pipeline() as unknown as ScriptPipeline;
  for (const call of calls) queueScript(pipeline, call.name, call.args);
  const replies = await pipeline.exec();
  if (replies === null) throw new Error('the pipeline was discarded');
  return replies;
}
