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
import { standInSidecar } from "./common.mjs";

const seen = [];
const { sidecar, client } = await standInSidecar((_req, body) => seen.push(body));
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
