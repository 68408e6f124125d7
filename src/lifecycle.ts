import type { Logger } from './log.ts';

/**
 * A port Aqueduct was told to listen on is taken (or not allowed). The message names the setting, so
 * that it alone says what to change; the CLI prints it as one line and exits non-zero.
 */
export class PortInUseError extends Error {
  override readonly name = 'PortInUseError';
  readonly setting: string;
  readonly port: number;

  constructor(setting: string, port: number, host: string, options?: { cause?: unknown }) {
    const code = (options?.cause as { code?: string } | undefined)?.code;
    const problem = code === 'EACCES' ? 'may not be opened by this user' : 'is already in use';
    super(
      `${setting}=${port}: port ${port} on ${host} ${problem}; stop what listens there or set ${setting} to a free port (0 picks one)`,
      options,
    );
    this.setting = setting;
    this.port = port;
  }
}

/** Runs `listen`, turning a busy or forbidden port into a {@link PortInUseError} for `setting`. */
export async function listenOrExplain(
  setting: string,
  port: number,
  host: string,
  listen: () => Promise<unknown>,
): Promise<void> {
  try {
    await listen();
  } catch (error) {
    const code = (error as { code?: string }).code;
    if (code === 'EADDRINUSE' || code === 'EACCES') {
      throw new PortInUseError(setting, port, host, { cause: error });
    }
    throw error;
  }
}

/**
 * Called once a process has closed everything it opened and logged "stopped": it should now exit by
 * itself. Should a library still hold the event loop (a socket or a timer nobody can reach any more),
 * the process exits anyway after `graceMs`, and the log names what was still open, so that a rollout
 * never waits out its grace period for a process that has nothing left to do. The timer itself does
 * not keep the process alive.
 */
export function exitIfStillRunning(logger: Logger, exitCode: number, graceMs: number): void {
  setTimeout(() => {
    logger.warn(
      { exitCode, graceMs, open: openResources() },
      'still running after "stopped"; exiting anyway',
    );
    process.exit(exitCode);
  }, graceMs).unref();
}

/** What keeps the event loop alive, counted by kind ({ TCPSocketWrap: 2, Timeout: 1 }). */
export function openResources(): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const kind of process.getActiveResourcesInfo()) counts[kind] = (counts[kind] ?? 0) + 1;
  return counts;
}
