import { compressSync } from 'snappy';
import { describe, expect, it } from 'vitest';
import { snappyCompressXerial, snappyDecompress } from '../../src/kafka/compression.ts';

// Java's framing as snappy-java writes it is read in test/integration/kafka-java-clients.test.ts; here,
// what one small batch there does not reach: several blocks, a raw block, and a truncated frame.

const HEADER = Buffer.from([0x82, 0x53, 0x4e, 0x41, 0x50, 0x50, 0x59, 0x00, 0, 0, 0, 1, 0, 0, 0, 1]);

function xerial(...blocks: Buffer[]): Buffer {
  return Buffer.concat([
    HEADER,
    ...blocks.flatMap((block) => {
      const compressed = compressSync(block);
      const length = Buffer.alloc(4);
      length.writeUInt32BE(compressed.length);
      return [length, compressed];
    }),
  ]);
}

describe('kafka: snappy batches', () => {
  it('reads xerial framing with several blocks (snappy-java cuts at 32 KiB) and a raw snappy block', async () => {
    const first = Buffer.alloc(32 * 1024, 'a');
    const second = Buffer.from('the rest of the batch');
    expect(await snappyDecompress(xerial(first, second))).toEqual(Buffer.concat([first, second]));
    expect(await snappyDecompress(compressSync(second))).toEqual(second);
  });

  it('writes the framing it reads, and refuses a truncated frame instead of returning part of it', async () => {
    const payload = Buffer.from('records '.repeat(1000));
    const framed = await snappyCompressXerial(payload);
    expect(framed.subarray(0, 16)).toEqual(HEADER);
    expect(await snappyDecompress(framed)).toEqual(payload);
    await expect(snappyDecompress(framed.subarray(0, framed.length - 3))).rejects.toThrow(/truncated/);
    await expect(snappyDecompress(framed.subarray(0, 18))).rejects.toThrow(/truncated/);
  });
});
