//! The suite's app over gRPC (a sidecar's `--app-protocol grpc`): it lists one
//! subscription in `ListTopicSubscriptions`, receives what a sidecar delivers
//! (`OnTopicEvent`, `OnBulkTopicEvent`), turns each event into the runtime's
//! [`Event`] for a case's handler, metadata read from the call's metadata as daprd
//! sends it, and answers with the handler's statuses.

use crate::subscriber::{metadata_from_headers, Deliveries, SubscriberApp};
use crate::wire::AppSubscription;
use dapr::dapr::proto::common::v1 as common;
use dapr::dapr::proto::runtime::v1 as runtime;
use dapr::dapr::proto::runtime::v1::app_callback_server::{AppCallback, AppCallbackServer};
use dapr::dapr::proto::runtime::v1::topic_event_response::TopicEventResponseStatus;
use pubsub_components::runtime::{Batch, BatchEntry, Event, Handler, Status};
use pubsub_components::Metadata;
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{watch, Notify};
use tonic::{Request, Response, Status as GrpcStatus};

/// Headers of a gRPC call that are the transport's, not the message's metadata.
const GRPC_HEADERS: [&str; 4] = [
    "te",
    "grpc-timeout",
    "grpc-accept-encoding",
    "grpc-encoding",
];

pub(crate) struct AppState {
    declared: Vec<AppSubscription>,
    handler: Option<Handler>,
    discovered: Arc<Notify>,
    asked: Arc<AtomicBool>,
    deliveries: Deliveries,
}

/// Starts an app on a free loopback port listing `declared` and handing what it
/// receives to `handler` (none: every event is answered RETRY, an app that only
/// creates its group).
pub async fn start(
    declared: Vec<AppSubscription>,
    handler: Option<Handler>,
) -> anyhow::Result<SubscriberApp> {
    let (listener, address) = crate::subscriber::listen_for_deliveries().await?;
    let discovered = Arc::new(Notify::new());
    let asked = Arc::new(AtomicBool::new(false));
    let state = AppState {
        declared,
        handler,
        discovered: discovered.clone(),
        asked: asked.clone(),
        deliveries: Deliveries::default(),
    };
    let (stop, stopped) = watch::channel(false);
    let server = crate::server::spawn_grpc(
        listener,
        tonic::service::Routes::new(AppCallbackServer::new(state)),
        stopped,
    );
    Ok(SubscriberApp::running(
        address, discovered, asked, stop, server,
    ))
}

/// The shared app's subscriptions over gRPC, by the path of their route
/// ([`crate::shared_app::SharedApp`]).
pub(crate) type RouteTable = Arc<Mutex<HashMap<String, Arc<AppState>>>>;

/// What one route of the shared app hands to `handler` (none: every event is
/// answered RETRY).
pub(crate) fn route_state(handler: Option<Handler>) -> Arc<AppState> {
    Arc::new(AppState {
        declared: Vec::new(),
        handler,
        discovered: Arc::default(),
        asked: Arc::default(),
        deliveries: Deliveries::default(),
    })
}

/// Serves the shared app over gRPC on `listener` until `stopped` says true: it lists
/// no subscription (they are declared to the sidecar as resources), and each event
/// goes to the route its call's `path` names; an event for a route not served (any
/// more) is answered RETRY, a batch `Unavailable`, to come again.
pub(crate) fn serve_shared(
    listener: tokio::net::TcpListener,
    stopped: watch::Receiver<bool>,
) -> (RouteTable, tokio::task::JoinHandle<()>) {
    let routes: RouteTable = Arc::default();
    let server = crate::server::spawn_grpc(
        listener,
        tonic::service::Routes::new(AppCallbackServer::new(SharedRoutes(routes.clone()))),
        stopped,
    );
    (routes, server)
}

/// The shared app's routes, answering Dapr's app callbacks.
struct SharedRoutes(RouteTable);

impl SharedRoutes {
    fn at(&self, path: &str) -> Option<Arc<AppState>> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(path)
            .cloned()
    }
}

#[tonic::async_trait]
impl AppCallback for SharedRoutes {
    async fn on_invoke(
        &self,
        _request: Request<common::InvokeRequest>,
    ) -> Result<Response<common::InvokeResponse>, GrpcStatus> {
        Err(not_here("OnInvoke"))
    }

    async fn list_topic_subscriptions(
        &self,
        _request: Request<()>,
    ) -> Result<Response<runtime::ListTopicSubscriptionsResponse>, GrpcStatus> {
        Ok(Response::new(
            runtime::ListTopicSubscriptionsResponse::default(),
        ))
    }

    async fn on_topic_event(
        &self,
        request: Request<runtime::TopicEventRequest>,
    ) -> Result<Response<runtime::TopicEventResponse>, GrpcStatus> {
        match self.at(&request.get_ref().path) {
            Some(state) => state.on_topic_event(request).await,
            None => Ok(Response::new(runtime::TopicEventResponse {
                status: answer(Status::Retry),
            })),
        }
    }

    async fn list_input_bindings(
        &self,
        _request: Request<()>,
    ) -> Result<Response<runtime::ListInputBindingsResponse>, GrpcStatus> {
        Ok(Response::new(runtime::ListInputBindingsResponse::default()))
    }

    async fn on_binding_event(
        &self,
        _request: Request<runtime::BindingEventRequest>,
    ) -> Result<Response<runtime::BindingEventResponse>, GrpcStatus> {
        Err(not_here("OnBindingEvent"))
    }

    async fn on_bulk_topic_event(
        &self,
        request: Request<runtime::TopicEventBulkRequest>,
    ) -> Result<Response<runtime::TopicEventBulkResponse>, GrpcStatus> {
        let path = request.get_ref().path.clone();
        match self.at(&path) {
            Some(state) => state.on_bulk_topic_event(request).await,
            None => Err(GrpcStatus::unavailable(format!(
                "no subscription at {path} now"
            ))),
        }
    }

    async fn on_job_event(
        &self,
        _request: Request<runtime::JobEventRequest>,
    ) -> Result<Response<runtime::JobEventResponse>, GrpcStatus> {
        Err(not_here("OnJobEvent"))
    }
}

fn not_here(what: &str) -> GrpcStatus {
    GrpcStatus::unimplemented(format!(
        "{what}: the suite's app answers pub/sub calls only"
    ))
}

fn answer(status: Status) -> i32 {
    match status {
        Status::Success => TopicEventResponseStatus::Success as i32,
        Status::Retry => TopicEventResponseStatus::Retry as i32,
        Status::Drop => TopicEventResponseStatus::Drop as i32,
    }
}

#[tonic::async_trait]
impl AppCallback for AppState {
    async fn on_invoke(
        &self,
        _request: Request<common::InvokeRequest>,
    ) -> Result<Response<common::InvokeResponse>, GrpcStatus> {
        Err(not_here("OnInvoke"))
    }

    async fn list_topic_subscriptions(
        &self,
        _request: Request<()>,
    ) -> Result<Response<runtime::ListTopicSubscriptionsResponse>, GrpcStatus> {
        let subscriptions = self.declared.iter().map(listed).collect();
        self.asked.store(true, Ordering::SeqCst);
        self.discovered.notify_waiters();
        Ok(Response::new(runtime::ListTopicSubscriptionsResponse {
            subscriptions,
        }))
    }

    async fn on_topic_event(
        &self,
        request: Request<runtime::TopicEventRequest>,
    ) -> Result<Response<runtime::TopicEventResponse>, GrpcStatus> {
        let Some(Handler::Single(handler)) = &self.handler else {
            // Not now: deliver it again.
            return Ok(Response::new(runtime::TopicEventResponse {
                status: answer(Status::Retry),
            }));
        };
        let metadata = call_metadata(request.metadata());
        let event = received(&self.deliveries, request.into_inner(), metadata)
            .map_err(GrpcStatus::invalid_argument)?;
        let status = handler.handle(event).await.map_err(GrpcStatus::internal)?;
        Ok(Response::new(runtime::TopicEventResponse {
            status: answer(status),
        }))
    }

    async fn list_input_bindings(
        &self,
        _request: Request<()>,
    ) -> Result<Response<runtime::ListInputBindingsResponse>, GrpcStatus> {
        Ok(Response::new(runtime::ListInputBindingsResponse::default()))
    }

    async fn on_binding_event(
        &self,
        _request: Request<runtime::BindingEventRequest>,
    ) -> Result<Response<runtime::BindingEventResponse>, GrpcStatus> {
        Err(not_here("OnBindingEvent"))
    }

    async fn on_bulk_topic_event(
        &self,
        request: Request<runtime::TopicEventBulkRequest>,
    ) -> Result<Response<runtime::TopicEventBulkResponse>, GrpcStatus> {
        let request = request.into_inner();
        let Some(Handler::Bulk(handler)) = &self.handler else {
            return Err(GrpcStatus::unavailable("the app takes no batches now"));
        };
        let mut entries = Vec::with_capacity(request.entries.len());
        for entry in request.entries {
            let metadata: Metadata = entry.metadata.clone().into_iter().collect();
            let event = match entry.event {
                Some(runtime::topic_event_bulk_request_entry::Event::CloudEvent(ce)) => {
                    let as_single = runtime::TopicEventRequest {
                        id: ce.id,
                        source: ce.source,
                        r#type: ce.r#type,
                        spec_version: ce.spec_version,
                        data_content_type: ce.data_content_type,
                        data: ce.data,
                        topic: request.topic.clone(),
                        pubsub_name: request.pubsub_name.clone(),
                        path: request.path.clone(),
                        extensions: ce.extensions,
                    };
                    received(&self.deliveries, as_single, metadata)
                }
                Some(runtime::topic_event_bulk_request_entry::Event::Bytes(bytes)) => {
                    Ok(self.deliveries.raw(
                        &request.topic,
                        bytes,
                        Some(entry.content_type.clone()).filter(|c| !c.is_empty()),
                        metadata,
                    ))
                }
                None => Err(format!("entry {} carries no event", entry.entry_id)),
            }
            .map_err(GrpcStatus::invalid_argument)?;
            entries.push(BatchEntry {
                entry_id: entry.entry_id,
                event,
            });
        }
        let batch = Batch {
            id: request.id,
            topic: request.topic,
            entries,
        };
        let statuses = handler.handle(batch).await.map_err(GrpcStatus::internal)?;
        Ok(Response::new(runtime::TopicEventBulkResponse {
            statuses: statuses
                .into_iter()
                .map(|s| runtime::TopicEventBulkResponseEntry {
                    entry_id: s.entry_id,
                    status: answer(s.status),
                })
                .collect(),
        }))
    }

    async fn on_job_event(
        &self,
        _request: Request<runtime::JobEventRequest>,
    ) -> Result<Response<runtime::JobEventResponse>, GrpcStatus> {
        Err(not_here("OnJobEvent"))
    }
}

/// A declared subscription as `ListTopicSubscriptions` lists it.
fn listed(declared: &AppSubscription) -> runtime::TopicSubscription {
    let path = declared.path().unwrap_or_default();
    runtime::TopicSubscription {
        pubsub_name: declared.pubsub_name.clone(),
        topic: declared.topic.clone(),
        metadata: declared.metadata.clone().into_iter().collect(),
        routes: Some(runtime::TopicRoutes {
            rules: Vec::new(),
            default: path,
        }),
        dead_letter_topic: declared.dead_letter_topic.clone().unwrap_or_default(),
        bulk_subscribe: declared
            .bulk_subscribe
            .map(|b| runtime::BulkSubscribeConfig {
                enabled: b.enabled,
                max_messages_count: b
                    .max_messages_count
                    .map_or(0, |n| i32::try_from(n).unwrap_or(i32::MAX)),
                max_await_duration_ms: b
                    .max_await_duration_ms
                    .map_or(0, |n| i32::try_from(n).unwrap_or(i32::MAX)),
            }),
    }
}

/// The message's metadata a call carries: every header that is not the transport's.
fn call_metadata(headers: &tonic::metadata::MetadataMap) -> Metadata {
    let map = headers.clone().into_headers();
    metadata_of(map.iter().filter_map(|(name, value)| {
        Some((name.as_str(), std::str::from_utf8(value.as_bytes()).ok()?))
    }))
}

/// The message's metadata among a call's headers: those that are not the transport's.
fn metadata_of<'a>(headers: impl Iterator<Item = (&'a str, &'a str)>) -> Metadata {
    metadata_from_headers(headers.filter(|(name, _)| !GRPC_HEADERS.contains(name)))
}

/// The event a sidecar sent as `request` with the call's `headers`, as a case sees
/// it (for an app of another's, such as an SDK's, that relays what it got).
pub(crate) fn event_of<'a>(
    deliveries: &Deliveries,
    request: runtime::TopicEventRequest,
    headers: impl Iterator<Item = (&'a str, &'a str)>,
) -> Result<Event, String> {
    received(deliveries, request, metadata_of(headers))
}

/// The event a sidecar sent, as the runtime's event: its CloudEvent put together
/// from the fields and extensions (data as JSON where its content type is JSON, as
/// text where it is text, else as base64), then read as an app reads a delivered
/// CloudEvent.
fn received(
    deliveries: &Deliveries,
    event: runtime::TopicEventRequest,
    metadata: Metadata,
) -> Result<Event, String> {
    let mut envelope: Map<String, Value> = event
        .extensions
        .map(|s| {
            s.fields
                .into_iter()
                .map(|(k, v)| (k, from_value(v)))
                .collect()
        })
        .unwrap_or_default();
    for (key, value) in [
        ("specversion", event.spec_version),
        ("id", event.id),
        ("source", event.source),
        ("type", event.r#type),
        ("datacontenttype", event.data_content_type.clone()),
    ] {
        envelope.insert(key.to_string(), json!(value));
    }
    // The call's topic and pub/sub are where the event was received (a dead-letter
    // topic, for a dead-lettered event); the envelope's own, among the extensions,
    // say where it was published, and stay.
    for (key, value) in [("topic", event.topic), ("pubsubname", event.pubsub_name)] {
        envelope.entry(key).or_insert(json!(value));
    }
    let essence = crate::wire::essence(&event.data_content_type);
    let text = std::str::from_utf8(&event.data).ok();
    let is_json = text
        .filter(|_| crate::wire::is_json(&essence))
        .is_some_and(|t| serde_json::from_str::<Value>(t).is_ok());
    let body = match text {
        Some(text) if is_json => {
            // The JSON as it was sent, bytes and all.
            crate::wire::envelope_with_json_data(&envelope, text).into_bytes()
        }
        Some(text) if essence.starts_with("text/") => {
            envelope.insert("data".into(), json!(text));
            serde_json::to_vec(&Value::Object(envelope)).unwrap_or_default()
        }
        _ => {
            use base64::Engine as _;
            let encoded = base64::engine::general_purpose::STANDARD.encode(&event.data);
            envelope.insert("data_base64".into(), json!(encoded));
            serde_json::to_vec(&Value::Object(envelope)).unwrap_or_default()
        }
    };
    deliveries.decode(&body, metadata)
}

/// A protobuf `Value` as JSON.
fn from_value(value: prost_types::Value) -> Value {
    use prost_types::value::Kind;
    match value.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::BoolValue(b)) => json!(b),
        // A Struct holds every number as a double: a whole one is read back whole.
        Some(Kind::NumberValue(n)) if n.fract() == 0.0 && n.abs() < 9_007_199_254_740_992.0 => {
            json!(n as i64)
        }
        Some(Kind::NumberValue(n)) => json!(n),
        Some(Kind::StringValue(s)) => json!(s),
        Some(Kind::ListValue(list)) => {
            Value::Array(list.values.into_iter().map(from_value).collect())
        }
        Some(Kind::StructValue(object)) => Value::Object(
            object
                .fields
                .into_iter()
                .map(|(k, v)| (k, from_value(v)))
                .collect(),
        ),
    }
}
