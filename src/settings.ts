import { readFileSync } from 'node:fs';
import type { z } from 'zod';
import { jsonErrorWithoutInput } from './redact.ts';

/**
 * What every settings schema (the consumer's in config.ts, the gateway's in gateway/config.ts) is read
 * with: the environment, a JSON file with the same keys, `<NAME>_FILE` for secrets, and the reference
 * lines `--help` prints.
 */

/** A configuration that did not validate; the message names every bad field. */
export class ConfigError extends Error {
  override readonly name = 'ConfigError';
  readonly retriable = false;
}

/** Suffix of a setting given as a file (Docker and Kubernetes secrets): `REDIS_PASSWORD_FILE=/run/secrets/redis`. */
export const FILE_SUFFIX = '_FILE';

/**
 * The settings only the gateway (`aqueduct serve`, src/gateway/config.ts) reads; the consumer's schema
 * has none of them. One `--config` file may configure every process, so the consumer's commands accept
 * these keys in it and ignore them. Written out rather than derived: the gateway's schema is built from
 * the consumer's, so this module cannot import it; a unit test keeps the list equal to the difference.
 */
export const GATEWAY_ONLY_SETTINGS: readonly string[] = [
  'AQUEDUCT_GATEWAY_TENANT_LIMITS',
  'AQUEDUCT_GATEWAY_PORT',
  'AQUEDUCT_GATEWAY_ADMIN_PORT',
  'AQUEDUCT_GATEWAY_HOST',
  'AQUEDUCT_GATEWAY_REQUEST_TIMEOUT_MS',
  'AQUEDUCT_GATEWAY_HEADERS_TIMEOUT_MS',
  'AQUEDUCT_GATEWAY_KEEP_ALIVE_TIMEOUT_MS',
  'AQUEDUCT_GATEWAY_CONNECTION_TIMEOUT_MS',
  'AQUEDUCT_GATEWAY_MAX_CONNECTIONS',
  'AQUEDUCT_GATEWAY_MAX_PIPELINED',
  'AQUEDUCT_GATEWAY_API_KEYS',
  'AQUEDUCT_GATEWAY_MAX_BATCH',
  'AQUEDUCT_GATEWAY_MAX_BODY_BYTES',
  'AQUEDUCT_GATEWAY_BODY_MEMORY_BYTES',
  'AQUEDUCT_GATEWAY_PRODUCE_TIMEOUT_MS',
  'AQUEDUCT_GATEWAY_PRODUCERS',
  'AQUEDUCT_GATEWAY_RETRY_AFTER_SECONDS',
];

/**
 * The raw values of the settings named in `keys`, from the environment or the JSON `file` (the
 * environment wins), each given directly or through `<NAME>_FILE`. Keys of the file that name a setting
 * of `alsoAccepted` or of {@link GATEWAY_ONLY_SETTINGS} are ignored; any other key that is not in `keys`
 * is an error (a typo must not be silently ignored).
 */
export function readSettings(
  keys: readonly string[],
  env: NodeJS.ProcessEnv,
  file?: string,
  alsoAccepted: readonly string[] = [],
): Record<string, unknown> {
  const fromFile = file ? readSettingsFile(file) : {};
  const accepted = new Set([...keys, ...alsoAccepted, ...GATEWAY_ONLY_SETTINGS]);
  const isKnown = (key: string) =>
    accepted.has(key) || (key.endsWith(FILE_SUFFIX) && accepted.has(key.slice(0, -FILE_SUFFIX.length)));
  const unknownInFile = Object.keys(fromFile).filter((key) => !isKnown(key));
  if (unknownInFile.length > 0) throw new ConfigError(`unknown keys in ${file}: ${unknownInFile.join(', ')}`);
  const merged: Record<string, unknown> = {};
  for (const key of keys) {
    const direct = present(env[key]) ?? present(fromFile[key]);
    const path = present(env[`${key}${FILE_SUFFIX}`]) ?? present(fromFile[`${key}${FILE_SUFFIX}`]);
    if (direct !== undefined && path !== undefined) {
      throw new ConfigError(`${key} and ${key}${FILE_SUFFIX} are both set: give the setting one way only`);
    }
    if (path !== undefined) merged[key] = readSettingFile(key, path);
    else if (direct !== undefined) merged[key] = direct;
  }
  return merged;
}

/** A `--config` file's settings: a JSON object, one key per setting. */
function readSettingsFile(file: string): Record<string, unknown> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(file, 'utf8'));
  } catch (error) {
    // A syntax error's message quotes the file, which may hold passwords.
    const why =
      error instanceof SyntaxError ? `not JSON: ${jsonErrorWithoutInput(error)}` : (error as Error).message;
    throw new ConfigError(`cannot read config file ${file}: ${why}`);
  }
  // null would fail further on with a TypeError, an array or a string as keys "0", "1"…
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw new ConfigError(
      `cannot read config file ${file}: not a JSON object of settings ({"NAME": value, …})`,
    );
  }
  return parsed as Record<string, unknown>;
}

function present(value: unknown): unknown {
  return value === undefined || value === null || value === '' ? undefined : value;
}

/** A setting's value from its `_FILE`; the error names the file, never what it holds. */
function readSettingFile(key: string, path: unknown): string {
  if (typeof path !== 'string') throw new ConfigError(`${key}${FILE_SUFFIX} must be a file path`);
  try {
    return readFileSync(path, 'utf8').replace(/\r?\n$/, '');
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code ?? 'unreadable';
    throw new ConfigError(`cannot read ${key}${FILE_SUFFIX}=${path} (${code})`);
  }
}

/** The reference lines of any settings schema's fields (their defaults and `describe()` texts). */
export function settingsReference(
  shape: Record<string, unknown>,
): Array<{ name: string; defaultValue: string; description: string }> {
  return Object.entries(shape).map(([name, field]) => {
    const parsed = (field as z.ZodType).safeParse(undefined);
    const value = parsed.success ? parsed.data : undefined;
    return {
      name,
      defaultValue: value === undefined ? '' : Array.isArray(value) ? value.join(',') : displayed(value),
      description: (field as z.ZodType).description ?? '',
    };
  });
}

/** A parsed default as its setting would be written: a map as `key=value,…`. */
function displayed(value: unknown): string {
  if (value instanceof Map) return [...value].map(([key, entry]) => `${key}=${entry}`).join(',');
  return String(value);
}

/** The settings reference as the lines of a `--help` text: name, description, default. */
export function settingsHelp(reference: ReturnType<typeof settingsReference>): string {
  return reference
    .map(
      (r) =>
        `  ${r.name.padEnd(40)} ${r.description}${r.defaultValue ? ` (default: ${r.defaultValue})` : ''}`,
    )
    .join('\n');
}
