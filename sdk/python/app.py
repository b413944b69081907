"""Dapr's Python SDK as the app of a certification row: a dapr.ext.grpc.App (gRPC) on a
port of its own subscribing as argv[1] (JSON) says, with one handler that hands each message
it gets (a SubscriptionMessage: the CloudEvent's fields, the data and the call's
metadata) to the suite's relay, and returns the status the relay gives back (or
raises, when the case's handler failed). Driven by sidecar/src/sdk_app.rs; prints
{"started": true, "port": N} once its server listens.

argv[1]: {"pubsub", "topic", "deadLetterTopic"?, "metadata"?, "relay": URL,
          "warmUp": URL}

The message goes to the relay as the TopicEventRequest the handler's
SubscriptionMessage holds (protobuf, base64), beside the metadata it carries:
{"request": base64, "metadata": {name: value}} -> {"status": "SUCCESS"|"RETRY"|"DROP"}
or {"throw": text}.
"""

import base64
import json
import sys
import urllib.request

from dapr.clients.grpc._response import TopicEventResponse
from dapr.ext.grpc import App, SubscriptionMessage
from dapr.proto.runtime.v1 import appcallback_pb2
from google.protobuf import struct_pb2

config = json.loads(sys.argv[1])
app = App()


def as_request(message: SubscriptionMessage) -> bytes:
    extensions = struct_pb2.Struct()
    extensions.update(message.extensions())
    return appcallback_pb2.TopicEventRequest(
        id=message.id(),
        source=message.source(),
        type=message.type(),
        spec_version=message.spec_version(),
        data_content_type=message.data_content_type(),
        data=message.raw_data(),
        topic=message.topic(),
        pubsub_name=message.pubsub_name(),
        extensions=extensions,
    ).SerializeToString()


@app.subscribe(
    config["pubsub"],
    config["topic"],
    metadata=config.get("metadata") or {},
    dead_letter_topic=config.get("deadLetterTopic") or None,
)
def handler(message: SubscriptionMessage) -> TopicEventResponse:
    body = json.dumps(
        {
            "request": base64.b64encode(as_request(message)).decode(),
            "metadata": message.metadata(),
        }
    ).encode()
    asked = urllib.request.Request(
        config["relay"], data=body, headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(asked, timeout=60) as answer:
        said = json.loads(answer.read())
    if "throw" in said:
        raise RuntimeError(said["throw"])
    return TopicEventResponse(said["status"].lower())


# One request to the relay before the first event, so that the first delivery does
# not also pay for loading urllib's HTTP client (the cases time deliveries).
with urllib.request.urlopen(config["warmUp"], timeout=60) as warm:
    warm.read()
# The App's gRPC server, through its public hook for adding services, so that it
# listens on a port the system picks (App.run takes a port chosen beforehand, which
# another process may take first); the port is told to the suite with "started".
servers = []
app.add_external_service(lambda _, server: servers.append(server), None)
port = servers[0].add_insecure_port("127.0.0.1:0")
servers[0].start()
print(json.dumps({"started": True, "port": port}), flush=True)
servers[0].wait_for_termination()
