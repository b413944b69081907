// Dapr's JavaScript SDK as the app of a certification row: a DaprServer (HTTP) on
// APP_PORT whose sidecar listens on DAPR_HTTP_PORT, subscribing as argv[2] (JSON)
// says, with one handler that hands each message it gets (the data and headers the
// SDK gives a handler) to the suite's relay, and answers the status the relay
// gives back (or throws, when the case's handler failed). Driven by
// sidecar/src/sdk_app.rs; prints {"started": true} once the server runs.
//
// argv[2]: {"pubsub", "topic", "deadLetterTopic"?, "metadata"?, "relay": URL}
import { httpServer } from "./dapr.mjs";

const config = JSON.parse(process.argv[2]);

// Metadata as a JavaScript app author writes it: numbers and booleans as such, the
// rest as strings. (The SDK JSON-encodes every value it declares, so a string value
// reaches the sidecar quoted: sdk/js/repro/subscription-metadata-quoted.mjs.)
const typed = (value) => {
  if (/^-?\d+$/.test(value)) return Number(value);
  if (value === "true" || value === "false") return value === "true";
  return value;
};
const metadata = config.metadata
  ? Object.fromEntries(Object.entries(config.metadata).map(([key, value]) => [key, typed(value)]))
  : undefined;

// The data as the handler got it, spelled so that the relay can tell its kind.
const encode = (data) => {
  if (data === undefined) return { undefined: true };
  if (Buffer.isBuffer(data)) return { base64: data.toString("base64") };
  if (typeof data === "string") return { text: data };
  return { json: data };
};

const handler = async (data, headers) => {
  const answer = await fetch(config.relay, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ data: encode(data), headers }),
  });
  if (!answer.ok) throw new Error(`the relay answered HTTP ${answer.status}: ${await answer.text()}`);
  const said = await answer.json();
  if (said.throw !== undefined) throw new Error(said.throw);
  return said.status;
};

const server = httpServer(process.env.APP_PORT, process.env.DAPR_HTTP_PORT);
await server.pubsub.subscribeWithOptions(config.pubsub, config.topic, {
  callback: handler,
  deadLetterTopic: config.deadLetterTopic ?? undefined,
  metadata,
});
await server.start();
console.log(JSON.stringify({ started: true }));
