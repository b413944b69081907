// What the reproductions share, none of it the defect they show: the SDK's server and
// client as an app makes them, on the ports of the environment; a stand-in sidecar
// for the client; publishing with Dapr's HTTP API itself; waiting.
import http from "node:http";
import { httpClient, httpServer } from "../dapr.mjs";

const appPort = process.env.APP_PORT ?? "3000";
const daprPort = process.env.DAPR_HTTP_PORT ?? "3500";

// The app's DaprServer on APP_PORT, its client talking to the sidecar at DAPR_HTTP_PORT.
export const appServer = () => httpServer(appPort, daprPort);

// A DaprClient talking to the sidecar at DAPR_HTTP_PORT.
export const sidecarClient = () => httpClient(daprPort);

// A stand-in sidecar on a free loopback port: it hands `onPublish` each publish
// request and its body (a Buffer) and answers it 204, answers the SDK's metadata
// request `{}` and anything else 200. Gives it and a DaprClient talking to it.
export async function standInSidecar(onPublish) {
  const sidecar = http.createServer((req, res) => {
    const chunks = [];
    req.on("data", (chunk) => chunks.push(chunk));
    req.on("end", () => {
      if (req.url.startsWith("/v1.0/publish/")) onPublish(req, Buffer.concat(chunks));
      res.statusCode = req.url.startsWith("/v1.0/publish/") ? 204 : 200;
      res.end(req.url.startsWith("/v1.0/metadata") ? "{}" : undefined);
    });
  });
  await new Promise((resolve) => sidecar.listen(0, "127.0.0.1", resolve));
  return { sidecar, client: httpClient(String(sidecar.address().port)) };
}

// Publishes `body` to `topic` of pub/sub memory with the HTTP API of the sidecar at
// DAPR_HTTP_PORT (not through the SDK), each of `metadata` as a `metadata.` query
// parameter.
export const publishWithHttpApi = (topic, contentType, body, metadata = {}) => {
  const query = Object.entries(metadata)
    .map(([key, value]) => `metadata.${key}=${encodeURIComponent(value)}`)
    .join("&");
  return fetch(`http://127.0.0.1:${daprPort}/v1.0/publish/memory/${topic}${query ? `?${query}` : ""}`, {
    method: "POST",
    headers: { "Content-Type": contentType },
    body,
  });
};

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// A handler's first call: `deliver` takes its value; `within(ms)` gives it, or
// undefined when there was none within `ms`.
export function firstCall() {
  let deliver;
  const delivered = new Promise((resolve) => (deliver = resolve));
  return { deliver, within: (ms) => Promise.race([delivered, sleep(ms)]) };
}
