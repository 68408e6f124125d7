import type { Platform } from '../events/event.ts';

/**
 * A provider that cannot be built from its configuration: a missing or unreadable key file, an
 * endpoint override that is not `https://host:port`, credentials that do not go together. Raised once
 * at start-up, never per push. The message names the setting and never quotes a secret.
 */
export class ProviderConfigError extends Error {
  override readonly name = 'ProviderConfigError';
  /** Retrying cannot help: the configuration has to change. */
  readonly retriable = false;
  readonly platform: Platform;
  /** The configuration key at fault (an environment variable name), when there is one. */
  readonly setting: string | undefined;

  constructor(platform: Platform, message: string, options: { setting?: string; cause?: unknown } = {}) {
    super(`${platform}: ${message}`, options.cause === undefined ? undefined : { cause: options.cause });
    this.platform = platform;
    this.setting = options.setting;
  }
}
