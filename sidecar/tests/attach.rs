//! Attaching to a running sidecar: `serve` with hot reload over the in-memory
//! component, started before the suite's app exists (as a user starts daprd), and
//! the sidecar target attached to it. Subscriptions are declared as resources,
//! taken up while running, delivered to the suite's app on the sidecar's app port,
//! and dropped when they end; what one sidecar with one app id cannot do is refused
//! with the reason.

use async_trait::async_trait;
use pubsub_components::memory::MemoryComponent;
use pubsub_components::runtime::{
    Event, Handler, MessageHandler, PublishRequest, RemoteRuntime, Runtime, Status, Subscription,
};
use pubsub_components::PubSubError;
use pubsub_sidecar::attach::AttachOptions;
use pubsub_sidecar::grpc::app::GrpcAppChannel;
use pubsub_sidecar::{AppChannel, ServeOptions, ServedComponent, Sidecar, SidecarTarget};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

mod common;
use common::{free_port, served_in_memory};

/// Records the data of what it is handed.
#[derive(Default)]
struct Recorder {
    seen: Mutex<Vec<Vec<u8>>>,
    arrived: Notify,
}

#[async_trait]
impl MessageHandler for Recorder {
    async fn handle(&self, event: Event) -> Result<Status, String> {
        self.seen.lock().unwrap().push(event.data);
        self.arrived.notify_waiters();
        Ok(Status::Success)
    }
}

impl Recorder {
    /// Waits (at most 10 s) until `count` events arrived.
    async fn wait_for(&self, count: usize) -> Vec<Vec<u8>> {
        tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                let arrived = self.arrived.notified();
                if self.seen.lock().unwrap().len() >= count {
                    return;
                }
                arrived.await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{count} deliveries did not arrive within 10 s"));
        self.seen.lock().unwrap().clone()
    }
}

/// The sidecar's `GET /v1.0/metadata` answer.
async fn metadata(http_port: u16) -> serde_json::Value {
    reqwest::get(format!("http://127.0.0.1:{http_port}/v1.0/metadata"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// The in-memory component, served as pub/sub `ps`.
fn served_memory() -> BTreeMap<String, ServedComponent> {
    served_in_memory(Runtime::new("ps", Arc::new(MemoryComponent::default())))
}

/// `serve` on `http_port` with hot reload of `resources`, delivering to the app
/// `app_id` on `app_port`.
fn hot_reload_options(
    http_port: u16,
    app_port: u16,
    app_id: &str,
    resources: &std::path::Path,
) -> ServeOptions {
    ServeOptions {
        listen: SocketAddr::from(([127, 0, 0, 1], http_port)),
        app: Some(
            AppChannel::new(
                format!("http://127.0.0.1:{app_port}"),
                Duration::from_secs(5),
            )
            .unwrap(),
        ),
        app_id: app_id.into(),
        resources: Some(resources.to_path_buf()),
        hot_reload: true,
        ..ServeOptions::default()
    }
}

#[tokio::test]
async fn a_running_sidecar_takes_up_the_suites_subscriptions_as_resources() {
    let resources = tempfile::tempdir().unwrap();
    let (http_port, app_port) = (free_port(), free_port());
    // The sidecar starts first and waits for its app, as daprd does.
    let sidecar = tokio::spawn(Sidecar::start(
        served_memory(),
        hot_reload_options(http_port, app_port, "certified-app", resources.path()),
    ));
    let options = AttachOptions {
        base: format!("http://127.0.0.1:{http_port}"),
        pubsub: "ps".into(),
        api_token: None,
        app_port,
        resources: resources.path().to_path_buf(),
        ready_within: Duration::from_secs(10),
        grpc: None,
    };
    let target = {
        let mut tries = 0;
        loop {
            match SidecarTarget::attach(options.clone()).await {
                Ok(target) => break target,
                Err(e) if tries < 50 => {
                    tries += 1;
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("cannot attach: {e:#}"),
            }
        }
    };
    let sidecar = sidecar.await.unwrap().expect("serve started");

    let recorder = Arc::new(Recorder::default());
    let handle = target
        .subscribe(
            Subscription::new("orders", "g1"),
            Handler::Single(recorder.clone()),
        )
        .await
        .expect("the sidecar took up the subscription");
    let declared: Vec<_> = std::fs::read_dir(resources.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(declared.len(), 1, "one resource: {declared:?}");
    let text = std::fs::read_to_string(&declared[0]).unwrap();
    assert!(text.contains("kind: Subscription"), "{text}");
    assert!(
        text.contains("- certified-app"),
        "scoped to the app id: {text}"
    );

    for n in 0..3 {
        target
            .publish(PublishRequest::new("orders", format!("m{n}").into_bytes()))
            .await
            .unwrap();
    }
    let seen = recorder.wait_for(3).await;
    assert_eq!(seen, [b"m0".to_vec(), b"m1".to_vec(), b"m2".to_vec()]);

    // One app id: a second subscription to the topic, or another group on it, is
    // beyond what one attached sidecar can do, and says so.
    let second = target
        .subscribe(
            Subscription::new("orders", "g1"),
            Handler::Single(Arc::new(Recorder::default())),
        )
        .await
        .err()
        .expect("refused");
    assert!(
        matches!(&second, PubSubError::Unsupported { feature, .. } if feature.contains("--sidecar-command")),
        "{second}"
    );

    handle.stop().await;
    assert_eq!(
        std::fs::read_dir(resources.path()).unwrap().count(),
        0,
        "the resource is removed when the subscription ends"
    );
    // A case stopped at its bound while the sidecar had not yet taken up its
    // subscription: the resource goes too (left behind, one the sidecar refused stayed
    // in its directory and was tried again in the next run).
    let abandoned = tokio::time::timeout(
        Duration::from_millis(1),
        target.subscribe(
            Subscription::new("abandoned", "g1"),
            Handler::Single(Arc::new(Recorder::default())),
        ),
    )
    .await;
    assert!(abandoned.is_err(), "stopped while waiting for the sidecar");
    assert_eq!(
        std::fs::read_dir(resources.path()).unwrap().count(),
        0,
        "the resource of an abandoned subscription is removed"
    );
    let metadata = metadata(http_port).await;
    assert_eq!(
        metadata["subscriptions"],
        serde_json::json!([]),
        "{metadata}"
    );
    assert_eq!(
        metadata["enabledFeatures"],
        serde_json::json!(["HotReload"])
    );

    let other_group = target
        .subscribe(
            Subscription::new("orders", "g2"),
            Handler::Single(Arc::new(Recorder::default())),
        )
        .await
        .err()
        .expect("refused");
    assert!(
        matches!(&other_group, PubSubError::Unsupported { feature, .. } if feature.contains("group g2 on orders after group g1")),
        "{other_group}"
    );
    // The same group again resumes where it left off.
    let again = Arc::new(Recorder::default());
    let handle = target
        .subscribe(
            Subscription::new("orders", "g1"),
            Handler::Single(again.clone()),
        )
        .await
        .unwrap();
    target
        .publish(PublishRequest::new("orders", b"m3".to_vec()))
        .await
        .unwrap();
    assert_eq!(again.wait_for(1).await, [b"m3".to_vec()]);
    handle.stop().await;
    target.stop().await;
    sidecar.stop().await;
}

#[tokio::test]
async fn attaching_to_a_sidecar_without_the_pubsub_names_what_it_serves() {
    let resources = tempfile::tempdir().unwrap();
    let sidecar = Sidecar::start(served_memory(), ServeOptions::default())
        .await
        .unwrap();
    let error = SidecarTarget::attach(AttachOptions {
        base: format!("http://{}", sidecar.address()),
        pubsub: "orders-bus".into(),
        api_token: None,
        app_port: 0,
        resources: resources.path().to_path_buf(),
        ready_within: Duration::from_secs(1),
        grpc: None,
    })
    .await
    .err()
    .expect("refused");
    let text = format!("{error:#}");
    assert!(
        text.contains("no pub/sub named 'orders-bus'") && text.contains("serves: ps"),
        "{text}"
    );
    sidecar.stop().await;
}

#[tokio::test]
async fn a_declarative_subscription_that_serve_cannot_start_is_an_error_naming_it() {
    let resources = tempfile::tempdir().unwrap();
    std::fs::write(
        resources.path().join("sub.yaml"),
        "apiVersion: dapr.io/v2alpha1\nkind: Subscription\nmetadata:\n  name: to-nowhere\nspec:\n  pubsubname: missing\n  topic: t\n  routes:\n    default: /t\n",
    )
    .unwrap();
    let app_port = free_port();
    let error = Sidecar::start(
        BTreeMap::new(),
        ServeOptions {
            app: Some(
                AppChannel::new(
                    format!("http://127.0.0.1:{app_port}"),
                    Duration::from_secs(1),
                )
                .unwrap(),
            ),
            app_start_within: Duration::from_millis(200),
            resources: Some(resources.path().to_path_buf()),
            ..ServeOptions::default()
        },
    )
    .await;
    // No app answers GET /dapr/subscribe: that is the first error; with an app
    // that answers none, the subscription's pub/sub is.
    assert!(error.is_err());
    let app = pubsub_sidecar::shared_app::SharedApp::start(0)
        .await
        .unwrap();
    let error = Sidecar::start(
        BTreeMap::new(),
        ServeOptions {
            app: Some(
                AppChannel::new(
                    format!("http://127.0.0.1:{}", app.port()),
                    Duration::from_secs(1),
                )
                .unwrap(),
            ),
            resources: Some(resources.path().to_path_buf()),
            ..ServeOptions::default()
        },
    )
    .await
    .err()
    .expect("refused");
    let text = format!("{error:#}");
    assert!(
        text.contains("to-nowhere") && text.contains("'missing'"),
        "{text}"
    );
    app.stop().await;
}

/// Hot reload: a declarative subscription the sidecar cannot start (here a
/// `maxDeliveries` that is not a number; on RabbitMQ, a topic longer than a routing
/// key) does not hold up the others. It did: reconciling stopped at the first
/// refusal, so every subscription named after it waited until it was removed, and a
/// matrix row through an attached sidecar stalled in a dozen cases.
#[tokio::test]
async fn a_refused_declarative_subscription_does_not_hold_up_the_others() {
    use pubsub_sidecar::resources::{write_subscription, SubscriptionResource};
    use pubsub_sidecar::wire::AppSubscription;
    let resources = tempfile::tempdir().unwrap();
    let (http_port, app_port) = (free_port(), free_port());
    // The suite's app, declaring no subscription of its own: nothing is delivered here.
    let app = pubsub_sidecar::shared_app::SharedApp::start(app_port)
        .await
        .unwrap();
    let sidecar = Sidecar::start(
        served_memory(),
        hot_reload_options(http_port, app_port, "app", resources.path()),
    )
    .await
    .expect("serve started");
    let declared = |topic: &str, metadata: &[(&str, &str)]| AppSubscription {
        pubsub_name: "ps".into(),
        topic: topic.into(),
        route: Some(format!("/{topic}")),
        metadata: metadata
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    };
    // Reconciled in name order: the refused one comes first.
    write_subscription(
        resources.path(),
        &SubscriptionResource::new(
            "a-refused",
            declared("refused", &[("maxDeliveries", "three")]),
            "app",
        ),
    )
    .unwrap();
    write_subscription(
        resources.path(),
        &SubscriptionResource::new("b-taken-up", declared("orders", &[]), "app"),
    )
    .unwrap();
    let topics = || async {
        let metadata = metadata(http_port).await;
        metadata["subscriptions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["topic"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    let listed = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let listed = topics().await;
            if !listed.is_empty() {
                return listed;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the subscription after the refused one was taken up within 10 s");
    assert_eq!(listed, ["orders"], "only the one that could start");
    sidecar.stop().await;
    app.stop().await;
}

/// Attached over gRPC: the running sidecar delivers to its app with the gRPC app
/// protocol, and the suite publishes through its gRPC API; each declared
/// subscription's events reach the suite's app by the `path` of the call, its route.
#[tokio::test]
async fn a_running_sidecar_over_grpc_delivers_each_declared_subscription_to_its_route() {
    let resources = tempfile::tempdir().unwrap();
    let (http_port, app_port, grpc_port) = (free_port(), free_port(), free_port());
    let options = ServeOptions {
        app: None,
        grpc_app: Some(
            GrpcAppChannel::new(
                format!("http://127.0.0.1:{app_port}"),
                Duration::from_secs(5),
            )
            .unwrap(),
        ),
        grpc_listen: Some(SocketAddr::from(([127, 0, 0, 1], grpc_port))),
        ..hot_reload_options(http_port, app_port, "grpc-app", resources.path())
    };
    let sidecar = tokio::spawn(Sidecar::start(served_memory(), options));
    let attach = AttachOptions {
        base: format!("http://127.0.0.1:{http_port}"),
        pubsub: "ps".into(),
        api_token: None,
        app_port,
        resources: resources.path().to_path_buf(),
        ready_within: Duration::from_secs(10),
        grpc: Some(format!("http://127.0.0.1:{grpc_port}")),
    };
    let target = {
        let mut tries = 0;
        loop {
            match SidecarTarget::attach(attach.clone()).await {
                Ok(target) => break target,
                Err(_) if tries < 50 => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("cannot attach over gRPC: {e:#}"),
            }
        }
    };
    let sidecar = sidecar.await.unwrap().expect("serve started");
    assert!(
        target.describe().contains("over gRPC"),
        "{}",
        target.describe()
    );
    let (orders, invoices) = (Arc::new(Recorder::default()), Arc::new(Recorder::default()));
    let first = target
        .subscribe(
            Subscription::new("orders", "grpc-app"),
            Handler::Single(orders.clone()),
        )
        .await
        .expect("the sidecar took up the subscription");
    let second = target
        .subscribe(
            Subscription::new("invoices", "grpc-app"),
            Handler::Single(invoices.clone()),
        )
        .await
        .expect("the sidecar took up the second subscription");
    for (topic, data) in [("orders", "o1"), ("invoices", "i1"), ("orders", "o2")] {
        target
            .publish(PublishRequest::new(topic, data.as_bytes().to_vec()))
            .await
            .unwrap();
    }
    assert_eq!(orders.wait_for(2).await, [b"o1".to_vec(), b"o2".to_vec()]);
    assert_eq!(invoices.wait_for(1).await, [b"i1".to_vec()]);
    first.stop().await;
    second.stop().await;
    assert_eq!(
        std::fs::read_dir(resources.path()).unwrap().count(),
        0,
        "the resources are removed when the subscriptions end"
    );
    target.stop().await;
    sidecar.stop().await;
}
