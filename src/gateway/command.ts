import type { Command } from 'commander';
import { exitStopped, logUncaughtErrors, openResources } from '../lifecycle.ts';
import { createLogger } from '../log.ts';
import { settingsHelp } from '../settings.ts';
import { exitOnConfigError } from '../settings-exit.ts';
import { startTracing } from '../telemetry/tracing.ts';
import { hashApiKey } from './api-keys.ts';
import {
  apiKeyHashes,
  type GatewayConfig,
  gatewayConfigReference,
  loadGatewayConfig,
  redactGatewayConfig,
} from './config.ts';
import { startGateway } from './server.ts';
import { gatewaySampler } from './tracing.ts';

/** `aqueduct serve`: the HTTP ingest gateway, until SIGTERM/SIGINT; `--hash-key` prints a key's hash. */
export function registerServeCommand(program: Command): void {
  const reference = settingsHelp(gatewayConfigReference());
  program
    .command('serve')
    .description('run the HTTP ingest gateway: POST /v1/notifications → Kafka, per-tenant 429 + Retry-After')
    .option('--config <file>', 'JSON file with the settings below (environment variables win)')
    .option(
      '--hash-key <key>',
      'print the SHA-256 of an API key for AQUEDUCT_GATEWAY_API_KEYS and exit ("-": read the key from stdin)',
    )
    .addHelpText(
      'after',
      `\nSettings (environment variables, or keys of --config):\n${reference}\n  OTEL_*${' '.repeat(35)}standard OpenTelemetry variables; tracing is on when OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_CONFIG_FILE is set, or OTEL_TRACES_EXPORTER names an exporter other than none (OTEL_SDK_DISABLED=true turns it off)`,
    )
    .action(async (flags: { config?: string; hashKey?: string }) => {
      if (flags.hashKey !== undefined) {
        const key = flags.hashKey === '-' ? (await readStdin()).trim() : flags.hashKey;
        if (key === '') {
          console.error('aqueduct serve --hash-key: the key is empty');
          process.exit(2);
        }
        console.log(hashApiKey(key));
        return;
      }
      const config = await exitOnConfigError('serve', () => {
        const loaded = loadGatewayConfig(process.env, flags.config);
        apiKeyHashes(loaded); // no key at all: refuse before anything starts
        return loaded;
      });
      await runGateway(config);
    });
}

/** Runs the gateway until SIGTERM/SIGINT, then drains within AQUEDUCT_SHUTDOWN_TIMEOUT_MS. */
export async function runGateway(config: GatewayConfig): Promise<void> {
  const logger = createLogger(config.LOG_LEVEL, 'aqueduct-gateway');
  logUncaughtErrors(logger);
  logger.info({ config: redactGatewayConfig(config) }, 'starting gateway');
  const sampler = await gatewaySampler();
  const tracing = await startTracing('aqueduct-gateway', { logger, ...(sampler ? { sampler } : {}) });
  const gateway = await exitOnConfigError('serve', () => startGateway(config, { logger }));
  await new Promise<void>((resolve) => {
    process.once('SIGTERM', resolve);
    process.once('SIGINT', resolve);
  });
  logger.info('shutting down: finishing requests in flight');
  const hardStop = setTimeout(() => {
    logger.error({ open: openResources() }, 'shutdown bound exceeded; exiting');
    process.exit(1);
  }, config.AQUEDUCT_SHUTDOWN_TIMEOUT_MS).unref();
  await gateway.close();
  // After the requests in flight: their spans end as they finish; shutdown exports them.
  await tracing.shutdown();
  clearTimeout(hardStop);
  logger.info('stopped');
  exitStopped(logger, 0);
}

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}
