"""Dapr's Python SDK as the publisher of a certification row: a long-running DaprClient
(gRPC) against the sidecar at DAPR_GRPC_PORT (its health probed on DAPR_HTTP_PORT, as
the SDK does) that publishes what the suite asks, one JSON request per stdin line, and
answers one JSON line per request on stdout with what the SDK returned. Requests run
concurrently, as an app's publishes do. Driven by sidecar/src/sdk.rs; the protocol is
sdk/js/publisher.mjs's:

{"id", "op": "publish", "pubsub", "topic", "jsonText"?: text, "base64"?: text,
 "contentType"?, "metadata"?}                  -> {"id", "error": null | {...}}
{"id", "op": "publishBulk", "pubsub", "topic", "messages": [{entryID, base64,
 contentType, metadata}], "metadata"?}         -> {"id", "failed": [{entryID, error}]}
                                                  or {"id", "error": {...}}

An error is {"text", "code" (the gRPC status code's name), "reason" (the ErrorInfo
reason, or "")}. A payload is handed to the SDK as an app author holds it: JSON as its
text (a str), anything else as bytes; each bulk entry as a BulkPublishEntry with its
entry id, content type and metadata.
"""

import base64
import json
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

from dapr.clients import BulkPublishEntry, DaprClient
from dapr.clients.exceptions import DaprGrpcError

# Publishes under way at once, as the suite's cases make them.
WORKERS = 64

_print_lock = threading.Lock()


def answer(line):
    text = json.dumps(line)
    with _print_lock:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()


def error_of(e):
    if isinstance(e, DaprGrpcError):
        reason = e.error_code()
        return {
            "text": e.details() or str(e),
            "code": e.code().name,
            "reason": "" if reason == "UNKNOWN" else reason,
        }
    return {"text": f"the SDK raised {type(e).__name__}: {e}", "code": "", "reason": ""}


def publish(client, request):
    if "jsonText" in request:
        data = request["jsonText"]
    else:
        data = base64.b64decode(request.get("base64") or "")
    client.publish_event(
        pubsub_name=request["pubsub"],
        topic_name=request["topic"],
        data=data,
        publish_metadata=request.get("metadata") or {},
        data_content_type=request.get("contentType"),
    )
    return {"id": request["id"], "error": None}


def publish_bulk(client, request):
    entries = [
        BulkPublishEntry(
            event=base64.b64decode(message["base64"]),
            metadata=message.get("metadata") or None,
            content_type=message.get("contentType"),
            entry_id=message["entryID"],
        )
        for message in request["messages"]
    ]
    response = client.publish_events(
        pubsub_name=request["pubsub"],
        topic_name=request["topic"],
        data=entries,
        publish_metadata=request.get("metadata") or {},
    )
    failed = [{"entryID": f.entry_id, "error": f.error} for f in response.failed_entries]
    return {"id": request["id"], "failed": failed}


def run(client, request):
    try:
        if request["op"] == "publish":
            answer(publish(client, request))
        elif request["op"] == "publishBulk":
            answer(publish_bulk(client, request))
        else:
            answer({"id": request["id"], "error": {"text": f"unknown op {request['op']}", "code": "", "reason": ""}})
    except Exception as e:  # every failure is the SDK's answer to the request
        answer({"id": request["id"], "error": error_of(e)})


def main():
    client = DaprClient()
    pool = ThreadPoolExecutor(max_workers=WORKERS)
    answer({"ready": True})
    for line in sys.stdin:
        if line.strip():
            pool.submit(run, client, json.loads(line))
    pool.shutdown(wait=True)


if __name__ == "__main__":
    main()
