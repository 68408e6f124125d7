import { execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
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

describe('stopOnSignal', () => {
  /** A job that stops cleanly in 20 s once asked: only an exit at the second signal ends it sooner. */
  const JOB = `
    import { stopOnSignal } from ${JSON.stringify(LIFECYCLE)};
    const stop = stopOnSignal(undefined);
    stop.signal.addEventListener('abort', () => {
      console.log('asked');
      setTimeout(() => process.exit(0), 20_000);
    });
    setInterval(() => {}, 1000);
    console.log('ready');
  `;

  it.each([
    ['SIGINT', 'SIGTERM', 143],
    ['SIGTERM', 'SIGINT', 130],
    ['SIGTERM', 'SIGTERM', 143],
  ] as const)('exits at once at a second signal: %s, then %s (exit %i)', async (first, second, status) => {
    const child = spawn(process.execPath, ['--input-type=module', '-e', JOB], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const exited = once(child, 'exit').then(([code, signal]) => code ?? signal);
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString('utf8');
    });
    try {
      while (!output.includes('ready')) await sleep(20);
      child.kill(first);
      while (!output.includes('asked')) await sleep(20);
      child.kill(second);
      expect(await Promise.race([exited, sleep(5000, 'still running')])).toBe(status);
    } finally {
      child.kill('SIGKILL');
    }
  });
});
