// Dapr's JavaScript SDK as the publisher of a certification row: a long-running
// DaprClient against the sidecar, over HTTP at DAPR_HTTP_PORT, or with
// DAPR_PROTOCOL=grpc over gRPC at DAPR_GRPC_PORT, that publishes what the suite asks,
// one JSON request per stdin line, and answers one JSON line per request on stdout
// with what the SDK returned. Requests run concurrently, as an app's publishes do.
// Driven by sidecar/src/sdk.rs. Over gRPC an error is {text, code, reason} (see
// grpcError), and each failed entry carries its error's as `grpc`.
//
// {"id", "op": "publish", "pubsub", "topic", "jsonText"?: text, "base64"?: text,
//  "contentType"?, "metadata"?}                     -> {"id", "error": text|null}
// {"id", "op": "publishBulk", "pubsub", "topic", "messages": [{entryID, eventText,
//  contentType, metadata}], "metadata"?}            -> {"id", "failed": [{entryID, error}]}
//
// A payload is handed to the SDK as an app author holds it: a JSON-typed payload
// as the JS value its text parses to (the SDK serializes it), any other as a
// Buffer; a bulk entry's event as the value its API form (`eventText`) parses to.
import { errorText, grpcClient, grpcError, httpClient } from "./dapr.mjs";
import { createInterface } from "node:readline";

const overGrpc = process.env.DAPR_PROTOCOL === "grpc";
const client = overGrpc ? grpcClient(process.env.DAPR_GRPC_PORT) : httpClient(process.env.DAPR_HTTP_PORT);
const failure = overGrpc ? grpcError : errorText;

const answer = (line) => process.stdout.write(JSON.stringify(line) + "\n");

const run = async (request) => {
  if (request.op === "publish") {
    const data = "jsonText" in request ? JSON.parse(request.jsonText) : Buffer.from(request.base64 ?? "", "base64");
    const options = {};
    if (request.contentType) options.contentType = request.contentType;
    if (request.metadata) options.metadata = request.metadata;
    const result = await client.pubsub.publish(request.pubsub, request.topic, data, options);
    return { id: request.id, error: failure(result.error) };
  }
  if (request.op === "publishBulk") {
    const messages = request.messages.map(({ eventText, base64, ...entry }) => ({ ...entry, event: JSON.parse(eventText) }));
    const result = await client.pubsub.publishBulk(request.pubsub, request.topic, messages, request.metadata);
    const failed = result.failedMessages.map((f) => ({
      entryID: f.message.entryID,
      error: errorText(f.error?.error ?? f.error),
      ...(overGrpc ? { grpc: grpcError(f.error) } : {}),
    }));
    return { id: request.id, failed };
  }
  const unknown = `unknown op ${request.op}`;
  return { id: request.id, error: overGrpc ? { text: unknown, code: "", reason: "" } : unknown };
};

createInterface({ input: process.stdin }).on("line", (line) => {
  const request = JSON.parse(line);
  run(request).then(answer, (e) =>
    answer({ id: request.id, error: overGrpc ? grpcError(e) : `the SDK threw: ${errorText(e)}` }),
  );
});
answer({ ready: true });
