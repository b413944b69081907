//! `serve` delivering to an app over gRPC (`--app-protocol grpc`), the app served in
//! the test with the generated server traits of the pinned `dapr` crate: its
//! subscriptions read from `ListTopicSubscriptions`, events delivered by
//! `OnTopicEvent` with the message's metadata as call metadata, and the app's
//! answers and errors mapped as daprd maps them; batches by `OnBulkTopicEvent`,
//! falling back to `OnBulkTopicEventAlpha1`.

use dapr::dapr::proto::common::v1 as dapr_common;
use dapr::dapr::proto::runtime::v1 as runtime;
use dapr::dapr::proto::runtime::v1::app_callback_alpha_server::{
    AppCallbackAlpha, AppCallbackAlphaServer,
};
use dapr::dapr::proto::runtime::v1::app_callback_server::{AppCallback, AppCallbackServer};
use dapr::dapr::proto::runtime::v1::topic_event_response::TopicEventResponseStatus as Answer;
use pubsub_components::runtime::{PublishRequest, Runtime};
use pubsub_sidecar::grpc::app::GrpcAppChannel;
use pubsub_sidecar::{ServeOptions, Sidecar};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tonic::{Request, Response, Status};

mod common;
use common::{memory_runtime, served_in_memory};

/// What the test app received: the events, and each batch's callback and entries' data.
#[derive(Default)]
struct Received {
    events: Vec<Delivered>,
    batches: Vec<(String, Vec<String>)>,
}

/// One event as the app got it.
struct Delivered {
    topic: String,
    data: Vec<u8>,
    path: String,
    /// The call's metadata.
    headers: HashMap<String, String>,
}

/// How the test app answers an event of a topic: a status, or an error.
type Script = fn(topic: &str, data: &[u8], seen_before: usize) -> Result<Answer, Status>;

#[derive(Clone)]
struct TestApp {
    subscriptions: Vec<runtime::TopicSubscription>,
    received: Arc<Mutex<Received>>,
    script: Script,
    /// Whether the stable bulk callback answers Unimplemented (Alpha1 only).
    alpha_only: bool,
}

#[tonic::async_trait]
impl AppCallback for TestApp {
    async fn on_invoke(
        &self,
        _: Request<dapr_common::InvokeRequest>,
    ) -> Result<Response<dapr_common::InvokeResponse>, Status> {
        Err(Status::unimplemented("no invocation"))
    }

    async fn list_topic_subscriptions(
        &self,
        _: Request<()>,
    ) -> Result<Response<runtime::ListTopicSubscriptionsResponse>, Status> {
        Ok(Response::new(runtime::ListTopicSubscriptionsResponse {
            subscriptions: self.subscriptions.clone(),
        }))
    }

    async fn on_topic_event(
        &self,
        request: Request<runtime::TopicEventRequest>,
    ) -> Result<Response<runtime::TopicEventResponse>, Status> {
        let headers: HashMap<String, String> = request
            .metadata()
            .clone()
            .into_headers()
            .iter()
            .filter_map(|(k, v)| {
                Some((
                    k.to_string(),
                    String::from_utf8(v.as_bytes().to_vec()).ok()?,
                ))
            })
            .collect();
        let event = request.into_inner();
        let seen = {
            let mut received = self.received.lock().unwrap();
            let seen = received
                .events
                .iter()
                .filter(|e| e.topic == event.topic && e.data == event.data)
                .count();
            received.events.push(Delivered {
                topic: event.topic.clone(),
                data: event.data.clone(),
                path: event.path.clone(),
                headers,
            });
            seen
        };
        let status = (self.script)(&event.topic, &event.data, seen)?;
        Ok(Response::new(runtime::TopicEventResponse {
            status: status as i32,
        }))
    }

    async fn list_input_bindings(
        &self,
        _: Request<()>,
    ) -> Result<Response<runtime::ListInputBindingsResponse>, Status> {
        Ok(Response::new(Default::default()))
    }

    async fn on_binding_event(
        &self,
        _: Request<runtime::BindingEventRequest>,
    ) -> Result<Response<runtime::BindingEventResponse>, Status> {
        Err(Status::unimplemented("no bindings"))
    }

    async fn on_bulk_topic_event(
        &self,
        request: Request<runtime::TopicEventBulkRequest>,
    ) -> Result<Response<runtime::TopicEventBulkResponse>, Status> {
        if self.alpha_only {
            return Err(Status::unimplemented("only the Alpha1 bulk callback"));
        }
        Ok(Response::new(self.bulk("stable", request.into_inner())))
    }

    async fn on_job_event(
        &self,
        _: Request<runtime::JobEventRequest>,
    ) -> Result<Response<runtime::JobEventResponse>, Status> {
        Err(Status::unimplemented("no jobs"))
    }
}

#[tonic::async_trait]
impl AppCallbackAlpha for TestApp {
    async fn on_bulk_topic_event_alpha1(
        &self,
        request: Request<runtime::TopicEventBulkRequest>,
    ) -> Result<Response<runtime::TopicEventBulkResponse>, Status> {
        Ok(Response::new(self.bulk("alpha1", request.into_inner())))
    }

    async fn on_job_event_alpha1(
        &self,
        _: Request<runtime::JobEventRequest>,
    ) -> Result<Response<runtime::JobEventResponse>, Status> {
        Err(Status::unimplemented("no jobs"))
    }
}

impl TestApp {
    /// Records a batch; answers SUCCESS for every entry but the last, which gets no
    /// status the first time it comes (RETRY, as daprd reads a missing status).
    fn bulk(
        &self,
        rpc: &str,
        batch: runtime::TopicEventBulkRequest,
    ) -> runtime::TopicEventBulkResponse {
        let ids: Vec<String> = batch.entries.iter().map(|e| e.entry_id.clone()).collect();
        let data: Vec<String> = batch
            .entries
            .iter()
            .map(|e| match &e.event {
                Some(runtime::topic_event_bulk_request_entry::Event::CloudEvent(ce)) => {
                    String::from_utf8_lossy(&ce.data).into_owned()
                }
                other => format!("{other:?}"),
            })
            .collect();
        let first_time = {
            let mut received = self.received.lock().unwrap();
            let first = received.batches.is_empty();
            received.batches.push((rpc.to_string(), data));
            first
        };
        let answered = if first_time {
            &ids[..ids.len() - 1]
        } else {
            &ids[..]
        };
        runtime::TopicEventBulkResponse {
            statuses: answered
                .iter()
                .map(|id| runtime::TopicEventBulkResponseEntry {
                    entry_id: id.clone(),
                    status: Answer::Success as i32,
                })
                .collect(),
        }
    }

    fn received(&self) -> std::sync::MutexGuard<'_, Received> {
        self.received.lock().unwrap()
    }

    /// Waits (bounded) until `done` holds of what was received.
    async fn wait_for(&self, done: impl Fn(&Received) -> bool) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if done(&self.received()) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }
}

fn subscription(topic: &str, metadata: &[(&str, &str)]) -> runtime::TopicSubscription {
    runtime::TopicSubscription {
        pubsub_name: "mem".into(),
        topic: topic.into(),
        metadata: metadata
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        routes: Some(runtime::TopicRoutes {
            rules: Vec::new(),
            default: format!("/{topic}"),
        }),
        dead_letter_topic: String::new(),
        bulk_subscribe: None,
    }
}

/// Serves `app` on a free port, then starts serve delivering to it.
async fn start(app: TestApp) -> (Sidecar, Runtime) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let server = tonic::transport::Server::builder()
        .add_service(AppCallbackServer::new(app.clone()))
        .add_service(AppCallbackAlphaServer::new(app));
    tokio::spawn(async move {
        server
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
            .await
            .unwrap()
    });
    let runtime = memory_runtime("grpc-app");
    let options = ServeOptions {
        grpc_app: Some(
            GrpcAppChannel::new(format!("http://{address}"), Duration::from_secs(5)).unwrap(),
        ),
        app_id: "grpc-app".into(),
        ..Default::default()
    };
    let sidecar = Sidecar::start(served_in_memory(runtime.clone()), options)
        .await
        .unwrap();
    (sidecar, runtime)
}

fn app(subscriptions: Vec<runtime::TopicSubscription>, script: Script) -> TestApp {
    TestApp {
        subscriptions,
        received: Arc::default(),
        script,
        alpha_only: false,
    }
}

async fn publish(runtime: &Runtime, topic: &str, data: &[u8], metadata: &[(&str, &str)]) {
    let mut request = PublishRequest::new(topic, data.to_vec()).with_content_type("text/plain");
    for (k, v) in metadata {
        request.metadata.insert(k.to_string(), v.to_string());
    }
    runtime.publish(request).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_reach_the_app_with_their_metadata_and_its_answers_count() {
    let script: Script = |topic, data, seen| match (topic, data, seen) {
        // RETRY once, then SUCCESS.
        ("orders", b"retry-once", 0) => Ok(Answer::Retry),
        // An error other than Unimplemented: delivered again.
        ("orders", b"fails-once", 0) => Err(Status::internal("the handler broke")),
        // Unimplemented: settled, never again, not dead-lettered.
        ("orders", b"unhandled", _) => Err(Status::unimplemented("not mine")),
        // DROP: dead-lettered.
        ("orders", b"dropped", _) => Ok(Answer::Drop),
        _ => Ok(Answer::Success),
    };
    let mut orders = subscription("orders", &[("maxDeliveries", "5")]);
    orders.dead_letter_topic = "dlq".into();
    let test_app = app(vec![orders, subscription("dlq", &[])], script);
    let (sidecar, runtime) = start(test_app.clone()).await;
    assert_eq!(
        sidecar.subscriptions().len(),
        2,
        "the listed subscriptions are served"
    );
    publish(
        &runtime,
        "orders",
        b"plain",
        &[("note", "kept"), ("Mixed-Case", "v"), ("label", "✓ utf-8")],
    )
    .await;
    publish(&runtime, "orders", b"retry-once", &[]).await;
    publish(&runtime, "orders", b"fails-once", &[]).await;
    publish(&runtime, "orders", b"unhandled", &[]).await;
    publish(&runtime, "orders", b"dropped", &[]).await;
    // Told apart by route: a dead-lettered event's CloudEvent names its original topic.
    let count = |r: &Received, data: &[u8]| {
        r.events
            .iter()
            .filter(|e| e.path == "/orders" && e.data == data)
            .count()
    };
    let dead = |r: &Received, data: &[u8]| {
        r.events
            .iter()
            .filter(|e| e.path == "/dlq" && e.data == data)
            .count()
    };
    assert!(
        test_app
            .wait_for(|r| count(r, b"plain") == 1
                && count(r, b"retry-once") == 2
                && count(r, b"fails-once") == 2
                && count(r, b"unhandled") == 1
                && dead(r, b"dropped") == 1)
            .await,
        "RETRY and an error deliver again; SUCCESS and Unimplemented settle; DROP dead-letters"
    );
    // Nothing more may come: what comes again comes within the declared redelivery
    // bound (there is no event for a delivery that never happens).
    tokio::time::sleep(runtime.capabilities().redelivery_bound).await;
    {
        let received = test_app.received();
        assert_eq!(
            count(&received, b"unhandled"),
            1,
            "an Unimplemented answer settles the event"
        );
        assert_eq!(count(&received, b"retry-once"), 2);
        assert_eq!(
            dead(&received, b"unhandled"),
            0,
            "an Unimplemented answer is not a DROP: nothing is dead-lettered"
        );
        let plain = received.events.iter().find(|e| e.data == b"plain").unwrap();
        let (path, headers) = (&plain.path, &plain.headers);
        assert_eq!(path, "/orders", "the route's path");
        assert_eq!(headers.get("note").map(String::as_str), Some("kept"));
        assert_eq!(
            headers.get("mixed-case").map(String::as_str),
            Some("v"),
            "metadata keys lowercased, as gRPC metadata keys are"
        );
        assert_eq!(
            headers.get("label").map(String::as_str),
            Some("✓ utf-8"),
            "values the bytes they are, as over HTTP"
        );
    }
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_fall_back_to_alpha1_and_an_entry_without_a_status_comes_again() {
    let mut bulk = subscription("bulk", &[]);
    bulk.bulk_subscribe = Some(runtime::BulkSubscribeConfig {
        enabled: true,
        max_messages_count: 3,
        max_await_duration_ms: 200,
    });
    let mut test_app = app(vec![bulk], |_, _, _| Ok(Answer::Success));
    test_app.alpha_only = true;
    let (sidecar, runtime) = start(test_app.clone()).await;
    for data in [b"a", b"b", b"c"] {
        publish(&runtime, "bulk", data, &[]).await;
    }
    assert!(
        test_app
            .wait_for(|r| r.batches.iter().map(|b| b.1.len()).sum::<usize>() >= 4)
            .await,
        "the entry left without a status comes again"
    );
    // Nothing more may come: what comes again comes within the declared redelivery
    // bound (there is no event for a delivery that never happens).
    tokio::time::sleep(runtime.capabilities().redelivery_bound).await;
    {
        let received = test_app.received();
        assert!(
            received.batches.iter().all(|(rpc, _)| rpc == "alpha1"),
            "an app without the stable callback gets the Alpha1 one: {:?}",
            received.batches
        );
        assert!(received.batches[0].1.len() <= 3, "maxMessagesCount holds");
        // Only the entry left without a status comes again, once.
        let unanswered = received.batches[0].1.last().unwrap().clone();
        let mut later: Vec<&String> = received.batches[1..].iter().flat_map(|b| &b.1).collect();
        let mut all: Vec<&String> = received.batches[0].1.iter().collect();
        later.sort();
        all.append(&mut later.clone());
        all.sort();
        all.dedup();
        assert_eq!(
            later,
            vec![&unanswered],
            "the unanswered entry, and only it, comes again: {:?}",
            received.batches
        );
        assert_eq!(all.len(), 3, "every entry came: {:?}", received.batches);
    }
    sidecar.stop().await;
}

/// What daprd does that an app's SDK relies on: a subscription listed with empty
/// routes (as Dapr's Python SDK lists them) or none is delivered with the empty path
/// (the app routes by pub/sub and topic); a dead-lettered event comes with the topic it
/// was received on, the dead-letter topic, in the call (an app routing by topic finds
/// its dead-letter handler); a metadata name gRPC cannot carry is left out rather than
/// failing the whole call (grpcio refuses such a call).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_topics_and_metadata_names_are_sent_as_grpc_apps_read_them() {
    let mut orders = subscription("orders", &[]);
    orders.routes = Some(runtime::TopicRoutes {
        rules: Vec::new(),
        default: String::new(),
    });
    orders.dead_letter_topic = "dlq".into();
    let mut dlq = subscription("dlq", &[]);
    dlq.routes = None;
    let script: Script = |topic, _, _| match topic {
        "orders" => Ok(Answer::Drop),
        _ => Ok(Answer::Success),
    };
    let test_app = app(vec![orders, dlq], script);
    let (sidecar, runtime) = start(test_app.clone()).await;
    publish(
        &runtime,
        "orders",
        b"unwanted",
        &[("app-17%20", "not a gRPC name"), ("app-ok", "carried")],
    )
    .await;
    assert!(
        test_app.wait_for(|r| r.events.len() >= 2).await,
        "the event, then its dead letter"
    );
    {
        let received = test_app.received();
        let (first, dead) = (&received.events[0], &received.events[1]);
        assert_eq!((first.topic.as_str(), first.path.as_str()), ("orders", ""));
        assert_eq!(
            (dead.topic.as_str(), dead.path.as_str()),
            ("dlq", ""),
            "the dead letter comes on the dead-letter topic"
        );
        assert_eq!(
            first.headers.get("app-ok").map(String::as_str),
            Some("carried")
        );
        assert!(
            !first.headers.contains_key("app-17%20"),
            "a name gRPC cannot carry is left out: {:?}",
            first.headers
        );
    }
    sidecar.stop().await;
}
