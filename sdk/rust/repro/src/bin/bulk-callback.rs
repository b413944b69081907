//! Dapr's Rust SDK (crate `dapr` 0.20.0): its gRPC app, `AppCallbackService`, cannot
//! take a bulk delivery.
//!
//! Dapr's API has the sidecar deliver a bulk subscription's batch to a gRPC app with
//! `OnBulkTopicEvent` (falling back to `OnBulkTopicEventAlpha1` when the app answers
//! `Unimplemented`), and the app answer one status per entry; an app that does not
//! take bulk deliveries answers `Unimplemented`. The SDK's app has a handler for the
//! topic, yet both calls end in `todo!("on_bulk_topic_event is not implemented yet")`:
//! the call's task panics, the sidecar sees the stream reset (neither statuses nor
//! `Unimplemented`), and retries the batch until it is dead-lettered or dropped. The
//! handler is never called.
//!
//! Run: `cargo run -p dapr-rust-sdk-repro --bin bulk-callback`. Exits 1 while the
//! defect is there, 0 once the app answers each call with statuses or
//! `Unimplemented`.

use dapr::appcallback::{AppCallbackService, Handler, HandlerMethod};
use dapr::dapr::proto::runtime::v1 as runtime;
use runtime::app_callback_alpha_client::AppCallbackAlphaClient;
use runtime::app_callback_alpha_server::AppCallbackAlphaServer;
use runtime::app_callback_client::AppCallbackClient;
use runtime::app_callback_server::AppCallbackServer;
use runtime::topic_event_bulk_request_entry::Event;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tonic::{Code, Response, Status};

/// The app's handler for topic `orders`: counts its calls, answers SUCCESS.
struct Orders(Arc<AtomicUsize>);

#[tonic::async_trait]
impl HandlerMethod for Orders {
    async fn handler(
        &self,
        _event: runtime::TopicEventRequest,
    ) -> Result<Response<runtime::TopicEventResponse>, Status> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(Response::new(runtime::TopicEventResponse::default()))
    }
}

/// A service of the SDK's app with the `orders` handler, its calls counted in `calls`.
fn app(calls: &Arc<AtomicUsize>) -> AppCallbackService {
    let mut app = AppCallbackService::new();
    app.add_handler(Handler {
        pub_sub_name: "pubsub".into(),
        topic: "orders".into(),
        handler: Box::new(Orders(calls.clone())),
    });
    app
}

/// The batch a sidecar delivers for two events of `orders`.
fn batch() -> runtime::TopicEventBulkRequest {
    let entry = |id: &str| runtime::TopicEventBulkRequestEntry {
        entry_id: id.into(),
        event: Some(Event::Bytes(br#"{"order":1}"#.to_vec())),
        content_type: "application/json".into(),
        ..Default::default()
    };
    runtime::TopicEventBulkRequest {
        id: "batch-1".into(),
        entries: vec![entry("e1"), entry("e2")],
        topic: "orders".into(),
        pubsub_name: "pubsub".into(),
        r#type: "com.dapr.event.sent.bulk".into(),
        path: "/orders".into(),
        ..Default::default()
    }
}

/// What the app's answer means to the sidecar: `None` where Dapr's API allows it
/// (a status per entry, or `Unimplemented`), else what went wrong.
fn judged(
    call: &str,
    answer: Result<Response<runtime::TopicEventBulkResponse>, Status>,
) -> Option<String> {
    match answer {
        Ok(answer) => {
            let statuses = answer.into_inner().statuses;
            println!("{call}: answered {} statuses", statuses.len());
            (statuses.len() != 2)
                .then(|| format!("{call}: {} statuses for 2 entries", statuses.len()))
        }
        Err(status) if status.code() == Code::Unimplemented => {
            println!("{call}: Unimplemented (the sidecar falls back or settles the entries)");
            None
        }
        Err(status) => Some(format!(
            "{call} failed with {:?}: {} (neither statuses nor Unimplemented)",
            status.code(),
            status.message()
        )),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let calls = Arc::new(AtomicUsize::new(0));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    // Served as an app is: the stable and the Alpha callbacks, from the SDK's service.
    let server = tonic::transport::Server::builder()
        .add_service(AppCallbackServer::new(app(&calls)))
        .add_service(AppCallbackAlphaServer::new(app(&calls)))
        .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener));
    tokio::spawn(server);

    let channel = tonic::transport::Endpoint::from_shared(format!("http://{address}"))?
        .connect()
        .await?;
    let mut problems = Vec::new();
    // One event first: the app and its handler work.
    let single = AppCallbackClient::new(channel.clone())
        .on_topic_event(runtime::TopicEventRequest {
            id: "single-1".into(),
            topic: "orders".into(),
            pubsub_name: "pubsub".into(),
            data: br#"{"order":0}"#.to_vec(),
            data_content_type: "application/json".into(),
            ..Default::default()
        })
        .await;
    println!(
        "OnTopicEvent: {:?}",
        single.as_ref().map(|a| a.get_ref().status)
    );
    let stable = AppCallbackClient::new(channel.clone())
        .on_bulk_topic_event(batch())
        .await;
    problems.extend(judged("OnBulkTopicEvent", stable));
    #[allow(deprecated)] // the fallback daprd makes
    let alpha = AppCallbackAlphaClient::new(channel)
        .on_bulk_topic_event_alpha1(batch())
        .await;
    problems.extend(judged("OnBulkTopicEventAlpha1", alpha));
    println!(
        "handler calls: {} (1 single event and 4 bulk entries delivered)",
        calls.load(Ordering::SeqCst)
    );
    if problems.is_empty() {
        println!("the SDK's app answers bulk deliveries as Dapr's API has it");
        return Ok(());
    }
    for problem in &problems {
        println!("DEFECT: {problem}");
    }
    std::process::exit(1);
}
