// Finding about @dapr/dapr 3.18.0: a Buffer payload is serialized by its content
// type instead of sent as its bytes (utils/Serializer.util.js, serializeHttp). With
// text/plain its bytes are decoded as UTF-8, each invalid byte becoming U+FFFD (3
// bytes on the wire); with application/json it is sent as JSON.stringify(buffer),
// {"type":"Buffer","data":[...]}. Dapr's API reference: the request body is the
// event's data, with the Content-Type given.
//
// A stand-in sidecar prints the bytes it receives (against serve:
// `certify --component memory --js-sdk --case publish.fidelity`). Exits 1 while the
// defect is there.
import http from "node:http";
import { DaprClient, CommunicationProtocolEnum, LogLevel } from "@dapr/dapr";

const seen = [];
const sidecar = http.createServer((req, res) => {
  const chunks = [];
  req.on("data", (chunk) => chunks.push(chunk));
  req.on("end", () => {
    if (req.url.startsWith("/v1.0/publish/")) seen.push(Buffer.concat(chunks));
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
const bytes = Buffer.from([0x68, 0x69, 0xff, 0x00, 0xfe]);
await client.pubsub.publish("memory", "repro-buffer", bytes, { contentType: "text/plain" });
await client.pubsub.publish("memory", "repro-buffer", Buffer.from('{"a":1}'), {
  contentType: "application/json",
});
for (const [i, body] of seen.entries()) {
  console.log(`publish ${i + 1}: the sidecar got ${body.length} bytes: ${body.toString("hex").slice(0, 60)}`);
}
const intact = seen.length === 2 && seen[0].equals(bytes) && seen[1].toString() === '{"a":1}';
console.log(`documented: ${bytes.toString("hex")} and 7b2261223a317d`);
sidecar.close();
process.exit(intact ? 0 : 1);
