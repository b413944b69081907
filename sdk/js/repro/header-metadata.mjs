// Finding about @dapr/dapr 3.18.0: metadata values that are not ASCII reach the
// handler garbled. A sidecar delivers an event's metadata as HTTP headers, their
// values as UTF-8 bytes; Node's HTTP server reads header bytes as Latin-1, and the
// SDK hands the handler req.headers as they are, so "✓" arrives as "\u00e2\u009c\u0093"
// (its three UTF-8 bytes, each a Latin-1 character). Metadata round-trips as
// published (https://docs.dapr.io/reference/api/pubsub_api/#metadata).
//
// Against serve, as in handler-throws.mjs:
//   (cd sdk/js && DAPR_HTTP_PORT=3500 APP_PORT=3000 node repro/header-metadata.mjs)
// Exits 1 while the defect is there.
import { appServer, firstCall, publishWithHttpApi } from "./common.mjs";

const server = appServer();
const call = firstCall();
await server.pubsub.subscribe("memory", "repro-header", async (_data, headers) => call.deliver(headers["app-label"]));
await server.start();
await publishWithHttpApi("repro-header", "text/plain", "hello", { "app-label": "✓" });
// The handler's call, or nothing after 5 s.
const received = await call.within(5000);
const codes = [...(received ?? "")].map((c) => c.codePointAt(0).toString(16)).join(" ");
console.log(`handler got app-label of code points ${codes} (documented: "✓", code point 2713)`);
await server.stop();
process.exit(received === "✓" ? 0 : 1);
