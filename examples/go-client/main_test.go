package main

import (
	"context"
	"errors"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	berthv1 "berth.dev/examples/go-client/gen/berth/v1"
)

func TestParseCPU(t *testing.T) {
	for in, want := range map[string]int64{"500m": 500, "0": 0, "2": 2000, "0.25": 250, "1.5": 1500, "0.0001": 1} {
		got, err := parseCPU(in)
		if err != nil || got != want {
			t.Errorf("parseCPU(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "abc", "-1", "1.5m", "5Gi", "NaN"} {
		if _, err := parseCPU(in); err == nil {
			t.Errorf("parseCPU(%q) succeeded; want an error", in)
		}
	}
}

func TestParseMemory(t *testing.T) {
	for in, want := range map[string]int64{
		"536870912": 536870912, "512Mi": 512 << 20, "1Gi": 1 << 30, "1G": 1e9, "1.5Gi": 3 << 29, "100k": 100000,
	} {
		got, err := parseMemory(in)
		if err != nil || got != want {
			t.Errorf("parseMemory(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "Mi", "-1Gi", "1Xi", "9Ei"} {
		if _, err := parseMemory(in); err == nil {
			t.Errorf("parseMemory(%q) succeeded; want an error", in)
		}
	}
	if got := formatMemory(512 << 20); got != "512Mi" {
		t.Errorf("formatMemory(512Mi) = %q", got)
	}
}

// resyncServer answers every delta with FAILED_PRECONDITION and the replica's
// generation in the trailer, as a replica that missed earlier generations
// does, and places the pod once it gets the full state.
type resyncServer struct {
	berthv1.UnimplementedSchedulingServiceServer
	calls []*berthv1.ClusterState
}

func (s *resyncServer) Schedule(ctx context.Context, req *berthv1.ScheduleRequest) (*berthv1.ScheduleResponse, error) {
	s.calls = append(s.calls, req.GetState())
	if !req.GetState().GetFull() {
		_ = grpc.SetTrailer(ctx, metadata.Pairs(replicaGenerationKey, "0"))
		return nil, status.Error(codes.FailedPrecondition, "snapshot is at generation 0, delta needs base 6")
	}
	return &berthv1.ScheduleResponse{
		Status:     &berthv1.Status{},
		Node:       req.GetState().GetDelta().GetUpsertNodes()[0].GetName(),
		Generation: req.GetState().GetGeneration(),
	}, nil
}

func dialFake(t *testing.T, srv berthv1.SchedulingServiceServer) berthv1.SchedulingServiceClient {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	s := grpc.NewServer()
	berthv1.RegisterSchedulingServiceServer(s, srv)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return berthv1.NewSchedulingServiceClient(conn)
}

func TestScheduleResendsFullStateOnResync(t *testing.T) {
	srv := &resyncServer{}
	client := dialFake(t, srv)
	cluster := exampleCluster()
	req := &berthv1.ScheduleRequest{
		Profile: "default-scheduler",
		State: &berthv1.ClusterState{
			ClusterId: "c1", Generation: 7, BaseGeneration: 6,
			Delta: &berthv1.ClusterDelta{DeletePods: []string{"uid-web-1"}},
		},
		Pod: pendingPod("default", "p", "default-scheduler", 100, 1<<20),
	}
	resp, err := schedule(context.Background(), client, req, func() *berthv1.ClusterState {
		return fullState("c1", 7, cluster)
	})
	if err != nil {
		t.Fatalf("schedule: %v", err)
	}
	if resp.GetNode() != "node-a" || len(srv.calls) != 2 || srv.calls[0].GetFull() || !srv.calls[1].GetFull() {
		t.Fatalf("want a delta then one full resend placing on node-a; got node %q after %d calls", resp.GetNode(), len(srv.calls))
	}
	if srv.calls[1].GetGeneration() != 7 || len(srv.calls[1].GetDelta().GetUpsertNodes()) != 4 {
		t.Fatalf("full resend carries the wrong state: %v", srv.calls[1])
	}
}

func TestScheduleDoesNotRetryAFullState(t *testing.T) {
	// A server that asks a full state to resync is broken; report, do not loop.
	srv := &alwaysResync{}
	client := dialFake(t, srv)
	req := &berthv1.ScheduleRequest{State: fullState("c1", 1, exampleCluster())}
	_, err := schedule(context.Background(), client, req, func() *berthv1.ClusterState { return req.GetState() })
	var rerr *resyncError
	if status.Code(err) != codes.FailedPrecondition || !errors.As(err, &rerr) || rerr.replicaGeneration != "3" {
		t.Fatalf("want FAILED_PRECONDITION reporting replica generation 3, got %v", err)
	}
	if srv.calls != 1 {
		t.Fatalf("want exactly one call, got %d", srv.calls)
	}
}

type alwaysResync struct {
	berthv1.UnimplementedSchedulingServiceServer
	calls int
}

func (s *alwaysResync) Schedule(ctx context.Context, _ *berthv1.ScheduleRequest) (*berthv1.ScheduleResponse, error) {
	s.calls++
	_ = grpc.SetTrailer(ctx, metadata.Pairs(replicaGenerationKey, "3"))
	return nil, status.Error(codes.FailedPrecondition, "resync")
}

func TestSummarizeOrdersScoredThenRejected(t *testing.T) {
	cluster := exampleCluster()
	req := &berthv1.ScheduleRequest{Profile: "default-scheduler", Pod: pendingPod("default", "p", "default-scheduler", 500, 512<<20)}
	resp := &berthv1.ScheduleResponse{
		Status: &berthv1.Status{},
		Node:   "node-b",
		Diagnosis: &berthv1.Diagnosis{Rejected: []*berthv1.NodeStatus{{
			Node:   "node-d",
			Status: &berthv1.Status{Code: berthv1.Code_CODE_UNSCHEDULABLE_AND_UNRESOLVABLE, Plugin: "NodeUnschedulable", Reasons: []string{"node(s) were unschedulable"}},
		}}},
		Scores: []*berthv1.NodeScore{
			{Node: "node-b", Total: 82, Plugins: map[string]int64{"NodeResourcesFit": 82}},
			{Node: "node-c", Total: 75, Plugins: map[string]int64{"NodeResourcesFit": 75}},
		},
	}
	res := summarize(req, resp, cluster)
	var names, filters []string
	for _, n := range res.Nodes {
		names = append(names, n.Name)
		filters = append(filters, n.Filter)
	}
	wantNames := []string{"node-b", "node-c", "node-d", "node-a"}
	wantFilters := []string{"passed", "passed", "rejected", "not evaluated"}
	for i := range wantNames {
		if names[i] != wantNames[i] || filters[i] != wantFilters[i] {
			t.Fatalf("nodes = %v %v; want %v %v", names, filters, wantNames, wantFilters)
		}
	}
	if !res.Nodes[0].Chosen || res.Nodes[2].Code != "UnschedulableAndUnresolvable" || res.Plugins[0] != "NodeResourcesFit" {
		t.Fatalf("unexpected summary: %+v", res)
	}
}
