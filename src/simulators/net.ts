import type { Server, Socket } from 'node:net';
import type { Readable } from 'node:stream';

/** The most of a request body a simulator keeps; past it, the body is only counted. */
export const MAX_BODY_BYTES = 64 * 1024;

/** Collects a request body (its first {@link MAX_BODY_BYTES}) and calls `done` with it and its full size at its end. */
export function readBody(source: Readable, done: (body: Buffer, size: number) => void): void {
  const chunks: Buffer[] = [];
  let size = 0;
  source.on('data', (chunk: Buffer) => {
    size += chunk.length;
    if (size <= MAX_BODY_BYTES) chunks.push(chunk);
  });
  source.on('end', () => done(chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks), size));
}

/** A host for URLs: a wildcard address becomes 127.0.0.1, an IPv6 address gets brackets. */
export function urlHost(host: string): string {
  if (host === '0.0.0.0' || host === '::') return '127.0.0.1';
  return host.includes(':') ? `[${host}]` : host;
}

/**
 * Listens and keeps track of every connection, so that {@link closeServer} can end keep-alive sockets
 * and HTTP/2 sessions at once instead of waiting for clients to hang up.
 */
export function listen(server: Server, host: string, port: number): Promise<number> {
  const sockets = new Set<Socket>();
  openSockets.set(server, sockets);
  server.on('connection', (socket: Socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  });
  return new Promise((resolve, reject) => {
    const onError = (error: Error) => reject(error);
    server.once('error', onError);
    server.listen(port, host, () => {
      server.off('error', onError);
      const address = server.address();
      resolve(typeof address === 'object' && address !== null ? address.port : port);
    });
  });
}

export function closeServer(server: Server): Promise<void> {
  return new Promise((resolve) => {
    server.close(() => resolve());
    for (const socket of openSockets.get(server) ?? []) socket.destroy();
  });
}

const openSockets = new WeakMap<Server, Set<Socket>>();
