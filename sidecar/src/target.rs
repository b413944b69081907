//! The sidecar target: the runtime API answered by sidecars over HTTP, for the
//! suite's cases to run through unchanged. Publishing goes through one sidecar.
//! Each subscription is an app of the suite's with a sidecar of its own, started
//! for it (its app id is the subscription's group) and stopped when it ends; or,
//! attached to a running sidecar ([`crate::attach`]), a subscription declared to
//! it as a resource and delivered to the suite's app on its app port.

use crate::attach::{AttachOptions, Attached, AttachedMember};
use crate::client::SidecarClient;
use crate::grpc_client::GrpcClient;
use crate::launch::free_port;
use crate::launch::{Launched, Launcher};
use crate::sdk::{Sdk, SdkPublisher};
use crate::sdk_app::SdkApp;
use crate::subscriber::{declaration, SubscriberApp};
use async_trait::async_trait;
use pubsub_components::runtime::{
    BulkPublishRequest, BulkPublishResponse, Handler, PublishRequest, RemoteRuntime, Subscription,
    SubscriptionHandle, BEYOND_REMOTE_API,
};
use pubsub_components::{
    Capabilities, Component, Consumer, ConsumerSpec, MessageId, OutgoingMessage, PubSubError,
    Result, Support,
};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Mutex};

/// How many times the JavaScript SDK's app and its sidecar are started on new ports when
/// another process took one of theirs first.
const PORT_TRIES: u32 = 3;

/// How long the SDK's app may take to start and see its sidecar.
const SDK_APP_START_WITHIN: Duration = Duration::from_secs(30);

/// The app id of the sidecar that only publishes.
const PUBLISHER_APP_ID: &str = "pcs-publisher";

/// Sidecars addressed as pub/sub `pubsub`: started by a launcher, or one running
/// sidecar attached to.
pub struct SidecarTarget {
    pubsub: String,
    publisher: Publisher,
    sidecars: Sidecars,
}

/// Who publishes: the suite's own HTTP or gRPC client, or one of Dapr's SDKs (in a
/// program of its own, or the Rust SDK in this process).
enum Publisher {
    Http(SidecarClient),
    Grpc(GrpcClient),
    Sdk(Box<SdkPublisher>),
    RustSdk(Box<crate::rust_sdk::RustSdkPublisher>),
}

/// The publishing sidecar, and its app (which declares nothing) if it has one.
type Publishing = (Box<dyn Launched>, Option<SubscriberApp>);

enum Sidecars {
    Launched {
        launcher: Arc<dyn Launcher>,
        /// How long a sidecar may take to read its app's subscriptions.
        discovery_within: Duration,
        /// The publishing sidecar and its app (which declares nothing), if it has one.
        publishing: Mutex<Option<Publishing>>,
        /// The SDK whose app subscribes, and its directory: the JavaScript SDK's
        /// `DaprServer`, the Python SDK's `dapr.ext.grpc.App` (else the suite's own
        /// app does).
        sdk_app: Option<(Sdk, std::path::PathBuf)>,
    },
    Attached(Attached),
}

impl SidecarTarget {
    /// Starts the publishing sidecar.
    pub async fn start(
        launcher: Arc<dyn Launcher>,
        pubsub: &str,
        discovery_within: Duration,
    ) -> anyhow::Result<SidecarTarget> {
        Self::start_publishing_with(launcher, pubsub, discovery_within, None).await
    }

    /// Starts the publishing sidecar; with `js_sdk` (the SDK's directory), Dapr's
    /// JavaScript SDK publishes through it instead of the suite's own client.
    pub async fn start_publishing_with(
        launcher: Arc<dyn Launcher>,
        pubsub: &str,
        discovery_within: Duration,
        js_sdk: Option<&std::path::Path>,
    ) -> anyhow::Result<SidecarTarget> {
        let app = SubscriberApp::start(Vec::new(), None).await?;
        let sidecar = launcher.launch(PUBLISHER_APP_ID, app.port()).await?;
        let publisher = match js_sdk {
            None => Publisher::Http(SidecarClient::new(
                sidecar.base(),
                pubsub,
                None,
                Duration::from_secs(60),
            )?),
            Some(dir) => {
                let port = port_of(&sidecar.base())
                    .ok_or_else(|| anyhow::anyhow!("no port in {}", sidecar.base()))?;
                match SdkPublisher::start(dir, port, pubsub).await {
                    Ok(sdk) => Publisher::Sdk(Box::new(sdk)),
                    Err(e) => {
                        sidecar.stop().await;
                        app.stop().await;
                        return Err(e);
                    }
                }
            }
        };
        Ok(SidecarTarget {
            pubsub: pubsub.to_string(),
            publisher,
            sidecars: Sidecars::Launched {
                launcher,
                discovery_within,
                publishing: Mutex::new(Some((sidecar, Some(app)))),
                sdk_app: None,
            },
        })
    }

    /// Starts the publishing sidecar, whose app over gRPC declares nothing, and
    /// publishes through its gRPC API with `client`: the suite's own gRPC client, or
    /// one of Dapr's SDKs. The launcher's sidecars must deliver over gRPC
    /// ([`Launcher::delivers_over_grpc`]).
    pub async fn start_publishing_over_grpc(
        launcher: Arc<dyn Launcher>,
        pubsub: &str,
        discovery_within: Duration,
        client: GrpcPublisher<'_>,
    ) -> anyhow::Result<SidecarTarget> {
        if !launcher.delivers_over_grpc() {
            anyhow::bail!(
                "the sidecars of {} are reached over HTTP, not over gRPC",
                launcher.describe()
            );
        }
        let app = crate::grpc_subscriber::start(Vec::new(), None).await?;
        let sidecar = match launcher.launch(PUBLISHER_APP_ID, app.port()).await {
            Ok(sidecar) => sidecar,
            Err(e) => {
                app.stop().await;
                return Err(e);
            }
        };
        let publisher = match (sidecar.grpc_base(), client) {
            (None, _) => Err(anyhow::anyhow!(
                "the sidecars of {} serve no gRPC API",
                launcher.describe()
            )),
            (Some(base), GrpcPublisher::Suite) => {
                GrpcClient::connect(base, pubsub, None, Duration::from_secs(60))
                    .await
                    .map(Publisher::Grpc)
            }
            (Some(base), GrpcPublisher::JsSdk(dir)) => match port_of(&base) {
                Some(grpc) => SdkPublisher::start_js_grpc(dir, grpc, pubsub)
                    .await
                    .map(|sdk| Publisher::Sdk(Box::new(sdk))),
                None => Err(anyhow::anyhow!("no port in {base}")),
            },
            (Some(base), GrpcPublisher::RustSdk) => {
                crate::rust_sdk::RustSdkPublisher::connect(&base, pubsub)
                    .await
                    .map(|sdk| Publisher::RustSdk(Box::new(sdk)))
            }
            (Some(base), GrpcPublisher::PythonSdk(dir)) => {
                match (port_of(&sidecar.base()), port_of(&base)) {
                    (Some(http), Some(grpc)) => SdkPublisher::start_python(dir, http, grpc, pubsub)
                        .await
                        .map(|sdk| Publisher::Sdk(Box::new(sdk))),
                    _ => Err(anyhow::anyhow!("no port in {} or {base}", sidecar.base())),
                }
            }
        };
        let publisher = match publisher {
            Ok(publisher) => publisher,
            Err(e) => {
                sidecar.stop().await;
                app.stop().await;
                return Err(e);
            }
        };
        Ok(SidecarTarget {
            pubsub: pubsub.to_string(),
            publisher,
            sidecars: Sidecars::Launched {
                launcher,
                discovery_within,
                publishing: Mutex::new(Some((sidecar, Some(app)))),
                sdk_app: None,
            },
        })
    }

    /// Makes `sdk`'s app (in `sdk_dir`) the app of every subscription with a
    /// handler, its handler relaying to the case's ([`crate::sdk_app`]): the
    /// JavaScript SDK's `DaprServer` (the sidecars deliver over HTTP), or the Python
    /// SDK's `dapr.ext.grpc.App` (they deliver over gRPC). Only for sidecars the
    /// target starts.
    pub fn with_sdk_app(mut self, sdk: Sdk, sdk_dir: &std::path::Path) -> anyhow::Result<Self> {
        match &mut self.sidecars {
            Sidecars::Launched {
                sdk_app, launcher, ..
            } => {
                if launcher.delivers_over_grpc() != (sdk == Sdk::Python) {
                    anyhow::bail!(
                        "the app of {} is not served over the protocol the sidecars of {} deliver with",
                        sdk.name(),
                        launcher.describe()
                    );
                }
                *sdk_app = Some((sdk, sdk_dir.to_path_buf()));
                Ok(self)
            }
            Sidecars::Attached(_) => {
                anyhow::bail!(
                    "the SDK's app runs with a sidecar the suite starts, not an attached one"
                )
            }
        }
    }

    /// The SDK whose app subscribes, if one does.
    fn sdk_subscribes(&self) -> Option<Sdk> {
        match &self.sidecars {
            Sidecars::Launched {
                sdk_app: Some((sdk, _)),
                ..
            } => Some(*sdk),
            _ => None,
        }
    }

    /// Attaches to a running sidecar ([`crate::attach`]): it publishes (over gRPC
    /// where `options.grpc` says where), and delivers the subscriptions the suite
    /// declares to it.
    pub async fn attach(options: AttachOptions) -> anyhow::Result<SidecarTarget> {
        let publisher = match &options.grpc {
            None => Publisher::Http(SidecarClient::new(
                options.base.clone(),
                &options.pubsub,
                options.api_token.clone(),
                Duration::from_secs(60),
            )?),
            Some(grpc) => Publisher::Grpc(
                GrpcClient::connect(
                    grpc.clone(),
                    &options.pubsub,
                    options.api_token.clone(),
                    Duration::from_secs(60),
                )
                .await?,
            ),
        };
        let pubsub = options.pubsub.clone();
        let attached = Attached::connect(options).await?;
        Ok(SidecarTarget {
            pubsub,
            publisher,
            sidecars: Sidecars::Attached(attached),
        })
    }

    /// What a component declaring `inner` offers through this target: what Dapr's
    /// API can express ([`capabilities_over_the_wire`]), less what its publisher cannot
    /// send (the Rust SDK's client has no bulk publish).
    pub fn capabilities(&self, inner: &Capabilities) -> Capabilities {
        let mut capabilities = capabilities_over_the_wire(inner);
        if matches!(self.publisher, Publisher::RustSdk(_)) {
            capabilities.bulk_publish = Support::Unsupported;
        }
        capabilities
    }

    /// What the sidecars are, for reports.
    pub fn describe(&self) -> String {
        match &self.sidecars {
            Sidecars::Launched { launcher, .. } => launcher.describe(),
            Sidecars::Attached(attached) => format!(
                "the running sidecar at {} (app id {}{})",
                attached.base(),
                attached.app_id(),
                if attached.over_grpc() {
                    ", over gRPC"
                } else {
                    ""
                }
            ),
        }
    }

    /// Stops the publishing sidecar, or the app of an attached one (subscriptions
    /// stop with their handles).
    pub async fn stop(&self) {
        if let Publisher::Sdk(sdk) = &self.publisher {
            sdk.stop().await;
        }
        match &self.sidecars {
            Sidecars::Launched { publishing, .. } => {
                if let Some((sidecar, app)) = publishing.lock().await.take() {
                    sidecar.stop().await;
                    if let Some(app) = app {
                        app.stop().await;
                    }
                }
            }
            Sidecars::Attached(attached) => attached.stop().await,
        }
    }
}

/// Who publishes over a sidecar's gRPC API.
#[derive(Debug, Clone, Copy)]
pub enum GrpcPublisher<'a> {
    /// The suite's own gRPC client.
    Suite,
    /// Dapr's Python SDK's client, installed in this directory.
    PythonSdk(&'a std::path::Path),
    /// Dapr's Rust SDK's client, in this process.
    RustSdk,
    /// Dapr's JavaScript SDK's client in its gRPC mode, installed in this directory.
    JsSdk(&'a std::path::Path),
}

/// The port of an address such as `http://127.0.0.1:3500`.
fn port_of(base: &str) -> Option<u16> {
    base.rsplit(':').next().and_then(|p| p.parse().ok())
}

/// A subscription a sidecar delivers: an app of the suite's with its own sidecar,
/// the sidecar having read the app's subscription; or a subscription declared to
/// an attached sidecar.
enum Member {
    Launched {
        sidecar: Box<dyn Launched>,
        app: SubscriberApp,
    },
    /// The SDK's app with its own sidecar.
    Sdk {
        sidecar: Box<dyn Launched>,
        app: SdkApp,
    },
    Attached(AttachedMember),
}

impl Member {
    async fn stop(self) {
        match self {
            Member::Launched { sidecar, app } => {
                sidecar.stop().await;
                app.stop().await;
            }
            Member::Sdk { sidecar, app } => {
                sidecar.stop().await;
                app.stop().await;
            }
            Member::Attached(member) => member.leave().await,
        }
    }
}

impl SidecarTarget {
    /// Starts an app declaring `subscription` (delivering to `handler`; none: every
    /// delivery is answered RETRY) with a sidecar of its own, whose app id is the
    /// subscription's group; returns once the sidecar has read the subscription.
    async fn join(&self, subscription: &Subscription, handler: Option<Handler>) -> Result<Member> {
        let (launcher, discovery_within, sdk_app) = match &self.sidecars {
            Sidecars::Launched {
                launcher,
                discovery_within,
                sdk_app,
                ..
            } => (launcher, *discovery_within, sdk_app),
            Sidecars::Attached(attached) => {
                return attached
                    .join(subscription, handler)
                    .await
                    .map(Member::Attached)
            }
        };
        let bulk = matches!(handler, Some(Handler::Bulk(_)));
        let declared = declaration(&self.pubsub, subscription, bulk).map_err(|feature| {
            PubSubError::Unsupported {
                component: BEYOND_REMOTE_API.into(),
                feature,
            }
        })?;
        let failed = |what: &str, e: anyhow::Error| {
            let context = format!(
                "{what} for {} in group {}",
                subscription.topics.describe(),
                subscription.group
            );
            // A sidecar in this process that could not start because the component
            // refused the subscription (a name it cannot represent) passes the
            // refusal on as such; anything else is the sidecar's failure.
            match e.downcast_ref::<PubSubError>() {
                Some(PubSubError::InvalidRequest(_)) => {
                    PubSubError::InvalidRequest(format!("{context}: {e:#}"))
                }
                Some(PubSubError::Unsupported { component, .. }) => PubSubError::Unsupported {
                    component: component.clone(),
                    feature: format!("{context}: {e:#}"),
                },
                _ => PubSubError::Broker {
                    context,
                    message: format!("{e:#}"),
                },
            }
        };
        match (sdk_app, &handler) {
            (Some((sdk, dir)), Some(Handler::Single(handler))) => {
                return self
                    .join_sdk_app(
                        *sdk,
                        dir,
                        launcher,
                        subscription,
                        &declared,
                        handler.clone(),
                    )
                    .await
                    .map_err(|e| failed("starting the SDK's app", e));
            }
            (Some((sdk, _)), Some(Handler::Bulk(_))) => {
                let why = match sdk {
                    Sdk::Js | Sdk::JsGrpc => "its subscribeBulk calls the app's handler once per entry",
                    Sdk::Python => "its App.subscribe declares no bulkSubscribe, and its bulk callback calls the handler once per entry",
                };
                return Err(PubSubError::Unsupported {
                    component: BEYOND_REMOTE_API.into(),
                    feature: format!("a bulk handler through {}: {why}, so the batch a case's bulk handler judges never reaches the app", sdk.name()),
                });
            }
            // The app that only creates the group is the suite's own.
            _ => {}
        }
        // The suite's app, over the protocol the sidecars deliver with.
        let (app, reading) = if launcher.delivers_over_grpc() {
            let app = crate::grpc_subscriber::start(vec![declared], handler).await;
            (app, "call ListTopicSubscriptions")
        } else {
            let app = SubscriberApp::start(vec![declared], handler).await;
            (app, "read GET /dapr/subscribe")
        };
        let app = app.map_err(|e| failed("starting the suite's app", e))?;
        let sidecar = match launcher.launch(&subscription.group, app.port()).await {
            Ok(sidecar) => sidecar,
            Err(e) => {
                app.stop().await;
                return Err(failed("starting a sidecar", e));
            }
        };
        if tokio::time::timeout(discovery_within, app.discovered())
            .await
            .is_err()
        {
            sidecar.stop().await;
            app.stop().await;
            return Err(PubSubError::Timeout {
                after: discovery_within,
                what: format!(
                    "waiting for the sidecar ({}) to {reading}",
                    launcher.describe()
                ),
            });
        }
        Ok(Member::Launched { sidecar, app })
    }
}

impl SidecarTarget {
    /// Starts the SDK's app for `declared` relaying to `handler`, then its sidecar
    /// (which reads the app's subscription as it starts); returns once the app's
    /// client has seen the sidecar.
    async fn join_sdk_app(
        &self,
        sdk: Sdk,
        sdk_dir: &std::path::Path,
        launcher: &Arc<dyn Launcher>,
        subscription: &Subscription,
        declared: &crate::wire::AppSubscription,
        handler: Arc<dyn pubsub_components::runtime::MessageHandler>,
    ) -> anyhow::Result<Member> {
        if sdk == Sdk::Python {
            // The app picks its port and tells it; its sidecar starts once it listens.
            let mut app = SdkApp::start(sdk, sdk_dir, 0, 0, declared, handler).await?;
            let port = match app.started(SDK_APP_START_WITHIN).await {
                Ok(Some(port)) => port,
                Ok(None) => {
                    app.stop().await;
                    anyhow::bail!("the app of {} did not say its port", sdk.name());
                }
                Err(e) => {
                    app.stop().await;
                    return Err(e);
                }
            };
            return match launcher.launch(&subscription.group, port).await {
                Ok(sidecar) => Ok(Member::Sdk { sidecar, app }),
                Err(e) => {
                    app.stop().await;
                    Err(e)
                }
            };
        }
        // The JavaScript app and its sidecar are told each other's ports before either
        // listens, so another process may take one of them first: then both start
        // again on new ports, a bounded number of times.
        let mut tries = 0;
        loop {
            tries += 1;
            let app_port = free_port()?;
            let http_port = free_port()?;
            let mut app =
                SdkApp::start(sdk, sdk_dir, app_port, http_port, declared, handler.clone()).await?;
            let launched = launcher
                .launch_on(&subscription.group, app_port, http_port)
                .await;
            let e = match launched {
                Ok(sidecar) => match app.started(SDK_APP_START_WITHIN).await {
                    Ok(_) => return Ok(Member::Sdk { sidecar, app }),
                    Err(e) => {
                        sidecar.stop().await;
                        e
                    }
                },
                Err(e) => e,
            };
            app.stop().await;
            let text = format!("{e:#}");
            let port_taken = text.contains("Address already in use")
                || text.contains("exited before it started");
            if !port_taken || tries >= PORT_TRIES {
                return Err(e);
            }
            tracing::debug!(error = %text, "the SDK's app or its sidecar lost its port: again");
        }
    }
}

#[async_trait]
impl RemoteRuntime for SidecarTarget {
    async fn publish(&self, request: PublishRequest) -> Result<MessageId> {
        match &self.publisher {
            Publisher::Http(client) => client.publish(request).await,
            Publisher::Grpc(client) => client.publish(request).await,
            Publisher::Sdk(sdk) => sdk.publish(request).await,
            Publisher::RustSdk(sdk) => sdk.publish(request).await,
        }
    }

    async fn bulk_publish(&self, request: BulkPublishRequest) -> Result<BulkPublishResponse> {
        match &self.publisher {
            Publisher::Http(client) => client.bulk_publish(request).await,
            Publisher::Grpc(client) => client.bulk_publish(request).await,
            Publisher::Sdk(sdk) => sdk.bulk_publish(request).await,
            Publisher::RustSdk(sdk) => sdk.bulk_publish(request).await,
        }
    }

    /// The JavaScript SDK publishes the JSON value an app holds, serialized its own
    /// way (over HTTP and gRPC; the Python SDK sends JSON as the text it is given); its app hands its
    /// handler the value it parsed (the Python SDK's, the bytes).
    fn reserializes_json(&self) -> bool {
        matches!(&self.publisher, Publisher::Sdk(sdk) if sdk.sdk() != Sdk::Python)
            || self.sdk_subscribes() == Some(Sdk::Js)
    }

    /// The JavaScript SDK's app hands its handler the data and headers only (the
    /// Python SDK's hands it the CloudEvent's fields too).
    fn hands_over_data_only(&self) -> Option<&'static str> {
        (self.sdk_subscribes() == Some(Sdk::Js)).then_some(crate::sdk_app::DATA_ONLY)
    }

    fn delivers_metadata_over_grpc(&self) -> bool {
        match &self.sidecars {
            Sidecars::Launched { launcher, .. } => launcher.delivers_over_grpc(),
            Sidecars::Attached(attached) => attached.over_grpc(),
        }
    }

    /// Dapr's API (HTTP or gRPC) carries no attempt number: each app counts the deliveries it
    /// saw, so a member that joins a group counts a message's attempts from 1.
    fn counts_attempts_per_app(&self) -> Option<&'static str> {
        Some("Dapr's API (HTTP or gRPC) carries no attempt number: each app counts the deliveries it saw, from 1 for a member that joins")
    }

    /// `serve` started in this process records its delivery spans here; a sidecar
    /// process, started or attached, records them in its own.
    fn records_spans_here(&self) -> bool {
        match &self.sidecars {
            Sidecars::Launched { launcher, .. } => launcher.in_process(),
            Sidecars::Attached(_) => false,
        }
    }

    async fn subscribe(
        &self,
        subscription: Subscription,
        handler: Handler,
    ) -> Result<SubscriptionHandle> {
        let member = self.join(&subscription, Some(handler)).await?;
        let (stop, mut stopped) = watch::channel(false);
        let task = tokio::spawn(async move {
            let _ = stopped.wait_for(|s| *s).await;
            member.stop().await;
        });
        Ok(SubscriptionHandle::new(stop, task))
    }

    /// Dapr's HTTP API has no call that creates a group: a group exists once an app
    /// with that id has subscribed. So an app declaring the subscription (answering
    /// any delivery with RETRY) is started with its sidecar, and both stop once the
    /// sidecar has read the subscription.
    async fn create_group(&self, subscription: &Subscription) -> Result<()> {
        self.join(subscription, None).await?.stop().await;
        Ok(())
    }
}

/// What a component offers through Dapr's API (HTTP or gRPC): what the runtime gives it
/// (emulated features are the sidecar's own, hence native from the wire), without
/// what the API has no words for (several topics in one subscription, seek,
/// partition updates).
pub fn capabilities_over_the_wire(inner: &Capabilities) -> Capabilities {
    let over = |support: Support| match support {
        Support::Unsupported => Support::Unsupported,
        _ => Support::Native,
    };
    Capabilities {
        bulk_publish: over(inner.bulk_publish),
        bulk_subscribe: over(inner.bulk_subscribe),
        ttl: over(inner.ttl),
        dead_letter: over(inner.dead_letter),
        delayed_delivery: over(inner.delayed_delivery),
        receiver_delay: over(inner.receiver_delay),
        multi_topic: false,
        seek: false,
        partitions: None,
        ..inner.clone()
    }
}

/// The description of a sidecar target for the suite's runtime: its kind,
/// capabilities and broker version. It is never asked to publish or consume (the
/// sidecars do); those calls are refused as not part of the HTTP API.
pub struct WireDescription {
    pub kind: String,
    pub capabilities: Capabilities,
    pub broker_version: String,
}

fn not_on_the_wire(what: &str) -> PubSubError {
    PubSubError::Unsupported {
        component: BEYOND_REMOTE_API.into(),
        feature: format!("{what} (not part of Dapr's API, HTTP or gRPC)"),
    }
}

#[async_trait]
impl Component for WireDescription {
    fn kind(&self) -> &str {
        &self.kind
    }

    fn capabilities(&self) -> Capabilities {
        self.capabilities.clone()
    }

    async fn broker_version(&self) -> Result<String> {
        Ok(self.broker_version.clone())
    }

    async fn publish(&self, _message: OutgoingMessage) -> Result<MessageId> {
        Err(not_on_the_wire("publishing a broker message directly"))
    }

    async fn consumer(&self, _spec: ConsumerSpec) -> Result<Box<dyn Consumer>> {
        Err(not_on_the_wire(
            "a consumer that receives and settles messages itself",
        ))
    }
}
