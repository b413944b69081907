//! Dapr's SDKs as the subscribing app of a certification row: the JavaScript SDK's
//! `DaprServer` (`sdk/js/app.mjs`, over HTTP) or the Python SDK's `dapr.ext.grpc.App`
//! (`sdk/python/app.py`, over gRPC) declares the subscription, its sidecar delivers
//! to it, and its handler hands what the SDK gives a handler (the JavaScript SDK: the
//! data and the headers; the Python SDK: the CloudEvent's fields, data and metadata)
//! to a relay of the suite's, which turns it into an [`Event`] for the case's handler
//! and answers the handler's status for the SDK to return. What the SDK makes of a
//! delivery (its data, its status) is what the case sees, so a row through it
//! certifies the SDK's app side.

use crate::sdk::{Sdk, JS_SDK};
use crate::subscriber::Deliveries;
use crate::subscriber::{declaration, metadata_from_headers};
use crate::wire::AppSubscription;
use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use base64::Engine as _;
use pubsub_components::runtime::{Event, MessageHandler, Subscription};
use pubsub_components::MessageId;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What the SDK hands an app's handler: the event's data only, so what a case sees
/// through this row has no content type and no CloudEvent.
pub const DATA_ONLY: &str = "the SDK hands its handler the event's data and headers, not the CloudEvent (no id, content type or envelope fields)";

/// A running `sdk/js/app.mjs` or `sdk/python/app.py`, and the relay it hands
/// messages to.
pub struct SdkApp {
    sdk: Sdk,
    child: Child,
    relay_stop: watch::Sender<bool>,
    relay: JoinHandle<()>,
}

/// What the SDK's handler got, as `app.mjs` spells it (the data and headers).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Relayed {
    data: RelayedData,
    #[serde(default)]
    headers: BTreeMap<String, Value>,
}

/// What the Python SDK's handler got, as `app.py` spells it: the event as a
/// `TopicEventRequest` (protobuf, base64), and the metadata it carried.
#[derive(Deserialize)]
struct RelayedOverGrpc {
    request: String,
    #[serde(default)]
    metadata: BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct RelayedData {
    text: Option<String>,
    base64: Option<String>,
    json: Option<Value>,
    #[serde(default)]
    undefined: bool,
}

struct Relay {
    topic: String,
    handler: Arc<dyn MessageHandler>,
    /// Deliveries seen per message (its data and metadata): the attempt the SDK's
    /// handler is not told.
    attempts: Mutex<HashMap<u64, u32>>,
    positions: AtomicU64,
    /// What reads events delivered over gRPC (the Python SDK's app).
    deliveries: Deliveries,
}

impl SdkApp {
    /// Starts the relay, and `sdk`'s app (in `sdk_dir`) declaring `declared` (one
    /// topic), handing what it receives to `handler`: the JavaScript app on
    /// `app_port`, for the sidecar that will listen on `dapr_http_port`, answering `GET
    /// /dapr/subscribe` once it runs; the Python app on a port it picks (both
    /// ignored), answering `ListTopicSubscriptions`. [`SdkApp::started`] waits until it
    /// says it started.
    pub async fn start(
        sdk: Sdk,
        sdk_dir: &Path,
        app_port: u16,
        dapr_http_port: u16,
        declared: &AppSubscription,
        handler: Arc<dyn MessageHandler>,
    ) -> anyhow::Result<SdkApp> {
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .map_err(|e| anyhow::anyhow!("cannot listen for the SDK app's relay: {e}"))?;
        let relay_address = listener.local_addr()?;
        let relay = Arc::new(Relay {
            topic: declared.topic.clone(),
            handler,
            attempts: Mutex::new(HashMap::new()),
            positions: AtomicU64::new(0),
            deliveries: Deliveries::default(),
        });
        let router = Router::new()
            .route("/relay", post(relayed))
            .route("/relay-grpc", post(relayed_over_grpc))
            .route("/warm-up", axum::routing::get(|| async { "warm" }))
            .with_state(relay);
        let (relay_stop, relay) =
            crate::server::spawn(listener, router, "the SDK app's relay server");
        let mut config = json!({
            "pubsub": declared.pubsub_name,
            "topic": declared.topic,
            "deadLetterTopic": declared.dead_letter_topic,
            "metadata": beyond_defaults(&declared.metadata),
            "relay": format!("http://{relay_address}/relay"),
        });
        let mut command = match sdk {
            Sdk::Js | Sdk::JsGrpc => tokio::process::Command::new("node"),
            Sdk::Python => {
                config["relay"] = json!(format!("http://{relay_address}/relay-grpc"));
                config["warmUp"] = json!(format!("http://{relay_address}/warm-up"));
                let mut command = tokio::process::Command::new(sdk_dir.join(".venv/bin/python"));
                command.env("PYTHONUNBUFFERED", "1");
                command
            }
        };
        let spawned = command
            .arg(match sdk {
                Sdk::Js | Sdk::JsGrpc => "app.mjs",
                Sdk::Python => "app.py",
            })
            .arg(config.to_string())
            .current_dir(sdk_dir)
            .env("APP_PORT", app_port.to_string())
            .env("DAPR_HTTP_PORT", dapr_http_port.to_string())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                let _ = relay_stop.send(true);
                anyhow::bail!("cannot start the app of {}: {e}", sdk.name());
            }
        };
        if let Some(stderr) = child.stderr.take() {
            tokio::spawn(crate::sdk::log_stderr(stderr));
        }
        Ok(SdkApp {
            sdk,
            child,
            relay_stop,
            relay,
        })
    }

    /// Waits (at most `within`) until the app says its server runs (the
    /// JavaScript app: and its client has seen the sidecar); the port it listens on,
    /// where it picked it (the Python app).
    pub async fn started(&mut self, within: Duration) -> anyhow::Result<Option<u16>> {
        let stdout = self
            .child
            .stdout
            .take()
            .ok_or_else(|| anyhow::anyhow!("the SDK app's output was already read"))?;
        let mut lines = BufReader::new(stdout).lines();
        let said = tokio::time::timeout(within, async {
            while let Ok(Some(line)) = lines.next_line().await {
                if let Ok(said) = serde_json::from_str::<Value>(&line) {
                    if said["started"] == true {
                        return Some(said["port"].as_u64().and_then(|p| u16::try_from(p).ok()));
                    }
                }
            }
            None
        })
        .await;
        // What the app prints later (the Python SDK prints data it cannot parse) goes
        // to the run's log: a pipe nobody reads would block the app, or break it.
        let sdk = self.sdk.name();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::debug!(target: "dapr_sdk", %sdk, "{line}");
            }
        });
        let program = match self.sdk {
            Sdk::Js | Sdk::JsGrpc => "sdk/js/app.mjs",
            Sdk::Python => "sdk/python/app.py",
        };
        match said {
            Ok(Some(port)) => Ok(port),
            Ok(None) => anyhow::bail!("{program} exited before it started"),
            Err(_) => anyhow::bail!("{program} did not start within {within:?}"),
        }
    }

    /// Stops the app and its relay.
    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
        let _ = self.relay_stop.send(true);
        let _ = self.relay.await;
    }
}

/// The subscription's metadata without the settings it leaves at the runtime's
/// defaults: an app declares what it changes (and the SDK cannot declare a duration,
/// see `sdk/js/app.mjs`, so only a case that sets one meets that).
fn beyond_defaults(metadata: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let defaults = declaration("", &Subscription::new("t", "g"), false)
        .map(|d| d.metadata)
        .unwrap_or_default();
    metadata
        .iter()
        .filter(|(key, value)| defaults.get(*key) != Some(*value))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect()
}

async fn relayed(State(relay): State<Arc<Relay>>, Json(message): Json<Relayed>) -> Json<Value> {
    let event = relay.event(message);
    relay.answer(event).await
}

async fn relayed_over_grpc(
    State(relay): State<Arc<Relay>>,
    Json(message): Json<RelayedOverGrpc>,
) -> Json<Value> {
    let event = base64::engine::general_purpose::STANDARD
        .decode(&message.request)
        .map_err(|e| format!("not base64: {e}"))
        .and_then(|bytes| {
            <dapr::dapr::proto::runtime::v1::TopicEventRequest as prost::Message>::decode(
                bytes.as_slice(),
            )
            .map_err(|e| format!("not a TopicEventRequest: {e}"))
        })
        .and_then(|request| {
            crate::grpc_subscriber::event_of(
                &relay.deliveries,
                request,
                message
                    .metadata
                    .iter()
                    .map(|(name, value)| (name.as_str(), value.as_str())),
            )
        });
    relay.answer(event).await
}

impl Relay {
    /// What the SDK's handler is told for `event`: the case's status, or to throw
    /// where the case's handler failed. An event the relay could not read is RETRY:
    /// the relay's own failure, not the case's, keeps the message (a handler that
    /// throws would have the SDK acknowledge it).
    async fn answer(&self, event: Result<Event, String>) -> Json<Value> {
        let event = match event {
            Ok(event) => event,
            Err(why) => {
                tracing::warn!(%why, "the SDK app's relay could not read a message");
                return Json(json!({ "status": "RETRY" }));
            }
        };
        match self.handler.handle(event).await {
            Ok(status) => Json(json!({ "status": status })),
            Err(why) => Json(json!({ "throw": why })),
        }
    }

    /// The event a case sees: the data as the SDK handed it (text as its bytes, a
    /// value as its JSON, a Buffer as its bytes, nothing as empty), the metadata
    /// its headers carry.
    fn event(&self, message: Relayed) -> Result<Event, String> {
        let data = match message.data {
            RelayedData { text: Some(t), .. } => t.into_bytes(),
            RelayedData {
                base64: Some(b), ..
            } => base64::engine::general_purpose::STANDARD
                .decode(b)
                .map_err(|e| format!("{JS_SDK} app relay: Buffer not base64: {e}"))?,
            RelayedData { json: Some(v), .. } => serde_json::to_vec(&v).unwrap_or_default(),
            RelayedData {
                undefined: true, ..
            } => Vec::new(),
            // `{"json": null}` parses as no field: the handler got null.
            _ => b"null".to_vec(),
        };
        let header = |value: &Value| match value {
            Value::String(s) => s.clone(),
            Value::Array(parts) => parts
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(", "),
            other => other.to_string(),
        };
        let headers: Vec<(String, String)> = message
            .headers
            .iter()
            .map(|(name, value)| (name.clone(), header(value)))
            .collect();
        let trace_parent = headers
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case("traceparent"))
            .map(|(_, value)| value.clone());
        let metadata = metadata_from_headers(headers.iter().map(|(n, v)| (n.as_str(), v.as_str())));
        let mut fingerprint = std::collections::hash_map::DefaultHasher::new();
        data.hash(&mut fingerprint);
        metadata.hash(&mut fingerprint);
        let identity = fingerprint.finish();
        let attempt = {
            let mut attempts = self.attempts.lock().unwrap_or_else(|p| p.into_inner());
            let count = attempts.entry(identity).or_insert(0);
            *count += 1;
            *count
        };
        Ok(Event {
            id: format!("{identity:016x}"),
            topic: self.topic.clone(),
            data,
            content_type: None,
            metadata,
            message_id: MessageId::new(
                self.topic.clone(),
                None,
                self.positions.fetch_add(1, Ordering::Relaxed),
            ),
            attempt,
            trace_parent,
            cloud_event: None,
            published_at: SystemTime::now(),
        })
    }
}
