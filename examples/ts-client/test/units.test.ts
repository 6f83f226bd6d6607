// Unit tests of the pieces that need no server: quantities, the delta log,
// the service config and the google.rpc.Status decoding.

import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { describe, it } from "node:test";

import * as grpc from "@grpc/grpc-js";

import { ReplicaTracker } from "../src/client";
import { ClusterLog, exampleCluster, pendingPod } from "../src/cluster";
import {
  channelOptions,
  decodeErrorInfo,
  encodeStatus,
  errorInfoOf,
  loadServiceConfig,
  methodConfigFor,
  replicaGeneration,
  STATUS_DETAILS_KEY,
  ServiceConfigError,
} from "../src/contract";
import { formatMemory, parseCPU, parseDuration, parseMemory } from "../src/quantity";

const REPO = path.resolve(__dirname, "..", "..", "..", "..");

describe("quantities", () => {
  it("parses CPU as millicores, rounding fractions up", () => {
    const cases: [string, number][] = [["500m", 500], ["0", 0], ["2", 2000], ["0.25", 250], ["1.5", 1500], ["0.0001", 1]];
    for (const [text, want] of cases) assert.equal(parseCPU(text), want, text);
    for (const bad of ["", "abc", "-1", "1.5m", "5Gi"]) assert.throws(() => parseCPU(bad), /invalid CPU/, bad);
  });

  it("parses memory as bytes", () => {
    const cases: [string, number][] = [["536870912", 536870912], ["512Mi", 512 * 2 ** 20], ["1Gi", 2 ** 30], ["1G", 1e9], ["1.5Gi", 1.5 * 2 ** 30]];
    for (const [text, want] of cases) assert.equal(parseMemory(text), want, text);
    for (const bad of ["", "Mi", "-1Gi", "1Xi"]) assert.throws(() => parseMemory(bad), /invalid memory/, bad);
    assert.equal(formatMemory(512 * 2 ** 20), "512Mi");
  });

  it("parses durations", () => {
    assert.equal(parseDuration("10s"), 10_000);
    assert.equal(parseDuration("500ms"), 500);
    assert.equal(parseDuration("2m"), 120_000);
    assert.throws(() => parseDuration("soon"), /invalid duration/);
    assert.throws(() => parseDuration("0s"), /positive/);
  });
});

describe("ClusterLog", () => {
  const placed = (name: string, node: string) => ({ ...pendingPod("default", name, "default-scheduler", 100, 2 ** 20), node_name: node });

  it("sends the whole cluster for a replica with nothing", () => {
    const log = ClusterLog.create(exampleCluster());
    const state = log.since(-1);
    assert.equal(state.full, true);
    assert.equal(state.generation, 1);
    assert.equal(state.delta?.upsert_nodes?.length, 4);
    assert.equal(state.delta?.upsert_pods?.length, 2);
  });

  it("sends each object changed after the base once, in its last state", () => {
    const log = ClusterLog.create(exampleCluster());
    const a = placed("a", "node-a");
    const b = placed("b", "node-b");
    log.apply({ upsertPods: [a] }); // 2
    log.apply({ upsertPods: [b] }); // 3
    log.apply({ upsertPods: [{ ...a, node_name: "node-c" }] }); // 4: a moved
    log.apply({ deletePods: [b.uid ?? ""], deleteNodes: ["node-d"] }); // 5: b gone, node-d gone
    const state = log.since(2);
    assert.equal(state.full, false);
    assert.equal(state.base_generation, 2);
    assert.equal(state.generation, 5);
    assert.deepEqual(state.delta?.upsert_pods?.map((p) => [p.uid, p.node_name]), [[a.uid, "node-c"]]);
    // b was added and removed after 2: a deletion only, never both.
    assert.deepEqual(state.delta?.delete_pods, [b.uid]);
    assert.deepEqual(state.delta?.delete_nodes, ["node-d"]);
    assert.deepEqual(state.delta?.upsert_nodes, []);
    assert.equal(state.cluster_id, log.clusterId);
    assert.equal(state.incarnation, log.incarnation);
  });

  it("falls back to the full state when the log no longer reaches the base", () => {
    const log = ClusterLog.create(exampleCluster(), 2);
    for (let i = 0; i < 4; i++) log.apply({ upsertPods: [placed(`p${i}`, "node-b")] }); // 2..5
    assert.equal(log.oldest, 3);
    assert.equal(log.since(2).full, true);
    assert.equal(log.since(3).full, false);
    assert.equal(log.since(3).delta?.upsert_pods?.length, 2);
  });

  it("survives a save and load with what each replica confirmed", () => {
    const log = ClusterLog.create(exampleCluster());
    log.apply({ upsertPods: [placed("a", "node-a")] });
    const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "berth-ts-")), "state.json");
    log.save(file, { r1: { generation: 2, last_seen_ms: 5 } });
    const { log: again, replicas } = ClusterLog.load(file);
    assert.equal(again.clusterId, log.clusterId);
    assert.equal(again.generation, 2);
    assert.deepEqual(replicas, { r1: { generation: 2, last_seen_ms: 5 } });
    assert.deepEqual(again.since(1).delta?.upsert_pods?.map((p) => p.name), ["a"]);
    fs.writeFileSync(file, "{}");
    assert.throws(() => ClusterLog.load(file), /cluster_id is missing/);
  });
});

describe("ReplicaTracker", () => {
  it("sends deltas from the lowest generation a known replica holds", () => {
    const t = new ReplicaTracker();
    assert.equal(t.base(), -1, "no replica known: full state");
    t.confirmed("a", 3);
    assert.equal(t.base(), 3);
    t.stale("b", -1);
    assert.equal(t.base(), -1, "a replica holding nothing needs the full state");
    t.confirmed("b", 5);
    assert.equal(t.base(), 3);
    t.confirmed("a", 2); // an older answer never moves a replica back
    assert.equal(t.replicas.get("a")?.generation, 3);
    t.forgetOlderThan(4);
    assert.equal(t.base(), -1);
  });

  it("forgets a replica that stopped answering", () => {
    let now = 0;
    const t = new ReplicaTracker(new Map(), () => now, 8, 30_000);
    t.confirmed("gone", 1);
    for (let i = 0; i < 8; i++) t.confirmed("b", 10 + i);
    assert.equal(t.base(), 1, "8 answers by others: still patient");
    t.confirmed("b", 20);
    assert.equal(t.base(), 20, "9 answers by others: forgotten");
    t.confirmed("c", 20);
    now = 31_000;
    t.confirmed("c", 21);
    assert.equal(t.base(), 21, "b silent for over 30 s: forgotten");
  });
});

describe("service config", () => {
  it("loads the repository's protos/service_config.json", () => {
    const cfg = loadServiceConfig(path.join(REPO, "protos", "service_config.json"));
    assert.ok(cfg.maxRequestMessageBytes !== undefined && cfg.maxRequestMessageBytes > 0);
    const opts = channelOptions(cfg);
    assert.equal(opts["grpc.max_send_message_length"], cfg.maxRequestMessageBytes);
    assert.equal(opts["grpc.service_config"], cfg.json);
    // grpc-js accepts it: a channel can be made with it.
    const channel = new grpc.Channel("127.0.0.1:1", grpc.credentials.createInsecure(), opts);
    channel.close();
  });

  it("names the file and the problem", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "berth-ts-"));
    const bad = path.join(dir, "bad.json");
    fs.writeFileSync(bad, "{nope");
    assert.throws(() => loadServiceConfig(bad), (e: unknown) => e instanceof ServiceConfigError && e.message.includes(bad));
    fs.writeFileSync(bad, JSON.stringify({ methodConfig: [{ name: [{ service: "berth.v1.SchedulingService" }], maxRequestMessageBytes: -1 }] }));
    assert.throws(() => loadServiceConfig(bad), /maxRequestMessageBytes must be a positive integer/);
    assert.throws(() => loadServiceConfig(path.join(dir, "missing.json")), /missing.json/);
  });

  it("picks the method's entry before the service's", () => {
    const config = {
      methodConfig: [
        { name: [{ service: "s" }], maxRequestMessageBytes: 1 },
        { name: [{ service: "s", method: "M" }], maxRequestMessageBytes: 2 },
      ],
    };
    assert.equal(methodConfigFor(config, "s", "M")?.maxRequestMessageBytes, 2);
    assert.equal(methodConfigFor(config, "s", "Other")?.maxRequestMessageBytes, 1);
    assert.equal(methodConfigFor(config, "t", "M"), undefined);
  });
});

describe("typed errors", () => {
  it("decodes ErrorInfo from grpc-status-details-bin", () => {
    const bytes = encodeStatus(grpc.status.FAILED_PRECONDITION, "stale", {
      reason: "STALE_SNAPSHOT",
      domain: "berth.dev",
      metadata: { replica_generation: "7", replica: "r1" },
    });
    const info = decodeErrorInfo(bytes);
    assert.deepEqual(info, { reason: "STALE_SNAPSHOT", domain: "berth.dev", metadata: { replica_generation: "7", replica: "r1" } });
    assert.equal(replicaGeneration(info!), 7);

    const md = new grpc.Metadata();
    md.set(STATUS_DETAILS_KEY, bytes);
    const err = Object.assign(new Error("x"), { code: grpc.status.FAILED_PRECONDITION, details: "stale", metadata: md });
    assert.equal(errorInfoOf(err)?.reason, "STALE_SNAPSHOT");
  });

  it("ignores ErrorInfo from other domains and rejects a missing generation", () => {
    const other = encodeStatus(9, "x", { reason: "STALE_SNAPSHOT", domain: "example.com", metadata: {} });
    assert.equal(decodeErrorInfo(other), undefined);
    assert.throws(() => replicaGeneration({ reason: "STALE_SNAPSHOT", domain: "berth.dev", metadata: {} }), /replica_generation/);
  });
});
