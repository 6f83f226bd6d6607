package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"

	berthv1 "berth.dev/berth/gen/go/berth/v1"
)

// The client contract of protos/README.md: typed errors and the service config.

// errorDomain is google.rpc.ErrorInfo.domain on every error the server sends.
const errorDomain = "berth.dev"

// reasonName is the ErrorInfo.reason string of an ErrorReason: its enum name
// without the ERROR_REASON_ prefix, e.g. "STALE_SNAPSHOT".
func reasonName(r berthv1.ErrorReason) string {
	const prefix = "ERROR_REASON_"
	name := r.String()
	if len(name) > len(prefix) && name[:len(prefix)] == prefix {
		return name[len(prefix):]
	}
	return name
}

// errorInfo returns the server's google.rpc.ErrorInfo from a gRPC error's
// status details (the grpc-status-details-bin trailer), or nil when the error
// has none from this domain (e.g. a transport error).
func errorInfo(err error) *errdetails.ErrorInfo {
	st, ok := status.FromError(err)
	if !ok {
		return nil
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == errorDomain {
			return info
		}
	}
	return nil
}

// staleSnapshot reports whether err is STALE_SNAPSHOT and, if so, the
// replica's generation from the ErrorInfo metadata (-1: no snapshot).
func staleSnapshot(err error) (replicaGeneration int64, stale bool, decodeErr error) {
	info := errorInfo(err)
	if info == nil || info.GetReason() != reasonName(berthv1.ErrorReason_ERROR_REASON_STALE_SNAPSHOT) {
		return 0, false, nil
	}
	raw, ok := info.GetMetadata()["replica_generation"]
	if !ok {
		return 0, true, errors.New("STALE_SNAPSHOT without metadata replica_generation")
	}
	g, perr := strconv.ParseInt(raw, 10, 64)
	if perr != nil {
		return 0, true, fmt.Errorf("STALE_SNAPSHOT metadata replica_generation=%q is not an integer", raw)
	}
	return g, true, nil
}

// loadServiceConfig returns the gRPC service config JSON: the file at path, or
// (path empty) the copy of protos/service_config.json that the generated Go
// package embeds. It must be a JSON object; grpc-go checks the rest when the
// channel is created.
func loadServiceConfig(path string) (string, error) {
	cfg := berthv1.DefaultServiceConfig
	where := "the embedded protos/service_config.json"
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return "", err
		}
		cfg, where = string(data), path
	}
	var obj map[string]any
	if err := json.Unmarshal([]byte(cfg), &obj); err != nil {
		return "", fmt.Errorf("%s: not a JSON object: %w", where, err)
	}
	return cfg, nil
}
