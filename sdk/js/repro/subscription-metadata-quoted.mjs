// Finding about @dapr/dapr 3.18.0: a subscription's metadata values are declared
// JSON-encoded. The SDK runs JSON.stringify on every value of the metadata option,
// so the string "250ms" is declared as "\"250ms\"" (quotes included) in its
// GET /dapr/subscribe answer. Dapr's subscription metadata is a map of strings
// (https://docs.dapr.io/reference/api/pubsub_api/#provide-a-route-for-dapr-to-deliver-topic-events):
// a sidecar reads "\"250ms\"" as it is, so no string value (a duration, a name) can be
// declared through the SDK; numbers and booleans survive only because their JSON is
// their text.
//
// Needs no sidecar: it reads the app's own answer (APP_PORT, default 3000).
//   (cd sdk/js && node repro/subscription-metadata-quoted.mjs)
// Exits 1 while the defect is there.
import { appServer, sleep } from "./common.mjs";

const port = process.env.APP_PORT ?? "3000";
const server = appServer();
await server.pubsub.subscribeWithOptions("memory", "orders", {
  callback: async () => {},
  metadata: { retryDelay: "250ms" },
});
// The app's server listens first; its client then waits for a sidecar this
// reproduction does not need.
server.start().catch(() => {});
let declared;
for (let tries = 0; tries < 100 && declared === undefined; tries++) {
  try {
    declared = await (await fetch(`http://127.0.0.1:${port}/dapr/subscribe`)).json();
  } catch {
    await sleep(100);
  }
}
const value = declared?.[0]?.metadata?.retryDelay;
console.log(`declared retryDelay: ${JSON.stringify(value)} (documented: "250ms")`);
process.exit(value === "250ms" ? 0 : 1);
