import { describe, expect, it } from 'vitest';
import { throttledErrorHandler } from '../../src/telemetry/export-errors.ts';

function harness(intervalMs = 30_000) {
  let clock = 1_000_000;
  const lines: { message: string; detail: string }[] = [];
  const handle = throttledErrorHandler(
    (message, detail) => lines.push({ message, detail }),
    intervalMs,
    () => clock,
  );
  return { handle, lines, advance: (ms: number) => (clock += ms) };
}

describe('throttledErrorHandler', () => {
  it('reports the first failure at once, then at most one line per interval with the count in between', () => {
    const { handle, lines, advance } = harness();
    const refused = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:4318'), { code: 'ECONNREFUSED' });
    handle(refused);
    for (let i = 0; i < 50; i++) {
      advance(500);
      handle(refused);
    }
    expect(lines).toHaveLength(1);
    expect(lines[0]?.detail).toBe('connect ECONNREFUSED 127.0.0.1:4318');
    advance(5_000);
    handle(new Error('Request timed out'));
    expect(lines).toHaveLength(2);
    expect(lines[1]?.message).toContain('(and 50 more since the last report, 30 s ago)');
    expect(lines[1]?.detail).toBe('Request timed out');
  });

  it('names an error by its message and code, never its serialized fields', () => {
    const { handle, lines } = harness();
    handle(Object.assign(new Error('OTLP export failed'), { code: 503, data: '{"huge":"body"}' }));
    expect(lines[0]?.detail).toBe('OTLP export failed (503)');
    const second = harness();
    second.handle('a plain string');
    second.handle({ message: 'an object' });
    expect(second.lines.map((line) => line.detail)).toEqual(['a plain string']);
    const third = harness();
    third.handle({ message: 'an object' });
    expect(third.lines[0]?.detail).toBe('an object');
  });
});
