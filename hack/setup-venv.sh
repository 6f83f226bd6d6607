#!/usr/bin/env bash
# Creates (or refreshes) the project's virtualenv at .venv with berth and its
# development tools installed in editable mode. Idempotent: skips pip when
# pyproject.toml has not changed since the last install.
#
# PYTHON: the interpreter to build it on (default python3); BERTH_VENV: where (default .venv).
# For benchmarks, use a CPython built with PGO and LTO, as the image's is (deploy/Dockerfile):
# a plain ./configure build costs Berth 20-30% more CPU (docs/benchmarks.md). On Debian:
#   PYTHON=/usr/bin/python3.11 BERTH_VENV=.venv-opt ./hack/setup-venv.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv="${BERTH_VENV:-$root/.venv}"
py="${PYTHON:-python3}"

if ! command -v "$py" >/dev/null 2>&1; then
  echo "setup-venv: $py not found; install Python 3.11+ (Debian: apt-get install python3 python3-venv)" >&2
  exit 1
fi
if [ ! -x "$venv/bin/python" ]; then
  echo "[setup-venv] creating virtualenv at $venv"
  "$py" -m venv "$venv" || {
    echo "setup-venv: could not create a virtualenv; on Debian: apt-get install python3-venv" >&2
    exit 1
  }
fi
stamp="$venv/.berth-installed"
want=$(sha256sum "$root/pyproject.toml" | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
echo "[setup-venv] installing berth and dev tools into $venv (pip, a minute or two on first run)"
"$venv/bin/python" -m pip install --quiet --upgrade pip
# The distribution was called "berth" before it became berth-scheduler; an old editable
# install of it would still map the top-level folders as packages.
if "$venv/bin/python" -m pip show --quiet berth >/dev/null 2>&1; then
  "$venv/bin/python" -m pip uninstall --quiet --yes berth
fi
"$venv/bin/python" -m pip install --quiet -e "$root[dev]"
echo "$want" > "$stamp"
echo "[setup-venv] ready: $venv"
