package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	berthv1 "berth.dev/berth/gen/go/berth/v1"
)

const (
	mi = int64(1) << 20
	gi = int64(1) << 30
)

// exampleCluster is the built-in cluster the client schedules against when no
// --cluster file is given:
//
//	node-a   4 CPU,  8Gi  running web-1 (3 CPU, 6Gi): almost full
//	node-b   8 CPU, 16Gi  running cache-1 (1 CPU, 2Gi): the emptiest
//	node-c   2 CPU,  2Gi  no pods, but small
//	node-d  16 CPU, 64Gi  cordoned (spec.unschedulable), the biggest
//
// With the default request (500m CPU, 512Mi) node-a, node-b and node-c fit,
// node-d is rejected by NodeUnschedulable, and NodeResourcesFit's
// LeastAllocated scoring prefers node-b. With --cpu 1500m node-a is rejected
// too ("Insufficient cpu").
func exampleCluster() *berthv1.ClusterDelta {
	node := func(name string, milliCPU, memory int64, unschedulable bool) *berthv1.Node {
		alloc := &berthv1.Resources{MilliCpu: proto.Int64(milliCPU), Memory: proto.Int64(memory), EphemeralStorage: 100 * gi, Pods: 110}
		return &berthv1.Node{
			Name: name,
			Uid:  "uid-" + name,
			Labels: map[string]string{
				"kubernetes.io/hostname": name,
				"kubernetes.io/os":       "linux",
			},
			// kubelet reserves a little for the system; capacity > allocatable.
			Capacity: &berthv1.Resources{
				MilliCpu: proto.Int64(milliCPU + 100), Memory: proto.Int64(memory + 512*mi), EphemeralStorage: 110 * gi, Pods: 110,
			},
			Allocatable:   alloc,
			Unschedulable: unschedulable,
		}
	}
	dNode := node("node-d", 16000, 64*gi, true)
	// What `kubectl cordon` leaves on a node besides spec.unschedulable.
	dNode.Taints = []*berthv1.Taint{{Key: "node.kubernetes.io/unschedulable", Effect: "NoSchedule"}}
	return &berthv1.ClusterDelta{
		UpsertNodes: []*berthv1.Node{
			node("node-a", 4000, 8*gi, false),
			node("node-b", 8000, 16*gi, false),
			node("node-c", 2000, 2*gi, false),
			dNode,
		},
		UpsertPods: []*berthv1.Pod{
			runningPod("web-1", "node-a", 3000, 6*gi),
			runningPod("cache-1", "node-b", 1000, 2*gi),
		},
	}
}

func runningPod(name, nodeName string, milliCPU, memory int64) *berthv1.Pod {
	return &berthv1.Pod{
		Uid:           "uid-" + name,
		Namespace:     "default",
		Name:          name,
		Labels:        map[string]string{"app": strings.SplitN(name, "-", 2)[0]},
		NodeName:      nodeName,
		SchedulerName: "default-scheduler",
		Phase:         "Running",
		Containers: []*berthv1.Container{{
			Name:     "main",
			Image:    "registry.k8s.io/pause:3.10",
			Requests: &berthv1.Resources{MilliCpu: proto.Int64(milliCPU), Memory: proto.Int64(memory)},
		}},
		CreationUnixMicros: time.Now().Add(-time.Hour).UnixMicro(),
	}
}

// pendingPod is the pod the client asks a placement for.
func pendingPod(namespace, name, schedulerName string, milliCPU, memory int64) *berthv1.Pod {
	return &berthv1.Pod{
		Uid:           "uid-" + randomHex(8),
		Namespace:     namespace,
		Name:          name,
		Labels:        map[string]string{"app": name},
		SchedulerName: schedulerName,
		Phase:         "Pending",
		Containers: []*berthv1.Container{{
			Name:     "app",
			Image:    "registry.k8s.io/pause:3.10",
			Requests: &berthv1.Resources{MilliCpu: proto.Int64(milliCPU), Memory: proto.Int64(memory)},
		}},
		CreationUnixMicros: time.Now().UnixMicro(),
	}
}

// fullState wraps a whole cluster as a full ClusterState: the server replaces
// its snapshot for clusterID with it.
func fullState(clusterID string, incarnation, generation int64, cluster *berthv1.ClusterDelta) *berthv1.ClusterState {
	return &berthv1.ClusterState{
		ClusterId:   clusterID,
		Incarnation: incarnation,
		Generation:  generation,
		Full:        true,
		Delta:       cluster,
	}
}

// loadCluster reads a ClusterDelta in protobuf JSON form (see
// --print-example-cluster): {"upsert_nodes": [...], "upsert_pods": [...]}.
func loadCluster(path string) (*berthv1.ClusterDelta, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	cluster := &berthv1.ClusterDelta{}
	if err := protojson.Unmarshal(data, cluster); err != nil {
		return nil, fmt.Errorf("%s: not a berth.v1.ClusterDelta in protobuf JSON: %w", path, err)
	}
	if len(cluster.GetUpsertNodes()) == 0 {
		return nil, fmt.Errorf("%s: upsert_nodes is empty; a full cluster state needs at least one node", path)
	}
	if len(cluster.GetDeleteNodes()) > 0 || len(cluster.GetDeletePods()) > 0 {
		return nil, fmt.Errorf("%s: delete_nodes/delete_pods make no sense in a full cluster state", path)
	}
	return cluster, nil
}

func clusterJSON(cluster *berthv1.ClusterDelta) ([]byte, error) {
	return protojson.MarshalOptions{Multiline: true, Indent: "  ", UseProtoNames: true}.Marshal(cluster)
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return hex.EncodeToString(b)
}

// parseCPU reads a CPU quantity the way a pod spec writes it and returns
// millicores: "500m" -> 500, "2" -> 2000, "0.25" -> 250. Fractions of a
// millicore round up, as Kubernetes' Quantity.MilliValue does.
func parseCPU(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if milli, ok := strings.CutSuffix(s, "m"); ok {
		v, err := strconv.ParseInt(milli, 10, 64)
		if err != nil || v < 0 {
			return 0, fmt.Errorf("invalid CPU quantity %q: want millicores like 500m or cores like 0.5", s)
		}
		return v, nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) || v > math.MaxInt64/1000 {
		return 0, fmt.Errorf("invalid CPU quantity %q: want millicores like 500m or cores like 0.5", s)
	}
	return int64(math.Ceil(v*1000 - 1e-9)), nil
}

var memorySuffixes = []struct {
	suffix string
	factor int64
}{
	// Binary suffixes first: "Mi" must not be read as "M" + "i".
	{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}, {"Pi", 1 << 50}, {"Ei", 1 << 60},
	{"k", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}, {"P", 1e15}, {"E", 1e18},
}

// parseMemory reads a memory quantity and returns bytes: "536870912",
// "512Mi", "1Gi", "1.5G".
func parseMemory(s string) (int64, error) {
	s = strings.TrimSpace(s)
	bad := fmt.Errorf("invalid memory quantity %q: want bytes, or a number with Ki/Mi/Gi/Ti or k/M/G/T, e.g. 512Mi", s)
	number, factor := s, int64(1)
	for _, sf := range memorySuffixes {
		if n, ok := strings.CutSuffix(s, sf.suffix); ok {
			number, factor = n, sf.factor
			break
		}
	}
	if v, err := strconv.ParseInt(number, 10, 64); err == nil {
		if v < 0 || (v > 0 && factor > math.MaxInt64/v) {
			return 0, bad
		}
		return v * factor, nil
	}
	v, err := strconv.ParseFloat(number, 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) || v*float64(factor) >= math.MaxInt64 {
		return 0, bad
	}
	return int64(math.Ceil(v * float64(factor))), nil
}

// formatMemory renders bytes the short way a human reads them: 512Mi, 2Gi.
func formatMemory(b int64) string {
	for _, u := range []struct {
		suffix string
		factor int64
	}{{"Ei", 1 << 60}, {"Pi", 1 << 50}, {"Ti", 1 << 40}, {"Gi", 1 << 30}, {"Mi", 1 << 20}, {"Ki", 1 << 10}} {
		if b >= u.factor && b%u.factor == 0 {
			return strconv.FormatInt(b/u.factor, 10) + u.suffix
		}
	}
	return strconv.FormatInt(b, 10)
}
