//! `serve` over gRPC, on the in-memory component, driven by the generated client of
//! Dapr's Rust SDK (the pinned `dapr` crate): publish, bulk publish (both RPCs),
//! metadata and streaming subscriptions, and the status codes and error details of
//! bad input, which must change nothing.

use dapr::dapr::proto::runtime::v1 as runtime;
use dapr::dapr::proto::runtime::v1::dapr_client::DaprClient;
use dapr::dapr::proto::runtime::v1::subscribe_topic_events_request_alpha1::SubscribeTopicEventsRequestType as StreamRequest;
use dapr::dapr::proto::runtime::v1::subscribe_topic_events_response_alpha1::SubscribeTopicEventsResponseType as StreamResponse;
use dapr::dapr::proto::runtime::v1::topic_event_response::TopicEventResponseStatus;
use pubsub_sidecar::{ServeOptions, Sidecar};
use std::collections::HashMap;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::Code;
use tonic_types::StatusExt;

mod common;
use common::{memory_runtime, served_in_memory};

/// How long a test waits for what must come.
const WITHIN: Duration = Duration::from_secs(10);

/// How long a test waits to see that nothing comes again: the in-memory component's
/// declared redelivery bound (what comes again comes within it).
fn redelivery_bound() -> Duration {
    use pubsub_components::Component as _;
    pubsub_components::memory::MemoryComponent::default()
        .capabilities()
        .redelivery_bound
}

async fn start(token: Option<&str>) -> (Sidecar, DaprClient<Channel>) {
    let runtime = memory_runtime("test-app");
    let options = ServeOptions {
        grpc_listen: Some(([127, 0, 0, 1], 0).into()),
        app_id: "test-app".into(),
        api_token: token.map(str::to_string),
        max_body_bytes: 64 * 1024,
        ..Default::default()
    };
    let sidecar = Sidecar::start(served_in_memory(runtime), options)
        .await
        .unwrap();
    let address = sidecar.grpc_address().expect("gRPC is served");
    let client = DaprClient::connect(format!("http://{address}"))
        .await
        .unwrap();
    (sidecar, client)
}

/// A streaming subscription opened by the test: the acks it sends, the messages it
/// gets.
struct Stream {
    acks: mpsc::Sender<runtime::SubscribeTopicEventsRequestAlpha1>,
    events: tonic::Streaming<runtime::SubscribeTopicEventsResponseAlpha1>,
}

fn initial(pubsub: &str, topic: &str) -> runtime::SubscribeTopicEventsRequestAlpha1 {
    runtime::SubscribeTopicEventsRequestAlpha1 {
        subscribe_topic_events_request_type: Some(StreamRequest::InitialRequest(
            runtime::SubscribeTopicEventsRequestInitialAlpha1 {
                pubsub_name: pubsub.into(),
                topic: topic.into(),
                metadata: HashMap::new(),
                dead_letter_topic: None,
            },
        )),
    }
}

fn processed(
    id: &str,
    status: TopicEventResponseStatus,
) -> runtime::SubscribeTopicEventsRequestAlpha1 {
    runtime::SubscribeTopicEventsRequestAlpha1 {
        subscribe_topic_events_request_type: Some(StreamRequest::EventProcessed(
            runtime::SubscribeTopicEventsRequestProcessedAlpha1 {
                id: id.into(),
                status: Some(runtime::TopicEventResponse {
                    status: status as i32,
                }),
            },
        )),
    }
}

/// Opens a stream whose first message is `first`.
async fn open(
    client: &mut DaprClient<Channel>,
    first: runtime::SubscribeTopicEventsRequestAlpha1,
) -> Result<Stream, tonic::Status> {
    let (acks, requests) = mpsc::channel(16);
    acks.send(first).await.unwrap();
    let events = client
        .subscribe_topic_events_alpha1(ReceiverStream::new(requests))
        .await?
        .into_inner();
    Ok(Stream { acks, events })
}

/// Opens a stream on `topic` and reads its initial response.
async fn subscribe(client: &mut DaprClient<Channel>, topic: &str) -> Stream {
    let mut stream = open(client, initial("mem", topic)).await.unwrap();
    let first = stream.next().await.expect("the initial response");
    assert!(
        matches!(first, StreamResponse::InitialResponse(_)),
        "the first message of a stream is the initial response, not {first:?}"
    );
    stream
}

impl Stream {
    async fn next(&mut self) -> Option<StreamResponse> {
        tokio::time::timeout(WITHIN, self.events.message())
            .await
            .expect("a message within the bound")
            .unwrap()
            .and_then(|m| m.subscribe_topic_events_response_type)
    }

    /// The next event (bounded).
    async fn event(&mut self) -> runtime::TopicEventRequest {
        match self.next().await {
            Some(StreamResponse::EventMessage(event)) => event,
            other => panic!("expected an event, got {other:?}"),
        }
    }

    /// Whether an event comes within `window`.
    async fn quiet_for(&mut self, window: Duration) -> bool {
        tokio::time::timeout(window, self.events.message())
            .await
            .is_err()
    }

    async fn ack(&self, id: &str, status: TopicEventResponseStatus) {
        self.acks.send(processed(id, status)).await.unwrap();
    }
}

fn publish_request(topic: &str, data: &[u8]) -> runtime::PublishEventRequest {
    runtime::PublishEventRequest {
        pubsub_name: "mem".into(),
        topic: topic.into(),
        data: data.to_vec(),
        data_content_type: "application/json".into(),
        metadata: HashMap::new(),
    }
}

fn entry(id: &str, event: &[u8]) -> runtime::BulkPublishRequestEntry {
    runtime::BulkPublishRequestEntry {
        entry_id: id.into(),
        event: event.to_vec(),
        content_type: "text/plain".into(),
        metadata: HashMap::new(),
    }
}

/// A status as a test pins it: code, message, and the details daprd sends.
fn described(status: &tonic::Status) -> String {
    let details = status.get_error_details();
    let resource = details
        .resource_info()
        .map(|r| format!("ResourceInfo({}, '{}')", r.resource_type, r.resource_name))
        .unwrap_or_default();
    let info = details
        .error_info()
        .map(|e| format!("ErrorInfo({}, {})", e.reason, e.domain))
        .unwrap_or_default();
    format!(
        "{:?}: {} [{resource}{}{info}]",
        status.code(),
        status.message(),
        if resource.is_empty() { "" } else { " " }
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_published_event_reaches_a_streaming_subscription_as_its_cloud_event() {
    let (sidecar, mut client) = start(None).await;
    let mut stream = subscribe(&mut client, "orders").await;
    let mut request = publish_request("orders", br#"{"order": 1}"#);
    request.metadata.insert("note".into(), "kept".into());
    client.publish_event(request).await.unwrap();
    let event = stream.event().await;
    assert_eq!(event.topic, "orders");
    assert_eq!(event.pubsub_name, "mem");
    assert_eq!(event.data_content_type, "application/json");
    assert_eq!(event.data, br#"{"order": 1}"#, "the data as published");
    assert_eq!(event.spec_version, "1.0");
    assert_eq!(event.r#type, "com.dapr.event.sent");
    assert!(!event.id.is_empty());
    stream
        .ack(&event.id, TopicEventResponseStatus::Success)
        .await;
    assert!(
        stream.quiet_for(redelivery_bound()).await,
        "an acknowledged event does not come again"
    );

    // The metadata lists the stream.
    let metadata = client
        .get_metadata(runtime::GetMetadataRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(metadata.id, "test-app");
    assert_eq!(metadata.registered_components[0].name, "mem");
    let listed: Vec<(String, i32)> = metadata
        .subscriptions
        .iter()
        .map(|s| (s.topic.clone(), s.r#type))
        .collect();
    assert_eq!(
        listed,
        vec![(
            "orders".to_string(),
            runtime::PubsubSubscriptionType::Streaming as i32
        )]
    );
    drop(stream);
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_redelivers_and_an_ended_stream_hands_its_unacknowledged_event_on() {
    let (sidecar, mut client) = start(None).await;
    let mut first = subscribe(&mut client, "jobs").await;
    client
        .publish_event(publish_request("jobs", b"\"work\""))
        .await
        .unwrap();
    let event = first.event().await;
    first.ack(&event.id, TopicEventResponseStatus::Retry).await;
    let again = first.event().await;
    assert_eq!(again.id, event.id, "RETRY sends the event again");
    // An ack of an id awaiting none is ignored; the stream stays open.
    first
        .ack("no-such-id", TopicEventResponseStatus::Success)
        .await;
    // The stream ends without acknowledging: the event goes to the next stream.
    drop(first);
    let mut second = subscribe(&mut client, "jobs").await;
    let handed_on = second.event().await;
    assert_eq!(
        handed_on.id, event.id,
        "an event unanswered when its stream ends goes to the next stream"
    );
    second
        .ack(&handed_on.id, TopicEventResponseStatus::Success)
        .await;
    assert!(second.quiet_for(redelivery_bound()).await);
    drop(second);
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_publish_on_both_rpcs_delivers_every_entry() {
    let (sidecar, mut client) = start(None).await;
    let mut stream = subscribe(&mut client, "bulk").await;
    for alpha in [false, true] {
        let request = runtime::BulkPublishRequest {
            pubsub_name: "mem".into(),
            topic: "bulk".into(),
            entries: vec![entry("a", b"one"), entry("b", b"two")],
            metadata: HashMap::new(),
        };
        let response = match alpha {
            false => client.bulk_publish_event(request).await,
            // Deprecated in the proto, still called by the JavaScript SDK.
            #[allow(deprecated)]
            true => client.bulk_publish_event_alpha1(request).await,
        }
        .unwrap()
        .into_inner();
        assert!(response.failed_entries.is_empty());
        let mut got = Vec::new();
        for _ in 0..2 {
            let event = stream.event().await;
            stream
                .ack(&event.id, TopicEventResponseStatus::Success)
                .await;
            got.push(String::from_utf8(event.data).unwrap());
        }
        got.sort();
        assert_eq!(got, ["one", "two"], "alpha1: {alpha}");
    }
    drop(stream);
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_daprd_codes_and_details_and_publishes_nothing() {
    let (sidecar, mut client) = start(None).await;
    let mut stream = subscribe(&mut client, "t").await;
    let mut answers = Vec::new();
    let single = |pubsub: &str, topic: &str, metadata: &[(&str, &str)]| {
        let mut request = publish_request(topic, b"{}");
        request.pubsub_name = pubsub.into();
        request.metadata = metadata
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        request
    };
    for (what, request) in [
        ("empty pubsub", single("", "t", &[])),
        ("unknown pubsub", single("nope", "t", &[])),
        ("empty topic", single("mem", "", &[])),
        (
            "bad rawPayload",
            single("mem", "t", &[("rawPayload", "maybe")]),
        ),
        (
            "bad ttlInSeconds",
            single("mem", "t", &[("ttlInSeconds", "soon")]),
        ),
    ] {
        let error = client.publish_event(request).await.unwrap_err();
        answers.push(format!("publish, {what}: {}", described(&error)));
    }
    let bulk = |entries: Vec<runtime::BulkPublishRequestEntry>| runtime::BulkPublishRequest {
        pubsub_name: "mem".into(),
        topic: "t".into(),
        entries,
        metadata: HashMap::new(),
    };
    for (what, request) in [
        (
            "duplicate entry id",
            bulk(vec![entry("x", b"1"), entry("x", b"2")]),
        ),
        (
            "missing entry id",
            bulk(vec![entry("x", b"1"), entry("", b"2")]),
        ),
    ] {
        let error = client.bulk_publish_event(request).await.unwrap_err();
        answers.push(format!("bulk, {what}: {}", described(&error)));
    }
    let oversized = runtime::PublishEventRequest {
        data: vec![b'x'; 65 * 1024],
        ..publish_request("t", b"")
    };
    let error = client.publish_event(oversized).await.unwrap_err();
    answers.push(format!("publish, oversized: {:?}", error.code()));
    let error = client
        .get_state(runtime::GetStateRequest::default())
        .await
        .unwrap_err();
    answers.push(format!("get_state: {:?}", error.code()));
    insta::assert_snapshot!(answers.join("\n"));
    assert!(
        stream.quiet_for(redelivery_bound()).await,
        "a refused request publishes nothing"
    );
    drop(stream);
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_does_not_start_with_an_initial_request_is_refused() {
    let (sidecar, mut client) = start(None).await;
    let mut answers = Vec::new();
    for (what, first) in [
        (
            "an ack first",
            processed("x", TopicEventResponseStatus::Success),
        ),
        ("empty pubsub", initial("", "t")),
        ("unknown pubsub", initial("nope", "t")),
        ("empty topic", initial("mem", "")),
    ] {
        let error = match open(&mut client, first).await {
            Err(error) => error,
            Ok(mut stream) => stream.events.message().await.unwrap_err(),
        };
        answers.push(format!("{what}: {}", described(&error)));
    }
    // A second initial request ends the stream.
    let stream = subscribe(&mut client, "t").await;
    stream.acks.send(initial("mem", "t")).await.unwrap();
    let mut events = stream.events;
    let error = tokio::time::timeout(WITHIN, events.message())
        .await
        .unwrap()
        .unwrap_err();
    answers.push(format!("a second initial request: {}", described(&error)));
    insta::assert_snapshot!(answers.join("\n"));
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_token_is_required_where_set() {
    let (sidecar, mut client) = start(Some("secret")).await;
    let error = client
        .publish_event(publish_request("t", b"{}"))
        .await
        .unwrap_err();
    assert_eq!(error.code(), Code::Unauthenticated, "{error:?}");
    let mut request = tonic::Request::new(publish_request("t", b"{}"));
    request
        .metadata_mut()
        .insert("dapr-api-token", "secret".parse().unwrap());
    client.publish_event(request).await.unwrap();
    sidecar.stop().await;
}

/// A loopback proxy to `to` for one client connection at a time; aborting the task it
/// returns drops both sockets at once, as a client process that dies does: no
/// end of stream, no reset, the connection just goes.
async fn vanishing_proxy(
    to: std::net::SocketAddr,
) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut connections = tokio::task::JoinSet::new();
        loop {
            let Ok((mut client, _)) = listener.accept().await else {
                return;
            };
            connections.spawn(async move {
                let mut server = tokio::net::TcpStream::connect(to).await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
            });
        }
    });
    (address, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_vanishes_mid_stream_hands_its_unacknowledged_event_on() {
    let (sidecar, mut client) = start(None).await;
    let (through, proxy) = vanishing_proxy(sidecar.grpc_address().unwrap()).await;
    let mut vanishing = DaprClient::connect(format!("http://{through}"))
        .await
        .unwrap();
    let mut doomed = subscribe(&mut vanishing, "vanish").await;
    client
        .publish_event(publish_request("vanish", b"\"kept\""))
        .await
        .unwrap();
    let event = doomed.event().await;
    // The client's connection goes without a word: the stream neither ended nor reset.
    proxy.abort();
    let _ = proxy.await;
    let mut next = subscribe(&mut client, "vanish").await;
    let handed_on = next.event().await;
    assert_eq!(
        (handed_on.id.as_str(), handed_on.data.as_slice()),
        (event.id.as_str(), b"\"kept\"".as_slice()),
        "the event the vanished client held goes to the next stream"
    );
    next.ack(&handed_on.id, TopicEventResponseStatus::Success)
        .await;
    // Acknowledged twice: the second is for an id awaiting none, ignored; nothing
    // comes again and the stream stays open for what comes next.
    next.ack(&handed_on.id, TopicEventResponseStatus::Retry)
        .await;
    assert!(next.quiet_for(redelivery_bound()).await);
    client
        .publish_event(publish_request("vanish", b"\"after\""))
        .await
        .unwrap();
    let after = next.event().await;
    assert_eq!(after.data, b"\"after\"", "the stream still delivers");
    next.ack(&after.id, TopicEventResponseStatus::Success).await;
    drop(next);
    drop(doomed);
    sidecar.stop().await;
}
