//! `serve` delivering over gRPC to an app that misbehaves: one that hangs in a call,
//! one whose call ends in a reset connection (its handler crashed), and one that
//! answers garbage instead of a response. Each failed call is a failed delivery:
//! the event comes again, counts toward `maxDeliveries`, and ends in the dead-letter
//! topic when it never succeeds; nothing is lost, nothing settled by mistake.

use async_trait::async_trait;
use dapr::dapr::proto::common::v1 as dapr_common;
use dapr::dapr::proto::runtime::v1 as runtime;
use dapr::dapr::proto::runtime::v1::app_callback_server::{AppCallback, AppCallbackServer};
use dapr::dapr::proto::runtime::v1::topic_event_response::TopicEventResponseStatus as Answer;
use pubsub_components::runtime::{
    Event, Handler, MessageHandler, PublishRequest, Runtime, Status as RuntimeStatus, Subscription,
};
use pubsub_sidecar::grpc::app::GrpcAppChannel;
use pubsub_sidecar::{ServeOptions, Sidecar};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tonic::{Request, Response, Status};

mod common;
use common::{memory_runtime, served_in_memory};

/// How long serve waits for the app to answer a call: a hanging call fails after it.
const APP_TIMEOUT: Duration = Duration::from_secs(1);

/// How long a test waits for what must come.
const WITHIN: Duration = Duration::from_secs(15);

/// An app over gRPC whose first call for a topic misbehaves as the topic says
/// (`hangs`: never answers; `resets`: its handler panics, so the connection goes), and
/// whose later calls answer SUCCESS.
#[derive(Clone, Default)]
struct BadApp {
    subscriptions: Vec<runtime::TopicSubscription>,
    /// The calls made per topic, and the data of each.
    calls: Arc<Mutex<HashMap<String, Vec<Vec<u8>>>>>,
    called: Arc<Notify>,
}

impl BadApp {
    /// Waits (bounded) until `topic` has had `count` calls; the calls made.
    async fn calls_of(&self, topic: &str, count: usize) -> Vec<Vec<u8>> {
        let waited = tokio::time::timeout(WITHIN, async {
            loop {
                let called = self.called.notified();
                if self.made(topic).len() >= count {
                    return;
                }
                called.await;
            }
        })
        .await;
        let made = self.made(topic);
        assert!(
            waited.is_ok(),
            "{count} calls for {topic} within {WITHIN:?}: {made:?}"
        );
        made
    }

    fn made(&self, topic: &str) -> Vec<Vec<u8>> {
        self.calls
            .lock()
            .unwrap()
            .get(topic)
            .cloned()
            .unwrap_or_default()
    }
}

#[tonic::async_trait]
impl AppCallback for BadApp {
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
        let event = request.into_inner();
        let first = {
            let mut calls = self.calls.lock().unwrap();
            let made = calls.entry(event.topic.clone()).or_default();
            made.push(event.data.clone());
            made.len() == 1
        };
        self.called.notify_waiters();
        if first {
            match event.topic.as_str() {
                "hangs" => std::future::pending::<()>().await,
                "resets" => panic!("the app's handler crashed (on purpose: the test's bad app)"),
                _ => {}
            }
        }
        Ok(Response::new(runtime::TopicEventResponse {
            status: Answer::Success as i32,
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
        _: Request<runtime::TopicEventBulkRequest>,
    ) -> Result<Response<runtime::TopicEventBulkResponse>, Status> {
        Err(Status::unimplemented("no bulk"))
    }

    async fn on_job_event(
        &self,
        _: Request<runtime::JobEventRequest>,
    ) -> Result<Response<runtime::JobEventResponse>, Status> {
        Err(Status::unimplemented("no jobs"))
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

/// Serves `routes` as the app on a free port, then starts serve delivering to it.
async fn start(routes: tonic::service::Routes) -> (Sidecar, Runtime) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_routes(routes)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
            .await
            .unwrap()
    });
    let runtime = memory_runtime("bad-app");
    let options = ServeOptions {
        grpc_app: Some(GrpcAppChannel::new(format!("http://{address}"), APP_TIMEOUT).unwrap()),
        app_id: "bad-app".into(),
        ..Default::default()
    };
    let sidecar = Sidecar::start(served_in_memory(runtime.clone()), options)
        .await
        .unwrap();
    (sidecar, runtime)
}

async fn publish(runtime: &Runtime, topic: &str, data: &[u8]) {
    runtime
        .publish(PublishRequest::new(topic, data.to_vec()).with_content_type("text/plain"))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_hangs_or_resets_is_a_failed_delivery_and_comes_again() {
    let app = BadApp {
        subscriptions: vec![subscription("hangs", &[]), subscription("resets", &[])],
        ..Default::default()
    };
    let (sidecar, runtime) = start(tonic::service::Routes::new(AppCallbackServer::new(
        app.clone(),
    )))
    .await;
    publish(&runtime, "hangs", b"patient").await;
    publish(&runtime, "resets", b"sturdy").await;
    for (topic, data) in [("hangs", &b"patient"[..]), ("resets", &b"sturdy"[..])] {
        let calls = app.calls_of(topic, 2).await;
        assert_eq!(
            calls,
            [data.to_vec(), data.to_vec()],
            "{topic}: the event comes again after the failed call"
        );
    }
    // Answered SUCCESS the second time: settled, not delivered again (what comes
    // again comes within the declared redelivery bound).
    tokio::time::sleep(runtime.capabilities().redelivery_bound + APP_TIMEOUT).await;
    for topic in ["hangs", "resets"] {
        assert_eq!(app.made(topic).len(), 2, "{topic}: settled by the SUCCESS");
    }
    sidecar.stop().await;
}

/// Records what reaches the dead-letter topic.
#[derive(Default)]
struct DeadLetters {
    seen: Mutex<Vec<Vec<u8>>>,
    arrived: Notify,
}

#[async_trait]
impl MessageHandler for DeadLetters {
    async fn handle(&self, event: Event) -> Result<RuntimeStatus, String> {
        self.seen.lock().unwrap().push(event.data);
        self.arrived.notify_waiters();
        Ok(RuntimeStatus::Success)
    }
}

/// What a garbage answer is made of: a gRPC frame whose message is no protobuf (a
/// field with wire type 7, which does not exist).
const GARBAGE: [u8; 8] = [0, 0, 0, 0, 3, 0xff, 0xff, 0xff];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_answers_are_failed_deliveries_until_the_event_is_dead_lettered() {
    let mut garbage = subscription("garbage", &[("maxDeliveries", "3")]);
    garbage.dead_letter_topic = "garbage-dlq".into();
    let app = BadApp {
        subscriptions: vec![garbage],
        ..Default::default()
    };
    // The app lists its subscription properly, and answers every event with garbage:
    // once as bytes that are no message, once as a page that is not gRPC at all.
    let answered = Arc::new(AtomicUsize::new(0));
    let counted = answered.clone();
    let router = tonic::service::Routes::new(AppCallbackServer::new(app))
        .into_axum_router()
        .route(
            "/dapr.proto.runtime.v1.AppCallback/OnTopicEvent",
            axum::routing::post(move || {
                let n = counted.fetch_add(1, Ordering::SeqCst);
                async move {
                    match n % 2 {
                        0 => ([("content-type", "application/grpc")], GARBAGE.to_vec()),
                        _ => (
                            [("content-type", "text/html")],
                            b"<html>500 not a gRPC answer</html>".to_vec(),
                        ),
                    }
                }
            }),
        );
    let (sidecar, runtime) = start(tonic::service::Routes::from(router)).await;
    let dead = Arc::new(DeadLetters::default());
    let _dlq = runtime
        .subscribe(
            Subscription::new("garbage-dlq", "dlq-reader"),
            Handler::Single(dead.clone()),
        )
        .await
        .unwrap();
    publish(&runtime, "garbage", b"unlucky").await;
    let arrived = tokio::time::timeout(WITHIN, async {
        loop {
            let arrived = dead.arrived.notified();
            if !dead.seen.lock().unwrap().is_empty() {
                return;
            }
            arrived.await;
        }
    })
    .await;
    assert!(
        arrived.is_ok(),
        "the event is dead-lettered after its garbage answers ({} calls)",
        answered.load(Ordering::SeqCst)
    );
    assert_eq!(*dead.seen.lock().unwrap(), [b"unlucky".to_vec()]);
    assert_eq!(
        answered.load(Ordering::SeqCst),
        3,
        "each garbage answer is one failed delivery of the three maxDeliveries allows"
    );
    sidecar.stop().await;
}
