#!/usr/bin/env bash
# Builds the Berth Go example client into bin/berth-go-client. The Go code
# for the API is the module berth.dev/berth/gen/go, committed at ../../gen/go
# (hack/gen-go.sh regenerates it) and used through go.mod's replace directive.
#
#   examples/go-client/build.sh          # from anywhere
#   examples/go-client/bin/berth-go-client --help
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

say() { echo "[build] $*"; }
die() { echo "build.sh: error: $*" >&2; exit 1; }

if ! command -v go >/dev/null 2>&1; then
  die "'go' not found on PATH; install Go 1.26 or newer (https://go.dev/doc/install), or add its bin directory to PATH"
fi
want_minor=26
have=$(go env GOVERSION 2>/dev/null || true)  # e.g. go1.26.8
minor=$(echo "$have" | sed -n 's/^go1\.\([0-9][0-9]*\).*/\1/p')
if [ -n "$minor" ] && [ "$minor" -lt "$want_minor" ] && [ "$(go env GOTOOLCHAIN)" = "local" ]; then
  die "$have is too old: go.mod needs go1.$want_minor (grpc-go's minimum); install a newer Go or set GOTOOLCHAIN=auto"
fi
[ -f "$root/gen/go/berth/v1/scheduling.pb.go" ] ||
  die "$root/gen/go/berth/v1 has no generated code; run hack/gen-go.sh from the repository root"

cd "$here"
say "using $have ($(command -v go))"
say "downloading Go modules (go.sum pins grpc-go and protobuf-go)"
go mod download || die "go mod download failed; is the Go module proxy reachable? (GOPROXY=$(go env GOPROXY))"
say "compiling bin/berth-go-client"
go build -o bin/berth-go-client . || die "go build failed"
say "built $here/bin/berth-go-client"
