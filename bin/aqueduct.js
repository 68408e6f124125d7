#!/usr/bin/env node
// Aqueduct runs its TypeScript sources directly: Node >= 22.18 strips the types itself, so there is no
// build step between a checkout and a running consumer (see docs/development.md, "Node 24").
import '../src/cli.ts';
