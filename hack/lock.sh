#!/usr/bin/env bash
# Locks the container image's Python dependencies, with hashes, for what the image runs:
# CPython 3.11 on Linux x86_64 and aarch64, wheels only.
#
#   deploy/requirements.lock        the runtime dependencies of pyproject.toml
#   deploy/build-requirements.lock  its [build-system] requires (what builds berth's wheel)
#
# deploy/Dockerfile installs both with pip --require-hashes. Resolved with uv (pinned in
# pyproject.toml's dev extra: hack/setup-venv.sh installs it) for x86_64; the same
# resolution for aarch64 must pin the same versions, else this fails. Hashes cover every
# file of each pinned version on PyPI, so one file serves both architectures.
#
#   hack/lock.sh            regenerate (versions already locked stay, unless pyproject.toml
#                           no longer allows them; add --upgrade to take newer ones)
#   hack/lock.sh --check    regenerate into a temporary directory and fail if it differs
#                           (tests/integration/test_image_lock.py runs this)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${BERTH_VENV:-$root/.venv}
uv=$venv/bin/uv
want_uv=$(sed -n 's/^ *"uv==\([0-9.]*\)".*/\1/p' "$root/pyproject.toml")
die() {
  echo "lock: $*" >&2
  exit 1
}
[ -n "$want_uv" ] || die "pyproject.toml's dev extra pins no uv==VERSION"
[ -x "$uv" ] || die "no uv in $venv; run hack/setup-venv.sh"
have_uv=$("$uv" --version | cut -d' ' -f2)
[ "$have_uv" = "$want_uv" ] || die "$uv is $have_uv, pyproject.toml pins $want_uv; run hack/setup-venv.sh"

check=0
extra=()
for arg in "$@"; do
  case $arg in
    --check) check=1 ;;
    --upgrade) extra+=(--upgrade) ;;
    *) die "unknown argument $arg (want --check or --upgrade)" ;;
  esac
done

out=$root/deploy
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ "$check" = 1 ]; then
  # Start from the committed files: uv keeps their pins, so only a change of
  # pyproject.toml (or of this script) makes a difference.
  cp "$out/requirements.lock" "$out/build-requirements.lock" "$work/"
  dest=$work
else
  dest=$out
fi

"$venv/bin/python" - "$root/pyproject.toml" >"$work/build-requirements.in" <<'PY'
import sys, tomllib
for req in tomllib.load(open(sys.argv[1], "rb"))["build-system"]["requires"]:
    print(req)
PY

compile() { # compile INPUT OUTPUT PLATFORM
  (cd "$root" && "$uv" pip compile "$1" --output-file "$2" \
    --python-version 3.11 --python-platform "$3" --only-binary :all: \
    --generate-hashes --no-annotate --quiet "${extra[@]}" \
    --custom-compile-command "hack/lock.sh")
}
for name in requirements build-requirements; do
  input=$root/pyproject.toml
  [ "$name" = build-requirements ] && input=$work/build-requirements.in
  compile "$input" "$dest/$name.lock" x86_64-manylinux_2_28
  cp "$dest/$name.lock" "$work/$name.aarch64.lock"
  compile "$input" "$work/$name.aarch64.lock" aarch64-manylinux_2_28
  cmp -s "$dest/$name.lock" "$work/$name.aarch64.lock" \
    || die "$name: aarch64 resolves differently from x86_64:"$'\n'"$(diff "$dest/$name.lock" "$work/$name.aarch64.lock")"
done

if [ "$check" = 1 ]; then
  status=0
  for name in requirements build-requirements; do
    if ! diff -u "$out/$name.lock" "$work/$name.lock" >"$work/$name.diff"; then
      echo "lock: deploy/$name.lock is not what hack/lock.sh makes from pyproject.toml; run hack/lock.sh and commit:" >&2
      cat "$work/$name.diff" >&2
      status=1
    fi
  done
  exit $status
fi
echo "[lock] wrote deploy/requirements.lock and deploy/build-requirements.lock"
