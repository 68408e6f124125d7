import type { IHeaders } from 'kafkajs';

/** Names of the Kafka headers Aqueduct reads and writes (W3C trace context uses its own names). */
export const HEADER = {
  /** Delivery attempt of a retried event (the original has none: attempt 1). */
  attempt: 'aqueduct-attempt',
  /**
   * Provider throttles (429s) a retried event has met. They spend no attempt: the provider refused to
   * look at the push then, not the push itself (absent: none).
   */
  throttles: 'aqueduct-throttles',
  /** Epoch ms before which a retried event must not be sent. */
  notBefore: 'aqueduct-not-before',
  /** Why an event was dead-lettered, retried or reported. */
  reason: 'aqueduct-reason',
  /** The machine-readable kind of that reason (e.g. invalid-json, rejected, max-attempts). */
  reasonKind: 'aqueduct-reason-kind',
  /** Where the event was first read: topic, partition and offset of the original message. */
  originTopic: 'aqueduct-origin-topic',
  originPartition: 'aqueduct-origin-partition',
  originOffset: 'aqueduct-origin-offset',
  /** Epoch ms when the original message was published (Kafka timestamp), for end-to-end latency. */
  originTimestamp: 'aqueduct-origin-timestamp',
} as const;

/**
 * A header's value as a string (kafkajs gives Buffers, arrays for repeated headers, or undefined; and
 * null, which its types omit, for a header whose value a producer left null: read as absent).
 */
export function headerString(headers: IHeaders | undefined, name: string): string | undefined {
  const value = headers?.[name];
  const first = Array.isArray(value) ? value[0] : value;
  if (first === undefined || first === null) return undefined;
  return typeof first === 'string' ? first : first.toString('utf8');
}

/**
 * A consumed message's headers as a producer can write them again, those `keep` accepts:
 * - in an object without a prototype, so that a header named `__proto__` stays a header (kafkajs 2.2's
 *   decoder reads one as a repeated header whose first value is `Object.prototype`: only Buffers and
 *   strings are header values, the rest is dropped);
 * - a null value (legal in Kafka, ConsoleProducer's `null.marker`) as an empty one, also within a
 *   repeated header: kafkajs 2.2 cannot write a null header value (its record encoder measures it
 *   before it checks for null, and throws).
 */
export function writableHeaders(headers: IHeaders | undefined, keep: (name: string) => boolean): IHeaders {
  const out: IHeaders = Object.create(null);
  for (const [name, value] of Object.entries(headers ?? {})) {
    if (value === undefined || !keep(name)) continue;
    if (!Array.isArray(value)) {
      out[name] = writableValue(value) ?? EMPTY;
      continue;
    }
    const parts = value.map(writableValue).filter((part) => part !== undefined);
    if (parts.length > 0) out[name] = parts;
  }
  return out;
}

const EMPTY = Buffer.alloc(0);

/** A header value kafkajs can write (null as empty), or undefined for what is no header value at all. */
function writableValue(part: unknown): Buffer | string | undefined {
  if (part === null) return EMPTY;
  return typeof part === 'string' || Buffer.isBuffer(part) ? part : undefined;
}

/** A numeric header, or `fallback` when absent or not a finite number. */
export function headerNumber(headers: IHeaders | undefined, name: string, fallback: number): number {
  const text = headerString(headers, name);
  const value = text === undefined ? Number.NaN : Number(text);
  return Number.isFinite(value) ? value : fallback;
}

/** Bytes of a message's key and headers (names and values), the part of a message besides its value. */
export function envelopeBytes(message: { key?: Buffer | string | null; headers?: IHeaders }): number {
  const size = (value: Buffer | string | null | undefined) =>
    value === null || value === undefined
      ? 0
      : typeof value === 'string'
        ? Buffer.byteLength(value)
        : value.length;
  let bytes = size(message.key);
  const headers = message.headers;
  // A loop without entries arrays: this runs for every consumed message.
  for (const name in headers) {
    const value = headers[name];
    bytes += Buffer.byteLength(name);
    if (Array.isArray(value)) for (const part of value) bytes += size(part);
    else bytes += size(value);
  }
  return bytes;
}
