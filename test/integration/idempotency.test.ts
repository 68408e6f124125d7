import { afterEach, describe, expect, it } from 'vitest';
import type { NotificationEventInput } from '../../src/events/event.ts';
import { hashApiKey } from '../../src/gateway/api-keys.ts';
import { publishEvents } from '../../src/publish/publisher.ts';
import { type GatewayProcess, spawnGateway } from '../helpers/gateway.ts';
import { type Rig, startRig } from '../helpers/pipeline.ts';

/**
 * The idempotency key is (tenant, id): tenants choose their own ids, so two tenants' `order-42` are two
 * events, while a second copy of one tenant's `order-42` is the same event. Every event below goes to
 * one device, so all of them land in one partition and are read in the order they were published.
 */

const TOKEN = 'idempotency-device-token-0001';
/** Unthrottled, and the FCM simulator keeps each push's payload (to tell the copies apart by title). */
const RIG = { partitions: 2, rate: 1000, burst: 1000, simulator: { keepPayloads: true } };
const ID = 'order-42';

let rig: Rig | undefined;
let gateway: GatewayProcess | undefined;
afterEach(async () => {
  await gateway?.stop();
  await rig?.close();
  gateway = undefined;
  rig = undefined;
});

function event(title: string, tenant?: string): NotificationEventInput {
  return {
    id: ID,
    platform: 'fcm',
    token: TOKEN,
    notification: { title, body: 'Your order shipped' },
    ...(tenant === undefined ? {} : { tenant }),
  };
}

/**
 * The titles of the pushes the FCM simulator accepted for `ID`, once the consumer group has committed
 * all `published` messages of the topic (every one of them resolved: pushed or skipped).
 */
async function pushedTitles(current: Rig, published: number): Promise<string[]> {
  const admin = current.kafka.admin();
  await admin.connect();
  try {
    const deadline = Date.now() + 60_000;
    for (;;) {
      const [offsets] = await admin.fetchOffsets({
        groupId: current.env.AQUEDUCT_GROUP_ID as string,
        topics: [current.topic],
      });
      const committed = (offsets?.partitions ?? []).reduce(
        (sum, p) => sum + Math.max(0, Number(p.offset)),
        0,
      );
      if (committed >= published) break;
      if (Date.now() > deadline) throw new Error(`committed ${committed} of ${published} messages`);
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
  } finally {
    await admin.disconnect();
  }
  return current.simulators.fcm
    .records()
    .filter((record) => record.eventId === ID)
    .map((record) => /"title":"([^"]+)"/.exec(JSON.stringify(record.payload))?.[1] ?? '?');
}

describe('idempotency key (tenant, id)', () => {
  it('through Kafka: the same id for two tenants and for no tenant is three events; a second copy of one is skipped', async () => {
    rig = await startRig(RIG);
    await rig.startConsumer();
    await publishEvents(
      rig.kafka,
      [event('acme', 'acme'), event('globex', 'globex'), event('no tenant'), event('acme again', 'acme')],
      { topic: rig.topic },
    );
    const titles = await pushedTitles(rig, 4);
    expect(titles.sort()).toEqual(['acme', 'globex', 'no tenant']);
  });

  it('through the gateway: each tenant gets its own order-42; a repeated request of one tenant is pushed once', async () => {
    rig = await startRig(RIG);
    gateway = await spawnGateway({
      ...rig.env,
      AQUEDUCT_GATEWAY_API_KEYS: JSON.stringify({
        [hashApiKey('key-acme-0123456789')]: 'acme',
        [hashApiKey('key-globex-0123456789')]: 'globex',
      }),
    });
    await rig.startConsumer();
    const post = async (key: string, title: string) => {
      const response = await fetch(`${gateway?.url}/v1/notifications`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
        body: JSON.stringify({ events: [{ ...event(title), id: ID }] }),
      });
      expect(response.status).toBe(202);
    };
    await post('key-acme-0123456789', 'acme');
    await post('key-globex-0123456789', 'globex');
    await post('key-acme-0123456789', 'acme again');
    const titles = await pushedTitles(rig, 3);
    expect(titles.sort()).toEqual(['acme', 'globex']);
  });
});
