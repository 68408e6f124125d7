/** Fetches the Kafka broker jars into Maven's local repository (once), so that the first test run does not. */
import { SetupError } from '../src/services/errors.ts';
import { kafkaClasspath } from '../src/services/kafka-local.ts';

try {
  const started = Date.now();
  const jars = (await kafkaClasspath((m) => console.log(m))).split(':');
  console.log(`Kafka jars ready: ${jars.length} jars (${((Date.now() - started) / 1000).toFixed(1)} s)`);
} catch (error) {
  console.error(error instanceof SetupError ? `fetch-kafka: ${error.message}` : error);
  process.exit(2);
}
