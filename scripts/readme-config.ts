/**
 * `node scripts/readme-config.ts`: rewrites the generated settings tables of the docs from the code:
 * the configuration reference in docs/configuration.md (between the config markers) from src/config.ts,
 * and the gateway's own settings in docs/gateway.md (between the gateway-config markers) from
 * src/gateway/config.ts. Tests keep both pages in step.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { configReference } from '../src/config.ts';
import { gatewayConfigMarkdown } from '../src/gateway/config.ts';

/** A generated table: the page it lives in and the markers around it. */
export interface GeneratedTable {
  page: URL;
  begin: string;
  end: string;
  render: () => string;
}

/** The configuration reference of `aqueduct consume`, one row per setting of src/config.ts. */
export function configReferenceMarkdown(): string {
  const rows = configReference().map(
    (r) =>
      `| \`${r.name}\` | ${r.defaultValue ? `\`${r.defaultValue}\`` : '–'} | ${r.description.replace(/\|/g, '\\|')} |`,
  );
  return ['| variable | default | meaning |', '| --- | --- | --- |', ...rows].join('\n');
}

export const GENERATED_TABLES: readonly GeneratedTable[] = [
  {
    page: new URL('../docs/configuration.md', import.meta.url),
    begin: '<!-- config:begin -->',
    end: '<!-- config:end -->',
    render: configReferenceMarkdown,
  },
  {
    page: new URL('../docs/gateway.md', import.meta.url),
    begin: '<!-- gateway-config:begin -->',
    end: '<!-- gateway-config:end -->',
    render: gatewayConfigMarkdown,
  },
];

/** `text` with what lies between the table's markers replaced by its rendering. */
export function withTable(text: string, table: GeneratedTable): string {
  const start = text.indexOf(table.begin);
  const stop = text.indexOf(table.end);
  if (start < 0 || stop < start)
    throw new Error(`${table.page.pathname} lacks ${table.begin} … ${table.end}`);
  return `${text.slice(0, start + table.begin.length)}\n${table.render()}\n${text.slice(stop)}`;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  for (const table of GENERATED_TABLES) {
    const before = readFileSync(table.page, 'utf8');
    const after = withTable(before, table);
    if (after !== before) writeFileSync(table.page, after);
    console.log(`${fileURLToPath(table.page)}: ${after === before ? 'already up to date' : 'updated'}`);
  }
}
