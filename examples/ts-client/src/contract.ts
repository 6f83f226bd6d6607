// The client contract of protos/README.md that is not in the .proto files:
// the gRPC service config every client loads, and typed errors
// (google.rpc.Status with a google.rpc.ErrorInfo detail, domain "berth.dev").

import * as fs from "node:fs";

import * as grpc from "@grpc/grpc-js";
import { getProtoPath, loadSync } from "google-proto-files";
import type * as protobuf from "protobufjs";

/** google.rpc.ErrorInfo.domain of every error the Berth server sends. */
export const ERROR_DOMAIN = "berth.dev";

/** The trailer that carries a google.rpc.Status with the error's details. */
export const STATUS_DETAILS_KEY = "grpc-status-details-bin";

/** ErrorInfo.reason values this client acts on (ErrorReason names without the prefix). */
export const Reason = {
  STALE_SNAPSHOT: "STALE_SNAPSHOT",
  SNAPSHOT_PASSED: "SNAPSHOT_PASSED",
  INVALID_REQUEST: "INVALID_REQUEST",
  UNKNOWN_PROFILE: "UNKNOWN_PROFILE",
  UNKNOWN_NODE: "UNKNOWN_NODE",
  BATCH_TOO_LARGE: "BATCH_TOO_LARGE",
} as const;

/** google.rpc.ErrorInfo, decoded. */
export interface ErrorInfo {
  reason: string;
  domain: string;
  metadata: Record<string, string>;
}

/** What the client reads from a service config besides what grpc-js applies itself. */
export interface ServiceConfig {
  /** The JSON, for the channel option grpc.service_config. */
  json: string;
  /** Where it came from, for messages. */
  source: string;
  /** maxRequestMessageBytes of SchedulingService (grpc-js does not apply it from JSON). */
  maxRequestMessageBytes?: number;
  /** maxResponseMessageBytes of SchedulingService. */
  maxResponseMessageBytes?: number;
}

export class ServiceConfigError extends Error {}

interface MethodName {
  service?: string;
  method?: string;
}

interface MethodConfig {
  name?: MethodName[];
  maxRequestMessageBytes?: unknown;
  maxResponseMessageBytes?: unknown;
}

/**
 * The methodConfig entry gRPC applies to service/method: one naming the method
 * exactly, else one naming the whole service (the service config spec's lookup).
 */
export function methodConfigFor(
  config: { methodConfig?: MethodConfig[] },
  service: string,
  method: string,
): MethodConfig | undefined {
  const entries = config.methodConfig ?? [];
  const named = (pred: (n: MethodName) => boolean) =>
    entries.find((e) => (e.name ?? []).some(pred));
  return (
    named((n) => n.service === service && n.method === method) ??
    named((n) => n.service === service && (n.method === undefined || n.method === ""))
  );
}

/**
 * Reads and checks a gRPC service config file (protos/service_config.json).
 * grpc-js applies timeouts, waitForReady, retryPolicy and the load balancer
 * from the JSON; the message size limits are returned for channel options.
 */
export function loadServiceConfig(file: string): ServiceConfig {
  let text: string;
  try {
    text = fs.readFileSync(file, "utf8");
  } catch (e) {
    throw new ServiceConfigError(`service config ${file}: ${(e as Error).message}`);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (e) {
    throw new ServiceConfigError(`service config ${file}: not JSON: ${(e as Error).message}`);
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) {
    throw new ServiceConfigError(`service config ${file}: must be a JSON object`);
  }
  const config = parsed as { methodConfig?: unknown };
  if (config.methodConfig !== undefined && !Array.isArray(config.methodConfig)) {
    throw new ServiceConfigError(`service config ${file}: methodConfig must be a list`);
  }
  const method = methodConfigFor(
    config as { methodConfig?: MethodConfig[] },
    "berth.v1.SchedulingService",
    "Schedule",
  );
  const size = (field: "maxRequestMessageBytes" | "maxResponseMessageBytes") => {
    const value = method?.[field];
    if (value === undefined) return undefined;
    const n = typeof value === "string" ? Number(value) : value;
    if (typeof n !== "number" || !Number.isInteger(n) || n <= 0) {
      throw new ServiceConfigError(
        `service config ${file}: ${field} must be a positive integer, got ${JSON.stringify(value)}`,
      );
    }
    return n;
  };
  return {
    json: text,
    source: file,
    maxRequestMessageBytes: size("maxRequestMessageBytes"),
    maxResponseMessageBytes: size("maxResponseMessageBytes"),
  };
}

/** Channel options that apply a loaded service config. */
export function channelOptions(config: ServiceConfig): grpc.ChannelOptions {
  const options: grpc.ChannelOptions = { "grpc.service_config": config.json };
  if (config.maxRequestMessageBytes !== undefined) {
    options["grpc.max_send_message_length"] = config.maxRequestMessageBytes;
  }
  if (config.maxResponseMessageBytes !== undefined) {
    options["grpc.max_receive_message_length"] = config.maxResponseMessageBytes;
  }
  return options;
}

let rpcTypes: { status: protobuf.Type; errorInfo: protobuf.Type } | undefined;

/** google.rpc.Status and ErrorInfo, from the .proto files google-proto-files ships. */
function types(): { status: protobuf.Type; errorInfo: protobuf.Type } {
  if (rpcTypes === undefined) {
    rpcTypes = {
      status: loadSync(getProtoPath("rpc", "status.proto")).lookupType("google.rpc.Status"),
      errorInfo: loadSync(getProtoPath("rpc", "error_details.proto")).lookupType(
        "google.rpc.ErrorInfo",
      ),
    };
  }
  return rpcTypes;
}

interface AnyMessage {
  type_url?: string;
  typeUrl?: string;
  value?: Uint8Array;
}

/** The ErrorInfo of domain berth.dev in an encoded google.rpc.Status, if any. */
export function decodeErrorInfo(statusBytes: Uint8Array): ErrorInfo | undefined {
  const { status, errorInfo } = types();
  const decoded = status.toObject(status.decode(statusBytes), { defaults: true }) as {
    details?: AnyMessage[];
  };
  for (const detail of decoded.details ?? []) {
    const url = detail.type_url ?? detail.typeUrl ?? "";
    if (!url.endsWith("/google.rpc.ErrorInfo") || detail.value === undefined) continue;
    const info = errorInfo.toObject(errorInfo.decode(detail.value), { defaults: true }) as {
      reason: string;
      domain: string;
      metadata?: Record<string, string>;
    };
    if (info.domain !== ERROR_DOMAIN) continue;
    return { reason: info.reason, domain: info.domain, metadata: info.metadata ?? {} };
  }
  return undefined;
}

/** Encodes a google.rpc.Status with one ErrorInfo detail (for tests and fakes). */
export function encodeStatus(code: number, message: string, info: ErrorInfo): Buffer {
  const { status, errorInfo } = types();
  const value = errorInfo.encode(errorInfo.fromObject(info)).finish();
  const msg = status.fromObject({
    code,
    message,
    details: [{ type_url: "type.googleapis.com/google.rpc.ErrorInfo", value }],
  });
  return Buffer.from(status.encode(msg).finish());
}

/** The ErrorInfo a failed call's trailers carry, if the server sent one. */
export function errorInfoOf(err: grpc.ServiceError): ErrorInfo | undefined {
  const values = err.metadata?.get(STATUS_DETAILS_KEY) ?? [];
  for (const value of values) {
    if (typeof value === "string") continue;
    try {
      const info = decodeErrorInfo(value);
      if (info !== undefined) return info;
    } catch {
      // A malformed details trailer: treat the error as untyped.
    }
  }
  return undefined;
}

/** True for the errors grpc-js raises for a failed call. */
export function isServiceError(err: unknown): err is grpc.ServiceError {
  return (
    err instanceof Error &&
    typeof (err as Partial<grpc.ServiceError>).code === "number" &&
    (err as Partial<grpc.ServiceError>).metadata !== undefined
  );
}

/** The upper-case name of a gRPC status code, e.g. "FAILED_PRECONDITION". */
export function codeName(code: number): string {
  return grpc.status[code] ?? `code ${code}`;
}

/**
 * The replica generation of a STALE_SNAPSHOT answer (ErrorInfo metadata
 * replica_generation; -1 means the replica has no snapshot).
 */
export function replicaGeneration(info: ErrorInfo): number {
  const raw = info.metadata["replica_generation"];
  const g = raw === undefined ? Number.NaN : Number(raw);
  if (!Number.isInteger(g)) {
    throw new Error(
      `${info.reason} without an integer metadata replica_generation (got ${JSON.stringify(raw)})`,
    );
  }
  return g;
}
