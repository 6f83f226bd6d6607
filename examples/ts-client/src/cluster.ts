// The caller's side of the delta protocol (protos/README.md, "Cluster state at
// the cost of what changed"): the caller owns the cluster, numbers its states
// by generation under a cluster_id, keeps a log of recent changes, and can
// build the ClusterState that takes any replica from generation g to now.

import { randomBytes } from "node:crypto";
import * as fs from "node:fs";

import type { ClusterDelta } from "./gen/berth/v1/ClusterDelta";
import type { ClusterState } from "./gen/berth/v1/ClusterState";
import type { Node } from "./gen/berth/v1/Node";
import type { Pod } from "./gen/berth/v1/Pod";

/** A replica as a --state file keeps it: its generation and when it last answered. */
export interface SavedReplica {
  generation: number;
  last_seen_ms: number;
}

const MI = 2 ** 20;
const GI = 2 ** 30;

export function randomHex(bytes: number): string {
  return randomBytes(bytes).toString("hex");
}

function node(name: string, milliCPU: number, memory: number, unschedulable: boolean): Node {
  return {
    name,
    uid: `uid-${name}`,
    labels: { "kubernetes.io/hostname": name, "kubernetes.io/os": "linux" },
    // kubelet reserves a little for the system; capacity > allocatable.
    capacity: {
      milli_cpu: milliCPU + 100,
      memory: memory + 512 * MI,
      ephemeral_storage: 110 * GI,
      pods: 110,
    },
    allocatable: { milli_cpu: milliCPU, memory, ephemeral_storage: 100 * GI, pods: 110 },
    unschedulable,
    // What `kubectl cordon` leaves on a node besides spec.unschedulable.
    taints: unschedulable ? [{ key: "node.kubernetes.io/unschedulable", effect: "NoSchedule" }] : [],
  };
}

function pod(
  name: string,
  nodeName: string,
  milliCPU: number,
  memory: number,
  schedulerName: string,
): Pod {
  return {
    uid: `uid-${name}-${randomHex(4)}`,
    namespace: "default",
    name,
    labels: { app: name.split("-")[0] ?? name },
    node_name: nodeName,
    scheduler_name: schedulerName,
    phase: nodeName === "" ? "Pending" : "Running",
    containers: [
      {
        name: "main",
        image: "registry.k8s.io/pause:3.10",
        requests: { milli_cpu: milliCPU, memory },
      },
    ],
    creation_unix_micros: Date.now() * 1000,
  };
}

/**
 * The built-in cluster, the Go example's:
 *
 *   node-a   4 CPU,  8Gi  running web-1 (3 CPU, 6Gi): almost full
 *   node-b   8 CPU, 16Gi  running cache-1 (1 CPU, 2Gi): the emptiest
 *   node-c   2 CPU,  2Gi  no pods, but small
 *   node-d  16 CPU, 64Gi  cordoned (spec.unschedulable), the biggest
 */
export function exampleCluster(): { nodes: Node[]; pods: Pod[] } {
  return {
    nodes: [
      node("node-a", 4000, 8 * GI, false),
      node("node-b", 8000, 16 * GI, false),
      node("node-c", 2000, 2 * GI, false),
      node("node-d", 16000, 64 * GI, true),
    ],
    pods: [
      pod("web-1", "node-a", 3000, 6 * GI, "default-scheduler"),
      pod("cache-1", "node-b", 1000, 2 * GI, "default-scheduler"),
    ],
  };
}

/** The pod to place: one container with the requested CPU and memory. */
export function pendingPod(
  namespace: string,
  name: string,
  schedulerName: string,
  milliCPU: number,
  memory: number,
): Pod {
  return { ...pod(name, "", milliCPU, memory, schedulerName), namespace, labels: { app: name } };
}

/** The keys one generation changed ("node/NAME", "pod/UID"). */
interface LogEntry {
  generation: number;
  keys: string[];
}

/** The form ClusterLog takes in a --state file. */
interface SavedLog {
  cluster_id: string;
  incarnation: number;
  generation: number;
  log_start: number;
  nodes: Node[];
  pods: Pod[];
  log: LogEntry[];
}

export class StateFileError extends Error {}

/** Changes to apply as one new generation. */
export interface Change {
  upsertNodes?: Node[];
  deleteNodes?: string[];
  upsertPods?: Pod[];
  deletePods?: string[];
}

/**
 * The caller's truth and its recent history. Every change makes a new
 * generation; the log remembers which objects each generation touched, back
 * to `logStart`, so `since(g)` can send exactly the objects changed after g,
 * each once, in its current state (or as a deletion).
 */
export class ClusterLog {
  private constructor(
    readonly clusterId: string,
    readonly incarnation: number,
    private gen: number,
    private logStart: number,
    private readonly nodes: Map<string, Node>,
    private readonly pods: Map<string, Pod>,
    private readonly log: LogEntry[],
    private readonly maxLog: number,
  ) {}

  /** A new lineage at generation 1: a fresh random cluster_id, incarnation now. */
  static create(cluster: { nodes: Node[]; pods: Pod[] }, maxLog = 64): ClusterLog {
    return new ClusterLog(
      `ts-client-${randomHex(8)}`,
      Date.now() * 1000,
      1,
      1,
      new Map(cluster.nodes.map((n) => [n.name ?? "", n])),
      new Map(cluster.pods.map((p) => [p.uid ?? "", p])),
      [],
      maxLog,
    );
  }

  get generation(): number {
    return this.gen;
  }

  /** The oldest generation `since` can send a delta from. */
  get oldest(): number {
    return this.logStart;
  }

  /** How many pods in the cluster have a name starting with `prefix`. */
  countPods(prefix: string): number {
    let n = 0;
    for (const p of this.pods.values()) if ((p.name ?? "").startsWith(prefix)) n++;
    return n;
  }

  /** Applies a change as generation + 1 and returns the new generation. */
  apply(change: Change): number {
    const keys: string[] = [];
    for (const n of change.upsertNodes ?? []) {
      this.nodes.set(n.name ?? "", n);
      keys.push(`node/${n.name}`);
    }
    for (const name of change.deleteNodes ?? []) {
      this.nodes.delete(name);
      keys.push(`node/${name}`);
    }
    for (const p of change.upsertPods ?? []) {
      this.pods.set(p.uid ?? "", p);
      keys.push(`pod/${p.uid}`);
    }
    for (const uid of change.deletePods ?? []) {
      this.pods.delete(uid);
      keys.push(`pod/${uid}`);
    }
    this.gen += 1;
    this.log.push({ generation: this.gen, keys });
    while (this.log.length > this.maxLog) {
      const dropped = this.log.shift();
      if (dropped !== undefined) this.logStart = dropped.generation;
    }
    return this.gen;
  }

  /** The whole cluster at the current generation. */
  full(): ClusterState {
    return {
      cluster_id: this.clusterId,
      incarnation: this.incarnation,
      generation: this.gen,
      full: true,
      delta: { upsert_nodes: [...this.nodes.values()], upsert_pods: [...this.pods.values()] },
    };
  }

  /**
   * The state that takes a replica at generation g to now: the objects
   * changed after g, each once, in its current state or as a deletion (an
   * object added then removed after g is just a deletion). The full state
   * when g is -1 (no snapshot) or older than the log reaches.
   */
  since(g: number): ClusterState {
    if (g < this.logStart || g > this.gen) return this.full();
    const touched = new Set<string>();
    for (const entry of this.log) {
      if (entry.generation > g) for (const k of entry.keys) touched.add(k);
    }
    const delta: Required<
      Pick<ClusterDelta, "upsert_nodes" | "delete_nodes" | "upsert_pods" | "delete_pods">
    > = { upsert_nodes: [], delete_nodes: [], upsert_pods: [], delete_pods: [] };
    for (const key of [...touched].sort()) {
      const [kind, id] = [key.slice(0, key.indexOf("/")), key.slice(key.indexOf("/") + 1)];
      if (kind === "node") {
        const n = this.nodes.get(id);
        if (n !== undefined) delta.upsert_nodes.push(n);
        else delta.delete_nodes.push(id);
      } else {
        const p = this.pods.get(id);
        if (p !== undefined) delta.upsert_pods.push(p);
        else delta.delete_pods.push(id);
      }
    }
    return {
      cluster_id: this.clusterId,
      incarnation: this.incarnation,
      generation: this.gen,
      base_generation: g,
      full: false,
      delta,
    };
  }

  /** Writes the log and what each replica confirmed to a --state file. */
  save(file: string, replicas: Record<string, SavedReplica>): void {
    const saved: SavedLog & { replicas: Record<string, SavedReplica> } = {
      cluster_id: this.clusterId,
      incarnation: this.incarnation,
      generation: this.gen,
      log_start: this.logStart,
      nodes: [...this.nodes.values()],
      pods: [...this.pods.values()],
      log: this.log,
      replicas,
    };
    fs.writeFileSync(file, JSON.stringify(saved, null, 1) + "\n");
  }

  /** The log saved by `save`, and what each replica confirmed. */
  static load(
    file: string,
    maxLog = 64,
  ): { log: ClusterLog; replicas: Record<string, SavedReplica> } {
    let saved: Partial<SavedLog & { replicas: Record<string, SavedReplica> }>;
    try {
      saved = JSON.parse(fs.readFileSync(file, "utf8")) as typeof saved;
    } catch (e) {
      throw new StateFileError(`state file ${file}: ${(e as Error).message}`);
    }
    for (const field of ["cluster_id", "incarnation", "generation", "log_start", "replicas"]) {
      if (saved[field as keyof typeof saved] === undefined) {
        throw new StateFileError(`state file ${file}: ${field} is missing`);
      }
    }
    const log = new ClusterLog(
      String(saved.cluster_id),
      Number(saved.incarnation),
      Number(saved.generation),
      Number(saved.log_start),
      new Map((saved.nodes ?? []).map((n) => [n.name ?? "", n])),
      new Map((saved.pods ?? []).map((p) => [p.uid ?? "", p])),
      saved.log ?? [],
      maxLog,
    );
    return { log, replicas: saved.replicas ?? {} };
  }
}

/** How big a state is, for the client's report. */
export function stateSize(state: ClusterState): number {
  const d = state.delta ?? {};
  return (
    (d.upsert_nodes?.length ?? 0) +
    (d.delete_nodes?.length ?? 0) +
    (d.upsert_pods?.length ?? 0) +
    (d.delete_pods?.length ?? 0)
  );
}
