import { type ChildProcess, spawn } from 'node:child_process';
import { createWriteStream, type WriteStream } from 'node:fs';
import { fileURLToPath } from 'node:url';

const CLI = fileURLToPath(new URL('../../bin/aqueduct.js', import.meta.url));

/** One `aqueduct consume` process started by a test, benchmark or the demo. */
export interface ConsumerProcess {
  readonly name: string;
  readonly child: ChildProcess;
  /** Every JSON log line it printed so far, parsed. */
  readonly logs: Array<Record<string, unknown>>;
  /** Resolves with the exit code (or signal) when it is gone. */
  readonly exited: Promise<number | string>;
  /** Resolves when its log says it joined the group. */
  joined(): Promise<void>;
  /** SIGTERM and wait for the exit. */
  stop(): Promise<number | string>;
  /** SIGKILL: a crash. */
  kill(): Promise<number | string>;
}

/**
 * Spawns `node bin/aqueduct.js consume` with the given environment (on top of this process's), collects
 * its JSON logs (also appended to `logFile` when given), and ties its life to this process.
 */
export function spawnConsumer(name: string, env: Record<string, string>, logFile?: string): ConsumerProcess {
  const child = spawn(process.execPath, [CLI, 'consume'], {
    env: { ...process.env, AQUEDUCT_HTTP_PORT: '0', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const file: WriteStream | undefined = logFile ? createWriteStream(logFile, { flags: 'a' }) : undefined;
  const logs: Array<Record<string, unknown>> = [];
  let joinedResolve: () => void = () => {};
  const joinedPromise = new Promise<void>((resolve) => {
    joinedResolve = resolve;
  });
  let buffer = '';
  const onData = (chunk: Buffer) => {
    file?.write(chunk);
    buffer += chunk.toString('utf8');
    let newline = buffer.indexOf('\n');
    while (newline >= 0) {
      const line = buffer.slice(0, newline);
      buffer = buffer.slice(newline + 1);
      newline = buffer.indexOf('\n');
      if (!line.startsWith('{')) continue;
      try {
        const entry = JSON.parse(line) as Record<string, unknown>;
        logs.push(entry);
        if (entry.msg === 'joined the consumer group') joinedResolve();
      } catch {
        // not a log line
      }
    }
  };
  child.stdout?.on('data', onData);
  child.stderr?.on('data', onData);
  const exited = new Promise<number | string>((resolve) => {
    child.once('exit', (code, signal) => {
      file?.end();
      resolve(code ?? signal ?? 'unknown');
    });
  });
  const ensureGone = () => child.kill('SIGKILL');
  process.once('exit', ensureGone);
  void exited.then(() => process.removeListener('exit', ensureGone));
  return {
    name,
    child,
    logs,
    exited,
    joined: () => joinedPromise,
    stop: () => {
      child.kill('SIGTERM');
      return exited;
    },
    kill: () => {
      child.kill('SIGKILL');
      return exited;
    },
  };
}
