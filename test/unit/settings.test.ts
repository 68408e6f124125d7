import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { configReference, configSchema, idempotencyWindowOf, loadConfig } from '../../src/config.ts';
import { hashApiKey } from '../../src/gateway/api-keys.ts';
import { apiKeyHashes, gatewayConfigSchema, loadGatewayConfig } from '../../src/gateway/config.ts';
import { GATEWAY_ONLY_SETTINGS } from '../../src/settings.ts';
import { MAX_TIMER_MS } from '../../src/timer-delay.ts';

/** Writes `settings` as a `--config` JSON file and returns its path. */
function configFile(settings: Record<string, unknown>): string {
  const file = join(mkdtempSync(join(tmpdir(), 'aqueduct-settings-')), 'aqueduct.json');
  writeFileSync(file, JSON.stringify(settings));
  return file;
}

describe('a --config file', () => {
  const hash = hashApiKey('a-long-random-key');
  const both = {
    KAFKA_BROKERS: 'kafka-1:9092,kafka-2:9092',
    AQUEDUCT_TOPIC: 'pushes',
    AQUEDUCT_FCM_RATE: 500,
    AQUEDUCT_GATEWAY_PORT: 8081,
    AQUEDUCT_GATEWAY_API_KEYS: { [hash]: 'acme' },
    AQUEDUCT_GATEWAY_TENANT_LIMITS: { acme: { rate: 100 } },
  };

  it('configures both processes: the consumer ignores the gateway-only settings, the gateway the consumer-only ones', () => {
    const file = configFile(both);
    const consumer = loadConfig({}, file);
    expect(consumer.KAFKA_BROKERS).toEqual(['kafka-1:9092', 'kafka-2:9092']);
    expect(consumer.AQUEDUCT_TOPIC).toBe('pushes');
    expect(consumer.AQUEDUCT_FCM_RATE).toBe(500);
    expect(consumer).not.toHaveProperty('AQUEDUCT_GATEWAY_PORT');
    const gateway = loadGatewayConfig({}, file);
    expect(gateway.AQUEDUCT_TOPIC).toBe('pushes');
    expect(gateway.AQUEDUCT_GATEWAY_PORT).toBe(8081);
    expect([...apiKeyHashes(gateway)]).toEqual([[hash, 'acme']]);
    expect(gateway).not.toHaveProperty('AQUEDUCT_FCM_RATE');
  });

  it('lets the consumer ignore a gateway setting given as <NAME>_FILE, too', () => {
    const keys = configFile({ [hash]: 'acme' });
    expect(() => loadConfig({}, configFile({ AQUEDUCT_GATEWAY_API_KEYS_FILE: keys }))).not.toThrow();
  });

  it('still refuses keys that name no setting of any process, naming them', () => {
    const file = configFile({ ...both, AQUEDUCT_GATEWAY_PROT: 8081, KAFKA_BROKER: 'kafka-1:9092' });
    const refusal = `unknown keys in ${file}: AQUEDUCT_GATEWAY_PROT, KAFKA_BROKER`;
    expect(() => loadConfig({}, file)).toThrow(refusal);
    expect(() => loadGatewayConfig({}, file)).toThrow(refusal);
  });

  it.each([['null'], ['[1, 2]'], ['"KAFKA_BROKERS=kafka:9092"'], ['42']])(
    'refuses %s, which is no object of settings, in one line for either process',
    (text) => {
      const file = join(mkdtempSync(join(tmpdir(), 'aqueduct-settings-')), 'aqueduct.json');
      writeFileSync(file, text);
      const why = `cannot read config file ${file}: not a JSON object of settings ({"NAME": value, …})`;
      expect(refusalOf(() => loadConfig({}, file))).toBe(why);
      expect(refusalOf(() => loadGatewayConfig({}, file))).toBe(why);
    },
  );

  it("names as gateway-only exactly the settings of the gateway's schema that the consumer's lacks", () => {
    const gatewayOnly = Object.keys(gatewayConfigSchema.shape).filter(
      (name) => !(name in configSchema.shape),
    );
    expect([...GATEWAY_ONLY_SETTINGS].sort()).toEqual(gatewayOnly.sort());
  });
});

describe('AQUEDUCT_IDEMPOTENCY_WINDOW_SECONDS', () => {
  const windowOf = (env: NodeJS.ProcessEnv) => idempotencyWindowOf(loadConfig(env));

  it('defaults to a day, in the reference too', () => {
    expect(windowOf({})).toBe(86_400);
    const reference = configReference().find((r) => r.name === 'AQUEDUCT_IDEMPOTENCY_WINDOW_SECONDS');
    expect(reference?.defaultValue).toBe('86400');
  });

  it('is off at 0, and takes the value of its deprecated name only when not given itself', () => {
    expect(windowOf({ AQUEDUCT_IDEMPOTENCY_WINDOW_SECONDS: '0' })).toBe(0);
    expect(windowOf({ AQUEDUCT_DEDUPE_TTL_SECONDS: '3600' })).toBe(3600);
    expect(windowOf({ AQUEDUCT_IDEMPOTENCY_WINDOW_SECONDS: '0', AQUEDUCT_DEDUPE_TTL_SECONDS: '3600' })).toBe(
      0,
    );
    expect(() => loadConfig({ AQUEDUCT_DEDUPE_TTL_SECONDS: '0' })).toThrow(/AQUEDUCT_DEDUPE_TTL_SECONDS/);
  });
});

describe('KAFKA_BROKERS', () => {
  it('defaults to 127.0.0.1:9092 and takes host:port,host:port with spaces and empty entries ignored', () => {
    expect(loadConfig({}).KAFKA_BROKERS).toEqual(['127.0.0.1:9092']);
    expect(loadConfig({ KAFKA_BROKERS: ' kafka-1:9092, ,10.0.0.2:19092' }).KAFKA_BROKERS).toEqual([
      'kafka-1:9092',
      '10.0.0.2:19092',
    ]);
  });

  it.each([
    ['kafka-1', '"kafka-1" is not host:port'],
    ['kafka-1:0', 'port from 1 to 65535'],
    ['kafka-1:9092,kafka-2:90920', '"kafka-2:90920" is not host:port'],
    ['PLAINTEXT://kafka-1:9092', 'is not host:port'],
    [' , ', 'at least one host:port'],
  ])('refuses %j with a message naming the setting and the entry', (value, why) => {
    expect(() => loadConfig({ KAFKA_BROKERS: value })).toThrow(new RegExp(`KAFKA_BROKERS.*${why}`));
    expect(() => loadGatewayConfig({ KAFKA_BROKERS: value })).toThrow(new RegExp(`KAFKA_BROKERS.*${why}`));
  });
});

describe('REDIS_URL', () => {
  it('takes redis:// and rediss:// URLs, with credentials, a database number and options', () => {
    for (const url of [
      'redis://127.0.0.1:6379',
      'redis://h:1/',
      'redis://h:1/15',
      'rediss://u:p@h:1/0?family=6',
    ])
      expect(loadConfig({ REDIS_URL: url }).REDIS_URL).toBe(url);
  });

  it.each([
    ['localhost:6379', 'scheme localhost:// is not redis:// or rediss://'],
    ['http://127.0.0.1:6379', 'scheme http:// is not redis:// or rediss://'],
    ['redis://127.0.0.1:6379/cache', 'the path must be a database number'],
    ['redis:///0', 'no host'],
    ['redis://:secret@h:99999', 'not a URL'],
  ])('refuses %j before connecting, naming the setting and never quoting the URL', (url, why) => {
    for (const load of [loadConfig, loadGatewayConfig]) {
      const refusal = refusalOf(() => load({ REDIS_URL: url }));
      expect(refusal).toMatch(new RegExp(`^invalid configuration: REDIS_URL: ${why}`));
      expect(refusal).not.toContain('secret');
    }
  });
});

describe('a setting in milliseconds', () => {
  // Node arms a timer of more than 2^31 - 1 ms for 1 ms: a shutdown bound of 1e12 stopped the
  // consumer 1 ms after SIGTERM, a produce timeout of that size would answer every request 503.
  const inMs = (shape: Record<string, unknown>) => Object.keys(shape).filter((name) => name.endsWith('_MS'));
  const hash = hashApiKey('a-long-random-key');
  const gatewayEnv = { AQUEDUCT_GATEWAY_API_KEYS: JSON.stringify({ [hash]: 'acme' }) };

  it.each(inMs(configSchema.shape))('%s refuses more than a timer can wait, naming itself', (name) => {
    expect(refusalOf(() => loadConfig({ [name]: String(MAX_TIMER_MS + 1) }))).toMatch(
      new RegExp(`^invalid configuration: ${name}: Too big`),
    );
  });

  it.each(inMs(gatewayConfigSchema.shape))('%s refuses more than a timer can wait, naming itself', (name) => {
    expect(refusalOf(() => loadGatewayConfig({ ...gatewayEnv, [name]: String(MAX_TIMER_MS + 1) }))).toMatch(
      new RegExp(`^invalid configuration: ${name}: Too big`),
    );
  });

  it('takes the longest a timer can wait', () => {
    const longest = String(MAX_TIMER_MS);
    expect(loadConfig({ AQUEDUCT_SHUTDOWN_TIMEOUT_MS: longest }).AQUEDUCT_SHUTDOWN_TIMEOUT_MS).toBe(
      MAX_TIMER_MS,
    );
    const gateway = loadGatewayConfig({
      ...gatewayEnv,
      AQUEDUCT_GATEWAY_REQUEST_TIMEOUT_MS: longest,
      AQUEDUCT_GATEWAY_PRODUCE_TIMEOUT_MS: longest,
    });
    expect(gateway.AQUEDUCT_GATEWAY_PRODUCE_TIMEOUT_MS).toBe(MAX_TIMER_MS);
  });
});

describe('a true/false setting', () => {
  it.each(['KAFKA_TLS', 'AQUEDUCT_TENANT_FAIRNESS', 'AQUEDUCT_LIMITER_ENABLED', 'APNS_PRODUCTION'])(
    '%s takes true/false, 1/0, yes/no, and says so of anything else',
    (name) => {
      expect(loadConfig({ [name]: 'yes' })[name as 'KAFKA_TLS']).toBe(true);
      expect(loadConfig({ [name]: '0' })[name as 'KAFKA_TLS']).toBe(false);
      expect(refusalOf(() => loadConfig({ [name]: 'on' }))).toBe(
        `invalid configuration: ${name}: expected true or false (or 1/0, yes/no)`,
      );
    },
  );
});

describe('a number setting', () => {
  it('takes decimal text from the environment and a JSON number from a --config file', () => {
    expect(loadConfig({ AQUEDUCT_FCM_RATE: ' 12.5 ', AQUEDUCT_FCM_BURST: '1e3' })).toMatchObject({
      AQUEDUCT_FCM_RATE: 12.5,
      AQUEDUCT_FCM_BURST: 1000,
    });
    expect(loadConfig({}, configFile({ AQUEDUCT_HTTP_PORT: 0 })).AQUEDUCT_HTTP_PORT).toBe(0);
  });

  it.each([['0x1F90'], ['10s'], ['800/s'], [' ']])('refuses %j rather than read it as a number', (text) => {
    expect(refusalOf(() => loadConfig({ AQUEDUCT_HTTP_PORT: text }))).toBe(
      'invalid configuration: AQUEDUCT_HTTP_PORT: expected a decimal number',
    );
  });

  it('refuses true, false and arrays in a --config file rather than read them as 1, 0 and their item', () => {
    const file = configFile({
      AQUEDUCT_HTTP_PORT: false,
      AQUEDUCT_SEND_CONCURRENCY: true,
      AQUEDUCT_GATEWAY_PRODUCERS: [2],
    });
    expect(refusalOf(() => loadConfig({}, file))).toBe(
      'invalid configuration: AQUEDUCT_SEND_CONCURRENCY: Invalid input: expected number, received boolean; AQUEDUCT_HTTP_PORT: Invalid input: expected number, received boolean',
    );
    expect(refusalOf(() => loadGatewayConfig({}, file))).toBe(
      'invalid configuration: AQUEDUCT_GATEWAY_PRODUCERS: Invalid input: expected number, received array',
    );
  });
});

/** The message of the error `load` throws ('' when it throws none). */
function refusalOf(load: () => unknown): string {
  try {
    load();
    return '';
  } catch (error) {
    return (error as Error).message;
  }
}
