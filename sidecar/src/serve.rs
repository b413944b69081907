//! `serve`: components of this project behind Dapr's pub/sub HTTP API, with the
//! runtime's semantics. The publish endpoints, the metadata and health endpoints a
//! client or SDK polls before it starts, and, when an app is given, its
//! subscriptions read from `GET /dapr/subscribe` at start and delivered to it.

use crate::app::AppChannel;
use crate::deliver::{BulkDeliveryHandler, Route, SingleDelivery};
use crate::wire::{
    self, ApiError, AppSubscription, BulkPublishFailure, FailedEntry, API_TOKEN_HEADER,
    METADATA_PREFIX,
};
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{DefaultBodyLimit, Path, RawQuery, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use pubsub_components::runtime::{
    BulkPublishEntry, BulkPublishRequest, BulkSubscribeOptions, Handler, PublishRequest, Runtime,
    Subscription, SubscriptionHandle,
};
use pubsub_components::{Metadata, PubSubError};
use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// daprd's default limit on a request body (`--max-body-size`, 4 MiB).
pub const DEFAULT_MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// A component served under its pub/sub name.
#[derive(Clone)]
pub struct ServedComponent {
    pub runtime: Runtime,
    /// `spec.type`, e.g. `pubsub.redis`.
    pub component_type: String,
}

/// How `serve` runs.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// The address the API listens on (port 0: a free one).
    pub listen: SocketAddr,
    /// The app whose subscriptions are delivered, if any.
    pub app: Option<AppChannel>,
    /// The app id: each subscription's consumer group, and the CloudEvent source.
    pub app_id: String,
    /// Requests must carry this in `dapr-api-token` when set (health checks excepted).
    pub api_token: Option<String>,
    pub max_body_bytes: usize,
    /// How long the app may take to answer `GET /dapr/subscribe` at start.
    pub app_start_within: Duration,
    /// A resources directory whose declarative subscriptions (`kind:
    /// Subscription`) are delivered to the app, as daprd's `--resources-path`.
    pub resources: Option<PathBuf>,
    /// Whether changes to the resources directory's subscriptions take effect while
    /// running (daprd's `HotReload` feature): looked for every 100 ms.
    pub hot_reload: bool,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            app: None,
            app_id: "pcs-app".into(),
            api_token: None,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            app_start_within: Duration::from_secs(30),
            resources: None,
            hot_reload: false,
        }
    }
}

/// A running sidecar.
pub struct Sidecar {
    address: SocketAddr,
    stop: watch::Sender<bool>,
    server: JoinHandle<()>,
    subscriptions: Vec<SubscriptionHandle>,
    declared: Vec<AppSubscription>,
    /// The declarative subscriptions, and the task that reloads them.
    declarative: Arc<tokio::sync::Mutex<Declarative>>,
    reloader: Option<JoinHandle<()>>,
}

/// The declarative subscriptions being delivered, by name.
#[derive(Default)]
struct Declarative {
    running: BTreeMap<String, (AppSubscription, SubscriptionHandle)>,
}

struct ApiState {
    components: BTreeMap<String, ServedComponent>,
    app_id: String,
    /// The app's subscriptions (`PROGRAMMATIC`) and the resources' (`DECLARATIVE`),
    /// as `GET /v1.0/metadata` lists them.
    declared: std::sync::Mutex<Vec<AppSubscription>>,
    declarative: std::sync::Mutex<Vec<AppSubscription>>,
    max_body_bytes: usize,
    hot_reload: bool,
}

impl Sidecar {
    /// Starts the API, then reads the app's subscriptions (when an app is given) and
    /// starts delivering them. A subscription naming a pub/sub that is not served,
    /// or that cannot be routed, is an error naming it: nothing starts half-way.
    pub async fn start(
        components: BTreeMap<String, ServedComponent>,
        options: ServeOptions,
    ) -> anyhow::Result<Sidecar> {
        let state = Arc::new(ApiState {
            components,
            app_id: options.app_id.clone(),
            declared: std::sync::Mutex::new(Vec::new()),
            declarative: std::sync::Mutex::new(Vec::new()),
            max_body_bytes: options.max_body_bytes,
            hot_reload: options.hot_reload,
        });
        let listener = tokio::net::TcpListener::bind(options.listen)
            .await
            .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", options.listen))?;
        let address = listener.local_addr()?;
        let router = router(state.clone(), &options);
        let (stop, server) = crate::server::spawn(listener, router, "the sidecar's HTTP server");
        let mut sidecar = Sidecar {
            address,
            stop,
            server,
            subscriptions: Vec::new(),
            declared: Vec::new(),
            declarative: Arc::default(),
            reloader: None,
        };
        if let Some(app) = &options.app {
            let declared = app.subscriptions(options.app_start_within).await?;
            for subscription in &declared {
                match subscribe(&state, app, &options.app_id, subscription).await {
                    Ok(handle) => sidecar.subscriptions.push(handle),
                    Err(e) => {
                        sidecar.stop().await;
                        return Err(e);
                    }
                }
            }
            *state.declared.lock().unwrap_or_else(|p| p.into_inner()) = declared.clone();
            sidecar.declared = declared;
        }
        if let Some(dir) = &options.resources {
            let wanted = crate::resources::load_subscriptions(dir, &options.app_id)?;
            let Some(app) = &options.app else {
                if wanted.is_empty() {
                    return Ok(sidecar);
                }
                sidecar.stop().await;
                anyhow::bail!(
                    "{} declares subscriptions ({}) but no app port was given to deliver them to",
                    dir.display(),
                    wanted.keys().cloned().collect::<Vec<_>>().join(", ")
                );
            };
            let mut declarative = sidecar.declarative.lock().await;
            if let Err(e) = reconcile(&state, app, &options.app_id, &mut declarative, wanted).await
            {
                drop(declarative);
                sidecar.stop().await;
                return Err(e);
            }
            drop(declarative);
            if options.hot_reload {
                sidecar.reloader = Some(tokio::spawn(reload_while_running(
                    state.clone(),
                    app.clone(),
                    options.app_id.clone(),
                    dir.clone(),
                    sidecar.declarative.clone(),
                    sidecar.stop.subscribe(),
                )));
            }
        }
        Ok(sidecar)
    }

    /// Where the API listens.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The subscriptions the app declared.
    pub fn subscriptions(&self) -> &[AppSubscription] {
        &self.declared
    }

    /// Stops delivery (unsettled messages go back to their brokers) and the API.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        if let Some(reloader) = self.reloader {
            let _ = reloader.await;
        }
        let running = std::mem::take(&mut self.declarative.lock().await.running);
        for (_, (_, handle)) in running {
            handle.stop().await;
        }
        for handle in self.subscriptions {
            handle.stop().await;
        }
        let _ = self.stop.send(true);
        let _ = self.server.await;
    }
}

/// Makes the declarative subscriptions delivered those `wanted`: a new name is
/// subscribed, a removed one stopped, a changed one stopped and subscribed again.
/// One that cannot start does not hold up the others (daprd starts every
/// subscription it can): every one that could not is an error naming it, and it is
/// tried again at the next reconcile.
async fn reconcile(
    state: &ApiState,
    app: &AppChannel,
    app_id: &str,
    declarative: &mut Declarative,
    wanted: BTreeMap<String, AppSubscription>,
) -> anyhow::Result<()> {
    let gone: Vec<String> = declarative
        .running
        .iter()
        .filter(|(name, (spec, _))| wanted.get(*name) != Some(spec))
        .map(|(name, _)| name.clone())
        .collect();
    let mut refused: Vec<anyhow::Error> = Vec::new();
    for name in gone {
        if let Some((spec, handle)) = declarative.running.remove(&name) {
            tracing::info!(%name, topic = %spec.topic, "declarative subscription removed");
            handle.stop().await;
        }
    }
    for (name, spec) in wanted {
        if declarative.running.contains_key(&name) {
            continue;
        }
        match subscribe(state, app, app_id, &spec).await {
            Ok(handle) => {
                tracing::info!(%name, topic = %spec.topic, "declarative subscription started");
                declarative.running.insert(name, (spec, handle));
            }
            Err(e) => refused.push(e.context(format!("the declarative subscription '{name}'"))),
        }
    }
    *state.declarative.lock().unwrap_or_else(|p| p.into_inner()) = declarative
        .running
        .values()
        .map(|(spec, _)| spec.clone())
        .collect();
    // The first refusal stays the error's source (a caller may ask what refused it).
    let mut refused = refused.into_iter();
    match refused.next() {
        None => Ok(()),
        Some(first) => {
            let others: Vec<String> = refused.map(|e| format!("{e:#}")).collect();
            if others.is_empty() {
                Err(first)
            } else {
                Err(first.context(format!("also not started: {}", others.join("; "))))
            }
        }
    }
}

/// Reads the resources directory every 100 ms until the sidecar stops, and
/// reconciles its subscriptions; what does not read or start is logged and tried
/// again on the next change, as daprd's hot reload does.
async fn reload_while_running(
    state: Arc<ApiState>,
    app: AppChannel,
    app_id: String,
    dir: PathBuf,
    declarative: Arc<tokio::sync::Mutex<Declarative>>,
    mut stopped: watch::Receiver<bool>,
) {
    let mut last_error = String::new();
    loop {
        tokio::select! {
            _ = stopped.wait_for(|s| *s) => return,
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
        let result = match crate::resources::load_subscriptions(&dir, &app_id) {
            Ok(wanted) => {
                let mut declarative = declarative.lock().await;
                reconcile(&state, &app, &app_id, &mut declarative, wanted).await
            }
            Err(e) => Err(e),
        };
        match result {
            Ok(()) => last_error.clear(),
            Err(e) => {
                let text = format!("{e:#}");
                if text != last_error {
                    tracing::warn!(error = %text, "reloading the declarative subscriptions");
                    eprintln!("serve: reloading the declarative subscriptions: {text}");
                    last_error = text;
                }
            }
        }
    }
}

/// Starts delivering one declared subscription.
async fn subscribe(
    state: &ApiState,
    app: &AppChannel,
    app_id: &str,
    declared: &AppSubscription,
) -> anyhow::Result<SubscriptionHandle> {
    let served = state.components.get(&declared.pubsub_name).ok_or_else(|| {
        anyhow::anyhow!(
            "the app subscribes to {} on pubsub '{}', which is not served (served: {})",
            declared.topic,
            declared.pubsub_name,
            state
                .components
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        )
    })?;
    let path = declared.path().map_err(|e| anyhow::anyhow!(e))?;
    let raw_payload = flag(&declared.metadata, "rawPayload").map_err(|e| anyhow::anyhow!(e))?;
    let mut subscription = Subscription::new(&declared.topic, app_id);
    subscription.dead_letter_topic = declared.dead_letter_topic.clone().filter(|t| !t.is_empty());
    apply_subscription_metadata(&mut subscription, &declared.metadata)
        .map_err(|e| anyhow::anyhow!("subscription to {}: {e}", declared.topic))?;
    let route = Route {
        app: app.clone(),
        pubsub_name: declared.pubsub_name.clone(),
        path,
        raw_payload,
    };
    let handler = match declared.bulk_subscribe.filter(|b| b.enabled) {
        Some(bulk) => {
            let defaults = BulkSubscribeOptions::default();
            subscription.bulk = Some(BulkSubscribeOptions {
                max_messages_count: bulk
                    .max_messages_count
                    .map_or(defaults.max_messages_count, |n| n as usize),
                max_await_duration: bulk
                    .max_await_duration_ms
                    .map_or(defaults.max_await_duration, Duration::from_millis),
            });
            Handler::Bulk(Arc::new(BulkDeliveryHandler { route }))
        }
        None => Handler::Single(Arc::new(SingleDelivery { route })),
    };
    served
        .runtime
        .subscribe(subscription, handler)
        .await
        .map_err(|e| {
            // The component's error stays the source, so that an in-process caller
            // can tell a refused subscription from a broken one.
            anyhow::Error::new(e).context(format!(
                "subscribing to {} on pubsub '{}'",
                declared.topic, declared.pubsub_name
            ))
        })
}

/// Subscription settings the runtime has and Dapr's subscription API spells as
/// metadata: `maxDeliveries`, `retryDelay` and `receiverDelay` (durations such as
/// `500ms`). Other keys are the component's and are left alone.
fn apply_subscription_metadata(
    subscription: &mut Subscription,
    metadata: &BTreeMap<String, String>,
) -> Result<(), String> {
    if let Some(text) = metadata.get("maxDeliveries") {
        subscription.max_deliveries = text
            .trim()
            .parse::<u32>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| format!("maxDeliveries '{text}' is not a whole number above 0"))?;
    }
    let duration = |key: &str| -> Result<Option<Duration>, String> {
        metadata
            .get(key)
            .map(|text| {
                humantime::parse_duration(text.trim())
                    .map_err(|e| format!("{key} '{text}' is not a duration such as 500ms: {e}"))
            })
            .transpose()
    };
    if let Some(delay) = duration("retryDelay")? {
        subscription.retry_delay = delay;
    }
    if let Some(delay) = duration("receiverDelay")? {
        subscription.receiver_delay = Some(delay);
    }
    Ok(())
}

/// A boolean metadata value, as the runtime reads one (absent is false).
fn flag(metadata: &BTreeMap<String, String>, key: &str) -> Result<bool, String> {
    metadata.get(key).map_or(Ok(false), |value| {
        pubsub_components::runtime::controls::parse_bool(key, value).map_err(|e| e.to_string())
    })
}

fn router(state: Arc<ApiState>, options: &ServeOptions) -> Router {
    let api = Router::new()
        .route("/v1.0/publish/{pubsub}/{*topic}", post(publish))
        .route("/v1.0/publish/{pubsub}", post(publish_without_topic))
        .route("/v1.0/publish/{pubsub}/", post(publish_without_topic))
        .route(
            "/v1.0-alpha1/publish/bulk/{pubsub}/{*topic}",
            post(bulk_publish),
        )
        .route("/v1.0/publish/bulk/{pubsub}/{*topic}", post(bulk_publish))
        .route(
            "/v1.0-alpha1/publish/bulk/{pubsub}",
            post(publish_without_topic),
        )
        .route("/v1.0/publish/bulk/{pubsub}", post(publish_without_topic))
        .route("/v1.0/metadata", get(metadata))
        .layer(DefaultBodyLimit::max(options.max_body_bytes))
        .with_state(state);
    let api = match options.api_token.clone() {
        Some(token) => api.layer(middleware::from_fn(move |request: Request, next: Next| {
            let token = token.clone();
            async move { require_token(&token, request, next).await }
        })),
        None => api,
    };
    api.route("/v1.0/healthz", get(healthy))
        .route("/v1.0/healthz/outbound", get(healthy))
}

async fn require_token(token: &str, request: Request, next: Next) -> Response {
    let given = request
        .headers()
        .get(API_TOKEN_HEADER)
        .and_then(|v| v.to_str().ok());
    if given == Some(token) {
        next.run(request).await
    } else {
        error_response(ApiError::unauthorized())
    }
}

async fn healthy() -> StatusCode {
    StatusCode::NO_CONTENT
}

fn error_response(error: ApiError) -> Response {
    let status = StatusCode::from_u16(error.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, Json(error.body)).into_response()
}

/// The `metadata.*` query parameters, prefix removed (the last value of a repeated key).
fn query_metadata(query: Option<&str>) -> Metadata {
    let mut metadata = Metadata::new();
    for (key, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        if let Some(name) = key.strip_prefix(METADATA_PREFIX) {
            metadata.insert(name.to_string(), value.into_owned());
        }
    }
    metadata
}

/// The component a request names, or the documented error.
fn served<'a>(state: &'a ApiState, pubsub: &str) -> Result<&'a ServedComponent, ApiError> {
    if pubsub.is_empty() {
        return Err(ApiError::pubsub_empty());
    }
    state
        .components
        .get(pubsub)
        .ok_or_else(|| ApiError::pubsub_not_found(pubsub))
}

/// The component a publish names and the request's metadata, or the documented error
/// (an unknown pubsub, a `rawPayload` that is neither true nor false).
fn request_target<'a>(
    state: &'a ApiState,
    pubsub: &str,
    query: Option<&str>,
) -> Result<(&'a ServedComponent, Metadata), ApiError> {
    let served = served(state, pubsub)?;
    let metadata = query_metadata(query);
    let map: BTreeMap<String, String> = metadata
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    flag(&map, "rawPayload").map_err(ApiError::request_metadata)?;
    Ok((served, metadata))
}

/// A publish error as daprd answers it: a request the runtime refuses as malformed
/// is 400 (its metadata), anything else 500.
fn publish_error(pubsub: &str, topic: &str, error: PubSubError) -> ApiError {
    match error {
        PubSubError::InvalidRequest(why) => ApiError::request_metadata(why),
        other => ApiError::publish_message(pubsub, topic, other),
    }
}

async fn publish_without_topic(Path(pubsub): Path<String>) -> Response {
    error_response(ApiError::topic_empty(&pubsub))
}

/// A publish or bulk publish request, read.
struct ReadPublish<'a> {
    pubsub: String,
    topic: String,
    served: &'a ServedComponent,
    metadata: Metadata,
    body: Bytes,
}

/// The pub/sub and topic a publish path names, the component it names, the
/// request's metadata and its body, or the documented error: a path that is not
/// UTF-8 once decoded is malformed (400 `ERR_MALFORMED_REQUEST`), a body over the
/// limit 413 `ERR_BODY_TOO_LARGE`, then the errors of [`request_target`].
fn read_publish<'a>(
    state: &'a ApiState,
    path: Result<Path<(String, String)>, PathRejection>,
    query: Option<&str>,
    body: Result<Bytes, BytesRejection>,
) -> Result<ReadPublish<'a>, ApiError> {
    let Path((pubsub, topic)) = path.map_err(|e| ApiError::malformed(e.body_text()))?;
    let body = body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::body_too_large(state.max_body_bytes)
        } else {
            ApiError::malformed(e.body_text())
        }
    })?;
    let (served, metadata) = request_target(state, &pubsub, query)?;
    Ok(ReadPublish {
        pubsub,
        topic,
        served,
        metadata,
        body,
    })
}

async fn publish(
    State(state): State<Arc<ApiState>>,
    path: Result<Path<(String, String)>, PathRejection>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let read = match read_publish(&state, path, query.as_deref(), body) {
        Ok(read) => read,
        Err(e) => return error_response(e),
    };
    // Unless specified, Dapr assumes text/plain (the API reference).
    let content_type = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .unwrap_or("text/plain")
        .to_string();
    let mut request = PublishRequest::new(read.topic.clone(), read.body.to_vec())
        .with_content_type(&content_type);
    request.metadata = read.metadata;
    if let Some(traceparent) = headers.get("traceparent").and_then(|v| v.to_str().ok()) {
        request
            .metadata
            .entry("traceparent".to_string())
            .or_insert_with(|| traceparent.to_string());
    }
    match read.served.runtime.publish(request).await {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => error_response(publish_error(&read.pubsub, &read.topic, e)),
    }
}

async fn bulk_publish(
    State(state): State<Arc<ApiState>>,
    path: Result<Path<(String, String)>, PathRejection>,
    RawQuery(query): RawQuery,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let read = match read_publish(&state, path, query.as_deref(), body) {
        Ok(read) => read,
        Err(e) => return error_response(e),
    };
    let wire_entries: Vec<wire::BulkPublishEntry> = match serde_json::from_slice(&read.body) {
        Ok(entries) => entries,
        Err(e) => return error_response(ApiError::unmarshal_events(&read.pubsub, &read.topic, e)),
    };
    // Every entry is checked before anything is published: a bad one refuses the
    // whole request, and nothing is half-published.
    let mut seen = HashSet::new();
    let mut entries = Vec::with_capacity(wire_entries.len());
    for (index, entry) in wire_entries.into_iter().enumerate() {
        if entry.entry_id.is_empty() || !seen.insert(entry.entry_id.clone()) {
            return error_response(ApiError::marshal_events(
                &read.pubsub,
                &read.topic,
                format!(
                    "entryId is duplicated or not present for the entry at index {index} ('{}')",
                    entry.entry_id
                ),
            ));
        }
        let event = match wire::event_bytes(&entry.event, &entry.content_type) {
            Ok(bytes) => bytes,
            Err(why) => {
                return error_response(ApiError::marshal_events(
                    &read.pubsub,
                    &read.topic,
                    format!("entry '{}': {why}", entry.entry_id),
                ))
            }
        };
        entries.push(BulkPublishEntry {
            entry_id: entry.entry_id,
            event,
            content_type: Some(entry.content_type).filter(|c| !c.is_empty()),
            metadata: entry.metadata.unwrap_or_default().into_iter().collect(),
        });
    }
    let request = BulkPublishRequest {
        topic: read.topic.clone(),
        entries,
        metadata: read.metadata,
    };
    match read.served.runtime.bulk_publish(request).await {
        Ok(response) if response.failed_entries.is_empty() => {
            StatusCode::NO_CONTENT.into_response()
        }
        Ok(response) => {
            let failure = BulkPublishFailure {
                failed_entries: response
                    .failed_entries
                    .into_iter()
                    .map(|f| FailedEntry {
                        entry_id: f.entry_id,
                        error: f.error,
                    })
                    .collect(),
                error_code: "ERR_PUBSUB_PUBLISH_MESSAGE".into(),
            };
            (StatusCode::INTERNAL_SERVER_ERROR, Json(failure)).into_response()
        }
        Err(e) => error_response(publish_error(&read.pubsub, &read.topic, e)),
    }
}

async fn metadata(State(state): State<Arc<ApiState>>) -> Response {
    let components: Vec<serde_json::Value> = state
        .components
        .iter()
        .map(|(name, served)| {
            serde_json::json!({
                "name": name,
                "type": served.component_type,
                "version": "v1",
                "capabilities": [],
            })
        })
        .collect();
    let programmatic = state
        .declared
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let declarative = state
        .declarative
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let subscriptions: Vec<serde_json::Value> = programmatic
        .iter()
        .map(|s| (s, "PROGRAMMATIC"))
        .chain(declarative.iter().map(|s| (s, "DECLARATIVE")))
        .map(|(s, kind)| {
            serde_json::json!({
                "pubsubname": s.pubsub_name,
                "topic": s.topic,
                "metadata": s.metadata,
                // daprd lists the rules flat, a match left out when empty.
                "rules": [{"path": s.path().unwrap_or_default()}],
                "deadLetterTopic": s.dead_letter_topic.clone().unwrap_or_default(),
                "type": kind,
            })
        })
        .collect();
    Json(serde_json::json!({
        "id": state.app_id,
        "runtimeVersion": format!("pubsub-conformance serve {}", env!("CARGO_PKG_VERSION")),
        "enabledFeatures": if state.hot_reload { vec!["HotReload"] } else { Vec::new() },
        "components": components,
        "subscriptions": subscriptions,
        "extended": {},
    }))
    .into_response()
}
