#!/usr/bin/env node
// berth-ts-client: asks Berth plugin server(s) where pods would be scheduled
// (berth.v1.SchedulingService/Schedule or ScheduleStream) and explains the
// answer. It follows the client contract of protos/README.md: the channel
// loads protos/service_config.json (deadlines, retries on UNAVAILABLE, message
// sizes, round_robin), the cluster travels as deltas, and a STALE_SNAPSHOT
// refusal (google.rpc.ErrorInfo in the status details, or a stream's
// RequestError) is answered with the changes after the replica's generation.

import * as fs from "node:fs";
import * as path from "node:path";
import { parseArgs } from "node:util";

import {
  ClusterLog,
  exampleCluster,
  pendingPod,
  type SavedReplica,
  StateFileError,
} from "./cluster";
import { CallError, connect, ReplicaTracker, Scheduler, type Send } from "./client";
import { loadServiceConfig, ServiceConfigError } from "./contract";
import type { ScheduleResponse__Output } from "./gen/berth/v1/ScheduleResponse";
import type { Status__Output } from "./gen/berth/v1/Status";
import { formatMemory, parseCPU, parseDuration, parseMemory, QuantityError } from "./quantity";

/** Exit codes. */
export const Exit = {
  PLACED: 0, // every pod has a node
  RPC_ERROR: 1, // a call failed: transport, gRPC status, or a broken contract
  USAGE: 2, // bad flags or input files
  UNSCHEDULABLE: 3, // the server answered, but some pod fits no node
} as const;

// dist/src/main.js -> the package directory -> the repository.
const PACKAGE_DIR = path.resolve(__dirname, "..", "..");
const REPO_DIR = path.resolve(PACKAGE_DIR, "..", "..");

const USAGE = `Usage: berth-ts-client [flags]

Asks a Berth plugin server where pods with the given requests would be
scheduled, and prints the chosen node, each node's filter result and each
plugin's score. Each placed pod joins the cluster (a delta) before the next.

Flags:
  --addr HOST:PORT[,IP:PORT...]  server(s); several make one round_robin channel
                                 (default 127.0.0.1:50051)
  --profile NAME                 the profile's schedulerName (default default-scheduler)
  --cpu Q                        each pod's CPU request: 500m or 0.5 (default 500m)
  --memory Q                     each pod's memory request: 512Mi, 1Gi, bytes (default 512Mi)
  --pods N                       how many pods to place, one after another (default 1)
  --namespace NS                 the pods' namespace (default default)
  --pod-name NAME                the pods' name, numbered with --pods > 1 (default ts-client-demo)
  --stream                       use ScheduleStream instead of unary Schedule calls
  --state FILE                   keep the caller's cluster, its delta log and the last
                                 confirmed generation in FILE across runs (created if absent)
  --service-config FILE          gRPC service config (default protos/service_config.json)
  --protos DIR                   the .proto files (default the repository's protos/)
  --timeout D                    deadline of each call: 10s, 500ms (default 10s)
  --wait-for-ready               wait (up to --timeout) for a server instead of failing fast
  --seed N                       seed of the tie-break among equal top scores (default 0: unseeded)
  --json                         print the result as JSON
  --help                         this text

Exit status: 0 placed, 1 RPC error, 2 usage error, 3 some pod fits no node.
`;

interface Options {
  addrs: string[];
  profile: string;
  milliCPU: number;
  memory: number;
  pods: number;
  namespace: string;
  podName: string;
  stream: boolean;
  stateFile?: string;
  serviceConfig: string;
  protos: string;
  timeoutMs: number;
  waitForReady: boolean;
  seed: number;
  json: boolean;
}

class UsageError extends Error {}

function parseOptions(argv: string[]): Options | "help" {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      strict: true,
      allowPositionals: false,
      options: {
        addr: { type: "string", default: "127.0.0.1:50051" },
        profile: { type: "string", default: "default-scheduler" },
        cpu: { type: "string", default: "500m" },
        memory: { type: "string", default: "512Mi" },
        pods: { type: "string", default: "1" },
        namespace: { type: "string", default: "default" },
        "pod-name": { type: "string", default: "ts-client-demo" },
        stream: { type: "boolean", default: false },
        state: { type: "string" },
        "service-config": {
          type: "string",
          default: path.join(REPO_DIR, "protos", "service_config.json"),
        },
        protos: { type: "string", default: path.join(REPO_DIR, "protos") },
        timeout: { type: "string", default: "10s" },
        "wait-for-ready": { type: "boolean", default: false },
        seed: { type: "string", default: "0" },
        json: { type: "boolean", default: false },
        help: { type: "boolean", default: false },
      },
    });
  } catch (e) {
    throw new UsageError((e as Error).message);
  }
  const v = parsed.values;
  if (v.help) return "help";
  const addrs = v.addr.split(",").map((a) => a.trim());
  if (addrs.some((a) => a === "")) throw new UsageError(`--addr "${v.addr}": empty address`);
  if (addrs.length > 1 && !addrs.every((a) => /^\d+\.\d+\.\d+\.\d+:\d+$/.test(a))) {
    throw new UsageError(
      `--addr "${v.addr}": several addresses must each be IPv4:port (for a DNS name with several addresses, pass dns:///NAME:PORT)`,
    );
  }
  const pods = Number(v.pods);
  if (!Number.isInteger(pods) || pods < 1 || pods > 1000) {
    throw new UsageError(`--pods "${v.pods}": want an integer from 1 to 1000`);
  }
  const seed = Number(v.seed);
  if (!Number.isSafeInteger(seed) || seed < 0) {
    throw new UsageError(`--seed "${v.seed}": want a non-negative integer`);
  }
  const quantity = <T>(flag: string, f: () => T): T => {
    try {
      return f();
    } catch (e) {
      if (e instanceof QuantityError) throw new UsageError(`--${flag}: ${e.message}`);
      throw e;
    }
  };
  if (!fs.existsSync(path.join(v.protos, "berth", "v1", "scheduling.proto"))) {
    throw new UsageError(`--protos ${v.protos}: no berth/v1/scheduling.proto there`);
  }
  return {
    addrs,
    profile: v.profile,
    milliCPU: quantity("cpu", () => parseCPU(v.cpu)),
    memory: quantity("memory", () => parseMemory(v.memory)),
    pods,
    namespace: v.namespace,
    podName: v["pod-name"],
    stream: v.stream,
    stateFile: v.state,
    serviceConfig: v["service-config"],
    protos: v.protos,
    timeoutMs: quantity("timeout", () => parseDuration(v.timeout)),
    waitForReady: v["wait-for-ready"],
    seed,
    json: v.json,
  };
}

/** Upstream's names of framework.Code values. */
const CODE_NAMES: Record<string, string> = {
  CODE_SUCCESS: "Success",
  CODE_ERROR: "Error",
  CODE_UNSCHEDULABLE: "Unschedulable",
  CODE_UNSCHEDULABLE_AND_UNRESOLVABLE: "UnschedulableAndUnresolvable",
  CODE_WAIT: "Wait",
  CODE_SKIP: "Skip",
  CODE_PENDING: "Pending",
};

function codeOf(status: Status__Output | null): string {
  const code = status?.code ?? "CODE_SUCCESS";
  return CODE_NAMES[code] ?? String(code);
}

interface NodeEntry {
  name: string;
  /** "passed", "rejected", or "not evaluated". */
  filter: string;
  plugin?: string;
  code?: string;
  reasons?: string[];
  total?: number;
  scores?: Record<string, number>;
  chosen: boolean;
}

interface PodResult {
  pod: string;
  milli_cpu: number;
  memory: number;
  status: string;
  plugin?: string;
  reasons?: string[];
  node: string;
  evaluated_nodes: number;
  feasible_nodes: number;
  generation: number;
  message?: string;
  score_plugins: string[];
  nodes: NodeEntry[];
}

function summarize(
  pod: string,
  milliCPU: number,
  memory: number,
  resp: ScheduleResponse__Output,
  nodeNames: string[],
): PodResult {
  const rejected = new Map((resp.diagnosis?.rejected ?? []).map((r) => [r.node, r.status]));
  const scores = new Map(resp.scores.map((s) => [s.node, s]));
  const plugins = [...new Set(resp.scores.flatMap((s) => Object.keys(s.plugins)))].sort();
  const entries: NodeEntry[] = [];
  const seen = new Set<string>();
  const add = (name: string) => {
    if (seen.has(name)) return;
    seen.add(name);
    const e: NodeEntry = { name, filter: "not evaluated", chosen: name === resp.node };
    const st = rejected.get(name);
    if (st !== undefined) {
      e.filter = "rejected";
      e.plugin = st?.plugin;
      e.code = codeOf(st);
      e.reasons = st?.reasons;
    }
    const s = scores.get(name);
    if (s !== undefined) {
      if (e.filter !== "rejected") e.filter = "passed";
      e.total = Number(s.total);
      e.scores = Object.fromEntries(Object.entries(s.plugins).map(([k, v]) => [k, Number(v)]));
    }
    if (e.filter === "not evaluated" && e.chosen) e.filter = "passed";
    entries.push(e);
  };
  // Scored nodes first, best first (the server's order), then the rejected,
  // then the rest, each in the cluster's order.
  resp.scores.forEach((s) => add(s.node));
  nodeNames.filter((n) => rejected.has(n)).forEach(add);
  nodeNames.forEach(add);
  const result: PodResult = {
    pod,
    milli_cpu: milliCPU,
    memory,
    status: codeOf(resp.status),
    node: resp.node,
    evaluated_nodes: resp.evaluated_nodes,
    feasible_nodes: resp.feasible_nodes,
    generation: Number(resp.generation),
    score_plugins: plugins,
    nodes: entries,
  };
  if (resp.status?.plugin) result.plugin = resp.status.plugin;
  if (resp.status?.reasons.length) result.reasons = resp.status.reasons;
  if (resp.diagnosis?.message) result.message = resp.diagnosis.message;
  return result;
}

function table(rows: string[][]): string {
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => (r[i] ?? "").length)));
  return rows
    .map((r) =>
      r
        .map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i] + 2)))
        .join("")
        .trimEnd(),
    )
    .join("\n");
}

function printText(out: NodeJS.WritableStream, res: PodResult, profile: string): void {
  out.write(
    `pod ${res.pod} (cpu ${res.milli_cpu}m, memory ${formatMemory(res.memory)}), profile "${profile}"\n`,
  );
  if (res.node) out.write(`placed on: ${res.node}\n`);
  else out.write(`not placed: ${res.status}${res.plugin ? ` (${res.plugin})` : ""}\n`);
  if (res.message) out.write(`diagnosis: ${res.message}\n`);
  else if (res.reasons) out.write(`reasons: ${res.reasons.join("; ")}\n`);
  out.write(
    `evaluated ${res.evaluated_nodes} node(s), ${res.feasible_nodes} feasible, snapshot generation ${res.generation}\n\n`,
  );
  const rows = [["", "NODE", "FILTER", "TOTAL", ...res.score_plugins]];
  for (const n of res.nodes) {
    const filter =
      n.filter === "rejected" ? `rejected by ${n.plugin}: ${(n.reasons ?? []).join("; ")}` : n.filter;
    rows.push([
      n.chosen ? "*" : "",
      n.name,
      filter,
      n.total === undefined ? "-" : String(n.total),
      ...res.score_plugins.map((p) => (n.scores?.[p] === undefined ? "-" : String(n.scores[p]))),
    ]);
  }
  out.write(table(rows) + "\n\n");
}

function describeSend(s: Send): string {
  const what =
    s.kind === "full"
      ? `full state at generation ${s.generation}`
      : `delta ${s.base_generation}->${s.generation}`;
  return `${s.pod}: ${what} (${s.objects} object(s)): ${s.outcome}`;
}

export async function run(
  argv: string[],
  stdout: NodeJS.WritableStream,
  stderr: NodeJS.WritableStream,
): Promise<number> {
  const fail = (msg: string, code: number) => {
    stderr.write(`berth-ts-client: ${msg}\n`);
    return code;
  };
  let opts: Options | "help";
  try {
    opts = parseOptions(argv);
  } catch (e) {
    if (e instanceof UsageError) return fail(`${e.message}\n\n${USAGE}`, Exit.USAGE);
    throw e;
  }
  if (opts === "help") {
    stdout.write(USAGE);
    return Exit.PLACED;
  }

  let serviceConfig;
  try {
    serviceConfig = loadServiceConfig(opts.serviceConfig);
  } catch (e) {
    if (e instanceof ServiceConfigError) return fail(e.message, Exit.USAGE);
    throw e;
  }

  let log: ClusterLog;
  let replicas: Record<string, SavedReplica> = {};
  try {
    if (opts.stateFile !== undefined && fs.existsSync(opts.stateFile)) {
      ({ log, replicas } = ClusterLog.load(opts.stateFile));
    } else {
      log = ClusterLog.create(exampleCluster());
    }
  } catch (e) {
    if (e instanceof StateFileError) return fail(e.message, Exit.USAGE);
    throw e;
  }

  let client;
  try {
    client = connect(opts.addrs, serviceConfig, opts.protos);
  } catch (e) {
    // grpc-js checks the service config when it makes the channel.
    return fail(`${serviceConfig.source}: ${(e as Error).message}`, Exit.USAGE);
  }
  const tracker = new ReplicaTracker(
    new Map(
      Object.entries(replicas).map(([id, r]) => [
        id,
        { generation: Number(r.generation), lastSeen: Number(r.last_seen_ms), lastAnswer: 0 },
      ]),
    ),
  );
  const scheduler = new Scheduler(client, log, tracker, {
    stream: opts.stream,
    timeoutMs: opts.timeoutMs,
    waitForReady: opts.waitForReady,
  });

  const results: PodResult[] = [];
  let code: number = Exit.PLACED;
  const server = opts.addrs.join(",");
  try {
    for (let i = 0; i < opts.pods; i++) {
      // Numbered after the pods this lineage already placed (--state).
      const name =
        opts.pods === 1 && opts.stateFile === undefined
          ? opts.podName
          : `${opts.podName}-${log.countPods(`${opts.podName}-`) + 1}`;
      const pod = pendingPod(opts.namespace, name, opts.profile, opts.milliCPU, opts.memory);
      const resp = await scheduler.schedule({
        profile: opts.profile,
        pod,
        explain: true,
        seed: opts.seed === 0 ? 0 : opts.seed + i,
      });
      const nodeNames = (log.full().delta?.upsert_nodes ?? []).map((n) => n.name ?? "");
      results.push(
        summarize(`${opts.namespace}/${name}`, opts.milliCPU, opts.memory, resp, nodeNames),
      );
      if (resp.node && resp.status?.code === "CODE_SUCCESS") {
        // The caller binds the pod; it now occupies its node in the cluster
        // the next request describes.
        log.apply({ upsertPods: [{ ...pod, node_name: resp.node, phase: "Running" }] });
      } else {
        code = Exit.UNSCHEDULABLE;
      }
    }
  } catch (e) {
    if (!(e instanceof CallError)) throw e;
    code = Exit.RPC_ERROR;
    stderr.write(
      `berth-ts-client: ${opts.stream ? "ScheduleStream" : "Schedule"} RPC to ${server} failed: ${e.message}\n`,
    );
    if (e.info && Object.keys(e.info.metadata).length > 0) {
      const md = Object.entries(e.info.metadata)
        .map(([k, v]) => `${k}=${v}`)
        .join(", ");
      stderr.write(`berth-ts-client: error metadata: ${md}\n`);
    }
  } finally {
    scheduler.close();
    client.close();
    if (opts.stateFile !== undefined) {
      log.save(
        opts.stateFile,
        Object.fromEntries(
          [...tracker.replicas].map(([id, r]) => [
            id,
            { generation: r.generation, last_seen_ms: r.lastSeen },
          ]),
        ),
      );
    }
  }

  const sends = scheduler.sends;
  if (opts.json) {
    const report = {
      server,
      profile: opts.profile,
      transport: opts.stream ? "stream" : "unary",
      cluster_id: log.clusterId,
      incarnation: log.incarnation,
      generation: log.generation,
      replicas: tracker.generations(),
      pods: results,
      sends,
      full_sends: sends.filter((s) => s.kind === "full").length,
      stale_answers: sends.filter((s) => s.outcome.startsWith("STALE_SNAPSHOT")).length,
    };
    stdout.write(JSON.stringify(report, null, 2) + "\n");
  } else {
    stdout.write(`server ${server}, ${opts.stream ? "ScheduleStream" : "Schedule"}\n\n`);
    for (const r of results) printText(stdout, r, opts.profile);
    stdout.write(`cluster state sent (cluster ${log.clusterId}):\n`);
    for (const s of sends) stdout.write(`  ${describeSend(s)}\n`);
  }
  return code;
}

if (require.main === module) {
  run(process.argv.slice(2), process.stdout, process.stderr).then(
    (code) => {
      process.exitCode = code;
    },
    (err: unknown) => {
      process.stderr.write(`berth-ts-client: unexpected error: ${(err as Error).stack ?? err}\n`);
      process.exitCode = Exit.RPC_ERROR;
    },
  );
}
