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

/** The signals that ask a process to stop. */
export type StopSignal = 'SIGINT' | 'SIGTERM';

/** The exit status a shell reports for a process the signal ended: 128 + its number. */
export function signalExitCode(signal: StopSignal): number {
  return signal === 'SIGTERM' ? 143 : 130;
}

/**
 * Calls `onFirst` for the first SIGINT or SIGTERM, and ends the process at once at any later one,
 * whichever of the two each is, with the status a shell reports for that signal (`onAgain` first, to
 * say so). The exit is explicit rather than the signal's default action: a process running as PID 1
 * (a container without an init) gets no default action, and a `once` handler per signal would leave
 * the other signal's handler to swallow the second one (Ctrl-C, then SIGTERM).
 */
export function onStopSignals(
  onFirst: (signal: StopSignal) => void,
  onAgain?: (signal: StopSignal) => void,
): void {
  let received = 0;
  const handle = (signal: StopSignal) => {
    if (received++ === 0) {
      onFirst(signal);
      return;
    }
    onAgain?.(signal);
    process.exit(signalExitCode(signal));
  };
  process.on('SIGINT', handle);
  process.on('SIGTERM', handle);
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
 * so on stderr (unless undefined); a second one, of either kind, ends the process at once.
 */
export function stopOnSignal(notice: string | undefined): SignalStop {
  const stop = new AbortController();
  let signalled: StopSignal | undefined;
  onStopSignals((name) => {
    signalled = name;
    if (notice !== undefined) console.error(`${notice} (again to exit now)`);
    stop.abort();
  });
  return {
    signal: stop.signal,
    exitCode: () => (signalled === undefined ? undefined : signalExitCode(signalled)),
  };
}
