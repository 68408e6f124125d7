import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { ValidationSeverity, type ValidatorSettings, validate } from 'dockerfile-utils';
import { describe, expect, it } from 'vitest';
import { HEALTH_PATHS, readRepoFile, repoRoot } from '../helpers/deploy-contract.ts';

// The Dockerfile and .dockerignore, checked without a Docker engine: dockerfile-utils (the Dockerfile
// validator of the VS Code Docker tooling) for syntax and instruction errors, then the structure this
// project needs, then whether the production-only image can actually start: every package the CLI
// imports at start-up must be a production dependency.

/** One instruction of a Dockerfile, continuation lines joined. */
interface Instruction {
  keyword: string;
  args: string;
  line: number;
}

/** Splits a Dockerfile into instructions (comments and parser directives dropped). */
function instructions(text: string): Instruction[] {
  const result: Instruction[] = [];
  let pending: Instruction | undefined;
  for (const [index, raw] of text.split('\n').entries()) {
    const line = raw.trim();
    if (pending) {
      if (line.startsWith('#')) continue;
      const continued = line.endsWith('\\');
      pending.args = `${pending.args} ${continued ? line.slice(0, -1).trim() : line}`.trim();
      if (!continued) {
        result.push(pending);
        pending = undefined;
      }
      continue;
    }
    if (line === '' || line.startsWith('#')) continue;
    const [keyword = '', ...rest] = line.split(/\s+/);
    const args = rest.join(' ');
    const instruction = {
      keyword: keyword.toUpperCase(),
      args: args.replace(/\\$/, '').trim(),
      line: index + 1,
    };
    if (args.endsWith('\\')) pending = instruction;
    else result.push(instruction);
  }
  return result;
}

/** The instructions of each build stage, by the order of the FROM lines. */
function stages(all: Instruction[]): Instruction[][] {
  const result: Instruction[][] = [];
  for (const instruction of all) {
    if (instruction.keyword === 'FROM') result.push([]);
    result.at(-1)?.push(instruction);
  }
  return result;
}

/** The exec form of an instruction (a JSON array), or undefined for the shell form. */
function execForm(args: string): string[] | undefined {
  if (!args.startsWith('[')) return undefined;
  const parsed: unknown = JSON.parse(args);
  return Array.isArray(parsed) ? parsed.map(String) : undefined;
}

/** Every rule of dockerfile-utils' validator, as an error. */
const STRICT: ValidatorSettings = {
  deprecatedMaintainer: ValidationSeverity.ERROR,
  directiveCasing: ValidationSeverity.ERROR,
  emptyContinuationLine: ValidationSeverity.ERROR,
  instructionCasing: ValidationSeverity.ERROR,
  instructionCmdMultiple: ValidationSeverity.ERROR,
  instructionEntrypointMultiple: ValidationSeverity.ERROR,
  instructionHealthcheckMultiple: ValidationSeverity.ERROR,
  instructionJSONInSingleQuotes: ValidationSeverity.ERROR,
  instructionWorkdirRelative: ValidationSeverity.ERROR,
};

/** Whether the build context admits a repository path under .dockerignore's allow-list. */
function admittedByDockerignore(path: string): boolean {
  const patterns = readRepoFile('.dockerignore')
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line !== '' && !line.startsWith('#'));
  // Only the allow-list form this repository uses: `*` then `!name` for each admitted top-level entry.
  let admitted = true;
  for (const pattern of patterns) {
    if (pattern === '*') admitted = false;
    else if (pattern.startsWith('!')) {
      const entry = pattern.slice(1).replace(/\/$/, '');
      if (path === entry || path.startsWith(`${entry}/`)) admitted = true;
    } else if (path === pattern || path.startsWith(`${pattern}/`)) admitted = false;
  }
  return admitted;
}

/**
 * What the start-up code needs at run time, following static imports from `entry`: the bare package
 * names it imports, and the repository files it loads (imported modules and `new URL('…',
 * import.meta.url)` reads). `import type` is erased by Node's type stripping and does not count; a
 * dynamic `import()` inside code is an optional path (the test-only containers runtime) and is not
 * followed, while a top-level `await import('…')` statement (the bin's, after its Node version check)
 * always runs and is.
 */
function runtimeNeeds(entry: string): { packages: Set<string>; files: Set<string> } {
  const packages = new Set<string>();
  const files = new Set<string>();
  const queue = [entry];
  while (queue.length > 0) {
    const file = queue.pop() ?? '';
    if (files.has(file)) continue;
    files.add(file);
    if (!/\.[cm]?[jt]s$/.test(file)) continue;
    const source = readFileSync(join(repoRoot, file), 'utf8');
    const specifiers = [
      ...source.matchAll(/^\s*(?:import|export)\s+(?!type\s)[^'";]*?\sfrom\s+['"]([^'"]+)['"]/gm),
      ...source.matchAll(/^\s*import\s+['"]([^'"]+)['"]/gm),
      ...source.matchAll(/^await import\(\s*['"]([^'"]+)['"]\s*\)/gm),
    ].map((match) => match[1] ?? '');
    for (const specifier of specifiers) {
      if (specifier.startsWith('node:')) continue;
      if (specifier.startsWith('.')) {
        queue.push(
          relative(repoRoot, join(repoRoot, dirname(file), specifier))
            .split('\\')
            .join('/'),
        );
      } else {
        const parts = specifier.split('/');
        packages.add(specifier.startsWith('@') ? parts.slice(0, 2).join('/') : (parts[0] ?? specifier));
      }
    }
    // A template (`../../lua/${name}.lua`) counts by its directory: the part before the first `${`.
    for (const match of source.matchAll(
      /new URL\(\s*['"`](\.{1,2}\/[^'"`]+)['"`]\s*,\s*import\.meta\.url\s*\)/g,
    )) {
      const target = (match[1] ?? '').split('${')[0] ?? '';
      const resolved = relative(repoRoot, join(repoRoot, dirname(file), target))
        .split('\\')
        .join('/');
      files.add(target.endsWith('/') ? `${resolved}/` : resolved);
    }
  }
  return { packages, files };
}

describe('Dockerfile', () => {
  const text = readRepoFile('Dockerfile');
  const all = instructions(text);
  const [deps = [], runtime = [], ...extra] = stages(all);

  it('passes the dockerfile-utils validator with every rule as an error', () => {
    expect(validate(text, STRICT).map((d) => `${d.range.start.line + 1}: ${d.message}`)).toEqual([]);
  });

  it('the validator and the parser catch a broken Dockerfile (guards the guard)', () => {
    const broken = `${text}\nCMD ['consume']\nWORKDIR app\nHEALTHCHECK --intervall=1s CMD true\n`;
    expect(validate(broken, STRICT).length).toBeGreaterThanOrEqual(3);
    expect(instructions('RUN a \\\n  # note\n  b\nCMD ["x"]\n')).toEqual([
      { keyword: 'RUN', args: 'a b', line: 1 },
      { keyword: 'CMD', args: '["x"]', line: 4 },
    ]);
  });

  it('builds in two stages on node:24-slim', () => {
    expect(extra).toEqual([]);
    // By tag, or by the digest the registry gives for it (written on both lines alike).
    expect(deps[0]?.args).toMatch(/^node:24-slim(@sha256:[0-9a-f]{64})? AS deps$/);
    expect(runtime[0]?.args).toBe((deps[0]?.args ?? '').replace(/ AS deps$/, ' AS runtime'));
  });

  it('installs production dependencies only, from the lockfile', () => {
    const runs = all.filter((instruction) => instruction.keyword === 'RUN').map((run) => run.args);
    // npm ci: the lockfile exactly, never a resolution of its own.
    expect(runs.some((run) => /\bnpm ci\b.*--omit=dev/.test(run))).toBe(true);
    // Every install in the image leaves development dependencies out.
    expect(runs.filter((run) => /\bnpm (install|i|ci)\b/.test(run) && !/--omit=dev/.test(run))).toEqual([]);
    expect(deps.some((i) => i.keyword === 'COPY' && i.args === 'package.json package-lock.json ./')).toBe(
      true,
    );
    expect(
      runtime.some((i) => i.keyword === 'COPY' && i.args.startsWith('--from=deps /app/node_modules')),
    ).toBe(true);
  });

  it('runs as a non-root user', () => {
    const users = runtime.filter((instruction) => instruction.keyword === 'USER').map((user) => user.args);
    expect(users.length).toBeGreaterThan(0);
    expect(users.at(-1)).not.toMatch(/^(root|0)(:|$)/);
  });

  it('checks its health with node against /healthz on AQUEDUCT_HTTP_PORT', () => {
    const [healthcheck, ...more] = runtime.filter((instruction) => instruction.keyword === 'HEALTHCHECK');
    expect(more).toEqual([]);
    const command = execForm(healthcheck?.args.slice(healthcheck.args.indexOf('CMD') + 3).trim() ?? '');
    expect(command?.slice(0, 2)).toEqual(['node', '-e']);
    expect(command?.[2]).toContain(HEALTH_PATHS.live);
    expect(command?.[2]).toContain('process.env.AQUEDUCT_HTTP_PORT');
  });

  it('starts the CLI under tini, `consume` by default', () => {
    const last = (keyword: string) => runtime.filter((i) => i.keyword === keyword).at(-1)?.args ?? '';
    // Node is not PID 1: the kernel would drop every signal PID 1 has no handler for (one that comes
    // before the CLI installs its handlers), and Kubernetes has no --init.
    expect(execForm(last('ENTRYPOINT'))).toEqual(['/usr/bin/tini', '--', 'node', '/app/bin/aqueduct.js']);
    const runs = runtime.filter((instruction) => instruction.keyword === 'RUN').map((run) => run.args);
    expect(runs.some((run) => /\bapt-get install\b.*\btini\b/.test(run))).toBe(true);
    expect(execForm(last('CMD'))).toEqual(['consume']);
    expect(runtime.some((i) => i.keyword === 'WORKDIR' && i.args === '/app')).toBe(true);
  });
});

describe('the image contents', () => {
  const pkg: unknown = JSON.parse(readRepoFile('package.json'));
  const dependencies = new Set(
    Object.keys(
      typeof pkg === 'object' && pkg !== null && 'dependencies' in pkg ? Object(pkg.dependencies) : {},
    ),
  );
  const needs = runtimeNeeds('bin/aqueduct.js');

  it('follows the start-up imports through the CLI', () => {
    expect(needs.files).toContain('bin/aqueduct.js');
    expect(needs.files).toContain('src/cli.ts');
    expect(needs.packages).toContain('commander');
  });

  it('has every package the CLI imports at start-up among the production dependencies', () => {
    // `npm install --omit=dev` installs nothing else: a devDependency imported here crashes the container.
    expect([...needs.packages].filter((name) => !dependencies.has(name)).sort()).toEqual([]);
  });

  it('lets through .dockerignore every file the CLI loads, and keeps tests and tooling out', () => {
    // Left out on purpose: kafka/ holds the Maven files of the local development broker that
    // `aqueduct services` starts with Java, which the image has not and does not need.
    const notShipped = new Set(['kafka/']);
    const missing = [...needs.files].filter((file) => !admittedByDockerignore(file) && !notShipped.has(file));
    expect(missing.sort()).toEqual([]);
    for (const file of needs.files) expect(existsSync(join(repoRoot, file)), file).toBe(true);
    for (const kept of ['package.json', 'package-lock.json', 'bin/aqueduct.js', 'src/cli.ts']) {
      expect(admittedByDockerignore(kept), kept).toBe(true);
    }
    for (const excluded of [
      'test/global-setup.ts',
      'testkit/burst.ts',
      'bench/run.ts',
      'node_modules/x',
      '.git/HEAD',
      'k8s/base',
      'Dockerfile',
    ]) {
      expect(admittedByDockerignore(excluded), excluded).toBe(false);
    }
  });
});
