/**
 * `npm run bench -- <scenario> [<scenario> …]`, or `npm run bench -- all`.
 *
 * Each scenario writes bench/results/<scenario>.json and prints a table; `node bench/readme.ts` then
 * regenerates the tables of docs/benchmarks.md from those files. Add a scenario with one line below.
 */
const scenarios: Record<string, () => Promise<void>> = {
  limiter: async () => (await import('./limiter.ts')).main(),
  burst: async () => (await import('./burst.ts')).main(),
  overhead: async () => (await import('./overhead.ts')).main(),
  gateway: async () => (await import('./gateway.ts')).main(),
  faults: async () => (await import('./faults.ts')).main(),
  state: async () => (await import('./state.ts')).main(),
  tenants: async () => (await import('./tenants.ts')).main(),
};

const requested = process.argv.slice(2);
const names = requested.includes('all') ? Object.keys(scenarios) : requested;
const unknown = names.filter((name) => !(name in scenarios));
if (names.length === 0 || unknown.length > 0) {
  if (unknown.length > 0) console.error(`unknown scenario: ${unknown.join(', ')}`);
  console.error(`usage: npm run bench -- <${[...Object.keys(scenarios), 'all'].join('|')}> [more scenarios]`);
  process.exit(2);
}
for (const name of names) {
  console.error(`== bench ${name}`);
  await (scenarios[name] as () => Promise<void>)();
}
