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
 * The argument error a script replied with, as `{ argument, message }` (the message starts with the
 * argument's name), or undefined when `error` is anything else.
 */
export function argumentReply(error: unknown): { argument: string; message: string } | undefined {
  const match = ARGUMENT_REPLY.exec(error instanceof Error ? error.message : String(error));
  return match ? { argument: match[1] as string, message: `${match[1]} ${match[2]}` } : undefined;
}

/**
 * Maps whatever a script call threw to the typed errors: an argument error reply becomes
 * {@link ScriptArgumentError}, everything else {@link ScriptUnavailableError}.
 */
export function toScriptError(
  error: unknown,
  script: ScriptName,
): ScriptArgumentError | ScriptUnavailableError {
  if (error instanceof ScriptArgumentError || error instanceof ScriptUnavailableError) return error;
  const argument = argumentReply(error);
  if (argument) return new ScriptArgumentError(argument.argument, argument.message);
  return new ScriptUnavailableError(script, error instanceof Error ? error.message : String(error), {
    cause: error,
  });
}
