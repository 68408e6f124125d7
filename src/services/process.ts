import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { openSync } from 'node:fs';

/**
 * A child process that cannot outlive the process that started it.
 *
 * Kafka and redis-server are started under a tiny `sh` guard that stops them when this Node process
 * disappears, even when it is killed with SIGKILL and never runs its clean-up: a test run or demo that
 * is interrupted must not leave a stray java or redis-server behind.
 */
export interface TiedProcess {
  readonly pid: number;
  /** Resolves with the exit code (or signal name) once the process is gone. */
  readonly exited: Promise<number | string>;
  /** Asks the process to stop (SIGTERM), escalates to SIGKILL after `graceMs`, resolves when it is gone. */
  stop(graceMs?: number): Promise<void>;
  isRunning(): boolean;
}

const GUARD = `
"$@" &
child=$!
trap 'kill -TERM "$child" 2>/dev/null; wait "$child"; exit $?' TERM INT
while kill -0 "$AQUEDUCT_PARENT_PID" 2>/dev/null && kill -0 "$child" 2>/dev/null; do sleep 1; done
kill -TERM "$child" 2>/dev/null
wait "$child"
`;

export function spawnTied(
  command: string,
  args: readonly string[],
  logFile: string,
  cwd?: string,
): TiedProcess {
  const out = openSync(logFile, 'a');
  const child: ChildProcess = spawn('sh', ['-c', GUARD, 'aqueduct-guard', command, ...args], {
    cwd,
    stdio: ['ignore', out, out],
    // Its own process group, so that a SIGKILL escalation reaches the service and not just the guard.
    detached: true,
    env: { ...process.env, AQUEDUCT_PARENT_PID: String(process.pid) },
  });
  let running = true;
  const exited = new Promise<number | string>((resolve) => {
    child.once('exit', (code, signal) => {
      running = false;
      resolve(code ?? signal ?? 'unknown');
    });
  });
  if (child.pid === undefined) throw new Error(`could not start ${command}`);
  return {
    pid: child.pid,
    exited,
    isRunning: () => running,
    async stop(graceMs = 15_000) {
      if (!running) return;
      child.kill('SIGTERM');
      const timer = setTimeout(() => {
        // The guard forwards SIGTERM; if the service ignores it, kill the guard's whole process group.
        try {
          process.kill(-(child.pid as number), 'SIGKILL');
        } catch {
          // already gone
        }
      }, graceMs);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** Resolves the absolute path of an executable on PATH, or undefined. */
export async function which(command: string): Promise<string | undefined> {
  const { execFile } = await import('node:child_process');
  return new Promise((resolve) => {
    execFile('sh', ['-c', `command -v ${command}`], (error, stdout) => {
      resolve(error ? undefined : stdout.trim() || undefined);
    });
  });
}

/** Runs a command to its end; its stdout, or an error with what it printed. */
export function runCommand(command: string, args: string[]): Promise<string> {
  return new Promise((resolvePromise, reject) => {
    execFile(command, args, { maxBuffer: 16 * 1024 * 1024 }, (error, stdout, stderr) => {
      if (error)
        reject(new Error(`${command} ${args.at(-1) ?? ''} failed: ${stderr || stdout || error.message}`));
      else resolvePromise(stdout);
    });
  });
}
