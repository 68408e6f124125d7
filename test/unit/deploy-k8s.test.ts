import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, posix } from 'node:path';
import { Ajv, type ValidateFunction } from 'ajv';
import { Deployment } from 'kubernetes-models/apps/v1/Deployment';
import { HorizontalPodAutoscaler } from 'kubernetes-models/autoscaling/v2/HorizontalPodAutoscaler';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1/PodDisruptionBudget';
import { ConfigMap } from 'kubernetes-models/v1/ConfigMap';
import { Namespace } from 'kubernetes-models/v1/Namespace';
import { Secret } from 'kubernetes-models/v1/Secret';
import { Service } from 'kubernetes-models/v1/Service';
import { beforeAll, describe, expect, it } from 'vitest';
import { readBackGroupId } from '../../src/config.ts';
import {
  arrayAt,
  at,
  HEALTH_PATHS,
  isDocumentedEnv,
  isObject,
  type JsonObject,
  objectAt,
  parseComposeFile,
  parseKubernetesFile,
  repoRoot,
  stringAt,
  TOPIC_PARTITIONS,
} from '../helpers/deploy-contract.ts';

// The Kubernetes manifests under k8s/, checked without a cluster: every YAML file parsed, every resource
// validated against the schema of its kind (Kubernetes' OpenAPI through kubernetes-models, KEDA's CRD
// vendored), every kustomization complete, and the cross-checks that tie the objects to one another and
// to the runtime contract.

/** One Kubernetes object and the file it came from. */
interface Manifest {
  file: string;
  object: JsonObject;
}

/** Where an object's fields are validated: a model of kubernetes-models, or the vendored KEDA schema. */
type Validator = (object: JsonObject) => string[];

/** Runs a kubernetes-models validator on a copy of the object; returns its message, if any. */
function modelValidator(create: () => { validate(): void }): Validator {
  return (object) => {
    const model = Object.assign(create(), structuredClone(object));
    try {
      model.validate();
      return [];
    } catch (error) {
      return [error instanceof Error ? error.message : String(error)];
    }
  };
}

/**
 * Closes every object schema that lists its properties, as the API server's strict field validation
 * (kubectl's default) does for a structural CRD schema: an unknown field is an error, not dropped.
 */
function strictSchema(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(strictSchema);
  if (!isObject(schema)) return schema;
  const result: JsonObject = Object.fromEntries(
    Object.entries(schema).map(([key, value]) => [key, strictSchema(value)]),
  );
  const open = schema['x-kubernetes-preserve-unknown-fields'] === true || 'additionalProperties' in schema;
  if (isObject(schema.properties) && !open) result.additionalProperties = false;
  return result;
}

/** Ajv for the KEDA CRD schema: OpenAPI's int32/date-time formats and the x-kubernetes markers. */
function kedaScaledObjectValidator(): Validator {
  const ajv = new Ajv({ allErrors: true, strict: true });
  ajv.addFormat('int32', {
    type: 'number',
    validate: (value: number) => Number.isInteger(value) && value >= -(2 ** 31) && value < 2 ** 31,
  });
  ajv.addFormat('date-time', (value: string) => !Number.isNaN(Date.parse(value)));
  ajv.addVocabulary([
    'x-kubernetes-list-type',
    'x-kubernetes-int-or-string',
    'x-kubernetes-preserve-unknown-fields',
  ]);
  const schema: unknown = JSON.parse(
    readFileSync(join(repoRoot, 'vendor/schemas/keda/scaledobject-v1alpha1.schema.json'), 'utf8'),
  );
  if (!isObject(schema)) throw new Error('the vendored KEDA schema is not an object');
  const validate: ValidateFunction = ajv.compile(strictSchema(schema) as JsonObject);
  return (object) =>
    validate(object)
      ? []
      : (validate.errors ?? []).map((error) => `${error.instancePath || '/'}: ${error.message ?? ''}`);
}

/** The validator of every apiVersion/kind the manifests may use; any other kind fails the test. */
const validators: Record<string, Validator> = {
  'v1/Namespace': modelValidator(() => new Namespace()),
  'v1/ConfigMap': modelValidator(() => new ConfigMap()),
  'v1/Secret': modelValidator(() => new Secret()),
  'v1/Service': modelValidator(() => new Service()),
  'apps/v1/Deployment': modelValidator(() => new Deployment()),
  'policy/v1/PodDisruptionBudget': modelValidator(() => new PodDisruptionBudget()),
  'autoscaling/v2/HorizontalPodAutoscaler': modelValidator(() => new HorizontalPodAutoscaler()),
  'keda.sh/v1alpha1/ScaledObject': kedaScaledObjectValidator(),
};

/** Schema errors of one object, each prefixed with where it is. */
function schemaErrors(manifest: Manifest): string[] {
  const type = `${String(manifest.object.apiVersion)}/${String(manifest.object.kind)}`;
  const where = `${manifest.file} ${type} ${String(at(manifest.object, 'metadata', 'name'))}`;
  const validator = validators[type];
  if (!validator) return [`${where}: no schema for this kind`];
  const errors = validator(manifest.object);
  if (typeof at(manifest.object, 'metadata', 'name') !== 'string') errors.push('metadata.name is required');
  return errors.map((error) => `${where}: ${error}`);
}

/** Every .yaml/.yml file under k8s/, as paths from the repository root (posix separators). */
function k8sYamlFiles(): string[] {
  return readdirSync(join(repoRoot, 'k8s'), { recursive: true, encoding: 'utf8' })
    .filter((file) => /\.ya?ml$/.test(file))
    .map((file) => posix.join('k8s', file.split('\\').join('/')))
    .sort();
}

/** The one object a file holds (manifests here keep one object per file). */
function onlyObject(file: string): JsonObject {
  const documents = parseKubernetesFile(file);
  const [object] = documents;
  if (documents.length !== 1 || !isObject(object)) throw new Error(`${file}: expected exactly one object`);
  return object;
}

const KUSTOMIZATIONS = ['k8s/base', 'k8s/alternatives/hpa'];

describe('k8s manifests', () => {
  let files: string[];
  /** What each kustomization directory lists, resolved to files (and base directories). */
  let listed: Map<string, { resources: string[]; patches: string[] }>;
  /** Every object of the base (what `kubectl apply -k k8s/base` creates). */
  let base: Manifest[];
  let overlayHpa: Manifest[];
  let examples: Manifest[];

  const find = (manifests: Manifest[], kind: string, name: string): JsonObject => {
    const found = manifests.find(
      (manifest) => manifest.object.kind === kind && at(manifest.object, 'metadata', 'name') === name,
    );
    if (!found) throw new Error(`no ${kind} ${name}`);
    return found.object;
  };

  beforeAll(() => {
    files = k8sYamlFiles();
    listed = new Map();
    for (const directory of KUSTOMIZATIONS) {
      const kustomization = onlyObject(`${directory}/kustomization.yaml`);
      const resolve = (entry: unknown) => posix.normalize(posix.join(directory, String(entry)));
      listed.set(directory, {
        resources: arrayAt(kustomization, 'resources').map(resolve),
        patches: arrayAt(kustomization, 'patches').map((patch) => resolve(at(patch, 'path'))),
      });
    }
    const manifestsOf = (directory: string): Manifest[] =>
      (listed.get(directory)?.resources ?? [])
        .filter((resource) => files.includes(resource))
        .map((file) => ({ file, object: onlyObject(file) }));
    base = manifestsOf('k8s/base');
    overlayHpa = manifestsOf('k8s/alternatives/hpa');
    examples = files
      .filter((file) => file.startsWith('k8s/examples/'))
      .map((file) => ({ file, object: onlyObject(file) }));
  });

  it('parses every YAML file under k8s/', () => {
    expect(files.length).toBeGreaterThanOrEqual(15);
    for (const file of files) expect(parseKubernetesFile(file).length, file).toBeGreaterThan(0);
  });

  it('lists every file of a kustomization directory in it, and only files that exist', () => {
    for (const directory of KUSTOMIZATIONS) {
      const entries = listed.get(directory);
      const inDirectory = files.filter(
        (file) => dirname(file) === directory && posix.basename(file) !== 'kustomization.yaml',
      );
      expect(
        [...(entries?.resources ?? []), ...(entries?.patches ?? [])]
          .filter((e) => inDirectory.includes(e))
          .sort(),
      ).toEqual(inDirectory);
      for (const entry of [...(entries?.resources ?? []), ...(entries?.patches ?? [])]) {
        const isKustomizationDir = KUSTOMIZATIONS.includes(entry);
        expect(files.includes(entry) || isKustomizationDir, `${directory} lists ${entry}`).toBe(true);
      }
    }
    // Every YAML file is in a kustomization or an example: nothing lies around unused.
    const accountedFor = new Set([
      ...KUSTOMIZATIONS.map((directory) => `${directory}/kustomization.yaml`),
      ...[...listed.values()].flatMap((entries) => [...entries.resources, ...entries.patches]),
      ...examples.map((example) => example.file),
    ]);
    expect(files.filter((file) => !accountedFor.has(file))).toEqual([]);
  });

  it('validates every resource against the schema of its kind', () => {
    const all = [...base, ...overlayHpa, ...examples];
    // 10 in the base, the consumer HPA of the alternative, the example Secret.
    expect(all.length).toBe(12);
    expect(all.flatMap(schemaErrors)).toEqual([]);
  });

  it('the schema check rejects broken objects (guards the guard)', () => {
    const deployment = structuredClone(find(base, 'Deployment', 'aqueduct-consumer'));
    const container = objectAt(deployment, 'spec', 'template', 'spec', 'containers', 0);
    container.ports = [{ name: 'http-metrics', containerPort: 'nine' }];
    container.resources = { limits: { memory: 'lots' } };
    const [deploymentError = ''] = schemaErrors({ file: 'mutated', object: deployment });
    expect(deploymentError).toContain('containers/0/ports/0/containerPort must be integer');
    expect(deploymentError).toContain('containers/0/resources/limits/memory must match format "quantity"');

    const scaledObject = structuredClone(find(base, 'ScaledObject', 'aqueduct-consumer'));
    const spec = objectAt(scaledObject, 'spec');
    spec.maxReplicas = spec.maxReplicaCount;
    delete spec.maxReplicaCount;
    spec.pollingInterval = '15';
    expect(schemaErrors({ file: 'mutated', object: scaledObject }).sort()).toEqual([
      'mutated keda.sh/v1alpha1/ScaledObject aqueduct-consumer: /spec/pollingInterval: must be integer',
      'mutated keda.sh/v1alpha1/ScaledObject aqueduct-consumer: /spec: must NOT have additional properties',
    ]);
    expect(schemaErrors({ file: 'mutated', object: { apiVersion: 'v1', kind: 'Pod' } })).toEqual([
      'mutated v1/Pod undefined: no schema for this kind',
    ]);
  });

  describe('the consumer', () => {
    let config: Record<string, string>;
    let deployment: JsonObject;
    let container: JsonObject;

    beforeAll(() => {
      config = Object.fromEntries(
        Object.entries(objectAt(find(base, 'ConfigMap', 'aqueduct-config'), 'data')).map(([k, v]) => [
          k,
          String(v),
        ]),
      );
      deployment = find(base, 'Deployment', 'aqueduct-consumer');
      container = objectAt(deployment, 'spec', 'template', 'spec', 'containers', 0);
    });

    it('is scaled by KEDA on the lag of its own group and topic, up to one consumer per partition', () => {
      const scaledObject = find(base, 'ScaledObject', 'aqueduct-consumer');
      expect(at(scaledObject, 'spec', 'scaleTargetRef', 'name')).toBe(at(deployment, 'metadata', 'name'));
      const triggers = arrayAt(scaledObject, 'spec', 'triggers');
      expect(triggers.map((trigger) => at(trigger, 'type'))).toEqual(['kafka', 'kafka']);
      // The topic, and its deferred topic where a tenant's excess over its fair share waits.
      expect(triggers.map((trigger) => objectAt(trigger, 'metadata').topic)).toEqual([
        config.AQUEDUCT_TOPIC,
        `${config.AQUEDUCT_TOPIC}.deferred`,
      ]);
      // Each read by its own group (the deferred topic by the read-back group).
      expect(triggers.map((trigger) => objectAt(trigger, 'metadata').consumerGroup)).toEqual([
        config.AQUEDUCT_GROUP_ID,
        readBackGroupId(config.AQUEDUCT_GROUP_ID ?? ''),
      ]);
      for (const trigger of triggers) {
        const metadata = objectAt(trigger, 'metadata');
        expect(metadata.bootstrapServers).toBe(config.KAFKA_BROKERS);
        expect(Number(metadata.lagThreshold)).toBeGreaterThan(0);
        // The consumers read a partition without a committed offset from its start (kafkajs
        // `fromBeginning: true`): KEDA must count its lag the same way, not as 1 (its default, `latest`).
        expect(metadata.offsetResetPolicy).toBe('earliest');
      }
      expect(at(scaledObject, 'spec', 'maxReplicaCount')).toBe(TOPIC_PARTITIONS);
      expect(Number(at(scaledObject, 'spec', 'minReplicaCount'))).toBeGreaterThanOrEqual(1);
      // The same partition count the compose publisher creates the topic with.
      const publisher = arrayAt(parseComposeFile('docker-compose.yml'), 'services', 'publisher', 'command');
      expect(Number(publisher[publisher.indexOf('--partitions') + 1])).toBe(TOPIC_PARTITIONS);
    });

    it('has a CPU HPA alternative without KEDA, bounded the same way', () => {
      const hpa = find(overlayHpa, 'HorizontalPodAutoscaler', 'aqueduct-consumer');
      expect(at(hpa, 'spec', 'scaleTargetRef')).toEqual({
        apiVersion: 'apps/v1',
        kind: 'Deployment',
        name: at(deployment, 'metadata', 'name'),
      });
      expect(at(hpa, 'spec', 'maxReplicas')).toBe(TOPIC_PARTITIONS);
      expect(arrayAt(hpa, 'spec', 'metrics').map((metric) => at(metric, 'resource', 'name'))).toEqual([
        'cpu',
      ]);
      // The overlay removes the ScaledObject: two autoscalers must never drive one Deployment.
      const patch = onlyObject('k8s/alternatives/hpa/delete-scaledobject.yaml');
      expect(patch.$patch).toBe('delete');
      const target = find(base, String(patch.kind), stringAt(patch, 'metadata', 'name'));
      expect(target.apiVersion).toBe(patch.apiVersion);
      expect(target.kind).toBe('ScaledObject');
    });

    it('leaves the replica count to the autoscaler and runs `consume`', () => {
      expect(at(deployment, 'spec', 'replicas')).toBeUndefined();
      expect(container.args).toEqual(['consume']);
    });

    it('probes /healthz and /readyz and is scraped on AQUEDUCT_HTTP_PORT', () => {
      expectProbesAndScrape(deployment, container, Number(config.AQUEDUCT_HTTP_PORT));
      const service = find(base, 'Service', 'aqueduct-consumer-metrics');
      expect(arrayAt(service, 'spec', 'ports').map((port) => at(port, 'port'))).toEqual([
        Number(config.AQUEDUCT_HTTP_PORT),
      ]);
    });

    it('gets longer than preStop plus the drain bound before SIGKILL', () => {
      expectGraceBeyondDrain(deployment, container, Number(config.AQUEDUCT_SHUTDOWN_TIMEOUT_MS));
    });

    it('finds its credentials where the ConfigMap says, mounted from the Secret', () => {
      const mounts = arrayAt(container, 'volumeMounts');
      const volumes = arrayAt(deployment, 'spec', 'template', 'spec', 'volumes');
      for (const variable of ['GOOGLE_APPLICATION_CREDENTIALS', 'APNS_KEY_FILE']) {
        const path = config[variable] ?? '';
        const mount = mounts.find((m) => path.startsWith(`${String(at(m, 'mountPath'))}/`));
        expect(mount, `${variable}=${path} lies under a mount`).toBeDefined();
        const volume = volumes.find((v) => at(v, 'name') === at(mount, 'name'));
        const secretName = String(at(volume, 'secret', 'secretName'));
        const itemPath = path.slice(String(at(mount, 'mountPath')).length + 1);
        const item = arrayAt(volume, 'secret', 'items').find((i) => at(i, 'path') === itemPath);
        expect(item, `${variable}: the Secret's item ${itemPath}`).toBeDefined();
        expect(Object.keys(objectAt(find(examples, 'Secret', secretName), 'stringData'))).toContain(
          at(item, 'key'),
        );
      }
    });
  });

  describe('the gateway', () => {
    let config: Record<string, string>;
    let deployment: JsonObject;
    let container: JsonObject;

    beforeAll(() => {
      config = Object.fromEntries(
        Object.entries(objectAt(find(base, 'ConfigMap', 'aqueduct-config'), 'data')).map(([k, v]) => [
          k,
          String(v),
        ]),
      );
      deployment = find(base, 'Deployment', 'aqueduct-gateway');
      container = objectAt(deployment, 'spec', 'template', 'spec', 'containers', 0);
    });

    it('runs `serve`, scaled by a CPU HPA, and never below one pod in a drain', () => {
      expect(container.args).toEqual(['serve']);
      expect(at(deployment, 'spec', 'replicas')).toBeUndefined();
      const hpa = find(base, 'HorizontalPodAutoscaler', 'aqueduct-gateway');
      expect(at(hpa, 'spec', 'scaleTargetRef', 'name')).toBe('aqueduct-gateway');
      expect(arrayAt(hpa, 'spec', 'metrics').map((metric) => at(metric, 'resource', 'name'))).toEqual([
        'cpu',
      ]);
      expect(Number(at(hpa, 'spec', 'minReplicas'))).toBeGreaterThanOrEqual(2);
      expect(at(find(base, 'PodDisruptionBudget', 'aqueduct-gateway'), 'spec', 'minAvailable')).toBe(1);
    });

    it('probes /healthz and /readyz and is scraped on AQUEDUCT_GATEWAY_ADMIN_PORT', () => {
      expectProbesAndScrape(deployment, container, Number(config.AQUEDUCT_GATEWAY_ADMIN_PORT));
    });

    it('exposes the API port in its Service and never the admin port', () => {
      const ports = arrayAt(container, 'ports');
      const portNamed = (name: string) =>
        Number(
          at(
            ports.find((p) => at(p, 'name') === name),
            'containerPort',
          ),
        );
      expect(portNamed('http')).toBe(Number(config.AQUEDUCT_GATEWAY_PORT));
      expect(portNamed('admin')).toBe(Number(config.AQUEDUCT_GATEWAY_ADMIN_PORT));
      expect(config.AQUEDUCT_GATEWAY_ADMIN_PORT).not.toBe(config.AQUEDUCT_GATEWAY_PORT);
      const service = find(base, 'Service', 'aqueduct-gateway');
      const targets = arrayAt(service, 'spec', 'ports').map((port) => at(port, 'targetPort'));
      expect(targets).toEqual(['http']);
      for (const manifest of base.filter((m) => m.object.kind === 'Service')) {
        for (const port of arrayAt(manifest.object, 'spec', 'ports')) {
          expect([at(port, 'targetPort'), at(port, 'port')], manifest.file).not.toContain('admin');
          expect(Number(at(port, 'port')), manifest.file).not.toBe(
            Number(config.AQUEDUCT_GATEWAY_ADMIN_PORT),
          );
        }
      }
    });

    it('gets longer than preStop plus the drain bound before SIGKILL', () => {
      expectGraceBeyondDrain(deployment, container, Number(config.AQUEDUCT_SHUTDOWN_TIMEOUT_MS));
    });
  });

  it('runs both Deployments non-root, read-only, without privileges, with requests and limits', () => {
    for (const deployment of base.filter((manifest) => manifest.object.kind === 'Deployment')) {
      const pod = objectAt(deployment.object, 'spec', 'template', 'spec');
      expect(at(pod, 'securityContext', 'runAsNonRoot'), deployment.file).toBe(true);
      expect(Number(at(pod, 'securityContext', 'runAsUser')), deployment.file).toBeGreaterThan(0);
      expect(at(pod, 'automountServiceAccountToken'), deployment.file).toBe(false);
      for (const container of arrayAt(pod, 'containers')) {
        expect(at(container, 'securityContext'), deployment.file).toEqual({
          allowPrivilegeEscalation: false,
          readOnlyRootFilesystem: true,
          capabilities: { drop: ['ALL'] },
        });
        for (const bound of ['requests', 'limits']) {
          expect(Object.keys(objectAt(container, 'resources', bound)).sort(), deployment.file).toEqual([
            'cpu',
            'memory',
          ]);
        }
        // The image the kustomization rewrites to the registry's.
        const images = arrayAt(onlyObject('k8s/base/kustomization.yaml'), 'images').map((i) => at(i, 'name'));
        expect(images, deployment.file).toContain(at(container, 'image'));
      }
    }
  });

  it('sets only documented environment variables, from objects and keys that exist', () => {
    const configMaps = base.filter((manifest) => manifest.object.kind === 'ConfigMap');
    const undocumented = configMaps.flatMap((configMap) =>
      Object.keys(objectAt(configMap.object, 'data'))
        .filter((key) => !isDocumentedEnv(key))
        .map((key) => `${configMap.file}: ${key}`),
    );
    for (const deployment of base.filter((manifest) => manifest.object.kind === 'Deployment')) {
      for (const container of arrayAt(deployment.object, 'spec', 'template', 'spec', 'containers')) {
        for (const variable of arrayAt(container, 'env')) {
          const name = String(at(variable, 'name'));
          if (!isDocumentedEnv(name)) undocumented.push(`${deployment.file}: ${name}`);
          const secretRef = at(variable, 'valueFrom', 'secretKeyRef');
          if (secretRef !== undefined) {
            const secret = find(examples, 'Secret', stringAt(secretRef, 'name'));
            expect(Object.keys(objectAt(secret, 'stringData'))).toContain(at(secretRef, 'key'));
          }
        }
        for (const source of arrayAt(container, 'envFrom')) {
          // envFrom turns every key into a variable: only the ConfigMap (checked above) may be a source.
          expect(Object.keys(objectAt(source)), deployment.file).toEqual(['configMapRef']);
          find(base, 'ConfigMap', stringAt(source, 'configMapRef', 'name'));
        }
      }
    }
    expect(undocumented).toEqual([]);
  });

  it('selects the right pods with every Service and PodDisruptionBudget', () => {
    const podLabels = base
      .filter((manifest) => manifest.object.kind === 'Deployment')
      .map((manifest) => objectAt(manifest.object, 'spec', 'template', 'metadata', 'labels'));
    const matches = (selector: JsonObject) =>
      podLabels.filter((labels) => Object.entries(selector).every(([key, value]) => labels[key] === value))
        .length;
    for (const { file, object } of base) {
      if (object.kind === 'Service') expect(matches(objectAt(object, 'spec', 'selector')), file).toBe(1);
      if (object.kind === 'PodDisruptionBudget') {
        expect(matches(objectAt(object, 'spec', 'selector', 'matchLabels')), file).toBe(1);
      }
    }
  });

  it('keeps the example Secret free of real secrets, and out of the kustomizations', () => {
    expect(examples.map((example) => example.file)).toEqual(['k8s/examples/secret.example.yaml']);
    for (const { file, object } of examples) {
      expect(object.data, file).toBeUndefined();
      for (const [key, value] of Object.entries(objectAt(object, 'stringData'))) {
        const text = String(value);
        expect(text, `${file} ${key}`).not.toMatch(/PRIVATE KEY|"private_key"\s*:\s*"-/);
        // Either a placeholder, or a URL without credentials.
        expect(text.includes('REPLACE_ME') || !text.includes('@'), `${file} ${key}`).toBe(true);
      }
      expect(at(object, 'metadata', 'namespace')).toBe(
        at(onlyObject('k8s/base/kustomization.yaml'), 'namespace'),
      );
    }
  });
});

/** The container port number a probe or Service names (by name or number). */
function containerPortNumber(container: JsonObject, port: unknown): number | undefined {
  if (typeof port === 'number') return port;
  const found = arrayAt(container, 'ports').find((candidate) => at(candidate, 'name') === port);
  const number = at(found, 'containerPort');
  return typeof number === 'number' ? number : undefined;
}

/** Probes on the telemetry contract's paths and Prometheus annotations, all on `port`. */
function expectProbesAndScrape(deployment: JsonObject, container: JsonObject, port: number): void {
  expect(port).toBeGreaterThan(0);
  const probes = {
    startupProbe: HEALTH_PATHS.live,
    livenessProbe: HEALTH_PATHS.live,
    readinessProbe: HEALTH_PATHS.ready,
  };
  for (const [probe, path] of Object.entries(probes)) {
    expect(at(container, probe, 'httpGet', 'path'), probe).toBe(path);
    expect(containerPortNumber(container, at(container, probe, 'httpGet', 'port')), probe).toBe(port);
  }
  expect(objectAt(deployment, 'spec', 'template', 'metadata', 'annotations')).toEqual({
    'prometheus.io/scrape': 'true',
    'prometheus.io/port': String(port),
    'prometheus.io/path': HEALTH_PATHS.metrics,
  });
}

/** terminationGracePeriodSeconds > preStop sleep + drain bound. */
function expectGraceBeyondDrain(deployment: JsonObject, container: JsonObject, drainMs: number): void {
  expect(drainMs).toBeGreaterThan(0);
  const preStop = arrayAt(container, 'lifecycle', 'preStop', 'exec', 'command');
  expect(preStop[0]).toBe('sleep');
  const preStopMs = Number(preStop[1]) * 1000;
  expect(preStopMs).toBeGreaterThan(0);
  const graceMs = Number(at(deployment, 'spec', 'template', 'spec', 'terminationGracePeriodSeconds')) * 1000;
  expect(graceMs).toBeGreaterThan(preStopMs + drainMs);
}
