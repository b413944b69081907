// Dapr's JavaScript SDK as every program here makes it: its server and client over
// HTTP, on loopback, logging errors only.
import { DaprClient, DaprServer, CommunicationProtocolEnum, LogLevel } from "@dapr/dapr";

// A DaprServer (HTTP) listening on `appPort`, its client talking to the sidecar at
// `daprPort`.
export const httpServer = (appPort, daprPort) =>
  new DaprServer({
    serverHost: "127.0.0.1",
    serverPort: appPort,
    communicationProtocol: CommunicationProtocolEnum.HTTP,
    clientOptions: { daprHost: "127.0.0.1", daprPort },
    logger: { level: LogLevel.Error },
  });

// A DaprClient (HTTP) talking to the sidecar at `daprPort`.
export const httpClient = (daprPort) =>
  new DaprClient({
    daprHost: "127.0.0.1",
    daprPort,
    communicationProtocol: CommunicationProtocolEnum.HTTP,
    logger: { level: LogLevel.Error },
  });

// The text of an error the SDK gave or threw, or null for none.
export const errorText = (error) => (error === undefined || error === null ? null : String(error.message ?? error));
