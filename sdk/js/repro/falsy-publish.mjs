// Finding about @dapr/dapr 3.18.0: publishing a falsy payload (0, "", false) sends
// an empty body as text/plain, so subscribers get "" instead of the value. Dapr's API
// reference: the request body is the event's data.
//
// Against serve, as in handler-throws.mjs (an in-process subscriber shows what was
// published: sidecar/tests/sdk_js.rs); here the SDK's own request is shown by a
// stand-in sidecar that prints what it receives. Exits 1 while the defect is there.
import { standInSidecar } from "./common.mjs";

let seen;
const { sidecar, client } = await standInSidecar((req, body) => {
  seen = { contentType: req.headers["content-type"], body: body.toString() };
});
await client.pubsub.publish("memory", "repro-falsy", 0);
console.log(`the sidecar got: ${JSON.stringify(seen)} (documented: body "0")`);
sidecar.close();
process.exit(seen?.body === "0" ? 0 : 1);
