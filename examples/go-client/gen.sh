#!/usr/bin/env bash
# Generates the Go protobuf and gRPC code for ../../protos/berth/v1/*.proto into
# gen/berth/v1 (package berthv1). The generated code is not committed: it is
# rebuilt from the same .proto files the Python server is generated from.
#
# protoc itself comes from the project's virtualenv (grpcio-tools, pinned in
# pyproject.toml); the Go plugins are built from the Go module proxy at pinned
# versions into .bin/ (project-local GOBIN, gitignored). protoc-gen-go's version
# is read from go.mod, so the generator always matches the runtime library.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
venv="${BERTH_VENV:-$root/.venv}"

# Pinned: protoc-gen-go-grpc lives in its own module with its own versions.
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2

say() { echo "[gen] $*"; }
die() { echo "gen.sh: error: $*" >&2; exit 1; }

command -v go >/dev/null 2>&1 ||
  die "'go' not found on PATH; install Go 1.26 or newer (https://go.dev/doc/install) and retry"
[ -x "$venv/bin/python" ] ||
  die "no Python virtualenv at $venv; run hack/setup-venv.sh from the repository root first"
"$venv/bin/python" -c 'import grpc_tools.protoc' 2>/dev/null ||
  die "grpcio-tools is not installed in $venv; run hack/setup-venv.sh from the repository root"

cd "$here"
bindir="$here/.bin"
mkdir -p "$bindir"

protobuf_version=$(go list -m -f '{{.Version}}' google.golang.org/protobuf) ||
  die "could not read the google.golang.org/protobuf version from go.mod"

# install NAME PACKAGE VERSION: go install into .bin/ unless the binary there
# already reports VERSION.
install_plugin() {
  local name=$1 pkg=$2 version=$3
  local have=""
  if [ -x "$bindir/$name" ]; then
    have=$("$bindir/$name" --version 2>/dev/null | awk '{print $NF}') || have=""
  fi
  if [ "$have" = "$version" ] || [ "v$have" = "$version" ]; then
    return 0
  fi
  say "installing $name $version into .bin/ (go install, from the module proxy)"
  GOBIN="$bindir" go install "$pkg@$version" ||
    die "go install $pkg@$version failed (is the Go module proxy reachable? GOPROXY=$(go env GOPROXY))"
}
install_plugin protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go "$protobuf_version"
install_plugin protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc "$PROTOC_GEN_GO_GRPC_VERSION"

# Generate into a scratch tree, then swap it in, so an interrupted run never
# leaves half a package behind.
module=$(go list -m)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
say "generating Go code from protos/berth/v1/*.proto"
"$venv/bin/python" -m grpc_tools.protoc \
  -I "$root/protos" \
  --plugin=protoc-gen-go="$bindir/protoc-gen-go" \
  --plugin=protoc-gen-go-grpc="$bindir/protoc-gen-go-grpc" \
  --go_out="$tmp" --go_opt=module="$module" \
  --go-grpc_out="$tmp" --go-grpc_opt=module="$module" \
  "$root"/protos/berth/v1/*.proto ||
  die "protoc failed on protos/berth/v1/*.proto"
[ -d "$tmp/gen/berth/v1" ] ||
  die "protoc wrote no gen/berth/v1; does the protos' go_package still start with $module/gen/?"
rm -rf "$here/gen"
mv "$tmp/gen" "$here/gen"
say "wrote $(ls "$here/gen/berth/v1" | tr '\n' ' ')"
