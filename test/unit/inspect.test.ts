import { Command } from 'commander';
import { describe, expect, it } from 'vitest';
import { inspectTarget, registerInspectCommand } from '../../src/inspect/command.ts';

describe('aqueduct inspect: what it reads', () => {
  it("takes the key prefix from AQUEDUCT_REDIS_PREFIX, the consumers' own, else aqueduct", () => {
    expect(inspectTarget({}).keyPrefix).toBe('aqueduct');
    expect(inspectTarget({ AQUEDUCT_REDIS_PREFIX: 'push-eu' }).keyPrefix).toBe('push-eu');
  });

  it('lets --prefix win over AQUEDUCT_REDIS_PREFIX, and then does not check the setting', () => {
    expect(inspectTarget({ AQUEDUCT_REDIS_PREFIX: 'push-eu' }, 'other').keyPrefix).toBe('other');
    expect(inspectTarget({ AQUEDUCT_REDIS_PREFIX: 'not a prefix' }, 'other').keyPrefix).toBe('other');
  });

  it('refuses a bad AQUEDUCT_REDIS_PREFIX, naming it', () => {
    expect(() => inspectTarget({ AQUEDUCT_REDIS_PREFIX: 'not a prefix' })).toThrow(/AQUEDUCT_REDIS_PREFIX/);
  });

  it("connects where the consumer's Redis settings say", () => {
    expect(inspectTarget({}).connection.url).toBe('redis://127.0.0.1:6379');
    const target = inspectTarget({ REDIS_CLUSTER_NODES: '10.0.0.1:7000', REDIS_PASSWORD: 'secret' });
    expect(target.connection.clusterNodes).toEqual([{ host: '10.0.0.1', port: 7000 }]);
    expect(target.connection.password).toBe('secret');
  });

  it('says in --help where the prefix comes from', () => {
    const program = new Command('aqueduct');
    registerInspectCommand(program);
    const help = program.commands.find((command) => command.name() === 'inspect')?.helpInformation() ?? '';
    expect(help.replace(/\s+/g, ' ')).toContain(
      '--prefix <keyPrefix> prefix of the Redis keys (default: AQUEDUCT_REDIS_PREFIX, else "aqueduct")',
    );
  });
});
