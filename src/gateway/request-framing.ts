import type { IncomingMessage } from 'node:http';

/**
 * What the gateway reads from a request's header fields beyond what Node checks: the transfer codings,
 * the expectations and the framing faults it answers itself (see `boundedFastify`).
 */

/**
 * The first coding other than `chunked` in a Transfer-Encoding field, if any (empty list elements are
 * ignored, RFC 9110 §5.6.1); named only when it is a short token, so an answer never echoes odd bytes.
 */
export function unsupportedTransferCoding(field: string | undefined): string | undefined {
  if (field === undefined) return undefined;
  for (const coding of field.split(',')) {
    const name = coding.trim().toLowerCase();
    if (name === '' || name === 'chunked') continue;
    return /^[a-z0-9!#$%&'*+.^_`|~-]{1,32}$/.test(name) ? name : '(unnamed)';
  }
  return undefined;
}

/** The answer to a request in another major version of HTTP. */
export const HTTP_VERSION_NOT_SUPPORTED = {
  error: 'http-version-not-supported',
  message: 'this API speaks HTTP/1.1 (and 1.0) only',
};

/** The answer to an expectation other than 100-continue. */
export const EXPECTATION_FAILED = {
  error: 'expectation-failed',
  message: 'the only expectation this API meets is "Expect: 100-continue"',
};

/**
 * Whether the client waits for `100 Continue` before it sends its body: an HTTP/1.1 request whose
 * Expect field (checked by `boundedFastify` to hold 100-continue alone) is there. An HTTP/1.0 client
 * must not be sent a 1xx answer (RFC 9110 §15.2), and its Expect is ignored (§10.1.1).
 */
export function expectsContinue(request: IncomingMessage): boolean {
  return request.httpVersion === '1.1' && expectations(request.headers.expect ?? '').length > 0;
}

/** The members of an Expect field, lower-case, without the empty list elements (RFC 9110 §5.6.1). */
export function expectations(field: string): string[] {
  return field
    .split(',')
    .map((member) => member.trim().toLowerCase())
    .filter((member) => member !== '');
}

/** Whether a Transfer-Encoding field's last coding (empty list elements ignored) is chunked. */
export function endsChunked(field: string): boolean {
  const codings = field
    .split(',')
    .map((coding) => coding.trim().toLowerCase())
    .filter((coding) => coding !== '');
  return codings.at(-1) === 'chunked';
}

/**
 * A request's framing fault among those Node lets through, in words for the client, or undefined:
 * - a missing Host in HTTP/1.1, more than one Host field, or one whose value is not `host[:port]`
 *   (RFC 9112 §3.2: "A server MUST respond with a 400 (Bad Request) status code to any HTTP/1.1 request
 *   message that lacks a Host header field and to any request message that contains more than one Host
 *   header field line or a Host header field with an invalid field value");
 * - more than one Content-Type field: Node reads the first where a proxy in front may read the last;
 * - an HTTP/1.0 request with Transfer-Encoding (RFC 9112 §6.1: its framing is faulty, and a recipient
 *   that ignores the field would split the bytes into other requests).
 */
export function framingProblem(request: IncomingMessage): string | undefined {
  const hosts = fieldLines(request.rawHeaders, 'host');
  if (hosts.length === 0 && request.httpVersion === '1.1')
    return 'an HTTP/1.1 request needs a Host header field (RFC 9112 §3.2)';
  if (hosts.length > 1) return 'more than one Host header field (RFC 9112 §3.2)';
  if (hosts.length === 1 && !HOST_VALUE.test(hosts[0] ?? ''))
    return 'the Host header field is not host[:port] (RFC 9112 §3.2)';
  if (fieldLines(request.rawHeaders, 'content-type').length > 1)
    return 'more than one Content-Type header field (RFC 9110 §8.3)';
  if (request.httpVersion === '1.0' && request.headers['transfer-encoding'] !== undefined)
    return 'an HTTP/1.0 request cannot use Transfer-Encoding (RFC 9112 §6.1): send Content-Length';
  // RFC 9112 §3.2: a request target has no fragment, and `*` is OPTIONS' alone.
  if (request.url?.includes('#')) return 'a request target cannot hold a fragment (#) (RFC 9112 §3.2)';
  if (request.url === '*' && request.method !== 'OPTIONS')
    return 'the request target * is for OPTIONS only (RFC 9112 §3.2.4)';
  return undefined;
}

/** RFC 3986 `uri-host [":" port]`, as a Host field holds it (empty is allowed, RFC 9112 §3.2). */
const HOST_VALUE =
  /^(?:\[[0-9A-Fa-f:.]+\]|\[v[0-9A-Fa-f]+\.[A-Za-z0-9\-._~!$&'()*+,;=:]+\]|[A-Za-z0-9\-._~!$&'()*+,;=%]*)(?::[0-9]*)?$/;

/** The values of every line of one header field, by its lower-case name, in `rawHeaders`. */
function fieldLines(rawHeaders: string[], name: string): string[] {
  const values: string[] = [];
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    if (rawHeaders[i]?.toLowerCase() === name) values.push(rawHeaders[i + 1] ?? '');
  }
  return values;
}
