#!/usr/bin/env bash
# Builds the Berth TypeScript example client into dist/: installs the pinned
# npm packages (npm ci from package-lock.json; skipped while the lock file is
# unchanged since the last install), generates the TypeScript types of
# ../../protos/berth/v1 into src/gen (proto-loader-gen-types), and compiles
# with tsc.
#
#   examples/ts-client/build.sh          # from anywhere
#   node examples/ts-client/dist/src/main.js --help
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

say() { echo "[ts-build] $*"; }
die() { echo "build.sh: error: $*" >&2; exit 1; }

command -v node >/dev/null 2>&1 ||
  die "'node' not found on PATH; install Node.js 18 or newer with npm (Debian: apt-get install nodejs npm)"
command -v npm >/dev/null 2>&1 || die "'npm' not found on PATH; install npm (Debian: apt-get install npm)"
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 18 ] || die "node $(node --version) is too old: @grpc/grpc-js and this client need Node.js 18+"

cd "$here"
stamp=node_modules/.berth-installed
want=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  say "installing npm packages (npm ci; package-lock.json pins them)"
  npm ci --no-audit --no-fund --loglevel=error ||
    die "npm ci failed; is the npm registry reachable? ($(npm config get registry 2>/dev/null))"
  echo "$want" >"$stamp"
fi
say "generating src/gen from ../../protos and compiling (tsc)"
rm -rf dist src/gen
npm run --silent build || die "the build failed (see above)"
say "built $here/dist/src/main.js"
