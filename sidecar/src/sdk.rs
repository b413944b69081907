//! Dapr's SDKs as the publisher of a certification row: the cases' publishes go
//! through an SDK's client, in a long-running program driven over its stdin and
//! stdout, to a sidecar: the JavaScript SDK's `DaprClient` over HTTP
//! (`sdk/js/publisher.mjs`), the Python SDK's over gRPC (`sdk/python/publisher.py`).
//! What the SDK returns is what the case sees, so a row through it certifies the
//! SDK's client side: its requests, and how it reads the sidecar's answers.

use crate::client::{api_error, wire_entry};
use crate::wire;
use pubsub_components::runtime::{
    BulkPublishRequest, BulkPublishResponse, FailedEntry, PublishRequest,
};
use pubsub_components::{MessageId, PubSubError, Result};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::oneshot;

/// The JavaScript SDK's package name, for reports.
pub const JS_SDK: &str = "@dapr/dapr";

/// The Python SDK's package name (on PyPI), for reports.
pub const PYTHON_SDK: &str = "dapr (Python)";

/// How long one publish through the SDK may take.
const CALL_WITHIN: Duration = Duration::from_secs(60);

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Value>>>>;

/// Which SDK a publisher program drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sdk {
    /// `@dapr/dapr`'s `DaprClient` over HTTP.
    Js,
    /// `@dapr/dapr`'s `DaprClient` over gRPC.
    JsGrpc,
    /// The Python SDK's `DaprClient` over gRPC.
    Python,
}

impl Sdk {
    /// The SDK's name, for reports and errors.
    pub fn name(self) -> &'static str {
        match self {
            Sdk::Js | Sdk::JsGrpc => JS_SDK,
            Sdk::Python => PYTHON_SDK,
        }
    }
}

/// A running `sdk/js/publisher.mjs` or `sdk/python/publisher.py`.
pub struct SdkPublisher {
    sdk: Sdk,
    pubsub: String,
    stdin: tokio::sync::Mutex<ChildStdin>,
    pending: Pending,
    next: AtomicU64,
    positions: AtomicU64,
    child: tokio::sync::Mutex<Child>,
}

/// The directory of the SDK as `scripts/install.sh` installs it (`sdk/js`), or an
/// error saying how to install it.
pub fn js_sdk_dir(root: &Path) -> anyhow::Result<PathBuf> {
    let dir = root.join("sdk/js");
    if !dir.join("node_modules/@dapr/dapr/package.json").exists() {
        anyhow::bail!(
            "Dapr's JavaScript SDK is not installed in {}: run ./scripts/install.sh (it runs npm ci there)",
            dir.display()
        );
    }
    Ok(dir)
}

/// The installed SDK's version (`@dapr/dapr 3.18.0`).
pub fn js_sdk_version(sdk_dir: &Path) -> String {
    std::fs::read_to_string(sdk_dir.join("node_modules/@dapr/dapr/package.json"))
        .ok()
        .and_then(|text| serde_json::from_str::<Value>(&text).ok())
        .and_then(|package| package["version"].as_str().map(str::to_string))
        .map_or_else(|| JS_SDK.to_string(), |v| format!("{JS_SDK} {v}"))
}

/// The directory of the Python SDK as `scripts/install.sh` installs it
/// (`sdk/python`, its virtual environment in `.venv`), or an error saying how to
/// install it.
pub fn python_sdk_dir(root: &Path) -> anyhow::Result<PathBuf> {
    let dir = root.join("sdk/python");
    if python_sdk_version(&dir).is_none() {
        anyhow::bail!(
            "Dapr's Python SDK is not installed in {}: run ./scripts/install.sh (it makes sdk/python/.venv)",
            dir.display()
        );
    }
    Ok(dir)
}

/// The installed Python SDK's version (`dapr (Python) 1.19.0`), read from its
/// package's metadata in the virtual environment.
pub fn python_sdk_version(sdk_dir: &Path) -> Option<String> {
    let lib = sdk_dir.join(".venv/lib");
    for python in std::fs::read_dir(lib).ok()?.flatten() {
        let packages = python.path().join("site-packages");
        for entry in std::fs::read_dir(packages).ok()?.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(version) = name
                .strip_prefix("dapr-")
                .and_then(|rest| rest.strip_suffix(".dist-info"))
            {
                return Some(format!("{PYTHON_SDK} {version}"));
            }
        }
    }
    None
}

impl SdkPublisher {
    /// Starts the JavaScript SDK's client against the sidecar whose HTTP API listens
    /// on `dapr_http_port`, publishing to pub/sub `pubsub`; returns once it is ready.
    pub async fn start(sdk_dir: &Path, dapr_http_port: u16, pubsub: &str) -> anyhow::Result<Self> {
        let mut command = Command::new("node");
        command
            .arg("publisher.mjs")
            .current_dir(sdk_dir)
            .env("DAPR_HTTP_PORT", dapr_http_port.to_string());
        Self::spawn(command, Sdk::Js, pubsub, "(is Node.js installed?)").await
    }

    /// Starts the JavaScript SDK's client over gRPC against the sidecar whose gRPC API
    /// listens on `dapr_grpc_port`, publishing to pub/sub `pubsub`; returns once it is
    /// ready.
    pub async fn start_js_grpc(
        sdk_dir: &Path,
        dapr_grpc_port: u16,
        pubsub: &str,
    ) -> anyhow::Result<Self> {
        let mut command = Command::new("node");
        command
            .arg("publisher.mjs")
            .current_dir(sdk_dir)
            .env("DAPR_PROTOCOL", "grpc")
            .env("DAPR_GRPC_PORT", dapr_grpc_port.to_string());
        Self::spawn(command, Sdk::JsGrpc, pubsub, "(is Node.js installed?)").await
    }

    /// Starts the Python SDK's client (in `sdk_dir`'s virtual environment) against
    /// the sidecar whose gRPC API listens on `dapr_grpc_port` (its HTTP API, which
    /// the SDK probes for health, on `dapr_http_port`), publishing to pub/sub
    /// `pubsub`; returns once it is ready.
    pub async fn start_python(
        sdk_dir: &Path,
        dapr_http_port: u16,
        dapr_grpc_port: u16,
        pubsub: &str,
    ) -> anyhow::Result<Self> {
        let mut command = Command::new(sdk_dir.join(".venv/bin/python"));
        command
            .arg("publisher.py")
            .current_dir(sdk_dir)
            .env("DAPR_HTTP_PORT", dapr_http_port.to_string())
            .env("DAPR_GRPC_PORT", dapr_grpc_port.to_string())
            .env("PYTHONUNBUFFERED", "1");
        Self::spawn(
            command,
            Sdk::Python,
            pubsub,
            "(did ./scripts/install.sh make sdk/python/.venv?)",
        )
        .await
    }

    async fn spawn(
        mut command: Command,
        sdk: Sdk,
        pubsub: &str,
        hint: &str,
    ) -> anyhow::Result<Self> {
        let mut child = command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                anyhow::anyhow!("cannot start the publisher of {}: {e} {hint}", sdk.name())
            })?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        tokio::spawn(log_stderr(child.stderr.take().expect("piped")));
        let pending: Pending = Arc::default();
        let (ready, is_ready) = oneshot::channel();
        tokio::spawn(read_answers(stdout, pending.clone(), ready));
        match tokio::time::timeout(Duration::from_secs(30), is_ready).await {
            Ok(Ok(())) => {}
            _ => anyhow::bail!(
                "the publisher of {} did not say it was ready within 30 s {hint}",
                sdk.name()
            ),
        }
        Ok(SdkPublisher {
            sdk,
            pubsub: pubsub.to_string(),
            stdin: tokio::sync::Mutex::new(stdin),
            pending,
            next: AtomicU64::new(1),
            positions: AtomicU64::new(0),
            child: tokio::sync::Mutex::new(child),
        })
    }

    /// The SDK it drives.
    pub fn sdk(&self) -> Sdk {
        self.sdk
    }

    /// Stops the program.
    pub async fn stop(&self) {
        let _ = self.child.lock().await.kill().await;
    }

    async fn call(&self, mut request: Value, what: &str) -> Result<Value> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        request["id"] = json!(id);
        request["pubsub"] = json!(self.pubsub);
        let (answer, answered) = oneshot::channel();
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, answer);
        let sdk = self.sdk.name();
        let failed = |message: String| PubSubError::Broker {
            context: format!("{what} through {sdk}"),
            message,
        };
        let mut line = request.to_string();
        line.push('\n');
        self.stdin
            .lock()
            .await
            .write_all(line.as_bytes())
            .await
            .map_err(|e| failed(format!("the SDK's program does not read: {e}")))?;
        match tokio::time::timeout(CALL_WITHIN, answered).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(_)) => Err(failed("the SDK's program exited".into())),
            Err(_) => {
                self.pending
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&id);
                Err(PubSubError::Timeout {
                    after: CALL_WITHIN,
                    what: format!("{what} through {sdk}"),
                })
            }
        }
    }

    /// A publish as an app author makes it: a JSON-typed payload as the value it
    /// parses to, any other as a Buffer, metadata as the SDK's metadata option.
    pub async fn publish(&self, request: PublishRequest) -> Result<MessageId> {
        let essence = request
            .content_type
            .as_deref()
            .map(wire::essence)
            .unwrap_or_default();
        let mut call = json!({
            "op": "publish",
            "topic": request.topic,
            "contentType": request.content_type,
            "metadata": request.metadata,
        });
        // JSON travels as its text, parsed in Node (keeping its key order), so the
        // SDK gets the value an app holds and serializes it itself.
        match std::str::from_utf8(&request.data) {
            Ok(text) if wire::is_json(&essence) && serde_json::from_str::<Value>(text).is_ok() => {
                call["jsonText"] = json!(text)
            }
            _ => {
                use base64::Engine as _;
                call["base64"] =
                    json!(base64::engine::general_purpose::STANDARD.encode(&request.data));
            }
        }
        let answer = self.call(call, "publishing").await?;
        match self.error_in(&answer, "publishing") {
            None => Ok(MessageId::new(
                request.topic,
                None,
                self.positions.fetch_add(1, Ordering::Relaxed),
            )),
            Some(error) => Err(error),
        }
    }

    /// The error an answer carries, if any: the JavaScript SDK's text, or the Python
    /// SDK's gRPC status (its code and `ErrorInfo` reason).
    fn error_in(&self, answer: &Value, what: &str) -> Option<PubSubError> {
        let error = &answer["error"];
        match self.sdk {
            Sdk::Js => error.as_str().map(|text| sdk_error(text, what)),
            Sdk::JsGrpc | Sdk::Python => {
                (!error.is_null()).then(|| grpc_sdk_error(error, what, self.sdk))
            }
        }
    }

    /// A bulk publish with `publishBulk`: each entry in the shape the API takes
    /// (as the suite's own client sends it), and the failed entries the SDK reports.
    pub async fn bulk_publish(&self, request: BulkPublishRequest) -> Result<BulkPublishResponse> {
        if let Some(index) = request.entries.iter().position(|e| e.entry_id.is_empty()) {
            // The SDK gives an entry without an entryID a random UUID: the request
            // the case asks for cannot be sent through it.
            return Err(PubSubError::Unsupported {
                component: self.sdk.name().into(),
                feature: format!(
                    "a bulk entry without an entry id (index {index}; the SDK sends a random UUID in its place)"
                ),
            });
        }
        let messages: Vec<Value> = request
            .entries
            .iter()
            .map(|entry| {
                let wire = wire_entry(entry);
                use base64::Engine as _;
                json!({
                    "entryID": wire.entry_id,
                    // The event in the HTTP API's form (JavaScript), and as its
                    // bytes (Python, which sends them over gRPC).
                    "eventText": wire.event.get(),
                    "base64": base64::engine::general_purpose::STANDARD.encode(&entry.event),
                    "contentType": wire.content_type,
                    "metadata": wire.metadata.unwrap_or_default(),
                })
            })
            .collect();
        let count = messages.len();
        let answer = self
            .call(
                json!({
                    "op": "publishBulk",
                    "topic": request.topic,
                    "messages": messages,
                    "metadata": request.metadata,
                }),
                "bulk publishing",
            )
            .await?;
        if let Some(error) = self.error_in(&answer, "bulk publishing") {
            return Err(error);
        }
        let failed: Vec<FailedEntry> = answer["failed"]
            .as_array()
            .map(|failed| {
                failed
                    .iter()
                    .map(|f| FailedEntry {
                        entry_id: f["entryID"].as_str().unwrap_or_default().to_string(),
                        error: f["error"].as_str().unwrap_or_default().to_string(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        // The JavaScript SDK lists every entry as failed when the whole request was
        // refused: the request's error, as the sidecar answered it.
        let first = answer["failed"].get(0).cloned().unwrap_or_default();
        if matches!(self.sdk, Sdk::Js | Sdk::JsGrpc) && count > 0 && failed.len() == count {
            if let Some(refused) = failed
                .first()
                .map(|f| match self.sdk {
                    Sdk::JsGrpc => grpc_sdk_error(&first["grpc"], "bulk publishing", self.sdk),
                    _ => sdk_error(&f.error, "bulk publishing"),
                })
                .filter(|e| {
                    matches!(
                        e,
                        PubSubError::InvalidRequest(_)
                            | PubSubError::NotFound(_)
                            | PubSubError::NotAllowed(_)
                    )
                })
            {
                return Err(refused);
            }
        }
        Ok(BulkPublishResponse {
            failed_entries: failed,
        })
    }
}

/// An error the SDK returned: its text holds the sidecar's answer
/// (`{"error", "error_msg", "status"}`) when there was one.
fn sdk_error(text: &str, what: &str) -> PubSubError {
    let answer = text
        .find('{')
        .and_then(|start| serde_json::from_str::<Value>(&text[start..]).ok());
    match answer
        .as_ref()
        .and_then(|a| Some((a["status"].as_u64()?, a["error_msg"].as_str()?)))
    {
        Some((status, body)) => api_error(status as u16, body.as_bytes(), what),
        None => PubSubError::Broker {
            context: format!("{what} through {JS_SDK}"),
            message: text.to_string(),
        },
    }
}

/// A gRPC error an SDK raised, as its program spells it (`{"text", "code", "reason"}`:
/// the status's message, code name and `ErrorInfo` reason), read as the suite's gRPC
/// client reads it.
fn grpc_sdk_error(error: &Value, what: &str, sdk: Sdk) -> PubSubError {
    let text = error["text"].as_str().unwrap_or_default();
    match error["code"]
        .as_str()
        .and_then(crate::grpc_client::code_named)
    {
        Some(code) => crate::grpc_client::error_of(
            code,
            error["reason"].as_str().unwrap_or_default(),
            text,
            what,
        ),
        None => PubSubError::Broker {
            context: format!("{what} through {}", sdk.name()),
            message: text.to_string(),
        },
    }
}

/// The SDK's own log lines (its errors, as `LogLevel.Error` keeps them) go to the
/// run's log, beside the cell they belong to, not to the terminal.
pub(crate) async fn log_stderr(stderr: tokio::process::ChildStderr) {
    let mut lines = BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::warn!(target: "dapr_sdk", "{line}");
    }
}

async fn read_answers(
    stdout: tokio::process::ChildStdout,
    pending: Pending,
    ready: oneshot::Sender<()>,
) {
    let mut ready = Some(ready);
    let mut lines = BufReader::new(stdout).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let Ok(answer) = serde_json::from_str::<Value>(&line) else {
            tracing::warn!(%line, "the SDK's program printed something else");
            continue;
        };
        if answer["ready"] == json!(true) {
            if let Some(ready) = ready.take() {
                let _ = ready.send(());
            }
            continue;
        }
        let Some(id) = answer["id"].as_u64() else {
            continue;
        };
        if let Some(waiting) = pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id)
        {
            let _ = waiting.send(answer);
        }
    }
    // The program exited: every waiting call learns it (its sender is dropped).
    pending.lock().unwrap_or_else(|p| p.into_inner()).clear();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sidecars_answer_inside_an_sdk_error_is_read_back() {
        let text = r#"{"error":"Bad Request","error_msg":"{\"errorCode\":\"ERR_PUBSUB_EVENTS_SER\",\"message\":\"bad\"}","status":400}"#;
        assert!(matches!(
            sdk_error(text, "publishing"),
            PubSubError::InvalidRequest(_)
        ));
        let text = r#"{"error":"Not Found","error_msg":"{\"errorCode\":\"ERR_PUBSUB_NOT_FOUND\",\"message\":\"no\"}","status":404}"#;
        assert!(matches!(
            sdk_error(text, "publishing"),
            PubSubError::NotFound(_)
        ));
        assert!(matches!(
            sdk_error("fetch failed", "publishing"),
            PubSubError::Broker { .. }
        ));
    }

    #[test]
    fn the_python_sdks_grpc_error_is_read_as_the_grpc_clients() {
        let refused = json!({"text": "bad", "code": "INVALID_ARGUMENT", "reason": "DAPR_PUBSUB_MARSHAL_EVENTS"});
        assert!(matches!(
            grpc_sdk_error(&refused, "bulk publishing", Sdk::Python),
            PubSubError::InvalidRequest(text) if text.contains("DAPR_PUBSUB_MARSHAL_EVENTS")
        ));
        let unknown =
            json!({"text": "no", "code": "INVALID_ARGUMENT", "reason": "DAPR_PUBSUB_NOT_FOUND"});
        assert!(matches!(
            grpc_sdk_error(&unknown, "publishing", Sdk::Python),
            PubSubError::NotFound(_)
        ));
        let raised = json!({"text": "the SDK raised ValueError: x", "code": "", "reason": ""});
        assert!(matches!(
            grpc_sdk_error(&raised, "publishing", Sdk::Python),
            PubSubError::Broker { .. }
        ));
    }
}
