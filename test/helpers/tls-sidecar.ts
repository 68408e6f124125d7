import net, { type AddressInfo } from 'node:net';
import tls from 'node:tls';

/**
 * A plain-text listener that forwards each connection over TLS to a server, the way a service mesh's
 * sidecar originates TLS for an application that speaks plain text to it. It relays bytes only, so the
 * application's protocol (HTTP/1.1 or HTTP/2) runs end to end; `alpn` is what it offers upstream.
 */
export interface TlsSidecar {
  /** `http://127.0.0.1:port`: what the application is pointed at. */
  url: string;
  /** Connections the sidecar has relayed. */
  connections(): number;
  close(): Promise<void>;
}

export async function startTlsSidecar(upstream: {
  url: string;
  caPem: string;
  alpn: 'http/1.1' | 'h2';
}): Promise<TlsSidecar> {
  const target = new URL(upstream.url);
  let connections = 0;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((plain) => {
    connections += 1;
    const secure = tls.connect({
      host: target.hostname,
      port: Number(target.port),
      ca: upstream.caPem,
      ALPNProtocols: [upstream.alpn],
      ...(net.isIP(target.hostname) === 0 ? { servername: target.hostname } : {}),
    });
    for (const socket of [plain, secure]) {
      sockets.add(socket);
      socket.on('close', () => sockets.delete(socket));
      socket.on('error', () => {
        plain.destroy();
        secure.destroy();
      });
    }
    plain.pipe(secure).pipe(plain);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    connections: () => connections,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}
