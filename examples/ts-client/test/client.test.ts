// The client against an in-process fake replica (grpc-js server) that plays the
// generation protocol and answers refusals the way berth serve does: a
// google.rpc.Status with an ErrorInfo in grpc-status-details-bin (unary), or a
// RequestError (ScheduleStream).

import assert from "node:assert/strict";
import * as path from "node:path";
import { after, before, describe, it } from "node:test";

import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";

import { CallError, connect, REPLICA_KEY, ReplicaTracker, Scheduler } from "../src/client";
import { ClusterLog, exampleCluster, pendingPod } from "../src/cluster";
import { encodeStatus, type ErrorInfo, loadServiceConfig, STATUS_DETAILS_KEY } from "../src/contract";
import type { ScheduleRequest__Output } from "../src/gen/berth/v1/ScheduleRequest";
import type { ScheduleResponse } from "../src/gen/berth/v1/ScheduleResponse";
import type { ScheduleStreamResponse } from "../src/gen/berth/v1/ScheduleStreamResponse";
import type { ProtoGrpcType } from "../src/gen/scheduling";

const REPO = path.resolve(__dirname, "..", "..", "..", "..");
const PROTOS = path.join(REPO, "protos");

/** One replica: holds one generation (-1: none) and the states it was sent. */
class FakeReplica {
  generation = -1;
  unavailable = 0;
  refuseFull = false;
  /** Stale answers other replicas behind the same channel give to deltas first. */
  others: [string, number][] = [];
  profiles = ["default-scheduler"];
  readonly received: ScheduleRequest__Output["state"][] = [];

  constructor(readonly id: string) {}

  /** The answer to one request: a response, or a refusal. */
  answer(req: ScheduleRequest__Output): ScheduleResponse | { code: number; message: string; info: ErrorInfo } {
    const state = req.state;
    this.received.push(state);
    if (!this.profiles.includes(req.profile)) {
      return {
        code: grpc.status.NOT_FOUND,
        message: `profile '${req.profile}' is not configured on this server`,
        info: { reason: "UNKNOWN_PROFILE", domain: "berth.dev", metadata: { profile: req.profile, replica: this.id } },
      };
    }
    const other = state?.full ? undefined : this.others.shift();
    if (other !== undefined) {
      return {
        code: grpc.status.FAILED_PRECONDITION,
        message: `this replica has generation ${other[1]}`,
        info: {
          reason: "STALE_SNAPSHOT",
          domain: "berth.dev",
          metadata: { replica_generation: String(other[1]), replica: other[0] },
        },
      };
    }
    const base = Number(state?.base_generation ?? 0);
    if (this.refuseFull || (!state?.full && (this.generation < 0 || this.generation < base))) {
      return {
        code: grpc.status.FAILED_PRECONDITION,
        message: `this replica has generation ${this.generation}`,
        info: {
          reason: "STALE_SNAPSHOT",
          domain: "berth.dev",
          metadata: { replica_generation: String(this.generation), replica: this.id },
        },
      };
    }
    this.generation = Math.max(this.generation, Number(state?.generation));
    return { status: { code: "CODE_SUCCESS" }, node: "node-b", generation: this.generation };
  }
}

function isRefusal(a: unknown): a is { code: number; message: string; info: ErrorInfo } {
  return typeof a === "object" && a !== null && "info" in a;
}

async function serve(replica: FakeReplica): Promise<{ addr: string; server: grpc.Server }> {
  const def = protoLoader.loadSync(path.join(PROTOS, "berth/v1/scheduling.proto"), {
    keepCase: true,
    longs: String,
    enums: String,
    defaults: true,
    oneofs: true,
    includeDirs: [PROTOS],
  });
  const proto = grpc.loadPackageDefinition(def) as unknown as ProtoGrpcType;
  const server = new grpc.Server();
  const trailers = () => {
    const md = new grpc.Metadata();
    md.set(REPLICA_KEY, replica.id);
    return md;
  };
  server.addService(proto.berth.v1.SchedulingService.service, {
    Schedule: (
      call: grpc.ServerUnaryCall<ScheduleRequest__Output, ScheduleResponse>,
      cb: grpc.sendUnaryData<ScheduleResponse>,
    ) => {
      if (replica.unavailable > 0) {
        replica.unavailable--;
        replica.received.push(call.request.state);
        cb({ code: grpc.status.UNAVAILABLE, details: "restarting" });
        return;
      }
      const a = replica.answer(call.request);
      if (isRefusal(a)) {
        const md = trailers();
        md.set(STATUS_DETAILS_KEY, encodeStatus(a.code, a.message, a.info));
        cb({ code: a.code, details: a.message, metadata: md });
      } else {
        cb(null, a, trailers());
      }
    },
    ScheduleStream: (call: grpc.ServerDuplexStream<ScheduleRequest__Output, ScheduleStreamResponse>) => {
      call.sendMetadata(trailers());
      call.on("data", (req: ScheduleRequest__Output) => {
        const a = replica.answer(req);
        if (isRefusal(a)) {
          call.write({
            error: {
              grpc_code: a.code,
              message: a.message,
              reason: a.info.reason,
              domain: a.info.domain,
              metadata: a.info.metadata,
              replica_generation: Number(a.info.metadata["replica_generation"] ?? -1),
            },
          });
        } else {
          call.write({ response: a });
        }
      });
      call.on("end", () => call.end());
    },
  } as grpc.UntypedServiceImplementation);
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (err, p) =>
      err ? reject(err) : resolve(p),
    ),
  );
  return { addr: `127.0.0.1:${port}`, server };
}

const serviceConfig = loadServiceConfig(path.join(PROTOS, "service_config.json"));
const ask = () => ({ profile: "default-scheduler", pod: pendingPod("default", "p", "default-scheduler", 100, 2 ** 20) });

/** A caller at generation 6 whose tracker believes replica "old" holds 4. */
function callerAtSix(): { log: ClusterLog; tracker: ReplicaTracker } {
  const log = ClusterLog.create(exampleCluster());
  for (let i = 0; i < 5; i++) log.apply({ upsertPods: [{ ...pendingPod("default", `q${i}`, "default-scheduler", 1, 1), node_name: "node-b" }] });
  const tracker = new ReplicaTracker();
  tracker.confirmed("old", 4);
  return { log, tracker };
}

for (const stream of [false, true]) {
  describe(`Scheduler over ${stream ? "ScheduleStream" : "unary Schedule"}`, () => {
    let replica: FakeReplica;
    let server: grpc.Server;
    let addr: string;
    before(async () => {
      replica = new FakeReplica("r2");
      ({ addr, server } = await serve(replica));
    });
    after(() => server.forceShutdown());

    const scheduler = (log: ClusterLog, tracker: ReplicaTracker) =>
      new Scheduler(connect([addr], serviceConfig, PROTOS), log, tracker, { stream, timeoutMs: 5000, waitForReady: false });

    it("resends the changes after the generation a stale replica reports", async () => {
      replica.generation = 2;
      replica.received.length = 0;
      const { log, tracker } = callerAtSix();
      const s = scheduler(log, tracker);
      try {
        const resp = await s.schedule(ask());
        assert.equal(resp.node, "node-b");
        assert.equal(Number(resp.generation), 6);
      } finally {
        s.close();
      }
      assert.deepEqual(
        s.sends.map((x) => [x.kind, x.base_generation, x.outcome]),
        [
          ["delta", 4, "STALE_SNAPSHOT replica_generation=2"],
          ["delta", 2, "ok"],
        ],
      );
      assert.equal(replica.received[1]?.delta?.upsert_pods.length, 4, "the pods added after generation 2");
      assert.deepEqual(tracker.generations(), { old: 4, r2: 6 });
    });

    it("resends the full state to a replica that holds nothing", async () => {
      replica.generation = -1;
      const { log, tracker } = callerAtSix();
      const s = scheduler(log, tracker);
      try {
        await s.schedule(ask());
      } finally {
        s.close();
      }
      assert.deepEqual(s.sends.map((x) => [x.kind, x.outcome]), [
        ["delta", "STALE_SNAPSHOT replica_generation=-1"],
        ["full", "ok"],
      ]);
    });

    it("sends the full state when the resend is stale too", async () => {
      replica.generation = 6;
      replica.others = [["r8", 5], ["r9", 3]];
      const { log, tracker } = callerAtSix();
      const s = scheduler(log, tracker);
      try {
        await s.schedule(ask());
      } finally {
        s.close();
      }
      assert.deepEqual(s.sends.map((x) => [x.kind, x.base_generation, x.replica, x.outcome]), [
        ["delta", 4, "r8", "STALE_SNAPSHOT replica_generation=5"],
        ["delta", 4, "r9", "STALE_SNAPSHOT replica_generation=3"],
        ["full", undefined, "r2", "ok"],
      ]);
    });

    it("reports a full state refused as stale instead of looping", async () => {
      replica.refuseFull = true;
      replica.generation = 3;
      const s = scheduler(ClusterLog.create(exampleCluster()), new ReplicaTracker());
      try {
        await assert.rejects(s.schedule(ask()), (e: unknown) => e instanceof CallError && /refused the full state/.test(e.message));
      } finally {
        s.close();
        replica.refuseFull = false;
      }
      assert.equal(s.sends.length, 1);
    });

    it("reports other refusals with their reason", async () => {
      const s = scheduler(ClusterLog.create(exampleCluster()), new ReplicaTracker());
      try {
        await assert.rejects(
          s.schedule({ ...ask(), profile: "nope" }),
          (e: unknown) =>
            e instanceof CallError &&
            e.code === grpc.status.NOT_FOUND &&
            e.info?.reason === "UNKNOWN_PROFILE" &&
            e.message.includes("(reason UNKNOWN_PROFILE)"),
        );
      } finally {
        s.close();
      }
    });
  });
}

describe("service config retry policy", () => {
  it("retries a call answered UNAVAILABLE", async () => {
    const replica = new FakeReplica("r3");
    replica.unavailable = 1;
    const { addr, server } = await serve(replica);
    const s = new Scheduler(connect([addr], serviceConfig, PROTOS), ClusterLog.create(exampleCluster()), new ReplicaTracker(), {
      stream: false,
      timeoutMs: 5000,
      waitForReady: false,
    });
    try {
      const resp = await s.schedule(ask());
      assert.equal(resp.node, "node-b");
    } finally {
      s.close();
      server.forceShutdown();
    }
    assert.equal(replica.received.length, 2, "one UNAVAILABLE, then the retry grpc-js made");
    assert.equal(s.sends.length, 1, "the retry is the channel's, not the client's");
  });
});
