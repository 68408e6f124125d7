import { readFile, writeFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { type BurstBenchResult, burstMarkdown } from './burst.ts';
import { type ChattyDeviceResult, chattyDeviceTable } from './chatty-device.ts';
import { deviceStormTable } from './device-storm.ts';
import { type FaultsBenchResult, faultsTable } from './faults.ts';
import { type GatewayBenchResult, gatewayTable } from './gateway.ts';
import { type LimiterBenchResult, renderLimiterMarkdown } from './limiter.ts';
import { overheadMarkdown } from './overhead.ts';
import { stateTable } from './state.ts';
import { type TenantsBenchResult, tenantsTable } from './tenants.ts';

/**
 * `node bench/readme.ts`: regenerates the benchmark tables of docs/benchmarks.md from
 * bench/results/*.json, so the numbers shown are always the ones measured (never typed by hand). Each
 * scenario owns the block between `<!-- bench:<name> -->` and `<!-- /bench:<name> -->`. Add a scenario
 * with one line below.
 */
const renderers: Record<string, (result: never) => string> = {
  limiter: (result: LimiterBenchResult) => renderLimiterMarkdown(result),
  gateway: (result: GatewayBenchResult) => gatewayTable(result),
  burst: (result: BurstBenchResult) => burstMarkdown(result),
  overhead: (result: Parameters<typeof overheadMarkdown>[0]) => overheadMarkdown(result),
  faults: (result: FaultsBenchResult) => faultsTable(result),
  'device-storm': (result: Parameters<typeof deviceStormTable>[0]) => deviceStormTable(result),
  'chatty-device': (result: ChattyDeviceResult) => chattyDeviceTable(result),
  state: (result: Parameters<typeof stateTable>[0]) => stateTable(result),
  tenants: (result: TenantsBenchResult) => tenantsTable(result),
};

const root = new URL('..', import.meta.url);

/** The page where the figures are shown. */
export const BENCHMARKS_PAGE = new URL('docs/benchmarks.md', root);

/** A page with every scenario's block re-rendered from its results file (blocks absent are left out). */
export async function renderBenchmarkBlocks(page: string): Promise<string> {
  let text = page;
  for (const [name, render] of Object.entries(renderers)) {
    const start = `<!-- bench:${name} -->`;
    const end = `<!-- /bench:${name} -->`;
    const from = text.indexOf(start);
    const to = text.indexOf(end);
    if (from === -1 || to < from) continue;
    const results = JSON.parse(await readFile(new URL(`bench/results/${name}.json`, root), 'utf8')) as never;
    text = `${text.slice(0, from + start.length)}\n${render(results)}\n${text.slice(to)}`;
  }
  return text;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const before = await readFile(BENCHMARKS_PAGE, 'utf8');
  const after = await renderBenchmarkBlocks(before);
  if (after !== before) await writeFile(BENCHMARKS_PAGE, after);
  console.log(
    after === before ? 'docs/benchmarks.md tables already up to date' : 'docs/benchmarks.md tables updated',
  );
}
