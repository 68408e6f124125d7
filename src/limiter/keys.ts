import { LimiterArgumentError } from './errors.ts';

/**
 * Key layout. A bucket name is `<tag>` or `<tag>:<rest>`: `fcm`, `fcm:tenant:acme`. Its key is
 *
 *     <keyPrefix>:{<tag>}:bucket            e.g. aqueduct:{fcm}:bucket
 *     <keyPrefix>:{<tag>}:bucket:<rest>     e.g. aqueduct:{fcm}:bucket:tenant:acme
 *
 * The braces are a Redis Cluster hash tag: every bucket whose name starts with the same tag lives in the
 * same slot, so one script call may touch the provider's bucket and a tenant's bucket atomically. A call
 * whose buckets have different tags is rejected (it could not run on a cluster). The fixed `bucket`
 * segment keeps `fcm` and `fcm:x` from colliding and lets `aqueduct inspect` find buckets with SCAN.
 */
const NAME = /^[^:{}\s]+(?::[^{}\s]+)?$/;

/** The hash tag of a bucket name: the part before the first ':'. */
export function bucketTag(name: string): string {
  const colon = name.indexOf(':');
  return colon === -1 ? name : name.slice(0, colon);
}

/** Throws unless `name` is a valid bucket name (see the key layout above). */
export function assertBucketName(name: unknown): asserts name is string {
  if (typeof name !== 'string' || !NAME.test(name)) {
    throw new LimiterArgumentError(
      'name',
      `bucket name must be "<tag>" or "<tag>:<rest>" without braces or spaces and with a non-empty tag, got ${JSON.stringify(name)}`,
    );
  }
}

/** Throws unless `prefix` can start a key without breaking the hash tag that follows it. */
export function assertKeyPrefix(prefix: string): void {
  if (prefix === '' || /[{}\s]/.test(prefix)) {
    throw new LimiterArgumentError(
      'keyPrefix',
      `keyPrefix must be non-empty, without braces or spaces, got ${JSON.stringify(prefix)}`,
    );
  }
}

/** The Redis key of one bucket (the name is validated). */
export function bucketKey(prefix: string, name: string): string {
  assertBucketName(name);
  const colon = name.indexOf(':');
  return colon === -1
    ? `${prefix}:{${name}}:bucket`
    : `${prefix}:{${name.slice(0, colon)}}:bucket${name.slice(colon)}`;
}

/** The keys of the buckets of one call: at least one, no duplicates, all with the same hash tag. */
export function bucketKeys(prefix: string, names: readonly string[]): string[] {
  if (names.length === 0) throw new LimiterArgumentError('buckets', 'buckets must name at least one bucket');
  const keys = new Array<string>(names.length);
  let tag = '';
  for (let i = 0; i < names.length; i++) {
    const name = names[i] as string;
    keys[i] = bucketKey(prefix, name);
    if (i === 0) tag = bucketTag(name);
    else if (bucketTag(name) !== tag) {
      throw new LimiterArgumentError(
        'buckets',
        `all buckets of one call must share the hash tag (the part of the name before the first ':') so that they live in one Redis Cluster slot; got "${tag}" and "${bucketTag(name)}" (${names.join(', ')})`,
      );
    }
    if (names.indexOf(name) !== i) {
      throw new LimiterArgumentError('buckets', `buckets name "${name}" twice in one call`);
    }
  }
  return keys;
}

/** The bucket name a key stands for, or undefined when the key is not a limiter bucket under `prefix`. */
export function bucketNameFromKey(prefix: string, key: string): string | undefined {
  const head = `${prefix}:{`;
  if (!key.startsWith(head)) return undefined;
  const close = key.indexOf('}', head.length);
  if (close === -1) return undefined;
  const tag = key.slice(head.length, close);
  const tail = key.slice(close + 1);
  let name: string;
  if (tail === ':bucket') name = tag;
  else if (tail.startsWith(':bucket:')) name = `${tag}${tail.slice(':bucket'.length)}`;
  else return undefined;
  return NAME.test(name) ? name : undefined;
}

const GLOB_SPECIAL = /[*?[\]\\]/;

function escapeGlob(text: string): string {
  return text.replace(/[*?[\]\\]/g, (c) => `\\${c}`);
}

/**
 * What to SCAN for the buckets whose names match a glob (`*`, `?`, `[abc]`, as Redis MATCH): a MATCH
 * pattern for the keys (narrowed to one hash tag when the pattern's tag is literal) and a test of names.
 */
export function bucketScan(
  prefix: string,
  namePattern = '*',
): { match: string; matches(name: string): boolean } {
  const tag = bucketTag(namePattern);
  const match = GLOB_SPECIAL.test(tag)
    ? `${escapeGlob(prefix)}:{*}:bucket*`
    : `${escapeGlob(prefix)}:{${escapeGlob(tag)}}:bucket*`;
  const regex = globToRegExp(namePattern);
  return { match, matches: (name) => regex.test(name) };
}

function globToRegExp(glob: string): RegExp {
  let source = '';
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i] as string;
    if (c === '*') source += '.*';
    else if (c === '?') source += '.';
    else if (c === '\\' && i + 1 < glob.length) source += escapeRegExp(glob[++i] as string);
    else if (c === '[') {
      const close = glob.indexOf(']', i + 1);
      if (close === -1) source += '\\[';
      else {
        let body = glob.slice(i + 1, close).replace(/\\/g, '\\\\');
        if (body.startsWith('^')) body = `^${body.slice(1)}`;
        source += `[${body}]`;
        i = close;
      }
    } else source += escapeRegExp(c);
  }
  return new RegExp(`^${source}$`);
}

function escapeRegExp(c: string): string {
  return c.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
}
