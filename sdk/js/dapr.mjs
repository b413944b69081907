// Dapr's JavaScript SDK as every program here makes it: its server and client over
// HTTP, on loopback, logging errors only.
import { DaprClient, DaprServer, CommunicationProtocolEnum, LogLevel } from "@dapr/dapr";

// A DaprServer (HTTP) listening on `appPort`, its client talking to the sidecar at
// `daprPort`.
export const httpServer = (appPort, daprPort) =>
  new DaprServer({
    serverHost: "127.0.0.1",
    serverPort: appPort,
    communicationProtocol: CommunicationProtocolEnum.HTTP,
    clientOptions: { daprHost: "127.0.0.1", daprPort },
    logger: { level: LogLevel.Error },
  });

// A DaprClient (HTTP) talking to the sidecar at `daprPort`.
export const httpClient = (daprPort) =>
  new DaprClient({
    daprHost: "127.0.0.1",
    daprPort,
    communicationProtocol: CommunicationProtocolEnum.HTTP,
    logger: { level: LogLevel.Error },
  });

// A DaprClient (gRPC) talking to the sidecar's gRPC API at `daprGrpcPort`.
export const grpcClient = (daprGrpcPort) =>
  new DaprClient({
    daprHost: "127.0.0.1",
    daprPort: daprGrpcPort,
    communicationProtocol: CommunicationProtocolEnum.GRPC,
    logger: { level: LogLevel.Error },
  });

// A gRPC error the SDK gave or threw (its client throws `{ error }`), as
// {text, code, reason}: the status's message, its code named as gRPC names it
// (INVALID_ARGUMENT) and the ErrorInfo reason among its details ("" for none); or
// null for none.
export const grpcError = (thrown) => {
  if (thrown === undefined || thrown === null) return null;
  const error = thrown.error ?? thrown;
  const code = typeof error.code === "number" ? grpcCodeName(error.code) : "";
  return { text: String(error.rawMessage ?? error.message ?? error), code, reason: errorInfoReason(error) };
};

const GRPC_CODES = ["OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
  "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED",
  "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"];
const grpcCodeName = (code) => GRPC_CODES[code] ?? "";

// The reason of a google.rpc.ErrorInfo among a ConnectError's details: its field 1, a
// string, read from the detail's bytes.
const errorInfoReason = (error) => {
  for (const detail of error.details ?? []) {
    if (detail?.desc?.typeName !== "google.rpc.ErrorInfo" && detail?.type !== "google.rpc.ErrorInfo") continue;
    const bytes = detail.value;
    if (!bytes || bytes[0] !== 0x0a || bytes[1] > 0x7f) continue;
    return new TextDecoder().decode(bytes.slice(2, 2 + bytes[1]));
  }
  return "";
};

// The text of an error the SDK gave or threw, or null for none.
export const errorText = (error) => (error === undefined || error === null ? null : String(error.message ?? error));
