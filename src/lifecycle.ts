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
 * Ends a process that has closed everything it opened and logged "stopped".
 *
 * kafkajs' retriers outlive a disconnect: a fetch that was reconnecting to a restarted broker when the
 * stop came goes on reconnecting, with its own timers and sockets, and a consumer group that kept the
 * coordinator's old broker object reconnects it for its LeaveGroup, where the cluster's disconnect
 * never reaches. kafkajs offers no way to cancel either (its own examples end the process after
 * disconnect), so waiting for the event loop to empty could take minutes, and a rollout would wait out
 * its grace period. What was still open is logged, to tell a leak of Aqueduct's own from a library's
 * leftovers.
 */
export function exitStopped(logger: Logger, exitCode: number): never {
  const open = Object.entries(openResources()).filter(([kind]) => !STDIO.has(kind));
  if (open.length > 0)
    logger.info({ exitCode, open: Object.fromEntries(open) }, 'exiting with library resources still open');
  process.exit(exitCode);
}

/** The handles of stdin, stdout and stderr: open in every process, never a leftover. */
const STDIO = new Set(['PipeWrap', 'TTYWrap']);

/** What keeps the event loop alive, counted by kind ({ TCPSocketWrap: 2, Timeout: 1 }). */
export function openResources(): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const kind of process.getActiveResourcesInfo()) counts[kind] = (counts[kind] ?? 0) + 1;
  return counts;
}

/**
 * Logs an error nothing caught (a throw in a callback, a rejection no one awaited) as one JSON line with
 * its stack, then ends the process as Node itself would (exit code 1). Node's own report goes to stderr
 * as plain text, which a log pipeline reading JSON lines drops: the process would die without a word.
 */
export function logUncaughtErrors(logger: Logger): void {
  const fatal = (kind: 'uncaughtException' | 'unhandledRejection') => (error: unknown) => {
    logger.fatal({ err: uncaughtFields(error), kind }, 'uncaught error; exiting');
    process.exit(1);
  };
  process.on('uncaughtException', fatal('uncaughtException'));
  process.on('unhandledRejection', fatal('unhandledRejection'));
}

function uncaughtFields(error: unknown): Record<string, unknown> {
  if (!(error instanceof Error)) return { message: String(error) };
  return { name: error.name, message: error.message, stack: error.stack };
}

/** A one-shot job's Ctrl-C (see {@link stopOnSignal}). */
export interface SignalStop {
  /** Aborted by the first SIGINT or SIGTERM. */
  readonly signal: AbortSignal;
  /** The exit status a shell reports for a job the signal ended (130, 143), or undefined without one. */
  exitCode(): number | undefined;
}

/**
 * The first SIGINT or SIGTERM asks a one-shot job (publish, replay) to stop cleanly, and `notice` says
 * so on stderr (unless undefined); a second one finds no handler left and ends the process at once.
 */
export function stopOnSignal(notice: string | undefined): SignalStop {
  const stop = new AbortController();
  let signalled: NodeJS.Signals | undefined;
  const onSignal = (name: NodeJS.Signals) => {
    signalled = name;
    if (notice !== undefined) console.error(`${notice} (again to exit now)`);
    stop.abort();
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  return {
    signal: stop.signal,
    // 128 + the signal's number.
    exitCode: () => (signalled === undefined ? undefined : signalled === 'SIGTERM' ? 143 : 130),
  };
}
