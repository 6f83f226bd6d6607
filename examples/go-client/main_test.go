package main

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	berthv1 "berth.dev/berth/gen/go/berth/v1"
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

// fakeReplica plays one plugin-server replica's generation protocol
// (protos/README.md): it holds one generation of one cluster (-1: none),
// applies a delta whose base it has reached, always takes a full state, and
// otherwise answers FAILED_PRECONDITION with a STALE_SNAPSHOT ErrorInfo
// carrying its generation, as berth serve does.
type fakeReplica struct {
	berthv1.UnimplementedSchedulingServiceServer
	generation  int64
	unavailable int // answer UNAVAILABLE to this many calls first
	calls       []*berthv1.ClusterState
}

func staleError(t *testing.T, replicaGeneration int64) error {
	t.Helper()
	st, err := status.New(codes.FailedPrecondition, "this replica cannot reach the requested generation").WithDetails(
		&errdetails.ErrorInfo{
			Reason: "STALE_SNAPSHOT",
			Domain: "berth.dev",
			Metadata: map[string]string{
				"replica_generation": strconv.FormatInt(replicaGeneration, 10),
				"replica":            "fake-0",
			},
		})
	if err != nil {
		t.Fatal(err)
	}
	return st.Err()
}

func (s *fakeReplica) serve(t *testing.T) berthv1.SchedulingServiceServer {
	return &fakeReplicaServer{fakeReplica: s, t: t}
}

type fakeReplicaServer struct {
	*fakeReplica
	t *testing.T
}

func (s *fakeReplicaServer) Schedule(_ context.Context, req *berthv1.ScheduleRequest) (*berthv1.ScheduleResponse, error) {
	state := req.GetState()
	s.calls = append(s.calls, state)
	if s.unavailable > 0 {
		s.unavailable--
		return nil, status.Error(codes.Unavailable, "replica restarting")
	}
	if !state.GetFull() && (s.generation < 0 || s.generation < state.GetBaseGeneration()) {
		return nil, staleError(s.t, s.generation)
	}
	s.generation = state.GetGeneration()
	return &berthv1.ScheduleResponse{Status: &berthv1.Status{}, Node: "node-a", Generation: s.generation}, nil
}

func dialFake(t *testing.T, srv berthv1.SchedulingServiceServer, opts ...grpc.DialOption) berthv1.SchedulingServiceClient {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	s := grpc.NewServer()
	berthv1.RegisterSchedulingServiceServer(s, srv)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	opts = append(opts,
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	conn, err := grpc.NewClient("passthrough:///bufnet", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return berthv1.NewSchedulingServiceClient(conn)
}

// deltaRequest asks for generation 7 with a delta from base 6.
func deltaRequest() *berthv1.ScheduleRequest {
	return &berthv1.ScheduleRequest{
		Profile: "default-scheduler",
		State: &berthv1.ClusterState{
			ClusterId: "c1", Generation: 7, BaseGeneration: 6,
			Delta: &berthv1.ClusterDelta{DeletePods: []string{"uid-web-1"}},
		},
		Pod: pendingPod("default", "p", "default-scheduler", 100, 1<<20),
	}
}

// since plays a caller's delta log that reaches back to generation 3: the
// changes after g, or the full state when g is older (or -1).
func since(asked *[]int64) func(int64) *berthv1.ClusterState {
	return func(g int64) *berthv1.ClusterState {
		*asked = append(*asked, g)
		if g < 3 {
			return fullState("c1", 1, 7, exampleCluster())
		}
		return &berthv1.ClusterState{
			ClusterId: "c1", Generation: 7, BaseGeneration: g,
			Delta: &berthv1.ClusterDelta{DeletePods: []string{"uid-web-1", "uid-cache-1"}},
		}
	}
}

func TestScheduleResendsTheChangesAfterTheReplicasGeneration(t *testing.T) {
	replica := &fakeReplica{generation: 5}
	client := dialFake(t, replica.serve(t))
	var asked []int64
	resp, err := schedule(context.Background(), client, deltaRequest(), since(&asked))
	if err != nil {
		t.Fatalf("schedule: %v", err)
	}
	if len(asked) != 1 || asked[0] != 5 {
		t.Fatalf("want the changes after the replica's generation 5 asked for once, got %v", asked)
	}
	if len(replica.calls) != 2 || replica.calls[1].GetFull() || replica.calls[1].GetBaseGeneration() != 5 {
		t.Fatalf("want a delta, then a delta from base 5; got %v", replica.calls)
	}
	if resp.GetNode() != "node-a" || resp.GetGeneration() != 7 || replica.generation != 7 {
		t.Fatalf("want node-a at generation 7, got %q at %d", resp.GetNode(), resp.GetGeneration())
	}
}

func TestScheduleResendsTheFullStateToAReplicaWithNoSnapshot(t *testing.T) {
	replica := &fakeReplica{generation: -1}
	client := dialFake(t, replica.serve(t))
	var asked []int64
	resp, err := schedule(context.Background(), client, deltaRequest(), since(&asked))
	if err != nil {
		t.Fatalf("schedule: %v", err)
	}
	if len(asked) != 1 || asked[0] != -1 {
		t.Fatalf("want the state since -1 asked for once, got %v", asked)
	}
	if len(replica.calls) != 2 || replica.calls[0].GetFull() || !replica.calls[1].GetFull() {
		t.Fatalf("want a delta then one full resend; got %v", replica.calls)
	}
	if len(replica.calls[1].GetDelta().GetUpsertNodes()) != 4 || resp.GetGeneration() != 7 {
		t.Fatalf("full resend carries the wrong state: %v", replica.calls[1])
	}
}

func TestScheduleDoesNotResendAFullState(t *testing.T) {
	// A server that refuses a full state as stale is broken; report, do not loop.
	replica := &alwaysStale{generation: 3}
	client := dialFake(t, replica.serve(t))
	req := &berthv1.ScheduleRequest{State: fullState("c1", 1, 1, exampleCluster())}
	var asked []int64
	_, err := schedule(context.Background(), client, req, since(&asked))
	var rerr *resyncError
	if status.Code(err) != codes.FailedPrecondition || !errors.As(err, &rerr) || rerr.replicaGeneration != 3 {
		t.Fatalf("want FAILED_PRECONDITION reporting replica generation 3, got %v", err)
	}
	if replica.calls != 1 || len(asked) != 0 {
		t.Fatalf("want exactly one call and no resend, got %d calls, resends %v", replica.calls, asked)
	}
}

func TestScheduleSendsTheFullStateWhenTheResendIsStaleToo(t *testing.T) {
	// Behind one channel the resend may reach another replica that is behind
	// too: the second resend is the full state, and a full state is never
	// stale, so its refusal ends the call.
	replica := &alwaysStale{generation: 4}
	client := dialFake(t, replica.serve(t))
	var asked []int64
	_, err := schedule(context.Background(), client, deltaRequest(), since(&asked))
	var rerr *resyncError
	if !errors.As(err, &rerr) || replica.calls != 3 {
		t.Fatalf("want a delta, a resend, a full state, then the error; got err %v after %d calls", err, replica.calls)
	}
	if len(asked) != 2 || asked[0] != 4 || asked[1] != -1 {
		t.Fatalf("want the changes after 4, then the full state; asked %v", asked)
	}
}

func TestFailedPreconditionWithoutStaleSnapshotIsNotResent(t *testing.T) {
	client := dialFake(t, &plainFailedPrecondition{})
	var asked []int64
	_, err := schedule(context.Background(), client, deltaRequest(), since(&asked))
	if status.Code(err) != codes.FailedPrecondition || len(asked) != 0 {
		t.Fatalf("want the FAILED_PRECONDITION returned as is, got %v (resends %v)", err, asked)
	}
}

func TestServiceConfigRetriesUnavailable(t *testing.T) {
	cfg, err := loadServiceConfig("")
	if err != nil {
		t.Fatal(err)
	}
	replica := &fakeReplica{generation: -1, unavailable: 1}
	client := dialFake(t, replica.serve(t), grpc.WithDefaultServiceConfig(cfg))
	req := &berthv1.ScheduleRequest{State: fullState("c1", 1, 1, exampleCluster())}
	resp, err := schedule(context.Background(), client, req, since(new([]int64)))
	if err != nil {
		t.Fatalf("want the service config's retryPolicy to retry UNAVAILABLE, got %v", err)
	}
	if len(replica.calls) != 2 || resp.GetGeneration() != 1 {
		t.Fatalf("want an UNAVAILABLE then a success, got %d calls", len(replica.calls))
	}
}

func TestLoadServiceConfig(t *testing.T) {
	cfg, err := loadServiceConfig("")
	if err != nil || !strings.Contains(cfg, "berth.v1.SchedulingService") {
		t.Fatalf("embedded service config: %v\n%s", err, cfg)
	}
	bad := t.TempDir() + "/bad.json"
	if err := os.WriteFile(bad, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadServiceConfig(bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Fatalf("want an error naming %s, got %v", bad, err)
	}
	if _, err := loadServiceConfig(t.TempDir() + "/missing.json"); err == nil {
		t.Fatal("want an error for a missing file")
	}
}

func TestReasonName(t *testing.T) {
	if got := reasonName(berthv1.ErrorReason_ERROR_REASON_STALE_SNAPSHOT); got != "STALE_SNAPSHOT" {
		t.Fatalf("reasonName = %q", got)
	}
}

type alwaysStale struct {
	generation int64
	calls      int
}

func (s *alwaysStale) serve(t *testing.T) berthv1.SchedulingServiceServer {
	return &alwaysStaleServer{alwaysStale: s, t: t}
}

type alwaysStaleServer struct {
	berthv1.UnimplementedSchedulingServiceServer
	*alwaysStale
	t *testing.T
}

func (s *alwaysStaleServer) Schedule(context.Context, *berthv1.ScheduleRequest) (*berthv1.ScheduleResponse, error) {
	s.calls++
	return nil, staleError(s.t, s.generation)
}

type plainFailedPrecondition struct {
	berthv1.UnimplementedSchedulingServiceServer
}

func (plainFailedPrecondition) Schedule(context.Context, *berthv1.ScheduleRequest) (*berthv1.ScheduleResponse, error) {
	return nil, status.Error(codes.FailedPrecondition, "some other precondition")
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
