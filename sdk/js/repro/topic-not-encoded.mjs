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
import http from "node:http";
import { DaprClient, CommunicationProtocolEnum, LogLevel } from "@dapr/dapr";

let seen;
const sidecar = http.createServer((req, res) => {
  req.resume();
  req.on("end", () => {
    if (req.url.startsWith("/v1.0/publish/")) seen = req.url;
    res.statusCode = req.url.startsWith("/v1.0/publish/") ? 204 : 200;
    res.end(req.url.startsWith("/v1.0/metadata") ? "{}" : undefined);
  });
});
await new Promise((resolve) => sidecar.listen(0, "127.0.0.1", resolve));
const client = new DaprClient({
  daprHost: "127.0.0.1",
  daprPort: String(sidecar.address().port),
  communicationProtocol: CommunicationProtocolEnum.HTTP,
  logger: { level: LogLevel.Error },
});
await client.pubsub.publish("memory", "orders#1", { order: 1 });
const documented = "/v1.0/publish/memory/orders%231";
console.log(`the sidecar got path ${seen} (documented: ${documented})`);
sidecar.close();
process.exit(seen === documented ? 0 : 1);
