import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { Ajv } from 'ajv';
import { DCLinter } from 'dclint';
import { beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_KAFKA_VERSION } from '../../src/services/kafka-version.ts';
import {
  arrayAt,
  at,
  goDurationMs,
  isDocumentedEnv,
  isObject,
  type JsonObject,
  objectAt,
  parseComposeFile,
  repoRoot,
  stringAt,
  TOPIC_PARTITIONS,
} from '../helpers/deploy-contract.ts';

// docker-compose.yml, checked without a Docker engine: the Compose Specification's JSON schema, dclint's
// rules, and the cross-checks that keep the services wired to one another and to the runtime contract.

const COMPOSE_FILE = 'docker-compose.yml';

/** The Compose Specification schema shipped in dclint (see vendor/schemas/SOURCE.md). */
function composeSchema(): JsonObject {
  const dclintRoot = dirname(createRequire(import.meta.url).resolve('dclint/package.json'));
  const schema: unknown = JSON.parse(readFileSync(join(dclintRoot, 'schemas/compose.schema.json'), 'utf8'));
  if (!isObject(schema)) throw new Error('dclint ships no compose schema object');
  // Ajv knows draft-07 as http://json-schema.org/draft-07/schema; the file names the https alias.
  const { $schema: _draft, ...rest } = schema;
  return rest;
}

/** Validates a parsed Compose file; returns Ajv's errors as `path: message` lines. */
function composeErrors(compose: unknown): string[] {
  // The Compose schema uses keywords of later drafts (`deprecated`) as annotations: not strict here.
  const ajv = new Ajv({ allErrors: true, strict: false, allowUnionTypes: true });
  const validate = ajv.compile(composeSchema());
  if (validate(compose)) return [];
  return (validate.errors ?? []).map((error) => `${error.instancePath || '/'}: ${error.message ?? ''}`);
}

/** The command of a service as a list of words. */
function commandOf(service: unknown): string[] {
  const command = at(service, 'command');
  if (Array.isArray(command)) return command.map(String);
  if (typeof command === 'string') return command.split(/\s+/).filter(Boolean);
  return [];
}

/** The value following `flag` in a command line. */
function flagValue(command: string[], flag: string): string | undefined {
  const index = command.indexOf(flag);
  return index === -1 ? undefined : command[index + 1];
}

/** A service's environment as a name → value map (both Compose forms). */
function environmentOf(service: unknown): Record<string, string> {
  const environment = at(service, 'environment');
  if (Array.isArray(environment)) {
    return Object.fromEntries(
      environment.map((entry) => {
        const [name = '', ...value] = String(entry).split('=');
        return [name, value.join('=')];
      }),
    );
  }
  return Object.fromEntries(Object.entries(objectAt(service, 'environment')).map(([k, v]) => [k, String(v)]));
}

/** host:port of an http(s) URL. */
function hostPort(url: string): { host: string; port: string } {
  const parsed = new URL(url);
  return { host: parsed.hostname, port: parsed.port };
}

/** The container port of every `ports` entry of a service ("127.0.0.1:8080:8080" → "8080"). */
function containerPorts(service: unknown): string[] {
  return arrayAt(service, 'ports').map((entry) => String(entry).split('/')[0]?.split(':').pop() ?? '');
}

describe('docker-compose.yml', () => {
  let compose: JsonObject;
  let services: JsonObject;
  let aqueductServices: [string, JsonObject][];

  beforeAll(() => {
    const parsed = parseComposeFile(COMPOSE_FILE);
    if (!isObject(parsed)) throw new Error(`${COMPOSE_FILE} is not a mapping`);
    compose = parsed;
    services = objectAt(compose, 'services');
    // Aqueduct's own services are the ones built from the repository's Dockerfile.
    aqueductServices = Object.entries(services).filter(
      (entry): entry is [string, JsonObject] => isObject(entry[1]) && at(entry[1], 'build') !== undefined,
    );
  });

  it('is valid against the Compose Specification schema', () => {
    expect(composeErrors(compose)).toEqual([]);
  });

  it('the schema check rejects what Compose would reject (guards the guard)', () => {
    const broken = structuredClone(compose);
    const consumer = objectAt(broken, 'services', 'consumer');
    consumer.depends_on = { kafka: { condition: 'service_healthyy' } };
    consumer.replica = 3;
    expect(composeErrors(broken).length).toBeGreaterThanOrEqual(2);
  });

  it('passes dclint with its correctness and security rules as errors', () => {
    const linter = new DCLinter({
      rules: {
        'no-duplicate-container-names': 2,
        'no-duplicate-exported-ports': 2,
        'no-quotes-in-volumes': 2,
        // Published ports are bound to 127.0.0.1: a laptop demo exposes nothing to its network.
        'no-unbound-port-interfaces': 2,
        'no-version-field': 2,
        'require-project-name-field': 2,
        'require-quotes-in-ports': [2, { quoteType: 'double' }],
        'service-container-name-regex': 2,
        'service-image-require-explicit-tag': 2,
        // Off, with reason: every Aqueduct service both builds and names the one image (aqueduct:local)
        // so that it is built once and shared; the ordering rules are style, and this file is ordered
        // along the data flow (broker, stores, simulators, publisher, consumer, gateway) instead.
        'no-build-and-image': 0,
        'service-dependencies-alphabetical-order': 0,
        'service-keys-order': 0,
        'service-ports-alphabetical-order': 0,
        'services-alphabetical-order': 0,
        'top-level-properties-order': 0,
      },
      quiet: true,
      debug: false,
      exclude: [],
    });
    const [result] = linter.lintFiles([join(repoRoot, COMPOSE_FILE)], false);
    // dclint's message type does not resolve under NodeNext (extensionless imports in its .d.ts).
    const messages: { line: number; rule: string; message: string }[] = result?.messages ?? [];
    expect(result).toBeDefined();
    expect(messages.map((message) => `${message.line}: ${message.rule}: ${message.message}`)).toEqual([]);
  });

  it('sets on Aqueduct services only the documented environment variables', () => {
    expect(aqueductServices.map(([name]) => name).sort()).toEqual([
      'apns-sim',
      'consumer',
      'fcm-sim',
      'gateway',
      'publisher',
    ]);
    const undocumented = aqueductServices.flatMap(([name, service]) =>
      Object.keys(environmentOf(service))
        .filter((variable) => !isDocumentedEnv(variable))
        .map((variable) => `${name}: ${variable}`),
    );
    expect(undocumented).toEqual([]);
  });

  it('runs every Aqueduct service from the one image, with a verb of the CLI contract', () => {
    const verbs = Object.fromEntries(
      aqueductServices.map(([name, service]) => [name, commandOf(service)[0]]),
    );
    expect(verbs).toEqual({
      'fcm-sim': 'simulate',
      'apns-sim': 'simulate',
      publisher: 'publish',
      consumer: 'consume',
      gateway: 'serve',
    });
    for (const [, service] of aqueductServices) {
      expect(at(service, 'image')).toBe('aqueduct:local');
      expect(at(service, 'build', 'context')).toBe('.');
    }
  });

  it('runs Kafka from the official image of the default broker release in KRaft mode, advertised where the services look for it', () => {
    const kafka = services.kafka;
    expect(at(kafka, 'image')).toBe(`apache/kafka:${DEFAULT_KAFKA_VERSION}`);
    const environment = environmentOf(kafka);
    expect(environment.KAFKA_PROCESS_ROLES).toBe('broker,controller');
    const advertised = (environment.KAFKA_ADVERTISED_LISTENERS ?? '')
      .split(',')
      .map((l) => l.split('://')[1]);
    for (const [name, service] of aqueductServices) {
      expect(advertised, name).toContain(environmentOf(service).KAFKA_BROKERS);
    }
    expect(arrayAt(kafka, 'healthcheck', 'test').length).toBeGreaterThan(0);
  });

  it('publishes a burst on a topic with one partition per possible consumer', () => {
    const command = commandOf(services.publisher);
    expect(command.slice(0, 1)).toEqual(['publish']);
    expect(Number(flagValue(command, '--generate'))).toBe(20_000);
    expect(Number(flagValue(command, '--partitions'))).toBe(TOPIC_PARTITIONS);
    expect(command).toContain('--create-topic');
    expect(at(services.publisher, 'restart')).toBe('no');
    expect(at(services.publisher, 'depends_on', 'kafka', 'condition')).toBe('service_healthy');
  });

  it('runs three consumers in one group, no more than the partitions', () => {
    const consumer = services.consumer;
    const replicas = Number(at(consumer, 'deploy', 'replicas'));
    expect(replicas).toBe(3);
    expect(replicas).toBeLessThanOrEqual(TOPIC_PARTITIONS);
    expect(environmentOf(consumer).AQUEDUCT_GROUP_ID).toBeTruthy();
    // Several replicas cannot share a container name or a published port.
    expect(at(consumer, 'container_name')).toBeUndefined();
    expect(at(consumer, 'ports')).toBeUndefined();
  });

  it('points the consumers at the simulators, trusting the certificates they write', () => {
    const consumerEnv = environmentOf(services.consumer);
    const consumerMounts = arrayAt(services.consumer, 'volumes').map(String);
    for (const provider of ['fcm', 'apns'] as const) {
      const simName = `${provider}-sim`;
      const sim = services[simName];
      const command = commandOf(sim);
      expect(command.slice(0, 2)).toEqual(['simulate', provider]);
      const prefix = provider.toUpperCase();
      const endpoint = hostPort(consumerEnv[`${prefix}_ENDPOINT`] ?? '');
      expect(endpoint.host).toBe(simName);
      // The certificate names the simulator's host name and its --cert-host names; the consumer
      // connects to one of those.
      expect([at(sim, 'hostname'), flagValue(command, '--cert-host')]).toEqual([simName, simName]);
      expect(endpoint.port).toBe(flagValue(command, '--port'));
      // The simulator writes <cert-dir>/<provider>.pem; the consumer reads it from the shared volume.
      const certDir = flagValue(command, '--cert-dir') ?? '';
      expect(consumerEnv[`${prefix}_CA_FILE`]).toBe(`${certDir}/${provider}.pem`);
      const simVolume = arrayAt(sim, 'volumes')
        .map(String)
        .find((mount) => mount.split(':')[1] === certDir);
      expect(simVolume, `${simName} mounts a volume on ${certDir}`).toBeDefined();
      const volumeName = simVolume?.split(':')[0] ?? '';
      expect(consumerMounts.some((mount) => mount.startsWith(`${volumeName}:${certDir}`))).toBe(true);
      expect(Object.keys(objectAt(compose, 'volumes'))).toContain(volumeName);
      // The simulator enforces the typical provider limit, and the consumers are configured with it as
      // it is, as docs/configuration.md, "Choosing the limits", says.
      expect(flagValue(command, '--rate')).toBe('800');
      expect(flagValue(command, '--burst')).toBe('2000');
      expect(consumerEnv[`AQUEDUCT_${prefix}_RATE`]).toBe('800');
      expect(consumerEnv[`AQUEDUCT_${prefix}_BURST`]).toBe('2000');
      // Healthy means: certificate written and port open, which is what the consumers wait for.
      expect(JSON.stringify(at(sim, 'healthcheck', 'test'))).toContain(`${certDir}/${provider}.pem`);
      expect(at(services.consumer, 'depends_on', simName, 'condition')).toBe('service_healthy');
    }
  });

  it('sends every trace to Jaeger over OTLP and publishes its UI', () => {
    const jaeger = services.jaeger;
    expect(String(at(jaeger, 'image'))).toMatch(/^jaegertracing\/jaeger:2\.\d+\.\d+$/);
    expect(arrayAt(jaeger, 'ports').map(String)).toContain('127.0.0.1:16686:16686');
    for (const [name, service] of aqueductServices) {
      const environment = environmentOf(service);
      expect(hostPort(environment.OTEL_EXPORTER_OTLP_ENDPOINT ?? ''), name).toEqual({
        host: 'jaeger',
        port: '4318',
      });
      expect(environment.OTEL_EXPORTER_OTLP_PROTOCOL, name).toBe('http/protobuf');
      expect(environment.OTEL_SERVICE_NAME, name).toBeTruthy();
    }
  });

  it('runs the gateway API on its contract port, health-checked on its admin port', () => {
    const gateway = services.gateway;
    const port = environmentOf(gateway).AQUEDUCT_GATEWAY_PORT ?? '';
    const admin = environmentOf(gateway).AQUEDUCT_GATEWAY_ADMIN_PORT ?? '';
    expect(port).toBe('8080');
    expect(admin).not.toBe('');
    expect(admin).not.toBe(port);
    expect(containerPorts(gateway)).toContain(port);
    expect(JSON.stringify(at(gateway, 'healthcheck', 'test'))).toContain(`:${admin}/healthz`);
  });

  it('gives each draining service longer than its drain bound before Compose kills it', () => {
    for (const name of ['consumer', 'gateway']) {
      const drainMs = Number(environmentOf(services[name]).AQUEDUCT_SHUTDOWN_TIMEOUT_MS);
      expect(drainMs, name).toBeGreaterThan(0);
      expect(goDurationMs(stringAt(services[name], 'stop_grace_period')), name).toBeGreaterThan(drainMs);
    }
  });

  it('waits only on dependencies that can report health, and declares every health check well', () => {
    for (const [name, service] of Object.entries(services)) {
      for (const [dependency, condition] of Object.entries(objectAt(service, 'depends_on'))) {
        expect(Object.keys(services), `${name} depends on ${dependency}`).toContain(dependency);
        if (at(condition, 'condition') === 'service_healthy') {
          expect(arrayAt(services[dependency], 'healthcheck', 'test').length, dependency).toBeGreaterThan(0);
        }
      }
      const healthcheck = objectAt(service, 'healthcheck');
      for (const key of ['interval', 'timeout', 'start_period'] as const) {
        if (typeof healthcheck[key] === 'string') expect(goDurationMs(healthcheck[key])).toBeGreaterThan(0);
      }
    }
  });
});
