import { randomBytes } from 'node:crypto';
import { createRequire } from 'node:module';
import kafkajs, { type PartitionerArgs } from 'kafkajs';
import { describe, expect, it } from 'vitest';
import { kafkaPartitioner, murmur2 } from '../../src/kafka/partitioner.ts';

// kafkajs' own Java-compatible hash, the reference the fast one must agree with byte for byte.
const kafkajsMurmur2 = createRequire(import.meta.url)(
  'kafkajs/src/producer/partitioners/default/murmur2',
) as (key: Buffer | string) => number;

const metadata = (count: number, leaderless: number[] = []): PartitionerArgs['partitionMetadata'] =>
  Array.from({ length: count }, (_, partitionId) => ({
    partitionId,
    leader: leaderless.includes(partitionId) ? -1 : 0,
    partitionErrorCode: 0,
    replicas: [0],
    isr: [0],
  }));

describe('murmur2: Kafka key hashing in 32-bit arithmetic', () => {
  it("gives the Java client's values (Kafka's own UtilsTest cases)", () => {
    const cases: Array<[string, number]> = [
      ['21', -973932308],
      ['foobar', -790332482],
      ['a-little-bit-long-string', -985981536],
      ['a-little-bit-longer-string', -1486304829],
      ['lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8', -58897971],
      ['abc', 479470107],
    ];
    for (const [key, expected] of cases) expect(murmur2(Buffer.from(key)), key).toBe(expected);
  });

  it("agrees with kafkajs' DefaultPartitioner hash on every length and on random bytes", () => {
    for (let length = 0; length <= 64; length++) {
      for (let round = 0; round < 20; round++) {
        const key = randomBytes(length);
        expect(murmur2(key), key.toString('hex')).toBe(kafkajsMurmur2(key));
      }
    }
    for (const key of ['', 'ü', 'device-🚀-42', 'order-42', 'x'.repeat(1000)])
      expect(murmur2(Buffer.from(key)), key).toBe(kafkajsMurmur2(key));
  });
});

describe('kafkaPartitioner', () => {
  const ours = kafkaPartitioner();
  const theirs = kafkajs.Partitioners.DefaultPartitioner();

  it('sends a keyed message to the partition kafkajs (and the Java producer) would', () => {
    for (const partitions of [1, 3, 6, 7, 64]) {
      for (let i = 0; i < 200; i++) {
        const args = {
          topic: 't',
          partitionMetadata: metadata(partitions),
          message: { key: i % 2 === 0 ? `event-${i}` : randomBytes(i % 40), value: null },
        };
        expect(ours(args)).toBe(theirs(args));
      }
    }
  });

  it('keeps the partition a message names', () => {
    expect(
      ours({ topic: 't', partitionMetadata: metadata(6), message: { key: 'k', value: null, partition: 4 } }),
    ).toBe(4);
  });

  it('spreads keyless messages round-robin over the partitions that have a leader', () => {
    const partitionMetadata = metadata(4, [2]);
    const seen = Array.from({ length: 300 }, () =>
      ours({ topic: 'u', partitionMetadata, message: { value: 'v' } }),
    );
    expect(new Set(seen)).toEqual(new Set([0, 1, 3]));
    for (const id of [0, 1, 3]) expect(seen.filter((p) => p === id)).toHaveLength(100);
  });
});
