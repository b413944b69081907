//! The suite's side of the app channel: an app that declares one subscription in
//! its `GET /dapr/subscribe` answer, receives what a sidecar delivers (single
//! CloudEvents and bulk bodies), turns each into the runtime's [`Event`] for a case's
//! handler, and answers with the handler's statuses in the documented bodies.

use crate::wire::{AppSubscription, BulkDelivery, BulkSubscribe};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use pubsub_components::runtime::controls::keys;
use pubsub_components::runtime::{envelope, Batch, BatchEntry, Event, Handler, Subscription};
use pubsub_components::{MessageId, Metadata, TopicSelector};
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

/// The route the app declares for its one subscription.
pub const ROUTE: &str = "/pcs/deliver";

/// Headers of an HTTP request (or a gRPC call, as an SDK's app hands them over) that
/// are the transport's, not the message's metadata.
const TRANSPORT_HEADERS: [&str; 16] = [
    "host",
    "content-type",
    "content-length",
    "user-agent",
    "accept",
    "accept-encoding",
    "connection",
    "traceparent",
    "tracestate",
    "transfer-encoding",
    "dapr-api-token",
    "grpc-trace-bin",
    "te",
    "grpc-timeout",
    "grpc-accept-encoding",
    "grpc-encoding",
];

/// Metadata keys the contract names: a header of the same name in any case is the
/// key (HTTP header names are case-insensitive, and daprd sends them lowercased).
const CONTRACT_KEYS: [&str; 7] = [
    keys::ORIGINAL_TOPIC,
    keys::DEAD_LETTER_REASON,
    keys::PARTITION_KEY,
    keys::TTL_IN_SECONDS,
    keys::DELIVER_AT,
    keys::DELIVER_AFTER,
    keys::RAW_PAYLOAD,
];

/// The metadata key a header carries: a contract key in its own spelling, any
/// other name as it came.
fn metadata_key(header: &str) -> String {
    CONTRACT_KEYS
        .iter()
        .find(|key| key.eq_ignore_ascii_case(header))
        .map_or_else(|| header.to_string(), |key| key.to_string())
}

/// The metadata a delivery's headers carry: every header that is not the
/// transport's, contract keys in their own spelling.
pub(crate) fn metadata_from_headers<'a>(
    headers: impl Iterator<Item = (&'a str, &'a str)>,
) -> Metadata {
    headers
        .filter(|(name, _)| !TRANSPORT_HEADERS.contains(&name.to_ascii_lowercase().as_str()))
        .map(|(name, value)| (metadata_key(name), value.to_string()))
        .collect()
}

/// The subscription `subscription` spelled as Dapr's programmatic subscription to
/// pub/sub `pubsub`: retries and delays as metadata, `bulkSubscribe` for a bulk
/// handler. Errors name what the HTTP API cannot express.
pub fn declaration(
    pubsub: &str,
    subscription: &Subscription,
    bulk: bool,
) -> Result<AppSubscription, String> {
    let TopicSelector::Single(topic) = &subscription.topics else {
        return Err(format!(
            "a subscription to {} (several topics) is not part of Dapr's API (HTTP or gRPC)",
            subscription.topics.describe()
        ));
    };
    let mut metadata = BTreeMap::new();
    metadata.insert(
        "maxDeliveries".to_string(),
        subscription.max_deliveries.to_string(),
    );
    metadata.insert(
        "retryDelay".to_string(),
        format!("{}ms", subscription.retry_delay.as_millis()),
    );
    if let Some(delay) = subscription.receiver_delay {
        metadata.insert(
            "receiverDelay".to_string(),
            format!("{}ms", delay.as_millis()),
        );
    }
    let bulk_subscribe = bulk.then(|| {
        let options = subscription.bulk.unwrap_or_default();
        BulkSubscribe {
            enabled: true,
            max_messages_count: Some(options.max_messages_count as u32),
            max_await_duration_ms: Some(options.max_await_duration.as_millis() as u64),
        }
    });
    Ok(AppSubscription {
        pubsub_name: pubsub.to_string(),
        topic: topic.clone(),
        route: Some(ROUTE.to_string()),
        routes: None,
        metadata,
        dead_letter_topic: subscription.dead_letter_topic.clone(),
        bulk_subscribe,
    })
}

/// A running app: its address, and a signal once a sidecar has read its
/// subscriptions.
pub struct SubscriberApp {
    address: SocketAddr,
    discovered: Arc<Notify>,
    asked: Arc<std::sync::atomic::AtomicBool>,
    stop: watch::Sender<bool>,
    server: JoinHandle<()>,
}

pub(crate) struct AppState {
    declared: Vec<AppSubscription>,
    handler: Option<Handler>,
    discovered: Arc<Notify>,
    asked: Arc<std::sync::atomic::AtomicBool>,
    deliveries: Deliveries,
}

/// What an app reads its deliveries into: each CloudEvent an event of the runtime,
/// its attempt counted by the app (neither of Dapr's APIs carries one) and its
/// position numbered.
#[derive(Default)]
pub(crate) struct Deliveries {
    /// Deliveries seen per CloudEvent id.
    attempts: Mutex<HashMap<String, u32>>,
    positions: AtomicU64,
}

impl SubscriberApp {
    /// Starts an app on a free loopback port declaring `declared` (none: an app that
    /// only publishes) and handing what it receives to `handler`.
    pub async fn start(
        declared: Vec<AppSubscription>,
        handler: Option<Handler>,
    ) -> anyhow::Result<SubscriberApp> {
        let (listener, address) = listen_for_deliveries().await?;
        let state = Arc::new(AppState::new(declared, handler));
        let discovered = state.discovered.clone();
        let asked = state.asked.clone();
        let router = Router::new()
            .route("/dapr/subscribe", get(subscriptions))
            .route("/dapr/config", get(config))
            .route(ROUTE, post(deliver))
            .with_state(state);
        let (stop, server) = crate::server::spawn(listener, router, "the suite's app server");
        Ok(SubscriberApp {
            address,
            discovered,
            asked,
            stop,
            server,
        })
    }

    /// The app's port.
    pub fn port(&self) -> u16 {
        self.address.port()
    }

    /// An app of the suite's already serving on `address`: `asked` is set and
    /// `discovered` notified once a sidecar has read its subscriptions, and its server
    /// ends once `stop` says true (an app over HTTP, or over gRPC:
    /// [`crate::grpc_subscriber`]).
    pub(crate) fn running(
        address: SocketAddr,
        discovered: Arc<Notify>,
        asked: Arc<std::sync::atomic::AtomicBool>,
        stop: watch::Sender<bool>,
        server: JoinHandle<()>,
    ) -> SubscriberApp {
        SubscriberApp {
            address,
            discovered,
            asked,
            stop,
            server,
        }
    }

    /// Waits until a sidecar has read the subscriptions (`GET /dapr/subscribe`, or
    /// `ListTopicSubscriptions` over gRPC).
    pub async fn discovered(&self) {
        let notified = self.discovered.notified();
        if self.asked.load(Ordering::SeqCst) {
            return;
        }
        notified.await;
    }

    /// Stops the app (deliveries under way are answered first).
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.server.await;
    }
}

/// The shared app's subscriptions, by route number.
pub(crate) type RouteTable = Arc<Mutex<HashMap<u64, Arc<AppState>>>>;

/// The router of the shared app over HTTP ([`crate::shared_app::SharedApp`]): no
/// subscriptions of its own, each route's deliveries at `/pcs/<n>/deliver`.
pub(crate) fn shared_router(routes: RouteTable) -> Router {
    Router::new()
        .route(
            "/dapr/subscribe",
            get(|| async { Json(Vec::<AppSubscription>::new()) }),
        )
        .route("/dapr/config", get(config))
        .route("/pcs/{route}/deliver", post(deliver_to_route))
        .with_state(routes)
}

/// What one route of the shared app over HTTP hands to `handler`.
pub(crate) fn route_state(handler: Option<Handler>) -> Arc<AppState> {
    Arc::new(AppState::new(Vec::new(), handler))
}

async fn deliver_to_route(
    State(routes): State<RouteTable>,
    axum::extract::Path(route): axum::extract::Path<u64>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let state = routes
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&route)
        .cloned();
    match state {
        Some(state) => deliver(State(state), headers, body).await,
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("no subscription at route {route} now"),
        )
            .into_response(),
    }
}

async fn subscriptions(State(state): State<Arc<AppState>>) -> Json<Vec<AppSubscription>> {
    state.asked.store(true, Ordering::SeqCst);
    state.discovered.notify_waiters();
    Json(state.declared.clone())
}

/// An app without configuration (daprd asks; 404 is "none").
async fn config() -> StatusCode {
    StatusCode::NOT_FOUND
}

async fn deliver(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Bytes) -> Response {
    match &state.handler {
        Some(Handler::Single(handler)) => {
            let event = match state.event(&headers, &body) {
                Ok(event) => event,
                // Neither SUCCESS nor DROP: a delivery the app cannot read is retried.
                Err(why) => return (StatusCode::BAD_REQUEST, why).into_response(),
            };
            match handler.handle(event).await {
                Ok(status) => Json(serde_json::json!({ "status": status })).into_response(),
                Err(why) => (StatusCode::INTERNAL_SERVER_ERROR, why).into_response(),
            }
        }
        Some(Handler::Bulk(handler)) => {
            let batch = match state.batch(&body) {
                Ok(batch) => batch,
                Err(why) => return (StatusCode::BAD_REQUEST, why).into_response(),
            };
            match handler.handle(batch).await {
                Ok(statuses) => Json(serde_json::json!({ "statuses": statuses })).into_response(),
                Err(why) => (StatusCode::INTERNAL_SERVER_ERROR, why).into_response(),
            }
        }
        // An app that only declares (to create a group): not now, deliver it again.
        None => StatusCode::SERVICE_UNAVAILABLE.into_response(),
    }
}

impl AppState {
    fn new(declared: Vec<AppSubscription>, handler: Option<Handler>) -> AppState {
        AppState {
            declared,
            handler,
            discovered: Arc::new(Notify::new()),
            asked: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            deliveries: Deliveries::default(),
        }
    }

    /// A single delivery: its CloudEvent, metadata from the headers daprd adds.
    fn event(&self, headers: &HeaderMap, body: &[u8]) -> Result<Event, String> {
        let metadata = metadata_from_headers(headers.iter().filter_map(|(name, value)| {
            Some((name.as_str(), std::str::from_utf8(value.as_bytes()).ok()?))
        }));
        let trace_header = headers
            .get("traceparent")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let mut event = self.deliveries.decode(body, metadata)?;
        event.trace_parent = event.trace_parent.or(trace_header);
        Ok(event)
    }

    /// A bulk delivery: each entry's CloudEvent (or raw payload), with its metadata.
    fn batch(&self, body: &[u8]) -> Result<Batch, String> {
        let delivery: BulkDelivery = serde_json::from_slice(body)
            .map_err(|e| format!("the bulk delivery is not the documented body: {e}"))?;
        let mut entries = Vec::with_capacity(delivery.entries.len());
        for entry in delivery.entries {
            let metadata: Metadata = entry.metadata.into_iter().collect();
            let event = match serde_json::from_str::<String>(entry.event.get()) {
                Ok(encoded) => {
                    let data = base64::engine::general_purpose::STANDARD
                        .decode(encoded)
                        .map_err(|e| {
                            format!("entry {}: raw event is not base64: {e}", entry.entry_id)
                        })?;
                    self.deliveries.raw(
                        &delivery.topic,
                        data,
                        Some(entry.content_type.clone()),
                        metadata,
                    )
                }
                Err(_) => self
                    .deliveries
                    .decode(entry.event.get().as_bytes(), metadata)?,
            };
            entries.push(BatchEntry {
                entry_id: entry.entry_id,
                event,
            });
        }
        Ok(Batch {
            id: delivery.id,
            topic: delivery.topic,
            entries,
        })
    }
}

impl Deliveries {
    /// A CloudEvent body as an event; `data_base64` of a raw payload wrapped by the
    /// sidecar (`application/octet-stream`) is the raw payload.
    pub(crate) fn decode(&self, body: &[u8], metadata: Metadata) -> Result<Event, String> {
        let decoded =
            envelope::decode(body).map_err(|e| format!("the delivery is not a CloudEvent: {e}"))?;
        let text = |name: &str| {
            decoded
                .envelope
                .get(name)
                .and_then(serde_json::Value::as_str)
                .map(str::to_string)
        };
        let topic = text("topic").unwrap_or_default();
        let id = decoded.id.clone().unwrap_or_default();
        let published_at = text("time")
            .and_then(|t| pubsub_components::runtime::controls::parse_time(&t))
            .unwrap_or_else(SystemTime::now);
        Ok(Event {
            attempt: self.attempt(&id),
            message_id: MessageId::new(
                topic.clone(),
                None,
                self.positions.fetch_add(1, Ordering::Relaxed),
            ),
            id,
            topic,
            data: decoded.data,
            content_type: decoded.content_type,
            metadata,
            trace_parent: text("traceparent"),
            cloud_event: Some(decoded.envelope),
            published_at,
        })
    }

    pub(crate) fn raw(
        &self,
        topic: &str,
        data: Vec<u8>,
        content_type: Option<String>,
        metadata: Metadata,
    ) -> Event {
        let position = self.positions.fetch_add(1, Ordering::Relaxed);
        let id = format!("{topic}@{position}");
        Event {
            attempt: 1,
            message_id: MessageId::new(topic.to_string(), None, position),
            id,
            topic: topic.to_string(),
            data,
            content_type,
            metadata,
            trace_parent: None,
            cloud_event: None,
            published_at: SystemTime::now(),
        }
    }

    /// The attempt of a delivery of CloudEvent `id`, as this app counts them.
    fn attempt(&self, id: &str) -> u32 {
        let mut attempts = self.attempts.lock().unwrap_or_else(|p| p.into_inner());
        let count = attempts.entry(id.to_string()).or_insert(0);
        *count += 1;
        *count
    }
}

/// A listener on a free loopback port for the sidecar's deliveries to an app, and its
/// address.
pub(crate) async fn listen_for_deliveries() -> anyhow::Result<(tokio::net::TcpListener, SocketAddr)>
{
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen for the sidecar's deliveries: {e}"))?;
    let address = listener.local_addr()?;
    Ok((listener, address))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pubsub_components::runtime::BulkSubscribeOptions;
    use std::time::Duration;

    #[test]
    fn contract_keys_keep_their_spelling_over_http() {
        assert_eq!(metadata_key("originaltopic"), "originalTopic");
        assert_eq!(metadata_key("deadletterreason"), "deadLetterReason");
        assert_eq!(metadata_key("pcs-key"), "pcs-key");
    }

    #[test]
    fn a_subscription_is_declared_as_dapr_spells_it() {
        let mut subscription = Subscription::new("orders", "g");
        subscription.max_deliveries = 3;
        subscription.retry_delay = Duration::from_millis(250);
        subscription.receiver_delay = Some(Duration::from_secs(2));
        subscription.dead_letter_topic = Some("dlq".into());
        subscription.bulk = Some(BulkSubscribeOptions {
            max_messages_count: 10,
            max_await_duration: Duration::from_millis(500),
        });
        let declared = declaration("ps", &subscription, true).unwrap();
        assert_eq!(declared.route.as_deref(), Some(ROUTE));
        assert_eq!(declared.metadata["maxDeliveries"], "3");
        assert_eq!(declared.metadata["retryDelay"], "250ms");
        assert_eq!(declared.metadata["receiverDelay"], "2000ms");
        assert_eq!(declared.dead_letter_topic.as_deref(), Some("dlq"));
        let bulk = declared.bulk_subscribe.unwrap();
        assert_eq!(bulk.max_messages_count, Some(10));
        assert_eq!(bulk.max_await_duration_ms, Some(500));
        let several =
            Subscription::selecting(TopicSelector::List(vec!["a".into(), "b".into()]), "g");
        let refused = declaration("ps", &several, false).unwrap_err();
        assert!(refused.contains("not part of Dapr's API"), "{refused}");
    }
}
