import { randomBytes } from 'node:crypto';
import type { IHeaders } from 'kafkajs';
import type { NotificationEventInput } from '../src/events/event.ts';
import { HEADER } from '../src/kafka/headers.ts';
import { messageKey } from '../src/publish/publisher.ts';
import type { RawMessage } from './raw-publish.ts';

/** The kinds of bad input {@link fuzzMessages} makes, each mixed into valid traffic by the faults run. */
export const FUZZ_KINDS = [
  'invalid-json',
  'truncated-json',
  'not-an-object',
  'empty',
  'wrong-types',
  'missing-fields',
  'unknown-fields',
  'too-many-data-entries',
  'oversized-field',
  'unknown-platform',
  'unknown-schema-version',
  'invalid-utf8',
  'deep-nesting',
  'huge-value',
  'huge-headers',
  'huge-key',
  'spoofed-aqueduct-headers',
] as const;
export type FuzzKind = (typeof FUZZ_KINDS)[number];

/** A bad message, with its device token when it has one (so that logs can be scanned for it). */
export interface FuzzMessage extends RawMessage {
  kind: FuzzKind;
  token?: string;
}

/** Options of {@link fuzzMessages}. */
export interface FuzzOptions {
  count: number;
  /** Prefix of the ids the bad messages carry (when they carry one). */
  idPrefix: string;
  /** How many 1 MB values among them (each goes to the broker in a request of its own). Default 4. */
  hugeValues?: number;
}

/**
 * `count` bad messages, the kinds taken in turn (so every kind is there), made from plausible events:
 * each has a device token of its own, so a token in a log line can be traced to the bad input that
 * carried it. `hugeValues` of them are 1 MB values (about the broker's default message limit).
 */
export function fuzzMessages(options: FuzzOptions): FuzzMessage[] {
  const kinds = FUZZ_KINDS.filter((k) => k !== 'huge-value');
  const messages: FuzzMessage[] = [];
  const hugeValues = options.hugeValues ?? 4;
  for (let i = 0; i < options.count; i++) {
    const kind: FuzzKind = i < hugeValues ? 'huge-value' : (kinds[i % kinds.length] as FuzzKind);
    messages.push(fuzzOne(kind, plausibleEvent(`${options.idPrefix}-${i}`, i)));
  }
  return messages;
}

function plausibleEvent(id: string, i: number): NotificationEventInput & { token: string } {
  const platform = i % 2 === 0 ? 'fcm' : 'apns';
  const token = platform === 'apns' ? randomHex(32) : `${randomHex(11)}:APA91b${randomHex(60)}`;
  return {
    id,
    platform,
    token,
    notification: { title: 'Flash sale', body: `Item ${i} is back in stock` },
    data: { campaign: 'fuzz', n: String(i) },
    priority: 'normal',
    ttlSeconds: 3600,
  };
}

function fuzzOne(kind: FuzzKind, event: NotificationEventInput & { token: string }): FuzzMessage {
  const json = JSON.stringify(event);
  const key = messageKey(event);
  const token = event.token;
  const base = { kind, token, key };
  switch (kind) {
    case 'invalid-json':
      return { ...base, value: `{"id": "${event.id}", "token": "${token}", platform: fcm}` };
    case 'truncated-json':
      // Cut inside the token: a parser error quoting its input would quote part of the token.
      return { ...base, value: json.slice(0, json.indexOf(token) + 24) };
    case 'not-an-object':
      return { ...base, value: JSON.stringify([event]) };
    case 'empty':
      return { kind, key, value: null };
    case 'wrong-types':
      return { ...base, value: JSON.stringify({ ...event, ttlSeconds: 'soon', priority: 7 }) };
    case 'missing-fields': {
      const { platform: _platform, notification: _notification, ...rest } = event;
      return { ...base, value: JSON.stringify(rest) };
    }
    case 'unknown-fields':
      return { ...base, value: json.replace(/^\{/, '{"__proto__":{"admin":true},"sound":"ding",') };
    case 'too-many-data-entries':
      return {
        ...base,
        value: JSON.stringify({
          ...event,
          data: Object.fromEntries(Array.from({ length: 40 }, (_, n) => [`k${n}`, 'v'])),
        }),
      };
    case 'oversized-field':
      return {
        ...base,
        value: JSON.stringify({ ...event, notification: { title: 'x'.repeat(300), body: '' } }),
      };
    case 'unknown-platform':
      return { ...base, value: JSON.stringify({ ...event, platform: 'sms' }) };
    case 'unknown-schema-version':
      return { ...base, value: JSON.stringify({ ...event, schemaVersion: 2 }) };
    case 'invalid-utf8': {
      const bytes = Buffer.from(json);
      const at = bytes.indexOf('Flash');
      return {
        ...base,
        value: Buffer.concat([bytes.subarray(0, at), Buffer.from([0xc3, 0x28, 0xff]), bytes.subarray(at)]),
      };
    }
    case 'deep-nesting':
      return { ...base, value: `${'['.repeat(7000)}${']'.repeat(7000)}` };
    case 'huge-value':
      return {
        ...base,
        value: JSON.stringify({ ...event, data: { blob: 'x'.repeat(1_000_000) } }),
      };
    case 'huge-headers': {
      const headers: IHeaders = { 'x-blob': 'y'.repeat(200_000), 'x-bad-utf8': Buffer.from([0xff, 0xfe]) };
      for (let n = 0; n < 500; n++) headers[`x-h${n}`] = `value-${n}`;
      // A valid event: only its headers are out of bounds.
      return { ...base, value: json, headers };
    }
    case 'huge-key':
      return { ...base, key: 'k'.repeat(100_000), value: json };
    case 'spoofed-aqueduct-headers':
      // A producer pretending the message is a retry due in a year, from somewhere else.
      return {
        ...base,
        value: JSON.stringify({ ...event, platform: 'web' }),
        headers: {
          [HEADER.attempt]: '99',
          [HEADER.notBefore]: String(Date.now() + 365 * 24 * 3600 * 1000),
          [HEADER.originTopic]: 'elsewhere',
          [HEADER.originPartition]: '0',
          [HEADER.originOffset]: '0',
        },
      };
  }
}

function randomHex(bytes: number): string {
  return randomBytes(bytes).toString('hex');
}
