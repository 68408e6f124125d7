import { describe, expect, it } from 'vitest';
import { byteLines, isBlank } from '../../src/publish/lines.ts';

async function linesOf(chunks: Array<Buffer | string>): Promise<string[]> {
  const out: string[] = [];
  for await (const line of byteLines(chunks)) out.push(line.toString('latin1'));
  return out;
}

describe('aqueduct publish: reading lines', () => {
  it('splits on LF and CRLF wherever the chunks are cut, and drops a byte order mark at the start only', async () => {
    const text = '\ufeff{"a":1}\r\n{"b":2}\n\n{"c":"\ufeff"}\r\n{"d":4}';
    const expected = ['{"a":1}', '{"b":2}', '', '{"c":"\u00ef\u00bb\u00bf"}', '{"d":4}'];
    const bytes = Buffer.from(text, 'utf8');
    for (let cut = 1; cut < bytes.length; cut++) {
      expect(await linesOf([bytes.subarray(0, cut), bytes.subarray(cut)]), `cut at ${cut}`).toEqual(expected);
    }
    expect(await linesOf([...bytes].map((byte) => Buffer.from([byte])))).toEqual(expected);
  });

  it('keeps bytes that are not UTF-8 as they are, for validation to refuse', async () => {
    const latin1 = Buffer.from('{"title":"Caf\xe9"}\n', 'latin1');
    const read: Buffer[] = [];
    for await (const line of byteLines([latin1])) read.push(line);
    expect(read).toEqual([latin1.subarray(0, -1)]);
  });

  it('counts a line of spaces, tabs and a CR as blank, and nothing else', () => {
    expect(isBlank(Buffer.from(' \t\r'))).toBe(true);
    expect(isBlank(Buffer.from(''))).toBe(true);
    expect(isBlank(Buffer.from(' x '))).toBe(false);
    expect(isBlank(Buffer.from('\u00a0'))).toBe(false);
  });
});
