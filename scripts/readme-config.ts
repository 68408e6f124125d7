/** Rewrites the README's configuration reference (between the config markers) from src/config.ts. */
import { readFileSync, writeFileSync } from 'node:fs';
import { configReference } from '../src/config.ts';

const file = new URL('../README.md', import.meta.url);
const readme = readFileSync(file, 'utf8');
const begin = '<!-- config:begin -->';
const end = '<!-- config:end -->';
const rows = configReference().map(
  (r) =>
    `| \`${r.name}\` | ${r.defaultValue ? `\`${r.defaultValue}\`` : '–'} | ${r.description.replace(/\|/g, '\\|')} |`,
);
const table = ['| variable | default | meaning |', '| --- | --- | --- |', ...rows].join('\n');
const start = readme.indexOf(begin);
const stop = readme.indexOf(end);
if (start < 0 || stop < start) throw new Error(`README.md lacks ${begin} … ${end}`);
writeFileSync(file, `${readme.slice(0, start + begin.length)}\n${table}\n${readme.slice(stop)}`);
console.log(`README.md: ${rows.length} settings`);
