#!/usr/bin/env node
// Aqueduct runs its TypeScript sources directly: Node >= 22.18 strips the types itself, so there is no
// build step between a checkout and a running consumer (see docs/development.md, "Node 24"). An older
// Node would fail on the first import with "Unknown file extension .ts": say what is needed instead.
const [major, minor] = process.versions.node.split('.').map(Number);
if (major < 22 || (major === 22 && minor < 18) || (major === 23 && minor < 6)) {
  console.error(
    `aqueduct needs Node 22.18 or later (this is ${process.version}): run it as \`npm run aqueduct -- <command>\`, which uses the project's Node 24, or install Node 24.`,
  );
  process.exit(1);
}
await import('../src/cli.ts');
