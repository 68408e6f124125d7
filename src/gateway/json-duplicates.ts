/**
 * Whether a JSON text holds an object with the same key twice. RFC 8259 §4 leaves what such an object
 * means to the parser (JSON.parse keeps the last value, many parsers the first), and I-JSON (RFC 7493
 * §2.3) forbids it: a proxy or a log reading `{"tenant": "a", "tenant": "b"}` may not see the event the
 * gateway writes. `text` must be valid JSON (already parsed): only strings, brackets and commas are
 * looked at. Keys are compared as decoded, so `"a"` and `"\u0061"` are one key.
 */
export function hasDuplicateKey(text: string): boolean {
  // One entry per open container: the keys seen so far for an object, null for an array.
  const open: Array<Set<string> | null> = [];
  let expectingKey = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) {
      let end = i + 1;
      let escaped = false;
      for (let d = text.charCodeAt(end); d !== QUOTE; d = text.charCodeAt(end)) {
        if (d === BACKSLASH) {
          escaped = true;
          end += 2;
        } else end += 1;
      }
      const keys = open.at(-1);
      if (expectingKey && keys) {
        const key = escaped ? (JSON.parse(text.slice(i, end + 1)) as string) : text.slice(i + 1, end);
        if (keys.has(key)) return true;
        keys.add(key);
        expectingKey = false;
      }
      i = end;
    } else if (c === OPEN_BRACE) {
      open.push(new Set());
      expectingKey = true;
    } else if (c === OPEN_BRACKET) {
      open.push(null);
    } else if (c === CLOSE_BRACE || c === CLOSE_BRACKET) {
      open.pop();
    } else if (c === COMMA) {
      expectingKey = open.at(-1) != null;
    }
  }
  return false;
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACKET = 0x5d;
const COMMA = 0x2c;
