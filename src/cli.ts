import { readFileSync } from 'node:fs';
import { Command, CommanderError } from 'commander';
import { registerConsumeCommand } from './consume/command.ts';
import { registerServeCommand } from './gateway/command.ts';
import { registerInspectCommand } from './inspect/command.ts';
import { PortInUseError } from './lifecycle.ts';
import { ProviderConfigError } from './providers/errors.ts';
import { registerPublishCommand } from './publish/command.ts';
import { registerReplayCommand } from './replay/command.ts';
import { registerServicesCommand } from './services/command.ts';
import { SetupError } from './services/errors.ts';
import { ConfigError } from './settings.ts';
import { registerSimulateCommand } from './simulators/command.ts';

const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as {
  version: string;
};

const program = new Command('aqueduct')
  .description('Turns a firehose of notification events into a regulated stream of push notifications.')
  .version(pkg.version)
  .showHelpAfterError()
  .exitOverride();

registerConsumeCommand(program);
registerInspectCommand(program);
registerPublishCommand(program);
registerReplayCommand(program);
registerServeCommand(program);
registerServicesCommand(program);
registerSimulateCommand(program);

try {
  await program.parseAsync(process.argv);
} catch (error) {
  // Help and --version end 0; any other commander error is a usage error (an unknown verb or option, a
  // flag's value refused, an argument missing), status 2 as for a refused setting, so that automation
  // can tell "called wrongly" (2) from "ran and failed" (1).
  if (error instanceof CommanderError) process.exit(error.exitCode === 0 ? 0 : 2);
  // A setting refused once a verb is under way (a PEM file it names cannot be read, a provider endpoint
  // that cannot work) ends it like one refused at start: one line naming it, status 2, no stack.
  if (
    error instanceof PortInUseError ||
    error instanceof ConfigError ||
    error instanceof ProviderConfigError
  ) {
    console.error(`aqueduct ${process.argv[2] ?? ''}: ${error.message}`);
    process.exit(2);
  }
  // kafkajs gave up (brokers out of reach, a request refused): one line with its reason, not a stack.
  if (error instanceof Error && error.name.startsWith('KafkaJS')) {
    const gaveUp = error.name === 'KafkaJSNumberOfRetriesExceeded' ? ' (gave up after retrying)' : '';
    console.error(`aqueduct ${process.argv[2] ?? ''}: Kafka: ${error.message}${gaveUp}`);
    process.exit(1);
  }
  if (error instanceof SetupError) {
    console.error(`aqueduct: ${error.message}`);
    process.exit(2);
  }
  throw error;
}
