import https from 'node:https';
import net, { isIP } from 'node:net';
import type { Duplex } from 'node:stream';
import tls from 'node:tls';
import type { Platform } from '../events/event.ts';
import { ProviderConfigError } from './errors.ts';
import { bridgeToHttp2 } from './http2-bridge.ts';

/** The host firebase-admin addresses; an override receives its requests unchanged. */
export const FCM_HOST = 'fcm.googleapis.com';

/** Where an endpoint override points: an FCM HTTP v1 or APNs HTTP/2 server other than Google's or Apple's. */
export interface Endpoint {
  /**
   * `https`: TLS, verified. `http`: plain text on the same protocol (HTTP/1.1 for FCM, or HTTP/2 with
   * prior knowledge when the server speaks that only; HTTP/2 with prior knowledge for APNs), for a
   * sidecar proxy that originates the TLS or a test server. The requests carry the provider
   * credentials, so plain text belongs on loopback or a pod's own network.
   */
  scheme: 'https' | 'http';
  host: string;
  port: number;
  /** TLS SNI and certificate name: the host, unless it is an IP address (SNI carries names only). */
  servername: string | undefined;
}

/**
 * Parses `https://host[:port]` or `http://host[:port]` (FCM_ENDPOINT, APNS_ENDPOINT). Anything else is
 * a configuration error.
 */
export function parseEndpoint(platform: Platform, value: string, setting: string): Endpoint {
  let url: URL;
  try {
    url = new URL(value);
  } catch (error) {
    throw new ProviderConfigError(
      platform,
      `${setting} is not a URL (expected https://host:port or http://host:port)`,
      {
        setting,
        cause: error,
      },
    );
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') {
    throw new ProviderConfigError(
      platform,
      `${setting} must be an https:// URL (or http:// for a plain-text sidecar or test server)`,
      { setting },
    );
  }
  if ((url.pathname !== '/' && url.pathname !== '') || url.search || url.username || url.password) {
    throw new ProviderConfigError(
      platform,
      `${setting} must be https://host:port or http://host:port, with no path, query or user`,
      { setting },
    );
  }
  const scheme = url.protocol === 'https:' ? 'https' : 'http';
  const host = url.hostname.replace(/^\[(.*)\]$/, '$1');
  const port = url.port === '' ? (scheme === 'https' ? 443 : 80) : Number(url.port);
  return { scheme, host, port, servername: isIP(host) === 0 ? host : undefined };
}

/**
 * An `https.Agent` for firebase-admin's `httpAgent` option. firebase-admin always addresses
 * `https://fcm.googleapis.com/...`; with an override every connection is dialled to the override
 * instead, verified against `ca` (when given) and the override's own name, so the requests (and their
 * `Host: fcm.googleapis.com` header) reach the other server unchanged; to a server that speaks HTTP/2
 * only, over the bridge of http2-bridge.ts. For an `http` override the connection is a plain socket, on
 * which node's https client speaks the same HTTP/1.1 (or, to a server that answers it in HTTP/2, the
 * bridge's HTTP/2 with prior knowledge). Without an override it is a plain keep-alive
 * agent. Either way `maxSockets` is the number of requests in flight: firebase-admin's HTTP/1.1
 * transport sends one request per socket and queues the rest in the agent.
 */
export function createFcmAgent(options: {
  endpoint?: Endpoint;
  caPem?: string;
  maxInFlight: number;
}): https.Agent {
  const agentOptions: https.AgentOptions = {
    keepAlive: true,
    maxSockets: options.maxInFlight,
    maxFreeSockets: options.maxInFlight,
  };
  const { endpoint, caPem } = options;
  if (!endpoint) return new https.Agent(caPem ? { ...agentOptions, ca: caPem } : agentOptions);
  return new EndpointOverrideAgent(agentOptions, endpoint, caPem);
}

/**
 * Whether a connection failed on TLS's `no_application_protocol` alert (number 120): the server speaks
 * none of the protocols offered in ALPN. Node names it by its own code when the handshake fails alone,
 * and as a write's EPROTO, with OpenSSL's text, when a request was already written to the socket.
 */
function refusedProtocol(error: NodeJS.ErrnoException): boolean {
  return (
    error.code === 'ERR_SSL_TLSV1_ALERT_NO_APPLICATION_PROTOCOL' ||
    (error.code === 'EPROTO' && /alert no application protocol|alert number 120\b/.test(error.message))
  );
}

/**
 * Whether the first bytes a server sent on a plain connection are an HTTP/2 server preface: the frame
 * header of a SETTINGS frame (type 4, no flags, stream 0, a payload of 6-byte settings; RFC 9113 §3.4,
 * §6.5), where an HTTP/1.1 server's answer starts with `HTTP/`.
 */
export function isHttp2Preface(chunk: Buffer): boolean {
  if (chunk.length < 9) return false;
  const length = chunk.readUIntBE(0, 3);
  return chunk[3] === 0x04 && chunk[4] === 0 && chunk.readUInt32BE(5) === 0 && length % 6 === 0;
}

class EndpointOverrideAgent extends https.Agent {
  private readonly endpoint: Endpoint;
  private readonly caPem: string | undefined;
  /**
   * What the override speaks over TLS, as the handshakes so far told. HTTP/1.1 is offered until a
   * server refuses it (TLS alert `no_application_protocol`): a server speaking both keeps the path
   * firebase-admin's transport expects, and the requests on the refused connections fail as network
   * errors (the consumer's warm-up takes that first refusal before any push is sent). From then on
   * connections offer `h2` and go through {@link bridgeToHttp2}.
   */
  private speaks: 'unknown' | 'http/1.1' | 'h2' = 'unknown';
  /**
   * What an `http` override speaks, as the first answers told. HTTP/1.1 is sent until a server answers
   * with an HTTP/2 server preface (a server that speaks HTTP/2 with prior knowledge only sends it as
   * soon as the connection opens, then drops the connection on the HTTP/1.1 request); that request
   * fails as a network error, as a refused handshake does, and from then on connections go through
   * {@link bridgeToHttp2} in cleartext.
   */
  private speaksPlain: 'unknown' | 'http/1.1' | 'h2c' = 'unknown';

  constructor(options: https.AgentOptions, endpoint: Endpoint, caPem: string | undefined) {
    super(options);
    this.endpoint = endpoint;
    this.caPem = caPem;
  }

  // The socket is returned at once, never through the callback form: Node's agent counts a socket
  // against maxSockets only once it has it, so sockets handed over later would not bound the connections.
  override createConnection(options: tls.ConnectionOptions): Duplex {
    if (this.endpoint.scheme === 'http') return this.connectPlain();
    if (this.speaks === 'h2') return bridgeToHttp2(this.connect(options, 'h2'), `https://${FCM_HOST}`);
    const socket = this.connect(options, 'http/1.1');
    if (this.speaks === 'unknown') {
      socket.once('secureConnect', () => {
        if (this.speaks === 'unknown') this.speaks = 'http/1.1';
      });
      socket.once('error', (error: NodeJS.ErrnoException) => {
        if (refusedProtocol(error)) this.speaks = 'h2';
      });
    }
    return socket;
  }

  private connectPlain(): Duplex {
    const socket = net.connect({ host: this.endpoint.host, port: this.endpoint.port });
    if (this.speaksPlain === 'h2c') return bridgeToHttp2(socket, `http://${FCM_HOST}`);
    if (this.speaksPlain === 'unknown') {
      socket.once('data', (chunk: Buffer) => {
        if (this.speaksPlain === 'unknown') this.speaksPlain = isHttp2Preface(chunk) ? 'h2c' : 'http/1.1';
      });
    }
    return socket;
  }

  private connect(options: tls.ConnectionOptions, alpn: 'http/1.1' | 'h2'): tls.TLSSocket {
    return tls.connect({
      ...options,
      host: this.endpoint.host,
      port: this.endpoint.port,
      servername: this.endpoint.servername,
      ...(this.caPem ? { ca: this.caPem } : {}),
      ALPNProtocols: [alpn],
    });
  }
}
