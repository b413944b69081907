//! Attaching to a sidecar that is already running (daprd, `serve`, any sidecar
//! that speaks Dapr's HTTP API). A running sidecar reads its app's `GET
//! /dapr/subscribe` once, when it starts, so the suite cannot subscribe through it
//! that way; it declares each subscription as a resource instead (`kind:
//! Subscription` in the directory the sidecar loads resources from), which daprd
//! takes up while running with its `HotReload` feature, and `serve` with
//! `--hot-reload`. The suite's app listens on the port the sidecar was given as its
//! app port, with a route per subscription, over HTTP or gRPC.
//!
//! One sidecar has one app id: every subscription's consumer group is that id. A
//! topic is therefore delivered to the suite's app once at a time, and in one
//! group for the whole run; a case that needs two groups or two members of a group
//! on one topic is refused with the reason (certify through `--sidecar-command`,
//! which starts a sidecar per app, for those).

use crate::resources::{write_subscription, SubscriptionResource};
use crate::shared_app::SharedApp;
use crate::subscriber::declaration;
use pubsub_components::runtime::{Handler, Subscription, BEYOND_REMOTE_API};
use pubsub_components::{PubSubError, Result};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// Where the running sidecar is and how it was started.
#[derive(Debug, Clone)]
pub struct AttachOptions {
    /// Its HTTP API, e.g. `http://127.0.0.1:3500`.
    pub base: String,
    /// The pub/sub name the cases publish to and subscribe on.
    pub pubsub: String,
    /// Sent as `dapr-api-token` when set.
    pub api_token: Option<String>,
    /// The app port the sidecar was started with: the suite's app listens there.
    pub app_port: u16,
    /// The directory the sidecar loads resources from (daprd's `--resources-path`):
    /// the suite writes its subscriptions there, and removes them when they end.
    pub resources: PathBuf,
    /// How long the sidecar may take to take up (or drop) a subscription.
    pub ready_within: Duration,
    /// Its gRPC API, e.g. `http://127.0.0.1:50001`, where the suite talks to it over
    /// gRPC: it publishes there, and the suite's app answers Dapr's app callbacks (the
    /// sidecar runs with the gRPC app protocol). `None`: over HTTP.
    pub grpc: Option<String>,
}

/// A running sidecar the suite attached to, and the suite's app behind it.
pub struct Attached {
    inner: Arc<Inner>,
}

struct Inner {
    options: AttachOptions,
    http: reqwest::Client,
    /// The sidecar's app id (`GET /v1.0/metadata`): every subscription's group.
    app_id: String,
    app: tokio::sync::Mutex<Option<SharedApp>>,
    /// Each topic subscribed in this run: the group the case asked for, and whether
    /// a subscription to it runs now.
    topics: Mutex<HashMap<String, TopicUse>>,
    /// Resource names of this run start with it.
    prefix: String,
    next: AtomicU64,
}

struct TopicUse {
    group: String,
    active: bool,
}

/// A subscription the attached sidecar delivers to the suite's app.
pub struct AttachedMember {
    inner: Arc<Inner>,
    topic: String,
    route: u64,
    path: String,
    file: PathBuf,
}

impl Attached {
    /// Asks the sidecar who it is (`GET /v1.0/metadata`: its app id, its pub/subs)
    /// and starts the suite's app on the sidecar's app port. Errors name what is
    /// missing: a sidecar that does not answer, a pub/sub it does not serve, a
    /// resources directory the suite cannot write, a port it cannot listen on.
    pub async fn connect(options: AttachOptions) -> anyhow::Result<Attached> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()?;
        let metadata = read_metadata(&http, &options).await?;
        let app_id = metadata
            .get("id")
            .and_then(serde_json::Value::as_str)
            .filter(|id| !id.is_empty())
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "the sidecar at {} names no app id in GET /v1.0/metadata",
                    options.base
                )
            })?
            .to_string();
        let served: Vec<String> = metadata
            .get("components")
            .and_then(serde_json::Value::as_array)
            .map(|components| {
                components
                    .iter()
                    .filter(|c| {
                        c.get("type")
                            .and_then(serde_json::Value::as_str)
                            .is_some_and(|t| t.starts_with("pubsub."))
                    })
                    .filter_map(|c| c.get("name").and_then(serde_json::Value::as_str))
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        if !served.contains(&options.pubsub) {
            anyhow::bail!(
                "the sidecar at {} serves no pub/sub named '{}' (it serves: {})",
                options.base,
                options.pubsub,
                if served.is_empty() {
                    "none".to_string()
                } else {
                    served.join(", ")
                }
            );
        }
        let probe = options.resources.join(".pcs-write-probe");
        std::fs::write(&probe, b"").map_err(|e| {
            anyhow::anyhow!(
                "cannot write subscriptions to the sidecar's resources directory {}: {e}",
                options.resources.display()
            )
        })?;
        let _ = std::fs::remove_file(&probe);
        let app = match options.grpc {
            None => SharedApp::start(options.app_port).await?,
            Some(_) => SharedApp::start_grpc(options.app_port).await?,
        };
        let prefix = format!(
            "pcs-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() % 1_000_000)
        );
        Ok(Attached {
            inner: Arc::new(Inner {
                options,
                http,
                app_id,
                app: tokio::sync::Mutex::new(Some(app)),
                topics: Mutex::new(HashMap::new()),
                prefix,
                next: AtomicU64::new(1),
            }),
        })
    }

    /// The sidecar's app id.
    pub fn app_id(&self) -> &str {
        &self.inner.app_id
    }

    /// The sidecar's API.
    pub fn base(&self) -> &str {
        &self.inner.options.base
    }

    /// Whether the suite talks to it over gRPC.
    pub fn over_grpc(&self) -> bool {
        self.inner.options.grpc.is_some()
    }

    /// Declares `subscription` to the sidecar (delivering to `handler`; none: every
    /// delivery is answered 503, to be delivered again) and returns once the
    /// sidecar lists it in `GET /v1.0/metadata`.
    pub async fn join(
        &self,
        subscription: &Subscription,
        handler: Option<Handler>,
    ) -> Result<AttachedMember> {
        let inner = &self.inner;
        let bulk = matches!(handler, Some(Handler::Bulk(_)));
        let unsupported = |feature: String| PubSubError::Unsupported {
            component: BEYOND_REMOTE_API.into(),
            feature,
        };
        let mut spec =
            declaration(&inner.options.pubsub, subscription, bulk).map_err(unsupported)?;
        let topic = spec.topic.clone();
        inner
            .claim(&topic, &subscription.group)
            .map_err(unsupported)?;
        let guard = inner.app.lock().await;
        let Some(app) = guard.as_ref() else {
            inner.release(&topic);
            return Err(PubSubError::Broker {
                context: format!("subscribing to {topic} through {}", inner.options.base),
                message: "the attached target was stopped".into(),
            });
        };
        let (route, path) = app.add(handler);
        spec.route = Some(path.clone());
        let name = format!(
            "{}-{}",
            inner.prefix,
            inner.next.fetch_add(1, Ordering::Relaxed)
        );
        let resource = SubscriptionResource::new(&name, spec, &inner.app_id);
        let file = match write_subscription(&inner.options.resources, &resource) {
            Ok(file) => file,
            Err(e) => {
                app.remove(route);
                inner.release(&topic);
                return Err(PubSubError::Broker {
                    context: format!("declaring the subscription to {topic}"),
                    message: format!("{e:#}"),
                });
            }
        };
        let member = AttachedMember {
            inner: inner.clone(),
            topic: topic.clone(),
            route,
            path,
            file,
        };
        drop(guard);
        if let Err(e) = member.wait_until_listed(true).await {
            member.leave().await;
            return Err(e);
        }
        Ok(member)
    }

    /// Stops the suite's app (subscriptions still declared are removed by their
    /// handles).
    pub async fn stop(&self) {
        if let Some(app) = self.inner.app.lock().await.take() {
            app.stop().await;
        }
    }
}

impl Inner {
    /// Marks `topic` subscribed for `group`, or says why the attached sidecar
    /// cannot: one subscription per topic at a time, one group per topic per run.
    fn claim(&self, topic: &str, group: &str) -> std::result::Result<(), String> {
        let mut topics = self.topics.lock().unwrap_or_else(|p| p.into_inner());
        match topics.get_mut(topic) {
            Some(used) if used.active => Err(format!(
                "a second subscription to {topic} (group {group}) while one runs: an attached sidecar delivers a topic to its app once, in its app id's group ({}); certify with --sidecar-command for a sidecar per app",
                self.app_id
            )),
            Some(used) if used.group != group => Err(format!(
                "group {group} on {topic} after group {}: every subscription of an attached sidecar is in its app id's group ({}); certify with --sidecar-command for a sidecar per app",
                used.group, self.app_id
            )),
            Some(used) => {
                used.active = true;
                Ok(())
            }
            None => {
                topics.insert(
                    topic.to_string(),
                    TopicUse {
                        group: group.to_string(),
                        active: true,
                    },
                );
                Ok(())
            }
        }
    }

    fn release(&self, topic: &str) {
        if let Some(used) = self
            .topics
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(topic)
        {
            used.active = false;
        }
    }
}

impl AttachedMember {
    /// Waits until the sidecar lists the subscription (`listed`) or no longer does.
    async fn wait_until_listed(&self, listed: bool) -> Result<()> {
        let inner = &self.inner;
        let within = inner.options.ready_within;
        let deadline = Instant::now() + within;
        let mut last;
        loop {
            match read_metadata(&inner.http, &inner.options).await {
                Ok(metadata) => {
                    if lists(&metadata, &inner.options.pubsub, &self.topic, &self.path) == listed {
                        return Ok(());
                    }
                    last = "not yet".into();
                }
                Err(e) => last = format!("{e:#}"),
            }
            if Instant::now() >= deadline {
                return Err(PubSubError::Timeout {
                    after: within,
                    what: format!(
                        "waiting for the sidecar at {} to {} the subscription to {} declared in {} (does it run with hot reload? last: {last})",
                        inner.options.base,
                        if listed { "take up" } else { "drop" },
                        self.topic,
                        self.file.display()
                    ),
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Removes the subscription's resource and waits (bounded) until the sidecar
    /// has dropped it; its route goes last, so that what the sidecar still delivers
    /// meanwhile reaches the handler.
    pub async fn leave(self) {
        let _ = std::fs::remove_file(&self.file);
        if let Err(e) = self.wait_until_listed(false).await {
            tracing::warn!(error = %e, "the attached sidecar kept a subscription");
        }
        if let Some(app) = self.inner.app.lock().await.as_ref() {
            app.remove(self.route);
        }
        self.inner.release(&self.topic);
    }
}

impl Drop for AttachedMember {
    /// A member dropped without [`AttachedMember::leave`] (its case stopped at its
    /// bound) still takes its resource away: left behind, a subscription kept
    /// delivering to a route nobody serves, and one the sidecar refused stayed in its
    /// directory for the next run.
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.file);
    }
}

/// The sidecar's `GET /v1.0/metadata` answer.
async fn read_metadata(
    http: &reqwest::Client,
    options: &AttachOptions,
) -> anyhow::Result<serde_json::Value> {
    let url = format!("{}/v1.0/metadata", options.base.trim_end_matches('/'));
    let mut request = http.get(&url);
    if let Some(token) = &options.api_token {
        request = request.header(crate::wire::API_TOKEN_HEADER, token);
    }
    let response = request
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("the sidecar does not answer GET {url}: {e}"))?;
    let status = response.status();
    let body = response.bytes().await?;
    if !status.is_success() {
        anyhow::bail!(
            "the sidecar answered GET {url} with HTTP {status}: {}",
            String::from_utf8_lossy(&body)
        );
    }
    serde_json::from_slice(&body)
        .map_err(|e| anyhow::anyhow!("GET {url} did not answer a JSON object: {e}"))
}

/// Whether a metadata answer lists a subscription of `pubsub` to `topic` routed to
/// `path` (daprd lists rules flat: `rules: [{match, path}]`).
fn lists(metadata: &serde_json::Value, pubsub: &str, topic: &str, path: &str) -> bool {
    metadata
        .get("subscriptions")
        .and_then(serde_json::Value::as_array)
        .is_some_and(|subscriptions| {
            subscriptions.iter().any(|s| {
                s.get("pubsubname").and_then(serde_json::Value::as_str) == Some(pubsub)
                    && s.get("topic").and_then(serde_json::Value::as_str) == Some(topic)
                    && s.get("rules")
                        .and_then(serde_json::Value::as_array)
                        .is_some_and(|rules| {
                            rules.iter().any(|r| {
                                r.get("path").and_then(serde_json::Value::as_str) == Some(path)
                            })
                        })
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subscription_is_listed_by_pubsub_topic_and_route() {
        let metadata = serde_json::json!({
            "id": "app",
            "subscriptions": [
                {"pubsubname": "ps", "topic": "t", "rules": [{"path": "/pcs/1/deliver"}], "deadLetterTopic": "", "type": "DECLARATIVE"}
            ]
        });
        assert!(lists(&metadata, "ps", "t", "/pcs/1/deliver"));
        assert!(!lists(&metadata, "ps", "t", "/pcs/2/deliver"));
        assert!(!lists(&metadata, "other", "t", "/pcs/1/deliver"));
        assert!(!lists(
            &serde_json::json!({"id": "app"}),
            "ps",
            "t",
            "/pcs/1/deliver"
        ));
    }
}
