import { isIP } from 'node:net';
import { hostname } from 'node:os';
import selfsigned from 'selfsigned';

/** A self-signed certificate and its key, PEM. The certificate is also what clients trust (its own CA). */
export interface SimulatorCertificate {
  certPem: string;
  keyPem: string;
}

/**
 * Generates a fresh self-signed TLS certificate (EC P-256, SHA-256, valid 30 days) for localhost,
 * 127.0.0.1, ::1, this machine's host name and any `extraHosts` (e.g. a docker-compose service name).
 * Nothing is written to disk; the CLI's `--cert-dir` writes the certificate for clients to trust.
 */
export async function generateCertificate(extraHosts: readonly string[] = []): Promise<SimulatorCertificate> {
  const names = new Set(['localhost', '127.0.0.1', '::1', hostname(), ...extraHosts].filter(Boolean));
  const altNames = [...names].map((name) =>
    isIP(name) === 0 ? { type: 2 as const, value: name } : { type: 7 as const, ip: name },
  );
  const notBeforeDate = new Date(Date.now() - 60_000);
  const notAfterDate = new Date(notBeforeDate.getTime() + 30 * 24 * 3600 * 1000);
  const pems = await selfsigned.generate([{ name: 'commonName', value: 'aqueduct provider simulator' }], {
    keyType: 'ec',
    curve: 'P-256',
    algorithm: 'sha256',
    notBeforeDate,
    notAfterDate,
    extensions: [
      { name: 'basicConstraints', cA: true },
      { name: 'keyUsage', digitalSignature: true, keyCertSign: true },
      { name: 'extKeyUsage', serverAuth: true },
      { name: 'subjectAltName', altNames },
    ],
  });
  return { certPem: pems.cert, keyPem: pems.private };
}
