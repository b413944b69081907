// Finding about @dapr/dapr 3.18.0: an event whose data is falsy (0, "", false)
// reaches the handler as the whole CloudEvent. The SDK's HTTP server takes
// `payload.data` only `if (payload.data)`, and otherwise hands over the request body.
// A CloudEvent's data is its `data` member whatever its value (CloudEvents 1.0, JSON
// format).
//
// Against serve, as in handler-throws.mjs:
//   (cd sdk/js && DAPR_HTTP_PORT=3500 APP_PORT=3000 node repro/falsy-data.mjs)
// Exits 1 while the defect is there.
import { appServer, publishWithHttpApi, sleep } from "./common.mjs";

const server = appServer();
let received;
await server.pubsub.subscribe("memory", "repro-falsy", async (data) => {
  received = data;
});
await server.start();
// Published with the HTTP API itself: the SDK's own publish loses a falsy payload
// before it leaves (repro/falsy-publish.mjs).
await publishWithHttpApi("repro-falsy", "application/json", "0");
await sleep(1000);
console.log(`handler got: ${JSON.stringify(received)} (documented: 0)`);
await server.stop();
process.exit(received === 0 ? 0 : 1);
