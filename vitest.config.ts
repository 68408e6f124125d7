import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Starts (or finds) the real Kafka broker and Redis server once for the whole run.
    globalSetup: ['test/global-setup.ts'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // Two cores: more workers only fight the broker for CPU.
    maxWorkers: 2,
    // A focused test would silently skip the rest of the suite in CI.
    allowOnly: false,
    reporters: ['default'],
  },
});
