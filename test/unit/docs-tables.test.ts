import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { GENERATED_TABLES, withTable } from '../../scripts/readme-config.ts';

// The settings tables of docs/configuration.md and docs/gateway.md are generated from the code by
// `node scripts/readme-config.ts`; a setting added, renamed or re-described must show there too.
describe('generated settings tables in docs/', () => {
  for (const table of GENERATED_TABLES) {
    it(`keeps ${table.page.pathname.split('/').slice(-2).join('/')} what the code says`, () => {
      const page = readFileSync(table.page, 'utf8');
      expect(page).toContain(table.begin);
      expect(withTable(page, table)).toBe(page);
    });
  }
});
