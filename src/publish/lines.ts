/**
 * The lines of a byte stream, as bytes: without their line ending (LF or CRLF), and the first without a
 * UTF-8 byte order mark (which editors on Windows write, and which JSON.parse would refuse). They are not
 * decoded here, so that a line that is not UTF-8 is refused as such by validation (instead of being read
 * with replacement characters and published altered), and `--no-validate` sends exactly the bytes given.
 */
export async function* byteLines(
  input: AsyncIterable<Buffer | string> | Iterable<Buffer | string>,
): AsyncGenerator<Buffer> {
  let rest: Buffer = Buffer.alloc(0);
  let first = true;
  const line = (bytes: Buffer): Buffer => {
    let out = bytes.at(-1) === CR ? bytes.subarray(0, -1) : bytes;
    if (first && out.subarray(0, BOM.length).equals(BOM)) out = out.subarray(BOM.length);
    first = false;
    return out;
  };
  for await (const chunk of input) {
    const bytes = typeof chunk === 'string' ? Buffer.from(chunk, 'utf8') : chunk;
    const data = rest.length > 0 ? Buffer.concat([rest, bytes]) : bytes;
    let start = 0;
    for (let end = data.indexOf(LF, start); end !== -1; end = data.indexOf(LF, start)) {
      yield line(data.subarray(start, end));
      start = end + 1;
    }
    rest = data.subarray(start);
  }
  if (rest.length > 0) yield line(rest);
}

/** True when a line holds nothing but ASCII white space. */
export function isBlank(line: Buffer): boolean {
  for (const byte of line)
    if (byte !== 0x20 && byte !== 0x09 && byte !== CR && byte !== 0x0b && byte !== 0x0c) return false;
  return true;
}

const LF = 0x0a;
const CR = 0x0d;
const BOM = Buffer.from([0xef, 0xbb, 0xbf]);
