import { describe, expect, it } from 'vitest';
import type { NotificationEvent } from '../../src/events/event.ts';
import type { Logger } from '../../src/log.ts';
import { failureLogger } from '../../src/pipeline/consumer.ts';
import type { Item } from '../../src/pipeline/item.ts';
import { classifyFcmFailure } from '../../src/providers/fcm-classification.ts';

const event = { id: 'e1', platform: 'fcm', token: 'secret-device-token' } as NotificationEvent;
/** The log line is about the event's provider only; the item is not read. */
const item = {} as Item;

function capture(): { logger: Logger; lines: Array<{ fields: Record<string, unknown>; msg: string }> } {
  const lines: Array<{ fields: Record<string, unknown>; msg: string }> = [];
  const logger = {
    warn: (fields: Record<string, unknown>, msg: string) => lines.push({ fields, msg }),
  } as unknown as Logger;
  return { logger, lines };
}

describe('failureLogger', () => {
  it('says once every 5 s that FCM gets no access token, with why, and nothing of the device', () => {
    const { logger, lines } = capture();
    const observer = failureLogger(logger);
    const noToken = classifyFcmFailure({
      clientCode: 'app/invalid-credential',
      message:
        'Credential implementation provided to initializeApp() via the "credential" property failed to fetch a valid Google OAuth2 access token with the following error: "request to https://oauth2.googleapis.com/token failed, reason: getaddrinfo ENOTFOUND oauth2.googleapis.com".',
    });
    for (let i = 0; i < 3; i++) observer.outcome?.(event, noToken, item);
    observer.outcome?.(event, { kind: 'retry', reason: 'network: ECONNRESET', throttled: false }, item);
    expect(lines).toHaveLength(1);
    expect(lines[0]?.msg).toMatch(/^FCM: no OAuth access token \(GOOGLE_APPLICATION_CREDENTIALS/);
    expect(lines[0]?.fields).toMatchObject({
      err: { message: expect.stringContaining('getaddrinfo ENOTFOUND oauth2.googleapis.com') },
      provider: 'fcm',
    });
    expect(JSON.stringify(lines)).not.toContain('secret-device-token');
  });
});
