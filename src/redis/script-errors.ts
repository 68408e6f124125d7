import type { ScriptName } from './scripts.ts';

/**
 * A script call was malformed: every script checks its arguments before it writes anything and answers
 * a bad one with the error reply `AQUEDUCT_ARGUMENT <argument> <message>` (see `lua/includes/arguments.lua`).
 * Retrying the same call cannot succeed, so `retriable` is false; `argument` names what to fix.
 */
export class ScriptArgumentError extends Error {
  override readonly name: string = 'ScriptArgumentError';
  /** The argument at fault, as the script's header names it. */
  readonly argument: string;
  readonly retriable = false;

  constructor(argument: string, message: string) {
    super(message);
    this.argument = argument;
  }
}

/**
 * Redis could not run a script: a connection error, a timeout, or an error reply that is not one of the
 * scripts' argument errors. Retrying later may succeed (`retriable` is true).
 */
export class ScriptUnavailableError extends Error {
  override readonly name = 'ScriptUnavailableError';
  readonly retriable = true;
  /** The script that failed. */
  readonly script: ScriptName;

  constructor(script: ScriptName, message: string, options?: { cause?: unknown }) {
    super(`script ${script} failed, Redis unavailable: ${message}`, options);
    this.script = script;
  }
}

const ARGUMENT_REPLY = /^AQUEDUCT_ARGUMENT (\S+) ([\s\S]*)$/;

/**
 * Maps whatever a script call threw to a caller's typed errors: an `AQUEDUCT_ARGUMENT <argument>
 * <message>` reply to `Argument` (the message starts with the argument's name), anything else (a
 * connection error, a timeout, another error reply) to what `unavailable` makes of its message. An
 * error that already is an `Argument` or an `Unavailable` passes through.
 */
export function mapScriptError<A extends Error, U extends Error>(
  error: unknown,
  Argument: new (argument: string, message: string) => A,
  Unavailable: abstract new (...args: never[]) => U,
  unavailable: (message: string, cause: unknown) => U,
): A | U {
  if (error instanceof Argument || error instanceof Unavailable) return error;
  const message = error instanceof Error ? error.message : String(error);
  const match = ARGUMENT_REPLY.exec(message);
  if (match) return new Argument(match[1] as string, `${match[1]} ${match[2]}`);
  return unavailable(message, error);
}

/**
 * Maps whatever a script call threw to the typed errors: an argument error reply becomes
 * {@link ScriptArgumentError}, everything else {@link ScriptUnavailableError}.
 */
export function toScriptError(
  error: unknown,
  script: ScriptName,
): ScriptArgumentError | ScriptUnavailableError {
  return mapScriptError(
    error,
    ScriptArgumentError,
    ScriptUnavailableError,
    (message, cause) => new ScriptUnavailableError(script, message, { cause }),
  );
}
