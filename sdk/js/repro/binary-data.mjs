// Finding about @dapr/dapr 3.18.0: binary data reaches the handler as text. A
// CloudEvent carries binary data in `data_base64` (CloudEvents 1.0, JSON format);
// the SDK's HTTP server decodes it with Buffer.from(data_base64, "base64").toString(),
// as UTF-8, so every byte sequence that is not UTF-8 becomes U+FFFD: the bytes
// FF 00 80 reach the handler as "\uFFFD\u0000\uFFFD", and the app cannot get them back.
//
// Against serve, as in handler-throws.mjs:
//   (cd sdk/js && DAPR_HTTP_PORT=3500 APP_PORT=3000 node repro/binary-data.mjs)
// Exits 1 while the defect is there.
import { appServer, firstCall, publishWithHttpApi } from "./common.mjs";

const server = appServer();
const call = firstCall();
await server.pubsub.subscribe("memory", "repro-binary", async (data) => call.deliver(data));
await server.start();
// Published with the HTTP API itself: the SDK's own publish changes a Buffer before
// it leaves (repro/buffer-payload.mjs).
await publishWithHttpApi("repro-binary", "application/octet-stream", new Uint8Array([0xff, 0x00, 0x80]));
// The handler's call, or nothing after 5 s.
const received = await call.within(5000);
const bytes = Buffer.isBuffer(received) ? received : Buffer.from(String(received ?? ""));
console.log(`handler got ${typeof received} ${JSON.stringify(received)}: bytes ${bytes.toString("hex")} (documented: ff0080)`);
await server.stop();
process.exit(bytes.toString("hex") === "ff0080" ? 0 : 1);
