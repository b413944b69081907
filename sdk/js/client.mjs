// Dapr's JavaScript SDK as an app that publishes: runs the steps given as JSON in
// argv[2] through DaprClient (HTTP) against the sidecar at DAPR_HTTP_PORT, and prints
// one JSON line per step with what the SDK answered. Driven by
// sidecar/tests/sdk_js.rs; each step is what an app author writes.
import { errorText, httpClient } from "./dapr.mjs";

const steps = JSON.parse(process.argv[2]);
const client = httpClient(process.env.DAPR_HTTP_PORT);

for (const step of steps) {
  if (step.op === "publish") {
    const options = {};
    if (step.contentType) options.contentType = step.contentType;
    if (step.metadata) options.metadata = step.metadata;
    const answer = await client.pubsub.publish(step.pubsub, step.topic, step.data, options);
    console.log(JSON.stringify({ op: step.op, error: errorText(answer.error) }));
  } else if (step.op === "publishBulk") {
    const answer = await client.pubsub.publishBulk(step.pubsub, step.topic, step.messages, step.metadata);
    const failed = answer.failedMessages.map((f) => ({
      entryID: f.message.entryID,
      error: errorText(f.error),
    }));
    console.log(JSON.stringify({ op: step.op, failed }));
  } else {
    throw new Error(`unknown step ${step.op}`);
  }
}
await client.stop();
