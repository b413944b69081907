// Finding about @dapr/dapr 3.18.0: publish() puts the topic into the request URL
// without percent-encoding it (implementation/Client/HTTPClient/pubsub.js builds
// `/publish/${pubSubName}/${topic}`). A topic holding '#' is cut there (the rest is a
// URL fragment, never sent), so publishing to "orders#1" publishes to "orders" and
// reports success; '?' turns the rest into a query string. Dapr's API reference:
// the path is /v1.0/publish/{pubsubname}/{topic}, the topic one path segment.
//
// A stand-in sidecar prints the path it receives (against serve the message lands on
// the wrong topic: `certify --component memory --js-sdk --case publish.invalid-requests`).
// Exits 1 while the defect is there.
import { standInSidecar } from "./common.mjs";

let seen;
const { sidecar, client } = await standInSidecar((req) => (seen = req.url));
await client.pubsub.publish("memory", "orders#1", { order: 1 });
const documented = "/v1.0/publish/memory/orders%231";
console.log(`the sidecar got path ${seen} (documented: ${documented})`);
sidecar.close();
process.exit(seen === documented ? 0 : 1);
