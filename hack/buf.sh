#!/usr/bin/env bash
# buf for the Berth API: lint (STANDARD + COMMENTS, exceptions documented in
# buf.yaml) and breaking-change detection against the last release.
#
#   hack/buf.sh install            npm ci the pinned buf CLI into hack/tools/node_modules
#   hack/buf.sh lint               buf lint (buf.yaml)
#   hack/buf.sh breaking [IMAGE]   buf breaking against IMAGE (default: the newest
#                                  protos/releases/v*.binpb)
#   hack/buf.sh check              lint, then breaking against the newest release
#   hack/buf.sh release vX.Y.Z [--force]
#                                  write protos/releases/vX.Y.Z.binpb from protos/
#                                  (refuses to overwrite an existing release
#                                  without --force, and to write one that breaks
#                                  the previous release)
#   hack/buf.sh buf ARGS...        run the pinned buf with ARGS
#
# A release image is `buf build --exclude-source-info` of protos/: the API's
# descriptors without comments, so rewording comments never changes it. It is
# committed, so `check` works on a fresh clone with no git tags and no network
# beyond npm (buf itself comes from the npm package @bufbuild/buf, pinned in
# hack/tools/package.json and package-lock.json).
#
# Environment: BUF_REPO_ROOT runs against another tree laid out like this
# repository (buf.yaml + protos/; tests/contract/test_buf.py uses it), with
# the buf installed here.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
root="${BUF_REPO_ROOT:-$repo}"
tools="$here/tools"
buf="$tools/node_modules/.bin/buf"
releases="$root/protos/releases"

say() { echo "[buf] $*"; }
die() { echo "buf.sh: error: $*" >&2; exit 1; }

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
}

# install: npm ci into hack/tools/node_modules when package-lock.json changed
# since the last install (or buf is missing).
install() {
  command -v npm >/dev/null 2>&1 ||
    die "npm not found on PATH; install Node.js 18+ with npm (Debian: apt-get install nodejs npm)"
  local stamp="$tools/node_modules/.berth-installed" want
  want=$(sha256sum "$tools/package-lock.json" | cut -d' ' -f1)
  if [ -x "$buf" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    return 0
  fi
  say "installing the buf CLI from npm into hack/tools/node_modules (npm ci)"
  (cd "$tools" && npm ci --no-audit --no-fund --loglevel=error) ||
    die "npm ci in hack/tools failed; is the npm registry reachable? ($(npm config get registry 2>/dev/null))"
  "$buf" --version >/dev/null 2>&1 || die "npm installed @bufbuild/buf but $buf does not run"
  echo "$want" >"$stamp"
}

# latest_release: the newest protos/releases/v*.binpb by version order.
latest_release() {
  local f
  f=$(ls "$releases"/v*.binpb 2>/dev/null | sort -V | tail -n 1) || true
  echo "$f"
}

lint() {
  say "buf lint (STANDARD + COMMENTS; exceptions in buf.yaml)"
  (cd "$root" && "$buf" lint) || die "buf lint found problems (listed above)"
  say "lint clean"
}

breaking() {
  local against=${1:-}
  if [ -z "$against" ]; then
    against=$(latest_release)
    [ -n "$against" ] ||
      die "no release image in protos/releases/; write the first with: hack/buf.sh release v0.1.0"
  fi
  [ -f "$against" ] || die "no such image: $against"
  say "buf breaking against ${against#"$root/"} (FILE rules)"
  (cd "$root" && "$buf" breaking --against "$against") ||
    die "breaking changes against ${against#"$root/"} (listed above): keep the old field numbers, names and types, or reserve them"
  say "no breaking changes against $(basename "$against" .binpb)"
}

release() {
  local version=${1:-} force=${2:-}
  [[ "$version" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] ||
    die "release wants a version like v0.1.0, got '${version}'"
  [ -z "$force" ] || [ "$force" = "--force" ] || die "unknown argument '$force'"
  local out="$releases/$version.binpb"
  if [ -e "$out" ] && [ "$force" != "--force" ]; then
    die "${out#"$root/"} exists; a release image is not rewritten (use --force only before the release is published)"
  fi
  lint
  local previous
  previous=$(ls "$releases"/v*.binpb 2>/dev/null | grep -v "/$version.binpb\$" | sort -V | tail -n 1) || true
  if [ -n "$previous" ]; then
    breaking "$previous"
  fi
  mkdir -p "$releases"
  (cd "$root" && "$buf" build --exclude-source-info -o "$out") || die "buf build failed"
  say "wrote ${out#"$root/"} ($(wc -c <"$out") bytes); commit it"
}

cmd=${1:-}
[ -n "$cmd" ] || usage
shift
case "$cmd" in
  install) install ;;
  lint) install; lint ;;
  breaking) install; breaking "${1:-}" ;;
  check) install; lint; breaking ;;
  release) install; release "$@" ;;
  buf) install; (cd "$root" && "$buf" "$@") ;;
  -h | --help | help) usage ;;
  *) echo "buf.sh: unknown command '$cmd'" >&2; usage ;;
esac
