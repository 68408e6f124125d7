import { readFileSync } from 'node:fs';
import type { ConnectionOptions } from 'node:tls';
import { ConfigError } from './settings.ts';

/** Options of {@link tlsOptions}. */
export interface TlsFiles {
  caFile: string | undefined;
  certFile: string | undefined;
  keyFile: string | undefined;
  rejectUnauthorized: boolean;
  /** The settings the files came from, for error messages. */
  names: { ca: string; cert: string; key: string };
}

/**
 * TLS when it is switched on or when any of its files is given (a CA, certificate or key only makes sense
 * over TLS, so naming one is taken as asking for it); undefined for a plain connection.
 */
export function tlsWhenWanted(switchedOn: boolean, files: TlsFiles): ConnectionOptions | undefined {
  const wanted =
    switchedOn || files.caFile !== undefined || files.certFile !== undefined || files.keyFile !== undefined;
  return wanted ? tlsOptions(files) : undefined;
}

/** Node TLS options with the PEM files read; a file that cannot be read is a ConfigError naming its setting. */
function tlsOptions(files: TlsFiles): ConnectionOptions {
  const read = (path: string | undefined, name: string): Buffer | undefined => {
    if (path === undefined) return undefined;
    try {
      return readFileSync(path);
    } catch (error) {
      throw new ConfigError(
        `cannot read ${name}=${path} (${(error as NodeJS.ErrnoException).code ?? 'unreadable'})`,
      );
    }
  };
  const ca = read(files.caFile, files.names.ca);
  const cert = read(files.certFile, files.names.cert);
  const key = read(files.keyFile, files.names.key);
  return {
    rejectUnauthorized: files.rejectUnauthorized,
    ...(ca ? { ca } : {}),
    ...(cert ? { cert } : {}),
    ...(key ? { key } : {}),
  };
}
