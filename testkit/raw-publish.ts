import type { IHeaders, Kafka, Message } from 'kafkajs';

/** A message exactly as given: any bytes, any headers, any key. */
export interface RawMessage {
  value: string | Buffer | null;
  key?: string | Buffer | null;
  headers?: IHeaders;
}

/** Bytes a message takes on the wire, roughly (value, key and headers). */
export function messageBytes(message: RawMessage): number {
  let bytes = byteLength(message.value) + byteLength(message.key ?? null);
  for (const [name, value] of Object.entries(message.headers ?? {})) {
    bytes += Buffer.byteLength(name);
    for (const part of Array.isArray(value) ? value : [value]) bytes += byteLength(part ?? null);
  }
  return bytes;
}

function byteLength(value: string | Buffer | null): number {
  if (value === null) return 0;
  return typeof value === 'string' ? Buffer.byteLength(value) : value.length;
}

/**
 * Publishes raw messages in order with an idempotent producer (acks from all in-sync replicas), in
 * requests of at most `maxRequestBytes` (a message larger than that goes alone): a broker refuses a
 * record batch over its `message.max.bytes`, whatever the messages in it.
 */
export async function publishRaw(
  kafka: Kafka,
  topic: string,
  messages: readonly RawMessage[],
  maxRequestBytes = 512 * 1024,
): Promise<void> {
  const producer = kafka.producer({
    idempotent: true,
    maxInFlightRequests: 1,
    allowAutoTopicCreation: false,
  });
  await producer.connect();
  try {
    let batch: Message[] = [];
    let bytes = 0;
    const flush = async () => {
      if (batch.length === 0) return;
      await producer.send({ topic, messages: batch, acks: -1 });
      batch = [];
      bytes = 0;
    };
    for (const message of messages) {
      const size = messageBytes(message);
      if (bytes + size > maxRequestBytes || batch.length >= 500) await flush();
      batch.push({
        value: message.value,
        ...(message.key !== undefined ? { key: message.key } : {}),
        ...(message.headers ? { headers: message.headers } : {}),
      });
      bytes += size;
    }
    await flush();
  } finally {
    await producer.disconnect();
  }
}
