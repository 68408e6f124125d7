/**
 * A problem with the environment Aqueduct was asked to run in (no Java, Maven unreachable, a busy port,
 * an unreachable Redis). Each one names what went wrong and what to do about it, so that the message
 * printed to a newcomer is enough to fix the setup without reading the code.
 */
export class SetupError extends Error {
  override readonly name = 'SetupError';
  /** What the user should do about it, as one sentence. */
  readonly fix: string;

  constructor(problem: string, fix: string, options?: { cause?: unknown }) {
    super(`${problem}\n  fix: ${fix}`, options);
    this.fix = fix;
  }
}
