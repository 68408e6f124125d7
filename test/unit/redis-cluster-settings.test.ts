import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.ts';
import { loadGatewayConfig } from '../../src/gateway/config.ts';
import { redisErrorSummary } from '../../src/redis/client.ts';
import { hashTagOf } from '../../src/redis/slot-pipelines.ts';
import { redisConnectionOptions } from '../../src/settings-options.ts';

describe('REDIS_CLUSTER_NODES', () => {
  it('unset: the single Redis of REDIS_URL', () => {
    const options = redisConnectionOptions(loadConfig({ REDIS_URL: 'redis://10.0.0.1:6380' }));
    expect(options.url).toBe('redis://10.0.0.1:6380');
    expect(options.clusterNodes).toBeUndefined();
  });

  it('parses host:port,host:port (spaces and empty entries ignored) into the nodes to start from', () => {
    const config = loadConfig({ REDIS_CLUSTER_NODES: ' redis-a:7000, 10.0.0.2:7001 ,,redis-c.example:7002' });
    expect(config.REDIS_CLUSTER_NODES).toEqual(['redis-a:7000', '10.0.0.2:7001', 'redis-c.example:7002']);
    expect(redisConnectionOptions(config).clusterNodes).toEqual([
      { host: 'redis-a', port: 7000 },
      { host: '10.0.0.2', port: 7001 },
      { host: 'redis-c.example', port: 7002 },
    ]);
  });

  it.each([
    ['redis-a', 'host:port'],
    ['redis-a:7000,redis-b', 'host:port'],
    ['redis://redis-a:7000', 'host:port'],
    [',', 'at least one host:port'],
    ['redis-a:0', 'port from 1 to 65535'],
    ['redis-a:7000,redis-b:70000', '"redis-b:70000" is not host:port'],
  ])('refuses %j with a message naming the setting', (value, why) => {
    expect(() => loadConfig({ REDIS_CLUSTER_NODES: value })).toThrow(
      new RegExp(`REDIS_CLUSTER_NODES.*${why}`, 'i'),
    );
  });

  it('wins over REDIS_URL when both are set: the cluster is used, the URL is not', () => {
    const options = redisConnectionOptions(
      loadConfig({ REDIS_URL: 'redis://10.0.0.1:6380', REDIS_CLUSTER_NODES: '10.0.0.2:7000' }),
    );
    expect(options.clusterNodes).toEqual([{ host: '10.0.0.2', port: 7000 }]);
  });

  it('refuses a REDIS_URL whose credentials or TLS the cluster connection would silently go without', () => {
    for (const url of [
      'redis://:secret@10.0.0.1:6380',
      'redis://app@10.0.0.1:6380',
      'rediss://10.0.0.1:6380',
    ]) {
      const config = loadConfig({ REDIS_URL: url, REDIS_CLUSTER_NODES: '10.0.0.2:7000' });
      expect(() => redisConnectionOptions(config)).toThrow(/REDIS_CLUSTER_NODES.*REDIS_URL/);
    }
  });

  it('takes the user, password and TLS from REDIS_USERNAME, REDIS_PASSWORD and REDIS_TLS', () => {
    const options = redisConnectionOptions(
      loadConfig({
        REDIS_CLUSTER_NODES: '10.0.0.2:7000',
        REDIS_USERNAME: 'aqueduct',
        REDIS_PASSWORD: 'secret',
        REDIS_TLS: 'true',
      }),
    );
    expect(options).toMatchObject({ username: 'aqueduct', password: 'secret', tls: {} });
  });

  it('is a gateway setting too', () => {
    const config = loadGatewayConfig({ REDIS_CLUSTER_NODES: '10.0.0.2:7000,10.0.0.3:7000' });
    expect(redisConnectionOptions(config).clusterNodes).toHaveLength(2);
  });
});

describe('hashTagOf', () => {
  it('is what Redis Cluster hashes: the first {…} when not empty, else the whole key', () => {
    expect(hashTagOf('aqueduct:{fcm}:bucket:tenant:acme')).toBe('fcm');
    expect(hashTagOf('aqueduct:{done}:x{y}')).toBe('done');
    expect(hashTagOf('aqueduct:{}:x{y}')).toBe('aqueduct:{}:x{y}');
    expect(hashTagOf('aqueduct:redis-epoch')).toBe('aqueduct:redis-epoch');
    expect(hashTagOf('a{b')).toBe('a{b');
  });
});

describe('redisErrorSummary', () => {
  it("adds a Cluster's last node error, which says why no node answered", () => {
    const error = Object.assign(new Error('Failed to refresh slots cache.'), {
      name: 'ClusterAllFailedError',
      lastNodeError: new Error('ERR This instance has cluster support disabled'),
    });
    expect(redisErrorSummary(error)).toEqual({
      name: 'ClusterAllFailedError',
      message: 'Failed to refresh slots cache.',
      cause: 'ERR This instance has cluster support disabled',
    });
    expect(redisErrorSummary(new Error('connect ECONNREFUSED 127.0.0.1:1'))).toEqual({
      name: 'Error',
      message: 'connect ECONNREFUSED 127.0.0.1:1',
    });
  });
});
