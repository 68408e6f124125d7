/** Writes schemas/event-v1.schema.json from the zod definition in src/events/event.ts. */
import { writeFileSync } from 'node:fs';
import { eventJsonSchema } from '../src/events/event.ts';

const file = new URL('../schemas/event-v1.schema.json', import.meta.url);
writeFileSync(file, `${JSON.stringify(eventJsonSchema(), null, 2)}\n`);
console.log(`wrote ${file.pathname}`);
