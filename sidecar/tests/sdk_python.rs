//! `serve` over gRPC driven by a client that is not this project's: the generated
//! stubs of Dapr's Python SDK (`dapr[grpc]`, pinned in sdk/python/requirements.txt and
//! installed into sdk/python/.venv by scripts/install.sh), used directly by
//! sdk/python/raw_stubs.py. A streaming subscription gets what PublishEvent and
//! BulkPublishEvent publish, with data and content types; a bulk request with a
//! duplicate entry id is refused INVALID_ARGUMENT with an ErrorInfo the Python side
//! decodes, and publishes nothing; GetMetadata lists the stream.

use dapr::dapr::proto::runtime::v1 as runtime;
use dapr::dapr::proto::runtime::v1::dapr_client::DaprClient;
use dapr::dapr::proto::runtime::v1::subscribe_topic_events_request_alpha1::SubscribeTopicEventsRequestType as StreamRequest;
use dapr::dapr::proto::runtime::v1::subscribe_topic_events_response_alpha1::SubscribeTopicEventsResponseType as StreamResponse;
use pubsub_sidecar::{ServeOptions, Sidecar};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;
use tokio_stream::wrappers::ReceiverStream;

mod common;
use common::{memory_runtime, served_in_memory};

/// The topic raw_stubs.py uses, on pub/sub `mem`.
const TOPIC: &str = "raw-py";

fn sdk_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../sdk/python");
    assert!(
        dir.join(".venv/bin/python").exists(),
        "Dapr's Python SDK is not installed in {}: run ./scripts/install.sh (it makes .venv there)",
        dir.join(".venv").display()
    );
    dir
}

/// Runs raw_stubs.py against the gRPC port; gives the JSON line printed per step.
async fn run_raw_stubs(port: u16) -> Vec<Value> {
    let dir = sdk_dir();
    let output = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new(dir.join(".venv/bin/python"))
            .arg(dir.join("raw_stubs.py"))
            .arg(port.to_string())
            .current_dir(&dir)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("raw_stubs.py finished within 60 s")
    .expect("the venv's python runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "raw_stubs.py failed ({}): {}\n{stdout}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect()
}

/// The lines of `step`.
fn steps<'a>(lines: &'a [Value], step: &str) -> Vec<&'a Value> {
    lines.iter().filter(|line| line["step"] == step).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdks_generated_stubs_publish_subscribe_and_read_error_details() {
    let runtime = memory_runtime("test-app");
    let options = ServeOptions {
        grpc_listen: Some(([127, 0, 0, 1], 0).into()),
        app_id: "test-app".into(),
        ..Default::default()
    };
    let sidecar = Sidecar::start(served_in_memory(runtime), options)
        .await
        .unwrap();
    let address = sidecar.grpc_address().expect("gRPC is served");

    let lines = run_raw_stubs(address.port()).await;
    let order: Vec<&str> = lines
        .iter()
        .map(|line| line["step"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        order,
        [
            "subscribed",
            "published",
            "bulk_published",
            "received",
            "received",
            "received",
            "duplicate",
            "quiet",
            "metadata",
            "done"
        ],
        "{lines:#?}"
    );

    // The three events, with their data and content types, each once.
    let mut received: Vec<(String, String)> = steps(&lines, "received")
        .iter()
        .map(|event| {
            assert_eq!(event["pubsub"], "mem", "{event}");
            assert_eq!(event["topic"], TOPIC, "{event}");
            (
                event["data"].as_str().unwrap().to_string(),
                event["content_type"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    received.sort();
    let mut expected = [
        (r#"{"n":1}"#, "application/json"),
        ("one", "text/plain"),
        ("two", "text/plain"),
    ]
    .map(|(data, content_type)| (data.to_string(), content_type.to_string()));
    expected.sort();
    assert_eq!(received, expected, "{lines:#?}");
    let mut ids: Vec<&str> = steps(&lines, "received")
        .iter()
        .map(|event| event["id"].as_str().unwrap())
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 3, "each event has its own id: {lines:#?}");

    // The duplicate entry id: refused as daprd does, the details read by Python.
    let duplicate = steps(&lines, "duplicate")[0];
    assert_eq!(duplicate["code"], "INVALID_ARGUMENT", "{duplicate}");
    assert_eq!(
        duplicate["reason"], "DAPR_PUBSUB_MARSHAL_EVENTS",
        "{duplicate}"
    );
    assert_eq!(duplicate["domain"], "dapr.io", "{duplicate}");
    assert_eq!(
        duplicate["resources"],
        json!([{"type": "pubsub", "name": "mem"}]),
        "{duplicate}"
    );

    // The metadata listed the stream.
    let metadata = steps(&lines, "metadata")[0];
    assert_eq!(
        metadata["subscriptions"],
        json!([{"pubsub": "mem", "topic": TOPIC, "type": "STREAMING"}]),
        "{metadata}"
    );

    // After the script: nothing of the refused bulk request was published (and the
    // three acknowledged events are not handed on): a new stream on the topic gets
    // nothing.
    let mut client = DaprClient::connect(format!("http://{address}"))
        .await
        .unwrap();
    let (requests, receiver) = tokio::sync::mpsc::channel(1);
    requests
        .send(runtime::SubscribeTopicEventsRequestAlpha1 {
            subscribe_topic_events_request_type: Some(StreamRequest::InitialRequest(
                runtime::SubscribeTopicEventsRequestInitialAlpha1 {
                    pubsub_name: "mem".into(),
                    topic: TOPIC.into(),
                    ..Default::default()
                },
            )),
        })
        .await
        .unwrap();
    let mut events = client
        .subscribe_topic_events_alpha1(ReceiverStream::new(receiver))
        .await
        .unwrap()
        .into_inner();
    let first = tokio::time::timeout(Duration::from_secs(10), events.message())
        .await
        .expect("the initial response within 10 s")
        .unwrap()
        .and_then(|m| m.subscribe_topic_events_response_type);
    assert!(
        matches!(first, Some(StreamResponse::InitialResponse(_))),
        "the first message of a stream is the initial response, not {first:?}"
    );
    let next = tokio::time::timeout(Duration::from_millis(500), events.message()).await;
    assert!(
        next.is_err(),
        "nothing is to come after the script, yet the stream got {next:?}"
    );
    drop(requests);
    drop(events);
    sidecar.stop().await;
}
