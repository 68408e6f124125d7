import { createPrivateKey, type KeyObject, sign } from 'node:crypto';

/**
 * APNs provider tokens (the JWT in `authorization: bearer …`), one per fleet rather than one per process.
 *
 * Apple asks for a provider token to be refreshed no more than once every 20 minutes and no less than
 * once every 60, answers 403 ExpiredProviderToken to one older than an hour, and 429
 * TooManyProviderTokenUpdates to updates more frequent than that. node-apn signs a token of its own in
 * every process and renews it after 55 minutes, so a fleet of consumers (or one scaled up and down by
 * an autoscaler) would show APNs a new token each time a process starts. {@link SharedProviderToken}
 * instead takes the token from a {@link ProviderTokenStore} (Redis, see apns-token-store.ts) that every
 * process of the fleet reads, renews it there once it is {@link RENEW_AFTER_SECONDS} old, and signs one
 * of its own only while the store cannot be reached.
 */

/** Age (s) at which the shared token is replaced: past Apple's 20-minute floor, well before its hour. */
export const RENEW_AFTER_SECONDS = 40 * 60;
/** Fewest ms between two reads of the store that refusals of the token ask for. */
const REREAD_AFTER_REFUSAL_MS = 5000;
/** node-apn renews a token this old (s) itself, in the request path: the store is then not asked. */
const NODE_APN_MAX_AGE_SECONDS = 55 * 60;

/** A signed provider token and when it was issued (its `iat`, epoch seconds). */
export interface ProviderToken {
  jwt: string;
  iat: number;
}

/** Where the fleet keeps its provider token. */
export interface ProviderTokenStore {
  /**
   * Offers `candidate`; answers the token every process is to use: the stored one when its iat is at
   * least `replaceBelow`, else `candidate` (now stored). An `established` candidate (one the caller
   * took from the store earlier and sends) also replaces a newer stored token when both are at least
   * `replaceBelow`: after the store lost its token, a process started since may have stored one of its
   * own, and the fleet keeps the one APNs already knows rather than all moving to a new one.
   */
  share(candidate: ProviderToken, replaceBelow: number, established?: boolean): Promise<ProviderToken>;
}

/** The signing key and the ids a provider token names (APNS_KEY_FILE, APNS_KEY_ID, APNS_TEAM_ID). */
export interface ProviderTokenKey {
  keyPem: string;
  keyId: string;
  teamId: string;
}

/** Signs provider tokens: ES256 over `{ alg, kid }.{ iss, iat }`, as Apple's token format asks. */
export function providerTokenSigner(key: ProviderTokenKey): (iat: number) => ProviderToken {
  const privateKey: KeyObject = createPrivateKey(key.keyPem);
  const header = base64url({ alg: 'ES256', kid: key.keyId });
  return (iat) => {
    const input = `${header}.${base64url({ iss: key.teamId, iat })}`;
    const signature = sign('sha256', Buffer.from(input), { key: privateKey, dsaEncoding: 'ieee-p1363' });
    return { jwt: `${input}.${signature.toString('base64url')}`, iat };
  };
}

function base64url(value: object): string {
  return Buffer.from(JSON.stringify(value)).toString('base64url');
}

/** Options of {@link SharedProviderToken}. */
export interface SharedProviderTokenOptions {
  /** How often (ms) the store is read for a token another process renewed. Default 60 000. */
  checkEveryMs?: number | undefined;
  /** The store could not be reached: the process goes on with the token it has (or one of its own). */
  onStoreError?: (error: unknown) => void;
  /**
   * How long (ms) a store call may take before the process goes on with a token of its own (and
   * `ready` resolves). Default 5000.
   */
  storeTimeoutMs?: number;
  /** The clock, epoch ms. */
  now?: () => number;
}

/**
 * The provider token of one process, in the shape node-apn reads on every request (`current`, and
 * `isExpired`/`regenerate`/`generation`, see @parse/node-apn lib/credentials/token/prepare.js), kept
 * equal to the fleet's shared one.
 */
export class SharedProviderToken {
  /** Counts the tokens this process used; node-apn passes it back to `regenerate`. */
  generation = 0;
  private token: ProviderToken;
  /** Whether `token` came from the store (the fleet's), rather than signed here and not yet shared. */
  private established = false;
  private readonly sign: (iat: number) => ProviderToken;
  private readonly store: ProviderTokenStore;
  private readonly now: () => number;
  private readonly onStoreError: (error: unknown) => void;
  private readonly timer: NodeJS.Timeout;
  private readonly storeTimeoutMs: number;
  /** When `refused` last read the store (epoch ms). */
  private lastRefusalRead = Number.NEGATIVE_INFINITY;
  /** The last store call asked (see `ask`). */
  private queue: Promise<void> = Promise.resolve();
  /** Resolves once the store's first answer (or its failure, or `storeTimeoutMs`) is in; never rejects. */
  readonly ready: Promise<void>;

  constructor(
    sign: (iat: number) => ProviderToken,
    store: ProviderTokenStore,
    options: SharedProviderTokenOptions = {},
  ) {
    this.sign = sign;
    this.store = store;
    this.now = options.now ?? Date.now;
    this.onStoreError = options.onStoreError ?? (() => {});
    this.token = sign(this.seconds());
    this.storeTimeoutMs = options.storeTimeoutMs ?? 5000;
    this.ready = this.refresh();
    this.timer = setInterval(() => void this.refresh(), options.checkEveryMs ?? 60_000);
    this.timer.unref();
  }

  /** The JWT node-apn sends. */
  get current(): string {
    return this.token.jwt;
  }

  /** node-apn asks before each request; true makes it call `regenerate` at once. */
  isExpired(validSeconds: number): boolean {
    return this.seconds() - this.token.iat >= Math.min(validSeconds, NODE_APN_MAX_AGE_SECONDS);
  }

  /**
   * node-apn's answer to 403 ExpiredProviderToken (and to `isExpired`): a token of generation
   * `generation` is not good any more. A fresh one is signed here, at once, since node-apn reads
   * `current` right after; the store is offered it, and whatever the fleet uses comes back from there.
   */
  regenerate(generation: number): void {
    if (generation !== this.generation) return;
    const stale = this.token;
    this.adopt(this.sign(this.seconds()), false);
    void this.ask(this.token, stale.iat + 1);
  }

  /**
   * APNs refused the token as an update too soon after the last (429 TooManyProviderTokenUpdates): the
   * fleet may have gone back to the token APNs knows (see ProviderTokenStore.share), so the store is
   * read now rather than at the next check; at most once every {@link REREAD_AFTER_REFUSAL_MS}.
   */
  refused(): void {
    const now = this.now();
    if (now - this.lastRefusalRead < REREAD_AFTER_REFUSAL_MS) return;
    this.lastRefusalRead = now;
    void this.refresh();
  }

  /** Stops reading the store. */
  close(): void {
    clearInterval(this.timer);
  }

  /** Offers a new token when the one in use is old enough to renew; else reads what the fleet uses. */
  private refresh(): Promise<void> {
    const now = this.seconds();
    const renew = now - this.token.iat >= RENEW_AFTER_SECONDS;
    // A stored token issued RENEW_AFTER_SECONDS ago or earlier is replaced.
    return this.ask(renew ? this.sign(now) : this.token, now - RENEW_AFTER_SECONDS + 1);
  }

  /** One store call at a time, in order, so that an older answer never lands after a newer one. */
  private ask(candidate: ProviderToken, replaceBelow: number): Promise<void> {
    const asked = this.queue
      .then(() => this.shareWithin(candidate, replaceBelow, candidate === this.token && this.established))
      .then(
        (shared) => this.adopt(shared, true),
        (error: unknown) => {
          // Without the store, the process goes on with its own token (node-apn's behaviour), renewed here.
          if (candidate.iat > this.token.iat) this.adopt(candidate, false);
          this.onStoreError(error);
        },
      );
    this.queue = asked;
    return asked;
  }

  private async shareWithin(
    candidate: ProviderToken,
    replaceBelow: number,
    established: boolean,
  ): Promise<ProviderToken> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new Error(`the token store did not answer within ${this.storeTimeoutMs} ms`)),
        this.storeTimeoutMs,
      );
    });
    try {
      return await Promise.race([this.store.share(candidate, replaceBelow, established), timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Uses `token` from now on; `shared`: it is the store's answer, the token the fleet uses. */
  private adopt(token: ProviderToken, shared: boolean): void {
    if (token.jwt === this.token.jwt) {
      this.established ||= shared;
      return;
    }
    this.token = token;
    this.established = shared;
    this.generation += 1;
  }

  private seconds(): number {
    return Math.floor(this.now() / 1000);
  }
}
