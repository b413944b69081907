// Finding about @dapr/dapr 3.18.0: in its gRPC mode, publishBulk drops each entry's
// metadata and content type.
//
// Dapr's API reference (pubsub_api, "Bulk publish", and the gRPC message
// BulkPublishRequestEntry): each entry carries its own `metadata` and `contentType`.
// The SDK's GRPCClientPubSub.publishBulk builds each BulkPublishRequestEntry from the
// entry id and the serialized event only, the content type inferred from the event's
// JavaScript type, so per-entry metadata (partitionKey, ttlInSeconds, an app's own
// keys) never reaches the sidecar. Shown here with an entry whose metadata the sidecar
// must refuse: over HTTP the SDK sends it and the request is refused; over gRPC the
// same call succeeds.
//
// Against serve (from the project root):
//   cargo run --release -- serve --components fixtures --http-port 3500 --grpc-port 50001 &
//   (cd sdk/js && DAPR_HTTP_PORT=3500 DAPR_GRPC_PORT=50001 node repro/grpc-bulk-entry-metadata.mjs)
import { grpcClient, httpClient } from "../dapr.mjs";

const entries = [
  { entryID: "bad-ttl", event: "x", contentType: "text/plain", metadata: { ttlInSeconds: "soon" } },
];
const refused = (answer) => answer.failedMessages.length > 0;
const overHttp = await httpClient(process.env.DAPR_HTTP_PORT ?? "3500").pubsub.publishBulk(
  "memory",
  "repro-grpc-bulk",
  entries,
);
const overGrpc = await grpcClient(process.env.DAPR_GRPC_PORT ?? "50001").pubsub.publishBulk(
  "memory",
  "repro-grpc-bulk",
  entries,
);
console.log(
  `an entry with metadata ttlInSeconds "soon": over HTTP ${refused(overHttp) ? "refused" : "published"}, ` +
    `over gRPC ${refused(overGrpc) ? "refused" : "published"} (documented: refused on both)`,
);
// Exits 1 while the defect is there (the HTTP call shows the sidecar does refuse it).
process.exitCode = refused(overHttp) && !refused(overGrpc) ? 1 : 0;
process.exit();
