import { ConfigError } from './settings.ts';

/**
 * Runs `step` for the verb `aqueduct <verb>`; settings it refuses (a ConfigError) end the process with
 * status 2 and `aqueduct <verb>: <message>` on stderr, since no retry can fix them. Other errors pass on.
 */
export async function exitOnConfigError<T>(verb: string, step: () => T | Promise<T>): Promise<T> {
  try {
    return await step();
  } catch (error) {
    if (error instanceof ConfigError) {
      console.error(`aqueduct ${verb}: ${error.message}`);
      process.exit(2);
    }
    throw error;
  }
}
