# syntax=docker/dockerfile:1
#
# Aqueduct's one image: the consumer (`consume`, the default), the gateway (`serve`), the provider
# simulators (`simulate fcm|apns`) and the publisher (`publish`) are the same program with another verb.
#
# There is no build stage in the TypeScript sense: Node 24 strips the types of `src/**/*.ts` at run time
# (see docs/development.md, "Node 24"), so the image holds the sources as they are in the repository. The
# `node` devDependency, which gives a Node 24 binary to machines whose system Node is older, is not
# needed here: the base image is Node 24, and `--omit=dev` leaves it out with every other dev tool.

# ---- dependencies: production packages only, resolved exactly from the lockfile ----
FROM node:24-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
# --ignore-scripts: no production dependency needs its install script (protobufjs' only prints a version
# hint; @firebase/util's writes a browser default nobody here reads), and not running them is safer.
# `npm install` rather than `npm ci`: vite (a dev dependency) names a Windows-only optional package that
# the registry does not serve, so the lockfile can never list it and `npm ci` refuses the lockfile as
# out of sync. `npm install` still resolves from the lockfile where it can.
RUN npm install --omit=dev --ignore-scripts --no-audit --no-fund \
  && npm cache clean --force

# ---- runtime: the same base, the sources, and those packages ----
FROM node:24-slim AS runtime
ENV NODE_ENV=production
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

# 9464: health + metrics of `consume` (AQUEDUCT_HTTP_PORT); 8080: the gateway (AQUEDUCT_GATEWAY_PORT).
EXPOSE 9464 8080

# slim has no curl or wget: Node's fetch asks /healthz on AQUEDUCT_HTTP_PORT (default 9464).
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.AQUEDUCT_HTTP_PORT || 9464) + '/healthz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]

ENTRYPOINT ["node", "/app/bin/aqueduct.js"]
CMD ["consume"]
