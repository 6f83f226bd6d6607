// Command berth-go-client asks a running Berth plugin server for a placement
// decision over gRPC (berth.v1.SchedulingService/Schedule) and explains it:
// the node chosen, every node's filter result and every plugin's score.
//
// The Go code for the service is the module berth.dev/berth/gen/go, generated
// by hack/gen-go.sh from the same protos/berth/v1/*.proto files the Python
// server is built from and committed in this repository (go.mod replaces it
// with ../../gen/go). The client follows the contract of protos/README.md: it
// loads the service config (deadlines, retries on UNAVAILABLE, message sizes)
// and reads typed errors (google.rpc.ErrorInfo) from the status details.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	berthv1 "berth.dev/berth/gen/go/berth/v1"
)

// Exit codes.
const (
	exitPlaced        = 0 // the pod has a node
	exitRPCError      = 1 // the call failed: transport or gRPC status error
	exitUsage         = 2 // bad flags or input file
	exitUnschedulable = 3 // the server answered, but no node fits (or a plugin errored)
)

type options struct {
	addr         string
	serviceCfg   string
	profile      string
	clusterFile  string
	cpu          string
	memory       string
	namespace    string
	podName      string
	timeout      time.Duration
	waitReady    bool
	seed         uint64
	jsonOut      bool
	printExample bool
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("berth-go-client", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.addr, "addr", "127.0.0.1:50051", "Berth plugin server `host:port`")
	fs.StringVar(&o.serviceCfg, "service-config", "", "gRPC service config `FILE` (default: protos/service_config.json, embedded\nin the generated package as berthv1.DefaultServiceConfig)")
	fs.StringVar(&o.profile, "profile", "default-scheduler", "scheduler profile (KubeSchedulerConfiguration schedulerName)")
	fs.StringVar(&o.clusterFile, "cluster", "", "`FILE` with the cluster as a berth.v1.ClusterDelta in protobuf JSON\n(default: the built-in example cluster; see -print-example-cluster)")
	fs.StringVar(&o.cpu, "cpu", "500m", "the pod's CPU request: millicores (500m) or cores (0.5)")
	fs.StringVar(&o.memory, "memory", "512Mi", "the pod's memory request: bytes or a quantity (512Mi, 1Gi)")
	fs.StringVar(&o.namespace, "namespace", "default", "the pod's namespace")
	fs.StringVar(&o.podName, "pod-name", "go-client-demo", "the pod's name")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "deadline for the whole call")
	fs.BoolVar(&o.waitReady, "wait-for-ready", false, "wait (up to -timeout) for the server to come up instead of failing fast")
	fs.Uint64Var(&o.seed, "seed", 0, "seed for the tie-break among equal top scores (0: unseeded)")
	fs.BoolVar(&o.jsonOut, "json", false, "print the result as JSON")
	fs.BoolVar(&o.printExample, "print-example-cluster", false, "print the built-in example cluster as JSON (a -cluster file) and exit")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: berth-go-client [flags]\n\n"+
			"Asks a Berth plugin server where a pod with the given requests would be\n"+
			"scheduled, and prints the chosen node, each node's filter result and each\n"+
			"plugin's score.\n\nFlags:\n")
		fs.PrintDefaults()
		fmt.Fprintf(stderr, "\nExit status: 0 placed, 1 RPC error, 2 usage error, 3 no node fits.\n")
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitPlaced
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "berth-go-client: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return exitUsage
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "berth-go-client: "+format+"\n", a...)
		return exitUsage
	}

	cluster := exampleCluster()
	if o.clusterFile != "" {
		var err error
		if cluster, err = loadCluster(o.clusterFile); err != nil {
			return usageErr("%v", err)
		}
	}
	if o.printExample {
		out, err := clusterJSON(cluster)
		if err != nil {
			return usageErr("%v", err)
		}
		fmt.Fprintf(stdout, "%s\n", out)
		return exitPlaced
	}
	milliCPU, err := parseCPU(o.cpu)
	if err != nil {
		return usageErr("-cpu: %v", err)
	}
	memory, err := parseMemory(o.memory)
	if err != nil {
		return usageErr("-memory: %v", err)
	}
	if o.timeout <= 0 {
		return usageErr("-timeout must be positive")
	}

	serviceConfig, err := loadServiceConfig(o.serviceCfg)
	if err != nil {
		return usageErr("-service-config: %v", err)
	}
	conn, err := grpc.NewClient(o.addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		// Per-method deadlines, retries on UNAVAILABLE, message size limits.
		grpc.WithDefaultServiceConfig(serviceConfig))
	if err != nil {
		return usageErr("-addr %q: %v", o.addr, err)
	}
	defer conn.Close()
	client := berthv1.NewSchedulingServiceClient(conn)

	// A fresh cluster_id per run: this process is a new snapshot lineage, so
	// it never collides with generations some earlier caller sent. The
	// incarnation tells a replica this run from any earlier one all the same.
	clusterID := "go-client-" + randomHex(8)
	incarnation := time.Now().UnixMicro()
	req := &berthv1.ScheduleRequest{
		Profile: o.profile,
		State:   fullState(clusterID, incarnation, 1, cluster),
		Pod:     pendingPod(o.namespace, o.podName, o.profile, milliCPU, memory),
		Explain: true,
		Seed:    o.seed,
	}

	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	var callOpts []grpc.CallOption
	if o.waitReady {
		callOpts = append(callOpts, grpc.WaitForReady(true))
	}
	// This client holds no older generations, so whatever the replica has, it
	// resends the whole cluster; a caller with a delta log sends the changes
	// after the replica's generation instead (see schedule).
	resp, err := schedule(ctx, client, req, func(int64) *berthv1.ClusterState {
		return fullState(clusterID, incarnation, req.GetState().GetGeneration(), cluster)
	}, callOpts...)
	if err != nil {
		st := status.Convert(err)
		reason := ""
		if info := errorInfo(err); info != nil {
			reason = " (reason " + info.GetReason() + ")"
		}
		fmt.Fprintf(stderr, "berth-go-client: Schedule RPC to %s failed: %s: %s%s\n", o.addr, st.Code(), st.Message(), reason)
		var rerr *resyncError
		if errors.As(err, &rerr) {
			fmt.Fprintf(stderr, "berth-go-client: the replica reports snapshot generation %d\n", rerr.replicaGeneration)
		}
		return exitRPCError
	}

	res := summarize(req, resp, cluster)
	if o.jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			fmt.Fprintf(stderr, "berth-go-client: %v\n", err)
			return exitRPCError
		}
	} else {
		printText(stdout, o.addr, res)
	}
	if res.Node == "" || resp.GetStatus().GetCode() != berthv1.Code_CODE_SUCCESS {
		return exitUnschedulable
	}
	return exitPlaced
}

// resyncError is a STALE_SNAPSHOT answer to a full state, which the client
// cannot act on (a server bug).
type resyncError struct {
	err               error
	replicaGeneration int64
}

func (e *resyncError) Error() string { return e.err.Error() }
func (e *resyncError) Unwrap() error { return e.err }

// GRPCStatus lets status.Convert see through the wrapper.
func (e *resyncError) GRPCStatus() *status.Status { return status.Convert(e.err) }

// schedule sends one Schedule call. A replica whose snapshot of the cluster
// cannot reach the request's generation (it just started, or a load balancer
// sent the caller's earlier deltas to other replicas) answers
// FAILED_PRECONDITION with a google.rpc.ErrorInfo detail: reason
// STALE_SNAPSHOT, metadata replica_generation (-1: no snapshot). The caller
// then resends the same request with stateSince(replica_generation): the
// changes after that generation, or the full state when it has no log
// reaching back there. A second STALE_SNAPSHOT for the same request (behind
// one channel the resend may reach another replica) gets the full state,
// stateSince(-1). A full state is never stale: refused as stale, it is
// reported, not resent (that answer would be a server bug). Retries on
// UNAVAILABLE are the service config's (retryPolicy), not this loop's.
func schedule(ctx context.Context, client berthv1.SchedulingServiceClient, req *berthv1.ScheduleRequest,
	stateSince func(replicaGeneration int64) *berthv1.ClusterState, opts ...grpc.CallOption,
) (*berthv1.ScheduleResponse, error) {
	for attempt := 0; ; attempt++ {
		resp, err := client.Schedule(ctx, req, opts...)
		if err == nil {
			return resp, nil
		}
		if status.Code(err) != codes.FailedPrecondition {
			return nil, err
		}
		g, stale, derr := staleSnapshot(err)
		if derr != nil {
			return nil, fmt.Errorf("%w (undecodable error detail: %v)", err, derr)
		}
		if !stale {
			return nil, err
		}
		if req.GetState().GetFull() {
			return nil, &resyncError{err: err, replicaGeneration: g}
		}
		if attempt > 0 {
			g = -1
		}
		req.State = stateSince(g)
	}
}

// result is what the client prints, and its -json form.
type result struct {
	Pod            string      `json:"pod"`
	Profile        string      `json:"profile"`
	MilliCPU       int64       `json:"milli_cpu"`
	Memory         int64       `json:"memory"`
	Status         string      `json:"status"`
	Plugin         string      `json:"plugin,omitempty"`
	Reasons        []string    `json:"reasons,omitempty"`
	Node           string      `json:"node"`
	EvaluatedNodes int32       `json:"evaluated_nodes"`
	FeasibleNodes  int32       `json:"feasible_nodes"`
	Generation     int64       `json:"generation"`
	Message        string      `json:"message,omitempty"`
	Plugins        []string    `json:"score_plugins"`
	Nodes          []nodeEntry `json:"nodes"`
}

type nodeEntry struct {
	Name string `json:"name"`
	// "passed", "rejected" or "not evaluated" (the server stopped looking
	// once it had enough feasible nodes: percentageOfNodesToScore).
	Filter  string           `json:"filter"`
	Plugin  string           `json:"plugin,omitempty"`
	Code    string           `json:"code,omitempty"`
	Reasons []string         `json:"reasons,omitempty"`
	Total   *int64           `json:"total,omitempty"`
	Scores  map[string]int64 `json:"scores,omitempty"`
	Chosen  bool             `json:"chosen"`
}

// codeName gives upstream's name for a framework status code.
func codeName(c berthv1.Code) string {
	switch c {
	case berthv1.Code_CODE_SUCCESS:
		return "Success"
	case berthv1.Code_CODE_ERROR:
		return "Error"
	case berthv1.Code_CODE_UNSCHEDULABLE:
		return "Unschedulable"
	case berthv1.Code_CODE_UNSCHEDULABLE_AND_UNRESOLVABLE:
		return "UnschedulableAndUnresolvable"
	case berthv1.Code_CODE_WAIT:
		return "Wait"
	case berthv1.Code_CODE_SKIP:
		return "Skip"
	case berthv1.Code_CODE_PENDING:
		return "Pending"
	}
	return c.String()
}

func summarize(req *berthv1.ScheduleRequest, resp *berthv1.ScheduleResponse, cluster *berthv1.ClusterDelta) result {
	pod := req.GetPod()
	var milliCPU, memory int64
	for _, c := range pod.GetContainers() {
		milliCPU += c.GetRequests().GetMilliCpu()
		memory += c.GetRequests().GetMemory()
	}
	res := result{
		Pod:            pod.GetNamespace() + "/" + pod.GetName(),
		Profile:        req.GetProfile(),
		MilliCPU:       milliCPU,
		Memory:         memory,
		Status:         codeName(resp.GetStatus().GetCode()),
		Plugin:         resp.GetStatus().GetPlugin(),
		Reasons:        resp.GetStatus().GetReasons(),
		Node:           resp.GetNode(),
		EvaluatedNodes: resp.GetEvaluatedNodes(),
		FeasibleNodes:  resp.GetFeasibleNodes(),
		Generation:     resp.GetGeneration(),
		Message:        resp.GetDiagnosis().GetMessage(),
		Plugins:        []string{},
	}
	rejected := map[string]*berthv1.Status{}
	for _, r := range resp.GetDiagnosis().GetRejected() {
		rejected[r.GetNode()] = r.GetStatus()
	}
	scores := map[string]*berthv1.NodeScore{}
	plugins := map[string]bool{}
	for _, s := range resp.GetScores() {
		scores[s.GetNode()] = s
		for p := range s.GetPlugins() {
			plugins[p] = true
		}
	}
	for p := range plugins {
		res.Plugins = append(res.Plugins, p)
	}
	sort.Strings(res.Plugins)

	// Scored nodes first, best first (the server's order), then the rejected,
	// then the rest, each in the cluster's order.
	seen := map[string]bool{}
	add := func(name string) {
		if seen[name] {
			return
		}
		seen[name] = true
		e := nodeEntry{Name: name, Filter: "not evaluated", Chosen: name == resp.GetNode()}
		if st, ok := rejected[name]; ok {
			e.Filter = "rejected"
			e.Plugin = st.GetPlugin()
			e.Code = codeName(st.GetCode())
			e.Reasons = st.GetReasons()
		}
		if s, ok := scores[name]; ok {
			if e.Filter != "rejected" {
				e.Filter = "passed"
			}
			total := s.GetTotal()
			e.Total = &total
			e.Scores = s.GetPlugins()
		}
		if e.Filter == "not evaluated" && name == resp.GetNode() {
			e.Filter = "passed" // chosen without scores: the only feasible node
		}
		res.Nodes = append(res.Nodes, e)
	}
	for _, s := range resp.GetScores() {
		add(s.GetNode())
	}
	for _, n := range cluster.GetUpsertNodes() {
		if _, ok := rejected[n.GetName()]; ok {
			add(n.GetName())
		}
	}
	for _, r := range resp.GetDiagnosis().GetRejected() {
		add(r.GetNode()) // rejected nodes the cluster did not name (should not happen)
	}
	for _, n := range cluster.GetUpsertNodes() {
		add(n.GetName())
	}
	return res
}

func printText(w io.Writer, addr string, res result) {
	fmt.Fprintf(w, "pod %s (cpu %dm, memory %s), profile %q, server %s\n",
		res.Pod, res.MilliCPU, formatMemory(res.Memory), res.Profile, addr)
	if res.Node != "" {
		fmt.Fprintf(w, "placed on: %s\n", res.Node)
	} else {
		fmt.Fprintf(w, "not placed: %s", res.Status)
		if res.Plugin != "" {
			fmt.Fprintf(w, " (%s)", res.Plugin)
		}
		fmt.Fprintln(w)
	}
	if res.Message != "" {
		fmt.Fprintf(w, "diagnosis: %s\n", res.Message)
	} else if len(res.Reasons) > 0 {
		fmt.Fprintf(w, "reasons: %s\n", strings.Join(res.Reasons, "; "))
	}
	fmt.Fprintf(w, "evaluated %d node(s), %d feasible, snapshot generation %d\n\n",
		res.EvaluatedNodes, res.FeasibleNodes, res.Generation)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	header := []string{"", "NODE", "FILTER", "TOTAL"}
	header = append(header, res.Plugins...)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, n := range res.Nodes {
		mark := ""
		if n.Chosen {
			mark = "*"
		}
		filter := n.Filter
		if n.Filter == "rejected" {
			filter = fmt.Sprintf("rejected by %s: %s", n.Plugin, strings.Join(n.Reasons, "; "))
		}
		row := []string{mark, n.Name, filter}
		if n.Total != nil {
			row = append(row, fmt.Sprint(*n.Total))
		} else {
			row = append(row, "-")
		}
		for _, p := range res.Plugins {
			if v, ok := n.Scores[p]; ok {
				row = append(row, fmt.Sprint(v))
			} else {
				row = append(row, "-")
			}
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	tw.Flush()
}
