#!/usr/bin/env bash
# Generates the Python protobuf/gRPC code (and mypy stubs) for protos/ into
# berth/v1/. With --check, generates into a temporary tree and fails when the
# committed files differ: CI runs this so generated code never drifts from
# the .proto files. The generator versions are pinned in pyproject.toml
# (grpcio-tools, mypy-protobuf).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv="${BERTH_VENV:-$root/.venv}"
check=0
[ "${1:-}" = "--check" ] && check=1

out="$root"
if [ $check = 1 ]; then
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi
mkdir -p "$out/berth/v1"
"$venv/bin/python" -m grpc_tools.protoc \
  -I "$root/protos" \
  --python_out="$out" \
  --grpc_python_out="$out" \
  --plugin=protoc-gen-mypy="$venv/bin/protoc-gen-mypy" \
  --plugin=protoc-gen-mypy_grpc="$venv/bin/protoc-gen-mypy_grpc" \
  --mypy_out="$out" \
  --mypy_grpc_out="$out" \
  "$root"/protos/berth/v1/*.proto 2> >(grep -v "^Writing mypy to" >&2)

if [ $check = 1 ]; then
  status=0
  for f in "$out"/berth/v1/*_pb2*; do
    rel=${f#"$out/"}
    if ! cmp -s "$f" "$root/$rel"; then
      echo "gen-protos: $rel is out of date with protos/; run hack/gen-protos.sh and commit" >&2
      status=1
    fi
  done
  for f in "$root"/berth/v1/*_pb2*; do
    rel=${f#"$root/"}
    [ -e "$out/$rel" ] || { echo "gen-protos: $rel has no .proto source; delete it" >&2; status=1; }
  done
  [ $status = 0 ] && echo "gen-protos: generated code matches protos/"
  exit $status
fi
touch "$root/berth/v1/__init__.py"
echo "gen-protos: wrote berth/v1/ from protos/berth/v1/*.proto"
