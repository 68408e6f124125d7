import type { BucketState } from '../limiter/index.ts';

/** The JSON document `aqueduct inspect --json` prints (one line per refresh with `--watch`). */
export interface InspectSnapshot {
  keyPrefix: string;
  pattern: string;
  /** Redis server time the snapshot was taken at, epoch ms. */
  serverTimeMs: number;
  buckets: BucketState[];
}

const COLUMNS = [
  'BUCKET',
  'TOKENS',
  'RATE/S',
  'CAPACITY',
  'HELD',
  'RATE NOW',
  'BLOCKED UNTIL',
  'TTL',
] as const;
/** The column left-aligned besides the bucket's name. */
const BLOCKED_COLUMN = COLUMNS.indexOf('BLOCKED UNTIL');

/** The human table of `aqueduct inspect`: one row per bucket, levels as of the Redis server's now. */
export function formatBucketTable(snapshot: InspectSnapshot): string {
  if (snapshot.buckets.length === 0) {
    return `no buckets match "${snapshot.pattern}" under key prefix "${snapshot.keyPrefix}"`;
  }
  const rows = snapshot.buckets.map((bucket) => [
    bucket.name,
    bucket.tokens === null ? '?' : formatNumber(bucket.tokens, 3),
    bucket.rate === null ? '?' : formatNumber(bucket.rate, 6),
    bucket.capacity === null ? '?' : formatNumber(bucket.capacity, 6),
    formatNumber(bucket.held, 0),
    bucket.rateFactor >= 1 ? '-' : `${formatNumber(bucket.rateFactor * 100, 1)} %`,
    bucket.blockedUntilMs === null
      ? '-'
      : `${new Date(bucket.blockedUntilMs).toISOString()} (in ${((bucket.blockedUntilMs - bucket.serverTimeMs) / 1000).toFixed(1)} s)`,
    bucket.ttlMs === null ? 'none' : formatDuration(bucket.ttlMs),
  ]);
  const widths = COLUMNS.map((title, c) =>
    Math.max(title.length, ...rows.map((row) => (row[c] as string).length)),
  );
  const line = (cells: readonly string[]) =>
    cells
      .map((cell, c) =>
        c === 0 || c === BLOCKED_COLUMN
          ? cell.padEnd(widths[c] as number)
          : cell.padStart(widths[c] as number),
      )
      .join('  ')
      .trimEnd();
  return [line(COLUMNS), ...rows.map(line)].join('\n');
}

function formatNumber(value: number, decimals: number): string {
  return Number.isInteger(value) ? String(value) : value.toFixed(decimals).replace(/0+$/, '');
}

function formatDuration(ms: number): string {
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  if (ms < 3_600_000) return `${Math.floor(ms / 60_000)} min ${Math.floor((ms % 60_000) / 1000)} s`;
  return `${(ms / 3_600_000).toFixed(1)} h`;
}
