import { randomBytes } from 'node:crypto';
import { request } from 'node:http';
import { connect, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

/**
 * The hostile clients of the `hostileClients` benchmark (bench/hostile-clients.ts), in a process of
 * their own: they run against the gateway on HOSTILE_PORT with the API key HOSTILE_KEY, as many of
 * each kind as HOSTILE_CLIENTS says, until SIGTERM; then the process prints what they got as JSON.
 */

const port = Number(process.env.HOSTILE_PORT);
const key = process.env.HOSTILE_KEY ?? '';
const clients = JSON.parse(process.env.HOSTILE_CLIENTS ?? '{}') as {
  slowBodies: number;
  invalidFlood: number;
  hugeHeaders: number;
  baggage: number;
};

const stop = new AbortController();
process.once('SIGTERM', () => stop.abort());
const counts: Record<string, number> = {};
const count = (what: string) => {
  counts[what] = (counts[what] ?? 0) + 1;
};
const slow = { closed: 0, longestOpenMs: 0 };
const baggageAccepted = { events: 0 };

/** Runs every kind of hostile client until `signal` aborts; resolves once they have all stopped. */
async function runHostileClients(
  port: number,
  hostile: typeof clients,
  signal: AbortSignal,
  count: (what: string) => void,
  slow: { closed: number; longestOpenMs: number },
  baggageAccepted: { events: number },
): Promise<void> {
  const loops: Array<Promise<void>> = [];
  for (let i = 0; i < hostile.slowBodies; i++) loops.push(slowBodyLoop(port, signal, count, slow));
  const invalid = JSON.stringify({
    events: Array.from({ length: 200 }, (_, i) => ({
      platform: i % 2 === 0 ? 'apns' : 'fcm',
      token: i % 2 === 0 ? 'not-hex-at-all' : 'aa\r\nbb',
      notification: { title: 'x'.repeat(100), body: 'y'.repeat(400) },
    })),
  });
  for (let i = 0; i < hostile.invalidFlood; i++) {
    loops.push(
      requestLoop(port, signal, count, 'invalid', () => ({
        headers: { authorization: `Bearer ${key}` },
        body: invalid,
      })),
    );
  }
  const huge = 'h'.repeat(20 * 1024);
  for (let i = 0; i < hostile.hugeHeaders; i++) {
    loops.push(
      requestLoop(port, signal, count, 'hugeHeaders', () => ({
        headers: { authorization: `Bearer ${key}`, 'x-padding': huge },
        body: '{}',
      })),
    );
  }
  for (let i = 0; i < hostile.baggage; i++) {
    loops.push(
      requestLoop(
        port,
        signal,
        count,
        'baggage',
        () => ({
          headers: {
            authorization: `Bearer ${key}`,
            baggage: 'userId=alice,isAdmin=true',
            traceparent: `00-${randomBytes(16).toString('hex')}-${randomBytes(8).toString('hex')}-01`,
          },
          body: JSON.stringify({
            platform: 'fcm',
            token: `baggage-${randomBytes(24).toString('hex')}`,
            notification: { title: 'hi', body: 'there' },
          }),
        }),
        (status) => {
          if (status === 202) baggageAccepted.events++;
        },
      ),
    );
  }
  await Promise.all(loops);
}

/** Announces a 100 kB body and sends a byte a second; opens another connection when one is closed. */
async function slowBodyLoop(
  port: number,
  signal: AbortSignal,
  count: (what: string) => void,
  slow: { closed: number; longestOpenMs: number },
): Promise<void> {
  while (!signal.aborted) {
    const opened = Date.now();
    const closedByServer = await new Promise<boolean>((resolve) => {
      const socket: Socket = connect(port, '127.0.0.1');
      let timer: NodeJS.Timeout | undefined;
      const onAbort = () => {
        clearInterval(timer);
        socket.destroy();
        resolve(false);
      };
      signal.addEventListener('abort', onAbort, { once: true });
      socket.on('connect', () => {
        socket.write(
          `POST /v1/notifications HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{`,
        );
        timer = setInterval(() => socket.write(' '), 1000);
      });
      socket.on('error', () => {});
      socket.on('close', () => {
        clearInterval(timer);
        signal.removeEventListener('abort', onAbort);
        resolve(!signal.aborted);
      });
    });
    if (closedByServer) {
      slow.closed++;
      slow.longestOpenMs = Math.max(slow.longestOpenMs, Date.now() - opened);
      count('slowBodyClosed');
    }
  }
}

/** Sends requests one after another on fresh connections, counting the statuses, until aborted. */
async function requestLoop(
  port: number,
  signal: AbortSignal,
  count: (what: string) => void,
  kind: string,
  make: () => { headers: Record<string, string>; body: string },
  onStatus: (status: number) => void = () => {},
): Promise<void> {
  while (!signal.aborted) {
    const { headers, body } = make();
    const status = await new Promise<number>((resolve) => {
      const req = request(
        {
          host: '127.0.0.1',
          port,
          method: 'POST',
          path: '/v1/notifications',
          headers: {
            'content-type': 'application/json',
            'content-length': Buffer.byteLength(body),
            ...headers,
          },
        },
        (res) => {
          res.resume();
          res.on('end', () => resolve(res.statusCode ?? 0));
          res.on('error', () => resolve(0));
        },
      );
      req.on('error', () => resolve(0));
      req.end(body);
    });
    onStatus(status);
    count(`${kind}:${status}`);
    // A refused client retries at once: the flood is as fast as the gateway answers.
    if (status === 0) await sleep(10);
  }
}

await runHostileClients(port, clients, stop.signal, count, slow, baggageAccepted);
process.stdout.write(JSON.stringify({ counts, slow, baggageAccepted: baggageAccepted.events }));
