import { readFileSync } from 'node:fs';
import { context, type DiagLogger, DiagLogLevel, diag, propagation, trace } from '@opentelemetry/api';
import { loggingErrorHandler, setGlobalErrorHandler } from '@opentelemetry/core';
import type { Sampler, SpanProcessor } from '@opentelemetry/sdk-trace';
import type { Logger } from '../log.ts';
import { throttledErrorHandler } from './export-errors.ts';
import { otelSettingProblems, TRACE_EXPORTERS, traceExporterNames } from './otel-settings.ts';

/**
 * Tracing for every Aqueduct process (consumer, publisher, gateway): the OpenTelemetry Node SDK,
 * configured by the standard `OTEL_*` environment variables, started only when there is somewhere to
 * send spans. While it is off the `@opentelemetry/api` calls are no-ops and the pipeline does not even
 * install its tracing observer, so no span object is ever made.
 */

/** Options of {@link startTracing}. */
export interface TracingOptions {
  /**
   * Span processors to use instead of the exporter the environment names (tests: an in-memory
   * exporter). Given, they turn tracing on whatever the environment says.
   */
  spanProcessors?: SpanProcessor[];
  /** A sampler instead of the one OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG describe. */
  sampler?: Sampler;
  /** Where the SDK's own diagnostics go (export failures, bad settings), at OTEL_LOG_LEVEL (default warn). */
  logger?: Logger;
  /** The environment to read. Default `process.env` (the SDK itself always reads `process.env`). */
  env?: NodeJS.ProcessEnv;
}

/** Started tracing; `shutdown` flushes what is buffered and unregisters everything. */
export interface Tracing {
  /** False when nothing was configured: then every call is a no-op. */
  readonly enabled: boolean;
  /**
   * Exports what is buffered and unregisters everything. Never rejects: spans the collector did not
   * take (down, refusing, too slow) are lost with a warning, and the process stops as it would have.
   */
  shutdown(): Promise<void>;
}

let active: Tracing | undefined;

/**
 * Whether tracing is configured, i.e. whether spans have somewhere to go: OTEL_EXPORTER_OTLP_ENDPOINT,
 * OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_CONFIG_FILE is set, or OTEL_TRACES_EXPORTER names an
 * exporter other than `none`. OTEL_SDK_DISABLED=true wins over all of them, and so does an
 * OTEL_TRACES_EXPORTER that names no exporter the SDK has (`jaeger`, `zipkin`…): the SDK would build
 * none, and every span would go nowhere. Variables that only shape tracing (OTEL_SERVICE_NAME,
 * OTEL_TRACES_SAMPLER, OTEL_EXPORTER_OTLP_PROTOCOL…) do not turn it on: a process that names its
 * service but no collector should not try localhost:4318 forever.
 */
export function tracingConfigured(env: NodeJS.ProcessEnv = process.env): boolean {
  const set = (name: string) => (env[name] ?? '').trim() !== '';
  if ((env.OTEL_SDK_DISABLED ?? '').trim().toLowerCase() === 'true') return false;
  const exporters = traceExporterNames(env);
  if (exporters.includes('none')) return false;
  if (exporters.length > 0 && !exporters.some((name) => TRACE_EXPORTERS.has(name))) return false;
  return (
    set('OTEL_EXPORTER_OTLP_ENDPOINT') ||
    set('OTEL_EXPORTER_OTLP_TRACES_ENDPOINT') ||
    set('OTEL_CONFIG_FILE') ||
    exporters.length > 0
  );
}

/** True between a {@link startTracing} that turned tracing on and its shutdown. */
export function isTracingEnabled(): boolean {
  return active?.enabled === true;
}

/**
 * Starts tracing for a process named `serviceName` (OTEL_SERVICE_NAME, or `service.name` in
 * OTEL_RESOURCE_ATTRIBUTES, wins over it), when {@link tracingConfigured} or `options.spanProcessors`
 * say so. Exporter, protocol (`http/protobuf` by default, `http/json`, `grpc`), endpoint, headers,
 * sampler, batching and resource all come from the standard variables. Metrics and logs are not
 * exported over OTLP: metrics are Prometheus (`/metrics`), logs are JSON lines on stdout.
 *
 * One tracing per process at a time: a second start before the first shutdown throws.
 */
export async function startTracing(serviceName: string, options: TracingOptions = {}): Promise<Tracing> {
  const env = options.env ?? process.env;
  if (active?.enabled) throw new Error('tracing is already started in this process');
  const configured = options.spanProcessors !== undefined || tracingConfigured(env);
  // Said before the SDK starts: it ignores these values with a diagnostic of its own that nobody sees
  // (see otel-settings.ts). While tracing is off they matter only when they are what turned it off.
  if (configured || traceExporterNames(env).length > 0) {
    const warn = diagLogger(options.logger).warn;
    for (const problem of otelSettingProblems(env)) warn(problem);
  }
  if (!configured) return { enabled: false, shutdown: async () => {} };

  // Loaded only when used: the SDK and its exporters take a noticeable while to import.
  const { startNodeSdk } = await import('@opentelemetry/sdk-node');
  const sdk = startNodeSdk({
    logLevel: 'none',
    resourceAttributes: {
      ...(namesItsService(env) ? {} : { 'service.name': serviceName }),
      'service.version': packageVersion(),
    },
    ...(options.spanProcessors ? { spanProcessors: options.spanProcessors } : {}),
    ...(options.sampler ? { sampler: options.sampler } : {}),
    metricReaders: [],
    logRecordProcessors: [],
  });
  diag.setLogger(diagLogger(options.logger), {
    logLevel: diagLevel(env.OTEL_LOG_LEVEL),
    suppressOverrideMessage: true,
  });
  // Through diag, so that OTEL_LOG_LEVEL governs these lines as it does the SDK's default handler's.
  setGlobalErrorHandler(throttledErrorHandler((message, detail) => diag.error(message, detail)));

  let stopped: Promise<void> | undefined;
  const tracing: Tracing = {
    enabled: true,
    shutdown() {
      stopped ??= (async () => {
        try {
          await sdk.shutdown();
        } catch (error) {
          // The exporter's last batch failed (a collector down or not answering): the SDK rejects its
          // shutdown with that error, which is no reason for a process to stop differently.
          diagLogger(options.logger).warn(
            'trace export failed at shutdown; the last spans are lost',
            error instanceof Error ? error : String(error),
          );
        } finally {
          // Unregistered, so that a later start in the same process (tests) can register anew.
          trace.disable();
          context.disable();
          propagation.disable();
          diag.disable();
          setGlobalErrorHandler(loggingErrorHandler());
          if (active === tracing) active = undefined;
        }
      })();
      return stopped;
    },
  };
  active = tracing;
  return tracing;
}

function namesItsService(env: NodeJS.ProcessEnv): boolean {
  if ((env.OTEL_SERVICE_NAME ?? '').trim() !== '') return true;
  return /(^|,)\s*service\.name\s*=/.test(env.OTEL_RESOURCE_ATTRIBUTES ?? '');
}

function packageVersion(): string {
  try {
    const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
      version?: string;
    };
    return pkg.version ?? 'unknown';
  } catch {
    return 'unknown';
  }
}

function diagLevel(value: string | undefined): DiagLogLevel {
  const levels: Record<string, DiagLogLevel> = {
    none: DiagLogLevel.NONE,
    error: DiagLogLevel.ERROR,
    warn: DiagLogLevel.WARN,
    info: DiagLogLevel.INFO,
    debug: DiagLogLevel.DEBUG,
    verbose: DiagLogLevel.VERBOSE,
    all: DiagLogLevel.ALL,
  };
  return levels[(value ?? '').trim().toLowerCase()] ?? DiagLogLevel.WARN;
}

/** The SDK's diagnostics as JSON log lines (or plain stderr when no logger is given). */
function diagLogger(logger: Logger | undefined): DiagLogger {
  const write =
    (level: 'error' | 'warn' | 'info' | 'debug' | 'trace') =>
    (message: string, ...args: unknown[]) => {
      const detail = args.map((arg) => (arg instanceof Error ? arg.message : String(arg))).join(' ');
      if (logger) logger[level]({ otel: true, ...(detail ? { detail } : {}) }, message);
      else if (level === 'error' || level === 'warn') console.error(`otel ${level}: ${message} ${detail}`);
    };
  return {
    error: write('error'),
    warn: write('warn'),
    info: write('info'),
    debug: write('debug'),
    verbose: write('trace'),
  };
}
