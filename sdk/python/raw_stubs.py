"""Drives serve over gRPC with Dapr's Python SDK's generated stubs only (no SDK client
class): a client that is not this project's. Usage: raw_stubs.py GRPC_PORT.

Proves, against pubsub "mem" topic "raw-py": a streaming subscription
(SubscribeTopicEventsAlpha1) opens with its initial response; PublishEvent and
BulkPublishEvent reach it with their data and content types, each event acknowledged
SUCCESS by its id; a bulk request with a duplicate entry id is refused
INVALID_ARGUMENT with rich details (google.rpc.Status, read by
grpc_status.rpc_status.from_call, which also checks they repeat the status's code and
message) holding an ErrorInfo DAPR_PUBSUB_MARSHAL_EVENTS, and delivers nothing;
GetMetadata lists the streaming subscription.

Prints one JSON object per step on stdout; on any failure, says what on stderr and
exits 1. Every wait is bounded.
Run by sidecar/tests/sdk_python.rs, in sdk/python/.venv (scripts/install.sh).
"""

import json
import queue
import sys
import threading

import grpc
from dapr.proto import api_service_v1, api_v1
from google.rpc import error_details_pb2
from grpc_status import rpc_status

PUBSUB = "mem"
TOPIC = "raw-py"
# The bound of each wait, in seconds.
WITHIN = 5.0
# How long the stream must stay quiet after the refused bulk request.
QUIET = 0.5
# The bound of the whole stream.
STREAM_DEADLINE = 30.0


class Failure(Exception):
    """What went wrong, for the message on exit."""


def step(name, **fields):
    print(json.dumps({"step": name, **fields}), flush=True)


def check(condition, message):
    if not condition:
        raise Failure(message)


class Subscription:
    """A SubscribeTopicEventsAlpha1 stream: the requests go from a queue (the initial
    request first, then acks), the responses are read by a thread into another queue,
    so that each wait for one is bounded."""

    _END = object()

    def __init__(self, stub):
        self._acks = queue.Queue()
        self._responses = queue.Queue()
        initial = api_v1.SubscribeTopicEventsRequestAlpha1(
            initial_request=api_v1.SubscribeTopicEventsRequestInitialAlpha1(
                pubsub_name=PUBSUB, topic=TOPIC
            )
        )
        self._call = stub.SubscribeTopicEventsAlpha1(
            self._requests(initial), timeout=STREAM_DEADLINE
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _requests(self, initial):
        yield initial
        while True:
            request = self._acks.get()
            if request is self._END:
                return
            yield request

    def _read(self):
        try:
            for response in self._call:
                self._responses.put(("response", response))
            self._responses.put(("end", None))
        except grpc.RpcError as error:
            self._responses.put(("error", error))

    def next(self, within=WITHIN):
        """The next response, or None if none came within `within` seconds."""
        try:
            kind, value = self._responses.get(timeout=within)
        except queue.Empty:
            return None
        if kind == "error":
            raise Failure(f"the stream failed: {value.code().name}: {value.details()}")
        if kind == "end":
            raise Failure("the stream ended")
        return value

    def ack(self, event_id):
        self._acks.put(
            api_v1.SubscribeTopicEventsRequestAlpha1(
                event_processed=api_v1.SubscribeTopicEventsRequestProcessedAlpha1(
                    id=event_id,
                    status=api_v1.TopicEventResponse(
                        status=api_v1.TopicEventResponse.SUCCESS
                    ),
                )
            )
        )

    def close(self):
        self._acks.put(self._END)
        self._call.cancel()


def entry(entry_id, event, content_type="text/plain"):
    return api_v1.BulkPublishRequestEntry(
        entry_id=entry_id, event=event, content_type=content_type
    )


def run(port):
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        grpc.channel_ready_future(channel).result(timeout=WITHIN)
    except grpc.FutureTimeoutError:
        raise Failure(f"no gRPC server answered on 127.0.0.1:{port} within {WITHIN} s")
    stub = api_service_v1.DaprStub(channel)
    subscription = Subscription(stub)
    try:
        # (a) The stream's first message is the initial response.
        first = subscription.next()
        check(first is not None, f"no initial response within {WITHIN} s")
        kind = first.WhichOneof("subscribe_topic_events_response_type")
        check(
            kind == "initial_response",
            f"the first message of the stream is {kind}, not initial_response",
        )
        step("subscribed", pubsub=PUBSUB, topic=TOPIC)

        # (b) One event.
        stub.PublishEvent(
            api_v1.PublishEventRequest(
                pubsub_name=PUBSUB,
                topic=TOPIC,
                data=b'{"n":1}',
                data_content_type="application/json",
            ),
            timeout=WITHIN,
        )
        step("published")

        # (c) Two in bulk.
        response = stub.BulkPublishEvent(
            api_v1.BulkPublishRequest(
                pubsub_name=PUBSUB,
                topic=TOPIC,
                entries=[entry("a", b"one"), entry("b", b"two")],
            ),
            timeout=WITHIN,
        )
        failed = [e.entry_id for e in response.failedEntries]
        check(not failed, f"the bulk publish failed entries {failed}")
        step("bulk_published", failed_entries=failed)

        # (d) The three events, each acknowledged SUCCESS by its id.
        for n in range(3):
            message = subscription.next()
            check(message is not None, f"event {n + 1} of 3 did not come within {WITHIN} s")
            kind = message.WhichOneof("subscribe_topic_events_response_type")
            check(kind == "event_message", f"expected an event_message, got {kind}")
            event = message.event_message
            check(event.id, "an event without an id")
            subscription.ack(event.id)
            step(
                "received",
                id=event.id,
                pubsub=event.pubsub_name,
                topic=event.topic,
                data=event.data.decode("utf-8", "backslashreplace"),
                content_type=event.data_content_type,
            )

        # (e) A duplicate entry id: the whole request is refused, with rich details.
        try:
            stub.BulkPublishEvent(
                api_v1.BulkPublishRequest(
                    pubsub_name=PUBSUB,
                    topic=TOPIC,
                    entries=[entry("x", b"first"), entry("x", b"second")],
                ),
                timeout=WITHIN,
            )
        except grpc.RpcError as error:
            refused = error
        else:
            raise Failure("a bulk request with a duplicate entry id was accepted")
        check(
            refused.code() == grpc.StatusCode.INVALID_ARGUMENT,
            f"the duplicate was refused {refused.code().name} ({refused.details()}), "
            "not INVALID_ARGUMENT",
        )
        try:
            status = rpc_status.from_call(refused)
        except ValueError as error:
            raise Failure(f"the error details do not match the status: {error}")
        check(status is not None, "the refusal carries no error details (grpc-status-details-bin)")
        infos = []
        resources = []
        for detail in status.details:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                infos.append({"reason": info.reason, "domain": info.domain})
            elif detail.Is(error_details_pb2.ResourceInfo.DESCRIPTOR):
                resource = error_details_pb2.ResourceInfo()
                detail.Unpack(resource)
                resources.append(
                    {"type": resource.resource_type, "name": resource.resource_name}
                )
        check(infos, f"the error details hold no ErrorInfo: {list(status.details)}")
        reason = infos[0]["reason"]
        check(
            reason == "DAPR_PUBSUB_MARSHAL_EVENTS",
            f"the ErrorInfo's reason is {reason}, not DAPR_PUBSUB_MARSHAL_EVENTS",
        )
        step(
            "duplicate",
            code=refused.code().name,
            message=refused.details(),
            reason=reason,
            domain=infos[0]["domain"],
            resources=resources,
        )

        # Nothing of the refused request reaches the stream.
        message = subscription.next(within=QUIET)
        check(
            message is None,
            f"something came after the refused bulk request: {message}",
        )
        step("quiet", seconds=QUIET)

        # (f) The metadata lists the stream.
        metadata = stub.GetMetadata(api_v1.GetMetadataRequest(), timeout=WITHIN)
        listed = [
            {
                "pubsub": s.pubsub_name,
                "topic": s.topic,
                "type": api_v1.PubsubSubscriptionType.Name(s.type),
            }
            for s in metadata.subscriptions
        ]
        expected = {"pubsub": PUBSUB, "topic": TOPIC, "type": "STREAMING"}
        check(expected in listed, f"the metadata does not list the stream: {listed}")
        step("metadata", subscriptions=listed)
    finally:
        subscription.close()
        channel.close()


def main():
    if len(sys.argv) != 2 or not sys.argv[1].isdigit():
        print("usage: raw_stubs.py GRPC_PORT", file=sys.stderr)
        sys.exit(1)
    try:
        run(int(sys.argv[1]))
    except Failure as failure:
        print(f"raw_stubs.py: {failure}", file=sys.stderr)
        sys.exit(1)
    except grpc.RpcError as error:
        print(
            f"raw_stubs.py: a call failed: {error.code().name}: {error.details()}",
            file=sys.stderr,
        )
        sys.exit(1)
    step("done")


if __name__ == "__main__":
    main()
