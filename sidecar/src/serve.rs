//! `serve`: components of this project behind Dapr's pub/sub HTTP API, with the
//! runtime's semantics. The publish endpoints, the metadata and health endpoints a
//! client or SDK polls before it starts, and, when an app is given, its
//! subscriptions read from `GET /dapr/subscribe` at start and delivered to it.

use crate::app::AppChannel;
use crate::deliver::{BulkDeliveryHandler, Route, SingleDelivery};
use crate::grpc::app::{GrpcAppChannel, GrpcBulkDelivery, GrpcRoute, GrpcSingleDelivery};
use crate::publish::{self, ReadEntry};
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
    BulkPublishRequest, BulkSubscribeOptions, Handler, PublishRequest, Runtime, Subscription,
    SubscriptionHandle,
};
use pubsub_components::Metadata;
use std::collections::BTreeMap;
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
    /// The address the HTTP API listens on (port 0: a free one).
    pub listen: SocketAddr,
    /// The address the gRPC API listens on, if it is served (port 0: a free one).
    pub grpc_listen: Option<SocketAddr>,
    /// The app whose subscriptions are delivered, if any, over HTTP.
    pub app: Option<AppChannel>,
    /// The app whose subscriptions are delivered, if any, over gRPC (daprd's
    /// `--app-protocol grpc`); not with `app`.
    pub grpc_app: Option<GrpcAppChannel>,
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
            grpc_listen: None,
            app: None,
            grpc_app: None,
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
    grpc_address: Option<SocketAddr>,
    /// Ends the open streams.
    stopping: watch::Sender<bool>,
    stop: watch::Sender<bool>,
    server: JoinHandle<()>,
    grpc_server: Option<JoinHandle<()>>,
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

/// The app a sidecar delivers to, over the protocol it speaks.
#[derive(Clone, Debug)]
enum App {
    Http(AppChannel),
    Grpc(GrpcAppChannel),
}

impl App {
    fn of(options: &ServeOptions) -> Option<App> {
        match (&options.app, &options.grpc_app) {
            (Some(app), _) => Some(App::Http(app.clone())),
            (None, Some(app)) => Some(App::Grpc(app.clone())),
            (None, None) => None,
        }
    }

    async fn subscriptions(&self, within: Duration) -> anyhow::Result<Vec<AppSubscription>> {
        match self {
            App::Http(app) => app.subscriptions(within).await,
            App::Grpc(app) => app.subscriptions(within).await,
        }
    }
}

/// What both transports of the API serve from.
pub(crate) struct ApiState {
    pub(crate) components: BTreeMap<String, ServedComponent>,
    pub(crate) app_id: String,
    /// The app's subscriptions (`PROGRAMMATIC`), the resources' (`DECLARATIVE`) and
    /// the open streams' (`STREAMING`, by stream), as the metadata calls list them.
    declared: std::sync::Mutex<Vec<AppSubscription>>,
    declarative: std::sync::Mutex<Vec<AppSubscription>>,
    pub(crate) streaming: std::sync::Mutex<BTreeMap<u64, AppSubscription>>,
    /// Says true once the sidecar stops: open streams end then.
    pub(crate) stopping: watch::Receiver<bool>,
    max_body_bytes: usize,
    hot_reload: bool,
}

/// How a subscription came to be, as the metadata calls tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SubscriptionKind {
    Programmatic,
    Declarative,
    Streaming,
}

impl SubscriptionKind {
    fn name(self) -> &'static str {
        match self {
            SubscriptionKind::Programmatic => "PROGRAMMATIC",
            SubscriptionKind::Declarative => "DECLARATIVE",
            SubscriptionKind::Streaming => "STREAMING",
        }
    }
}

impl ApiState {
    /// Every subscription being delivered, with how it came to be.
    pub(crate) fn subscriptions(&self) -> Vec<(AppSubscription, SubscriptionKind)> {
        let lock = |m: &std::sync::Mutex<Vec<AppSubscription>>| {
            m.lock().unwrap_or_else(|p| p.into_inner()).clone()
        };
        let streaming: Vec<AppSubscription> = self
            .streaming
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        let tag = |list: Vec<AppSubscription>, kind| list.into_iter().map(move |s| (s, kind));
        tag(lock(&self.declared), SubscriptionKind::Programmatic)
            .chain(tag(lock(&self.declarative), SubscriptionKind::Declarative))
            .chain(tag(streaming, SubscriptionKind::Streaming))
            .collect()
    }

    pub(crate) fn runtime_version(&self) -> String {
        format!("pubsub-conformance serve {}", env!("CARGO_PKG_VERSION"))
    }

    pub(crate) fn enabled_features(&self) -> Vec<String> {
        match self.hot_reload {
            true => vec!["HotReload".to_string()],
            false => Vec::new(),
        }
    }
}

impl Sidecar {
    /// Starts the API, then reads the app's subscriptions (when an app is given) and
    /// starts delivering them. A subscription naming a pub/sub that is not served,
    /// or that cannot be routed, is an error naming it: nothing starts half-way.
    pub async fn start(
        components: BTreeMap<String, ServedComponent>,
        options: ServeOptions,
    ) -> anyhow::Result<Sidecar> {
        if options.app.is_some() && options.grpc_app.is_some() {
            anyhow::bail!("an app is reached over HTTP or over gRPC, not both");
        }
        let (stopping, stopping_seen) = watch::channel(false);
        let state = Arc::new(ApiState {
            components,
            app_id: options.app_id.clone(),
            declared: std::sync::Mutex::new(Vec::new()),
            declarative: std::sync::Mutex::new(Vec::new()),
            streaming: std::sync::Mutex::new(BTreeMap::new()),
            stopping: stopping_seen,
            max_body_bytes: options.max_body_bytes,
            hot_reload: options.hot_reload,
        });
        let listener = tokio::net::TcpListener::bind(options.listen)
            .await
            .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", options.listen))?;
        let address = listener.local_addr()?;
        let grpc_listener = match options.grpc_listen {
            Some(at) => Some(
                tokio::net::TcpListener::bind(at)
                    .await
                    .map_err(|e| anyhow::anyhow!("cannot listen for gRPC on {at}: {e}"))?,
            ),
            None => None,
        };
        let grpc_address = grpc_listener.as_ref().map(|l| l.local_addr()).transpose()?;
        let router = router(state.clone(), &options);
        let (stop, server) = crate::server::spawn(listener, router, "the sidecar's HTTP server");
        let grpc_server = grpc_listener.map(|listener| {
            let service = crate::grpc::service(
                state.clone(),
                options.api_token.clone(),
                options.max_body_bytes,
            );
            crate::server::spawn_grpc(listener, service, stop.subscribe())
        });
        let mut sidecar = Sidecar {
            address,
            grpc_address,
            stopping,
            stop,
            server,
            grpc_server,
            subscriptions: Vec::new(),
            declared: Vec::new(),
            declarative: Arc::default(),
            reloader: None,
        };
        let app = App::of(&options);
        if let Some(app) = &app {
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
            let Some(app) = &app else {
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

    /// Where the HTTP API listens.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Where the gRPC API listens, if it is served.
    pub fn grpc_address(&self) -> Option<SocketAddr> {
        self.grpc_address
    }

    /// The subscriptions the app declared.
    pub fn subscriptions(&self) -> &[AppSubscription] {
        &self.declared
    }

    /// Stops delivery (unsettled messages go back to their brokers) and the API.
    pub async fn stop(self) {
        let _ = self.stopping.send(true);
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
        if let Some(grpc) = self.grpc_server {
            let _ = grpc.await;
        }
    }
}

/// Makes the declarative subscriptions delivered those `wanted`: a new name is
/// subscribed, a removed one stopped, a changed one stopped and subscribed again.
/// One that cannot start does not hold up the others (daprd starts every
/// subscription it can): every one that could not is an error naming it, and it is
/// tried again at the next reconcile.
async fn reconcile(
    state: &ApiState,
    app: &App,
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
    app: App,
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
    app: &App,
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
    let path = match app {
        App::Http(_) => declared.path(),
        App::Grpc(_) => declared.grpc_path(),
    }
    .map_err(|e| anyhow::anyhow!(e))?;
    let raw_payload =
        publish::flag(&declared.metadata, "rawPayload").map_err(|e| anyhow::anyhow!(e))?;
    let mut subscription = Subscription::new(&declared.topic, app_id);
    subscription.dead_letter_topic = declared.dead_letter_topic.clone().filter(|t| !t.is_empty());
    apply_subscription_metadata(&mut subscription, &declared.metadata)
        .map_err(|e| anyhow::anyhow!("subscription to {}: {e}", declared.topic))?;
    let bulk = declared.bulk_subscribe.filter(|b| b.enabled);
    if let Some(bulk) = bulk {
        let defaults = BulkSubscribeOptions::default();
        subscription.bulk = Some(BulkSubscribeOptions {
            max_messages_count: bulk
                .max_messages_count
                .map_or(defaults.max_messages_count, |n| n as usize),
            max_await_duration: bulk
                .max_await_duration_ms
                .map_or(defaults.max_await_duration, Duration::from_millis),
        });
    }
    let pubsub_name = declared.pubsub_name.clone();
    let handler = match (app, bulk.is_some()) {
        (App::Http(app), bulk) => {
            let route = Route {
                app: app.clone(),
                pubsub_name,
                path,
                raw_payload,
            };
            match bulk {
                true => Handler::Bulk(Arc::new(BulkDeliveryHandler { route })),
                false => Handler::Single(Arc::new(SingleDelivery { route })),
            }
        }
        (App::Grpc(app), bulk) => {
            let route = GrpcRoute {
                app: app.clone(),
                pubsub_name,
                path,
                raw_payload,
            };
            match bulk {
                true => Handler::Bulk(Arc::new(GrpcBulkDelivery { route })),
                false => Handler::Single(Arc::new(GrpcSingleDelivery { route })),
            }
        }
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
pub(crate) fn apply_subscription_metadata(
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

/// The component a publish names and the request's metadata, or the documented error
/// (an unknown pubsub, a `rawPayload` that is neither true nor false).
fn request_target<'a>(
    state: &'a ApiState,
    pubsub: &str,
    query: Option<&str>,
) -> Result<(&'a ServedComponent, Metadata), ApiError> {
    let served = publish::component(&state.components, pubsub)?;
    let metadata = query_metadata(query);
    publish::check_metadata(pubsub, &metadata)?;
    Ok((served, metadata))
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
    match publish::publish(read.served, &read.pubsub, request).await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => error_response(e),
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
    let read_entries = wire_entries
        .into_iter()
        .map(|entry| ReadEntry {
            event: wire::event_bytes(&entry.event, &entry.content_type),
            entry_id: entry.entry_id,
            content_type: Some(entry.content_type),
            metadata: entry.metadata.unwrap_or_default().into_iter().collect(),
        })
        .collect();
    let entries = match publish::bulk_entries(&read.pubsub, &read.topic, read_entries) {
        Ok(entries) => entries,
        Err(e) => return error_response(e),
    };
    let request = BulkPublishRequest {
        topic: read.topic.clone(),
        entries,
        metadata: read.metadata,
    };
    match publish::bulk_publish(read.served, &read.pubsub, request).await {
        Ok(failed) if failed.is_empty() => StatusCode::NO_CONTENT.into_response(),
        Ok(failed) => {
            let failure = BulkPublishFailure {
                failed_entries: failed
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
        Err(e) => error_response(e),
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
    let subscriptions: Vec<serde_json::Value> = state
        .subscriptions()
        .into_iter()
        .map(|(s, kind)| {
            serde_json::json!({
                "pubsubname": s.pubsub_name,
                "topic": s.topic,
                "metadata": s.metadata,
                // daprd lists the rules flat, a match left out when empty.
                "rules": [{"path": s.path().unwrap_or_default()}],
                "deadLetterTopic": s.dead_letter_topic.clone().unwrap_or_default(),
                "type": kind.name(),
            })
        })
        .collect();
    Json(serde_json::json!({
        "id": state.app_id,
        "runtimeVersion": state.runtime_version(),
        "enabledFeatures": state.enabled_features(),
        "components": components,
        "subscriptions": subscriptions,
        "extended": {},
    }))
    .into_response()
}
