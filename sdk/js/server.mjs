// Dapr's JavaScript SDK as an app that subscribes: a DaprServer (HTTP) on APP_PORT,
// its client talking to the sidecar at DAPR_HTTP_PORT, subscribing as argv[2]
// (JSON) says, and printing one JSON line per message its handlers get:
// {"topic", "data", "status"}. Driven by sidecar/tests/sdk_js.rs.
//
// Each subscription: {"topic", "answer", "bulk"?, "deadLetterTopic"?, "metadata"?}
// where answer is "success", "retry-once" (RETRY the first time a data value is
// seen, then SUCCESS), "drop" or "throw" (the handler throws).
import { DaprPubSubStatusEnum } from "@dapr/dapr";
import { httpServer } from "./dapr.mjs";

const config = JSON.parse(process.argv[2]);
const server = httpServer(process.env.APP_PORT, process.env.DAPR_HTTP_PORT);

const seen = new Set();
const handlerFor = (subscription) => async (data) => {
  const key = JSON.stringify(data);
  let status = DaprPubSubStatusEnum.SUCCESS;
  if (subscription.answer === "drop") status = DaprPubSubStatusEnum.DROP;
  if (subscription.answer === "retry-once" && !seen.has(key)) {
    seen.add(key);
    status = DaprPubSubStatusEnum.RETRY;
  }
  console.log(JSON.stringify({ topic: subscription.topic, data, status: subscription.answer === "throw" ? "THROW" : status }));
  if (subscription.answer === "throw") throw new Error("the handler failed");
  return status;
};

for (const subscription of config.subscriptions) {
  if (subscription.bulk) {
    await server.pubsub.subscribeBulk(config.pubsub, subscription.topic, handlerFor(subscription), {
      maxMessagesCount: subscription.bulk.maxMessagesCount,
      maxAwaitDurationMs: subscription.bulk.maxAwaitDurationMs,
      metadata: subscription.metadata,
    });
  } else {
    await server.pubsub.subscribeWithOptions(config.pubsub, subscription.topic, {
      callback: handlerFor(subscription),
      deadLetterTopic: subscription.deadLetterTopic,
      metadata: subscription.metadata,
    });
  }
}
await server.start();
console.log(JSON.stringify({ started: true }));
