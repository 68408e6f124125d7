import { readFileSync } from 'node:fs';
import { ConfigError } from './settings.ts';

/**
 * A TLS connection's certificates and checking, as Kafka and Redis clients take them (a subset of
 * Node's `tls.ConnectionOptions`). Present means "connect over TLS"; every field may be left out.
 */
export interface TlsOptions {
  /** PEM certificate(s) of the CA to trust instead of Node's default store. */
  ca?: Buffer | string;
  /** PEM client certificate, for mutual TLS (with `key`). */
  cert?: Buffer | string;
  /** PEM private key (unencrypted) of `cert`. */
  key?: Buffer | string;
  /** false: accept a server certificate that does not verify. Default true. */
  rejectUnauthorized?: boolean;
}

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
export function tlsWhenWanted(switchedOn: boolean, files: TlsFiles): TlsOptions | undefined {
  const wanted =
    switchedOn || files.caFile !== undefined || files.certFile !== undefined || files.keyFile !== undefined;
  return wanted ? tlsOptions(files) : undefined;
}

/** Node TLS options with the PEM files read; a file that cannot be read is a ConfigError naming its setting. */
function tlsOptions(files: TlsFiles): TlsOptions {
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
