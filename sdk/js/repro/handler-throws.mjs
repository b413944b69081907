// Finding about @dapr/dapr 3.18.0: a subscription handler that throws acknowledges
// the message. The SDK catches the error, logs it and answers {"status":"SUCCESS"},
// so the message is never delivered again. Dapr's API reads a failed handler (any
// answer but a 2xx or 404) as RETRY; an app that cannot process a message has it
// redelivered, or dead-lettered once its retries are spent.
//
// Against serve (from the project root; serve waits 30 s for the app to start):
//   cargo run --release -- serve --components fixtures/memory-only --http-port 3500 --app-port 3000 &
//   (cd sdk/js && DAPR_HTTP_PORT=3500 APP_PORT=3000 node repro/handler-throws.mjs)
// where fixtures/memory-only holds a copy of fixtures/memory.yaml. Exits 1 while the
// defect is there.
import { appServer, sleep } from "./common.mjs";

const server = appServer();
let calls = 0;
await server.pubsub.subscribe("memory", "repro-throws", async () => {
  calls += 1;
  throw new Error("cannot process this message yet");
});
await server.start();
await server.client.pubsub.publish("memory", "repro-throws", { order: 1 });
await sleep(2000);
console.log(`handler calls in 2 s: ${calls} (documented: more than 1, the message is retried)`);
await server.stop();
process.exit(calls > 1 ? 0 : 1);
