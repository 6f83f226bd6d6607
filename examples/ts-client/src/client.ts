// Calls to berth.v1.SchedulingService that follow the client contract
// (protos/README.md): the service config on the channel, and on
// FAILED_PRECONDITION with reason STALE_SNAPSHOT one resend with the changes
// after the replica's generation (or the full state), unary or on a stream.

import * as path from "node:path";

import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";

import { ClusterLog, stateSize } from "./cluster";
import {
  channelOptions,
  codeName,
  errorInfoOf,
  type ErrorInfo,
  isServiceError,
  Reason,
  replicaGeneration,
  type ServiceConfig,
} from "./contract";
import type { ClusterState } from "./gen/berth/v1/ClusterState";
import type { RequestError__Output } from "./gen/berth/v1/RequestError";
import type { ScheduleRequest } from "./gen/berth/v1/ScheduleRequest";
import type { ScheduleResponse__Output } from "./gen/berth/v1/ScheduleResponse";
import type { ScheduleStreamResponse__Output } from "./gen/berth/v1/ScheduleStreamResponse";
import type { SchedulingServiceClient } from "./gen/berth/v1/SchedulingService";
import type { ProtoGrpcType } from "./gen/scheduling";

/** The options the generated types in src/gen were made with (package.json "gen"). */
const LOADER_OPTIONS: protoLoader.Options = {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
};

/** A call that failed: the gRPC code, message and (if sent) the ErrorInfo. */
export class CallError extends Error {
  constructor(
    readonly code: number,
    readonly details: string,
    readonly info: ErrorInfo | undefined,
    readonly note = "",
  ) {
    super(
      `${codeName(code)}: ${details}` +
        (info ? ` (reason ${info.reason})` : "") +
        (note ? `; ${note}` : ""),
    );
  }
}

/** One message the client sent with a ClusterState, and how the replica took it. */
export interface Send {
  pod: string;
  kind: "full" | "delta";
  base_generation?: number;
  generation: number;
  /** Objects in the state: upserts plus deletes. */
  objects: number;
  /** "ok", "STALE_SNAPSHOT replica_generation=G", or the error's code and reason. */
  outcome: string;
  /** The replica that answered, when it said. */
  replica?: string;
}

/**
 * A client for the given address(es). Several ip:port addresses make one
 * channel over all of them; the service config's loadBalancingConfig
 * (round_robin) spreads the calls.
 */
export function connect(
  addrs: string[],
  config: ServiceConfig,
  protosDir: string,
): SchedulingServiceClient {
  const definition = protoLoader.loadSync(path.join(protosDir, "berth/v1/scheduling.proto"), {
    ...LOADER_OPTIONS,
    includeDirs: [protosDir],
  });
  const proto = grpc.loadPackageDefinition(definition) as unknown as ProtoGrpcType;
  const target = addrs.length === 1 ? addrs[0] : `ipv4:${addrs.join(",")}`;
  return new proto.berth.v1.SchedulingService(
    target,
    grpc.credentials.createInsecure(),
    channelOptions(config),
  );
}

/** The part of a ScheduleRequest besides the cluster state. */
export type Ask = Omit<ScheduleRequest, "state">;

/** Trailing (and, on streams, initial) metadata naming the replica that answered. */
export const REPLICA_KEY = "berth-replica";

/** An answer and the id of the replica that gave it ("" when it did not say). */
interface Answer {
  resp: ScheduleResponse__Output;
  replica: string;
}

interface Transport {
  /** One Schedule: the response, or a typed refusal (CallError). */
  send(req: ScheduleRequest): Promise<Answer>;
  close(): void;
}

function firstString(md: grpc.Metadata | undefined, key: string): string {
  const v = md?.get(key)[0];
  return typeof v === "string" ? v : "";
}

/** Unary Schedule calls, each with its own deadline. */
class UnaryTransport implements Transport {
  constructor(
    private readonly client: SchedulingServiceClient,
    private readonly timeoutMs: number,
    private readonly waitForReady: boolean,
  ) {}

  send(req: ScheduleRequest): Promise<Answer> {
    return new Promise((resolve, reject) => {
      let result: ScheduleResponse__Output | undefined;
      const call = this.client.Schedule(
        req,
        new grpc.Metadata({ waitForReady: this.waitForReady }),
        { deadline: Date.now() + this.timeoutMs },
        (err, resp) => {
          if (err) reject(toCallError(err));
          else if (resp === undefined) reject(new Error("Schedule answered no message"));
          else result = resp;
        },
      );
      // grpc-js calls the callback, then emits the status with the trailers.
      call.on("status", (st: grpc.StatusObject) => {
        if (result !== undefined) resolve({ resp: result, replica: firstString(st.metadata, REPLICA_KEY) });
      });
    });
  }

  close(): void {}
}

/**
 * ScheduleStream: one long-lived stream, one answer per request, in order.
 * Each answer is a oneof: `response`, or `error` (a RequestError carrying what
 * the unary call's status and ErrorInfo would); the stream stays open after an
 * error answer.
 */
class StreamTransport implements Transport {
  private readonly call: grpc.ClientDuplexStream<ScheduleRequest, ScheduleStreamResponse__Output>;
  private readonly answers: AsyncIterator<ScheduleStreamResponse__Output>;
  /** A stream is served by one replica, which names itself in the headers. */
  private replica = "";

  constructor(client: SchedulingServiceClient, waitForReady: boolean) {
    // No deadline: the stream lives as long as the caller schedules (the
    // service config sets no timeout for ScheduleStream either).
    this.call = client.ScheduleStream(new grpc.Metadata({ waitForReady }));
    this.answers = this.call[Symbol.asyncIterator]() as AsyncIterator<ScheduleStreamResponse__Output>;
    this.call.on("metadata", (md: grpc.Metadata) => {
      this.replica = firstString(md, REPLICA_KEY);
    });
  }

  async send(req: ScheduleRequest): Promise<Answer> {
    this.call.write(req);
    let next: IteratorResult<ScheduleStreamResponse__Output>;
    try {
      next = await this.answers.next();
    } catch (err) {
      throw toCallError(err);
    }
    if (next.done) throw new Error("ScheduleStream ended before answering");
    const answer = next.value;
    switch (answer.result) {
      case "response":
        if (answer.response) return { resp: answer.response, replica: this.replica };
        break;
      case "error":
        if (answer.error) throw fromRequestError(answer.error);
        break;
    }
    throw new Error("ScheduleStream answered neither a response nor an error");
  }

  close(): void {
    this.call.end();
  }
}

function toCallError(err: unknown): unknown {
  if (!isServiceError(err)) return err;
  return new CallError(err.code, err.details, errorInfoOf(err));
}

function fromRequestError(e: RequestError__Output): CallError {
  const info = e.reason ? { reason: e.reason, domain: e.domain, metadata: e.metadata } : undefined;
  return new CallError(e.grpc_code, e.message, info);
}

/** What the tracker knows of one replica. */
export interface ReplicaSeen {
  /** The generation it confirmed holding; -1 when it needs a full state. */
  generation: number;
  /** When it last answered (ms since the epoch). */
  lastSeen: number;
  /** The tracker's answer count when it last answered. */
  lastAnswer: number;
}

/**
 * What each replica behind the channel confirmed, by replica id (the
 * berth-replica trailer, or the ErrorInfo metadata "replica";
 * protos/README.md, "Replicas: what to send to whom"). A request carries the
 * changes after the lowest generation any known replica holds, so whichever
 * replica the load balancer picks can apply it; while a known replica holds
 * nothing (-1), that is the full state. A replica not heard from in 64
 * answers (2 x the replicas known when it needs a full state) or 30 s is
 * forgotten, so one gone for good does not hold the base back.
 */
export class ReplicaTracker {
  private answers = 0;

  constructor(
    readonly replicas = new Map<string, ReplicaSeen>(),
    private readonly now: () => number = Date.now,
    private readonly forgetAnswers = 64,
    private readonly forgetMs = 30_000,
  ) {}

  /** The generation to send a delta from; -1: send the full state. */
  base(): number {
    this.forget();
    if (this.replicas.size === 0) return -1;
    return Math.min(...[...this.replicas.values()].map((r) => r.generation));
  }

  confirmed(replica: string, generation: number): void {
    const r = this.seen(replica);
    r.generation = Math.max(r.generation, generation);
  }

  stale(replica: string, generation: number): void {
    this.seen(replica).generation = generation;
  }

  /** Replicas whose generation the log no longer reaches count as holding nothing. */
  forgetOlderThan(oldest: number): void {
    for (const r of this.replicas.values()) if (r.generation >= 0 && r.generation < oldest) r.generation = -1;
  }

  /** Replica id to generation, for reports. */
  generations(): Record<string, number> {
    return Object.fromEntries([...this.replicas].map(([id, r]) => [id, r.generation]));
  }

  private seen(replica: string): ReplicaSeen {
    this.answers += 1;
    let r = this.replicas.get(replica);
    if (r === undefined) {
      r = { generation: -1, lastSeen: 0, lastAnswer: 0 };
      this.replicas.set(replica, r);
    }
    r.lastSeen = this.now();
    r.lastAnswer = this.answers;
    return r;
  }

  private forget(): void {
    if (this.replicas.size < 2) return;
    const patience = Math.max(this.forgetAnswers, 4 * this.replicas.size);
    const patienceFull = Math.max(4, 2 * this.replicas.size);
    const now = this.now();
    for (const [id, r] of this.replicas) {
      const quiet = this.answers - r.lastAnswer;
      if (quiet > (r.generation < 0 ? patienceFull : patience) || now - r.lastSeen > this.forgetMs) {
        this.replicas.delete(id);
      }
    }
  }
}

/**
 * Schedules pods one after another against one channel, carrying the
 * caller's cluster as deltas from the generation every known replica holds.
 * A replica that is behind (new, restarted, or one the load balancer had not
 * sent the earlier deltas to) answers STALE_SNAPSHOT with its generation; the
 * client records it and resends the same request with the changes after the
 * new base (the full state while some replica holds nothing). A second
 * STALE_SNAPSHOT for the same request (the resend reached another replica)
 * gets the full state. A full state is never stale: refused as stale, it is a
 * server bug, reported and not resent.
 */
export class Scheduler {
  readonly sends: Send[] = [];
  private readonly transport: Transport;

  constructor(
    client: SchedulingServiceClient,
    readonly log: ClusterLog,
    readonly tracker: ReplicaTracker,
    options: { stream: boolean; timeoutMs: number; waitForReady: boolean },
  ) {
    this.transport = options.stream
      ? new StreamTransport(client, options.waitForReady)
      : new UnaryTransport(client, options.timeoutMs, options.waitForReady);
  }

  async schedule(ask: Ask): Promise<ScheduleResponse__Output> {
    const podName = `${ask.pod?.namespace}/${ask.pod?.name}`;
    this.tracker.forgetOlderThan(this.log.oldest);
    let state: ClusterState = this.log.since(this.tracker.base());
    for (let attempt = 0; ; attempt++) {
      const send: Send = {
        pod: podName,
        kind: state.full ? "full" : "delta",
        generation: Number(state.generation),
        objects: stateSize(state),
        outcome: "",
      };
      if (!state.full) send.base_generation = Number(state.base_generation);
      this.sends.push(send);
      try {
        const { resp, replica } = await this.transport.send({ ...ask, state });
        send.outcome = "ok";
        send.replica = replica;
        this.tracker.confirmed(replica, Number(resp.generation));
        return resp;
      } catch (err) {
        if (!(err instanceof CallError)) throw err;
        const stale =
          err.code === grpc.status.FAILED_PRECONDITION && err.info?.reason === Reason.STALE_SNAPSHOT;
        if (!stale || err.info === undefined) {
          send.outcome = codeName(err.code) + (err.info ? ` ${err.info.reason}` : "");
          throw err;
        }
        const g = replicaGeneration(err.info);
        const replica = err.info.metadata["replica"] ?? "";
        send.outcome = `${Reason.STALE_SNAPSHOT} replica_generation=${g}`;
        send.replica = replica;
        if (state.full) {
          throw new CallError(
            err.code,
            err.details,
            err.info,
            `replica ${replica} is at generation ${g} and refused the full state`,
          );
        }
        this.tracker.stale(replica, g);
        state = attempt === 0 ? this.log.since(this.tracker.base()) : this.log.full();
      }
    }
  }

  close(): void {
    this.transport.close();
  }
}
