import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { CallTimeouts } from '../../src/limiter/timeouts.ts';

const never = () => new Promise<string>(() => {});
const resolveAfter = (ms: number, value: string) => sleep(ms).then(() => value);

describe('CallTimeouts (one timer for all of a limiter’s calls)', () => {
  it('passes results and errors through, and rejects only the calls still pending at their deadline', async () => {
    const timeouts = new CallTimeouts(80);
    const calls = [
      timeouts.track(never(), () => new Error('first timed out')),
      timeouts.track(resolveAfter(10, 'fast'), () => new Error('unexpected')),
      timeouts.track(Promise.reject(new Error('failed')), () => new Error('unexpected')),
      timeouts.track(resolveAfter(300, 'too slow'), () => new Error('slow timed out')),
    ];
    const settled = await Promise.allSettled(calls);
    expect(settled.map((s) => (s.status === 'fulfilled' ? s.value : (s.reason as Error).message))).toEqual([
      'first timed out',
      'fast',
      'failed',
      'slow timed out',
    ]);
  });

  it('keeps watching calls made after earlier ones settled', async () => {
    const timeouts = new CallTimeouts(50);
    expect(await timeouts.track(resolveAfter(5, 'a'), () => new Error('a timed out'))).toBe('a');
    await sleep(20);
    const late = timeouts.track(never(), () => new Error('b timed out'));
    await expect(late).rejects.toThrow('b timed out');
    const many = await Promise.all(
      Array.from({ length: 3000 }, (_, i) => timeouts.track(Promise.resolve(i), () => new Error('x'))),
    );
    expect(many[2999]).toBe(2999);
  });
});
