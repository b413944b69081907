//! Dapr's JavaScript SDK (`@dapr/dapr`) as the publisher of a certification row:
//! the cases' publishes go through its `DaprClient`, in a long-running Node
//! program (`sdk/js/publisher.mjs`) driven over its stdin and stdout, to a sidecar.
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

/// The SDK's package name and the version `sdk/js/package-lock.json` pins, for
/// reports.
pub const JS_SDK: &str = "@dapr/dapr";

/// How long one publish through the SDK may take.
const CALL_WITHIN: Duration = Duration::from_secs(60);

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Value>>>>;

/// A running `sdk/js/publisher.mjs`.
pub struct SdkPublisher {
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

impl SdkPublisher {
    /// Starts the SDK's client against the sidecar whose HTTP API listens on
    /// `dapr_http_port`, publishing to pub/sub `pubsub`; returns once it is ready.
    pub async fn start(sdk_dir: &Path, dapr_http_port: u16, pubsub: &str) -> anyhow::Result<Self> {
        let mut child = Command::new("node")
            .arg("publisher.mjs")
            .current_dir(sdk_dir)
            .env("DAPR_HTTP_PORT", dapr_http_port.to_string())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| anyhow::anyhow!("cannot start node for Dapr's JavaScript SDK: {e}"))?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        tokio::spawn(log_stderr(child.stderr.take().expect("piped")));
        let pending: Pending = Arc::default();
        let (ready, is_ready) = oneshot::channel();
        tokio::spawn(read_answers(stdout, pending.clone(), ready));
        match tokio::time::timeout(Duration::from_secs(30), is_ready).await {
            Ok(Ok(())) => {}
            _ => anyhow::bail!(
                "sdk/js/publisher.mjs did not say it was ready within 30 s (is Node.js installed?)"
            ),
        }
        Ok(SdkPublisher {
            pubsub: pubsub.to_string(),
            stdin: tokio::sync::Mutex::new(stdin),
            pending,
            next: AtomicU64::new(1),
            positions: AtomicU64::new(0),
            child: tokio::sync::Mutex::new(child),
        })
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
        let failed = |message: String| PubSubError::Broker {
            context: format!("{what} through {JS_SDK}"),
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
                    what: format!("{what} through {JS_SDK}"),
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
        match answer["error"].as_str() {
            None => Ok(MessageId::new(
                request.topic,
                None,
                self.positions.fetch_add(1, Ordering::Relaxed),
            )),
            Some(error) => Err(sdk_error(error, "publishing")),
        }
    }

    /// A bulk publish with `publishBulk`: each entry in the shape the API takes
    /// (as the suite's own client sends it), and the failed entries the SDK reports.
    pub async fn bulk_publish(&self, request: BulkPublishRequest) -> Result<BulkPublishResponse> {
        if let Some(index) = request.entries.iter().position(|e| e.entry_id.is_empty()) {
            // The SDK gives an entry without an entryID a random UUID: the request
            // the case asks for cannot be sent through it.
            return Err(PubSubError::Unsupported {
                component: JS_SDK.into(),
                feature: format!(
                    "a bulk entry without an entryID (index {index}; the SDK sends a random UUID in its place)"
                ),
            });
        }
        let messages: Vec<Value> = request
            .entries
            .iter()
            .map(|entry| {
                let wire = wire_entry(entry);
                json!({
                    "entryID": wire.entry_id,
                    "eventText": wire.event.get(),
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
        if let Some(error) = answer["error"].as_str() {
            return Err(sdk_error(error, "bulk publishing"));
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
        // The SDK lists every entry as failed when the whole request was refused:
        // the request's error, as the sidecar answered it.
        if count > 0 && failed.len() == count {
            if let Some(refused) = failed
                .first()
                .map(|f| sdk_error(&f.error, "bulk publishing"))
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

/// The SDK's own log lines (its errors, as `LogLevel.Error` keeps them) go to the
/// run's log, beside the cell they belong to, not to the terminal.
pub(crate) async fn log_stderr(stderr: tokio::process::ChildStderr) {
    let mut lines = BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::warn!(target: "dapr_js_sdk", "{line}");
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
}
