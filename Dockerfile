# syntax=docker/dockerfile:1
#
# Aqueduct's one image: the consumer (`consume`, the default), the gateway (`serve`), the provider
# simulators (`simulate fcm|apns`) and the publisher (`publish`) are the same program with another verb.
#
# There is no build stage in the TypeScript sense: Node 24 strips the types of `src/**/*.ts` at run time
# (see docs/development.md, "Node 24"), so the image holds the sources as they are in the repository. The
# `node` devDependency, which gives a Node 24 binary to machines whose system Node is older, is not
# needed here: the base image is Node 24, and `--omit=dev` leaves it out with every other dev tool.

# ---- the base image ----
# Pinned by tag: node:24-slim. To pin it by digest (what a reproducible build wants), write the digest
# the registry gives for the tag on both FROM lines, `node:24-slim@sha256:<digest>`:
#   docker buildx imagetools inspect node:24-slim --format '{{json .Manifest.Digest}}'
# (or `docker pull node:24-slim && docker inspect --format '{{index .RepoDigests 0}}' node:24-slim`),
# and refresh it the same way for each Node security release. The digest is never written from memory:
# only one read from the registry is (docs/development.md, "The image's base and lockfile").

# ---- dependencies: production packages only, resolved exactly from the lockfile ----
FROM node:24-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
# --ignore-scripts: no production dependency needs its install script (protobufjs' only prints a version
# hint; @firebase/util's writes a browser default nobody here reads), and not running them is safer.
# `npm ci`: exactly the lockfile, or a failed build. The lockfile is complete for every platform (it
# lists vite's Windows-only optional dependency too, which npm skips here), so `npm ci` accepts it.
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund \
  && npm cache clean --force

# ---- runtime: the same base, the sources, and those packages ----
FROM node:24-slim AS runtime
ENV NODE_ENV=production
# tini runs as PID 1 and passes every signal on to Node. Node as PID 1 would not do: the kernel drops a
# signal PID 1 has no handler for, and Kubernetes has no `--init`. A SIGTERM that arrives while the
# modules still load, before the CLI has its handlers (a pod removed as it starts), would be lost, and
# the consumer would go on to join its group and run until the SIGKILL at the end of the grace period.
RUN apt-get update \
  && apt-get install -y --no-install-recommends tini \
  && rm -rf /var/lib/apt/lists/*
WORKDIR /app
# Owned by root and not writable by the runtime user: the process has no reason to change its own code.
COPY --from=deps /app/node_modules ./node_modules
# .dockerignore lets only the runtime files through (bin, src, lua, schemas, package.json).
COPY . .
# The simulators write their self-signed certificates here; a named volume mounted on it inherits the
# ownership, so the non-root user can write (see docker-compose.yml).
RUN mkdir -p /certs && chown node:node /certs

# `node` (uid 1000) comes with the official image.
USER node

# 9464: health + metrics of `consume` (AQUEDUCT_HTTP_PORT); 8080: the gateway's API
# (AQUEDUCT_GATEWAY_PORT); 9465: the gateway's probes, metrics and OpenAPI (AQUEDUCT_GATEWAY_ADMIN_PORT).
EXPOSE 9464 8080 9465

# slim has no curl or wget: Node's fetch asks /healthz on AQUEDUCT_HTTP_PORT (default 9464).
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.AQUEDUCT_HTTP_PORT || 9464) + '/healthz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]

ENTRYPOINT ["/usr/bin/tini", "--", "node", "/app/bin/aqueduct.js"]
CMD ["consume"]
