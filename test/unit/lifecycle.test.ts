import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const LIFECYCLE = fileURLToPath(new URL('../../src/lifecycle.ts', import.meta.url));
const LOG = fileURLToPath(new URL('../../src/log.ts', import.meta.url));

/** Runs `body` in a fresh Node process that logged uncaught errors first; its exit code and stdout. */
function runWithUncaughtLogging(body: string): Promise<{ code: number | null; lines: string[] }> {
  const script = `
    import { logUncaughtErrors } from ${JSON.stringify(LIFECYCLE)};
    import { createLogger } from ${JSON.stringify(LOG)};
    logUncaughtErrors(createLogger('info'));
    ${body}
  `;
  return new Promise((resolve) => {
    execFile(process.execPath, ['--input-type=module', '-e', script], (error, stdout) => {
      resolve({ code: error ? (error.code as number) : 0, lines: stdout.split('\n').filter(Boolean) });
    });
  });
}

describe('logUncaughtErrors', () => {
  it.each([
    ['unhandledRejection', "Promise.reject(new TypeError('nobody awaited me'));"],
    ['uncaughtException', "setTimeout(() => { throw new TypeError('nobody awaited me'); }, 1);"],
  ])('logs a %s as one JSON line with its stack, then exits 1', async (kind, body) => {
    const { code, lines } = await runWithUncaughtLogging(body);
    expect(code).toBe(1);
    const entries = lines.map((line) => JSON.parse(line) as Record<string, unknown>);
    const fatal = entries.find((entry) => entry.msg === 'uncaught error; exiting');
    expect(fatal).toMatchObject({
      level: 60,
      kind,
      err: { name: 'TypeError', message: 'nobody awaited me' },
    });
    expect(String((fatal?.err as { stack?: string } | undefined)?.stack)).toContain('nobody awaited me');
  });

  it('leaves a process without uncaught errors alone', async () => {
    const { code, lines } = await runWithUncaughtLogging(
      'await Promise.resolve(); console.log(\'{"msg":"fine"}\');',
    );
    expect(code).toBe(0);
    expect(lines).toEqual(['{"msg":"fine"}']);
  });
});
