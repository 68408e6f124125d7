import { createServer } from 'node:net';
import { SetupError } from './errors.ts';

/** Fails with a clear {@link SetupError} when something already listens on 127.0.0.1:`port`. */
export async function assertPortFree(port: number, what: string): Promise<void> {
  const free = await new Promise<boolean>((resolve) => {
    const server = createServer();
    server.once('error', () => resolve(false));
    server.listen({ port, host: '127.0.0.1', exclusive: true }, () => server.close(() => resolve(true)));
  });
  if (!free) {
    throw new SetupError(
      `port ${port} (${what}) is already in use on 127.0.0.1.`,
      'stop whatever listens there (ss -ltnp shows it) or choose another port; leaving the port unset picks a free one.',
    );
  }
}
