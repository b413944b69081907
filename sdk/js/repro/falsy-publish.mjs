// Finding about @dapr/dapr 3.18.0: publishing a falsy payload (0, "", false) sends
// an empty body as text/plain, so subscribers get "" instead of the value. Dapr's API
// reference: the request body is the event's data.
//
// Against serve, as in handler-throws.mjs (an in-process subscriber shows what was
// published: sidecar/tests/sdk_js.rs); here the SDK's own request is shown by a
// stand-in sidecar that prints what it receives. Exits 1 while the defect is there.
import http from "node:http";
import { DaprClient, CommunicationProtocolEnum, LogLevel } from "@dapr/dapr";

let seen;
const sidecar = http.createServer((req, res) => {
  let body = "";
  req.on("data", (chunk) => (body += chunk));
  req.on("end", () => {
    if (req.url.startsWith("/v1.0/publish/")) seen = { contentType: req.headers["content-type"], body };
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
await client.pubsub.publish("memory", "repro-falsy", 0);
console.log(`the sidecar got: ${JSON.stringify(seen)} (documented: body "0")`);
sidecar.close();
process.exit(seen?.body === "0" ? 0 : 1);
