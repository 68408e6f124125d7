import { promisify } from 'node:util';
import { zstdCompress, zstdDecompress } from 'node:zlib';
import kafkajs from 'kafkajs';
import { compressFrame, decompressFrame } from 'lz4-napi';
import { compress as snappyCompress, uncompress as snappyUncompress } from 'snappy';

/**
 * kafkajs reads gzip batches only. A record batch compressed with snappy, lz4 or zstd (the
 * `compression.type` of a Java, librdkafka or console producer, or of the topic itself) makes its
 * consumer crash with KafkaJSNotImplemented and not restart, stalling every partition behind it. These
 * codecs let every Aqueduct client read (and write) all four of Kafka's compression types, as Kafka's
 * own clients write them:
 * - zstd: a standard zstd frame (Node's zlib has zstd since 23.8);
 * - lz4: a standard LZ4 frame (Kafka ≥ 0.10 writes the frame format with a correct header checksum);
 * - snappy: the Java client writes xerial-snappy framing (snappy-java's SnappyOutputStream: a 16-byte
 *   header, then blocks each prefixed by its length); librdkafka writes the same framing or a raw block.
 */

/** snappy-java's stream header: its magic (0x82 "SNAPPY" 0), then two big-endian int32 versions. */
const XERIAL_MAGIC = Buffer.from([0x82, 0x53, 0x4e, 0x41, 0x50, 0x50, 0x59, 0x00]);
const XERIAL_HEADER_BYTES = 16;
const XERIAL_VERSION = 1;
const XERIAL_MIN_COMPATIBLE_VERSION = 1;

/** The payload of a snappy-compressed batch, in xerial framing or as one raw snappy block. */
export async function snappyDecompress(buffer: Buffer): Promise<Buffer> {
  if (buffer.length < XERIAL_HEADER_BYTES || !buffer.subarray(0, XERIAL_MAGIC.length).equals(XERIAL_MAGIC)) {
    return (await snappyUncompress(buffer)) as Buffer;
  }
  const blocks: Buffer[] = [];
  let offset = XERIAL_HEADER_BYTES;
  while (offset < buffer.length) {
    if (offset + 4 > buffer.length) throw new Error('snappy: truncated xerial block length');
    const length = buffer.readUInt32BE(offset);
    offset += 4;
    if (offset + length > buffer.length) throw new Error('snappy: truncated xerial block');
    blocks.push((await snappyUncompress(buffer.subarray(offset, offset + length))) as Buffer);
    offset += length;
  }
  return Buffer.concat(blocks);
}

/** A snappy-compressed batch in the xerial framing the Java client reads (one block). */
export async function snappyCompressXerial(payload: Buffer): Promise<Buffer> {
  const block = await snappyCompress(payload);
  const header = Buffer.alloc(XERIAL_HEADER_BYTES + 4);
  XERIAL_MAGIC.copy(header, 0);
  header.writeInt32BE(XERIAL_VERSION, 8);
  header.writeInt32BE(XERIAL_MIN_COMPATIBLE_VERSION, 12);
  header.writeUInt32BE(block.length, XERIAL_HEADER_BYTES);
  return Buffer.concat([header, block]);
}

const zstdCompressAsync = promisify(zstdCompress);
const zstdDecompressAsync = promisify(zstdDecompress);

/** kafkajs' codec shape: `compress` gets its encoder, whose `buffer` is the batch's records. */
interface Codec {
  compress(encoder: { buffer: Buffer }): Promise<Buffer>;
  decompress(buffer: Buffer): Promise<Buffer>;
}

// kafkajs is CommonJS and builds these two exports in a way Node's named-export detection misses.
const { CompressionCodecs, CompressionTypes } = kafkajs;

const CODECS: Array<[number, Codec]> = [
  [
    CompressionTypes.Snappy,
    { compress: (encoder) => snappyCompressXerial(encoder.buffer), decompress: snappyDecompress },
  ],
  [
    CompressionTypes.LZ4,
    { compress: (encoder) => compressFrame(encoder.buffer), decompress: (buffer) => decompressFrame(buffer) },
  ],
  [
    CompressionTypes.ZSTD,
    {
      compress: (encoder) => zstdCompressAsync(encoder.buffer),
      decompress: (buffer) => zstdDecompressAsync(buffer),
    },
  ],
];

/** Registers the snappy, lz4 and zstd codecs with kafkajs (process-wide; repeating it changes nothing). */
export function registerCompressionCodecs(): void {
  for (const [type, codec] of CODECS) {
    (CompressionCodecs as Record<number, () => Codec>)[type] = () => codec;
  }
}
