// Finding about @dapr/dapr 3.18.0: a bulk publish that fails for some entries is
// reported to the app as a full success.
//
// Dapr's API reference (pubsub_api, "Bulk publish"): when some entries fail, the
// sidecar answers HTTP 500 with {"failedEntries":[{"entryId","error"}],"errorCode"}.
// The SDK's getBulkPublishResponse matches each failed entry by `entry.entryID`,
// which the documented answer (and daprd's) does not have, so it finds none and
// publishBulk resolves with failedMessages: [] while one entry was never published.
//
// Against serve, which answers as documented (from the project root):
//   cargo run --release -- serve --components fixtures --http-port 3500 &
//   (cd sdk/js && DAPR_HTTP_PORT=3500 node repro/bulk-failed-entries.mjs)
// The memory component refuses events above its maxMessageBytes (65536).
import { sidecarClient } from "./common.mjs";

const client = sidecarClient();
const answer = await client.pubsub.publishBulk("memory", "repro-bulk", [
  { entryID: "fits", event: "small", contentType: "text/plain" },
  { entryID: "too-big", event: "x".repeat(70000), contentType: "text/plain" },
]);
const failed = answer.failedMessages.map((f) => f.message.entryID);
console.log(`failedMessages: ${JSON.stringify(failed)} (documented: ["too-big"])`);
// Exits 1 while the defect is there.
process.exitCode = failed.includes("too-big") ? 0 : 1;
