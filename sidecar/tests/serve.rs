//! `serve` over the in-memory component, driven through its HTTP API by reqwest and
//! delivering to an app served in the test: the documented bodies, answers and
//! error codes, end to end.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use pubsub_components::memory::MemoryComponent;
use pubsub_components::runtime::Runtime;
use pubsub_sidecar::wire::AppSubscription;
use pubsub_sidecar::{AppChannel, ServeOptions, Sidecar};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

mod common;
use common::{memory_runtime, served_in_memory};

/// What the test app received, per route.
#[derive(Default)]
struct Received {
    bodies: Vec<(String, Value)>,
}

/// The test app: declares `subscriptions`, records every delivery, and answers each
/// route with `answers(route, body)`.
struct TestApp {
    base: String,
    received: Arc<Mutex<Received>>,
}

type Answer = fn(&str, &Value) -> (StatusCode, Value);

async fn start_app(subscriptions: Vec<AppSubscription>, answer: Answer) -> TestApp {
    let received = Arc::new(Mutex::new(Received::default()));
    let state = (received.clone(), Arc::new(subscriptions), answer);
    let app = Router::new()
        .route(
            "/dapr/subscribe",
            get(|State((_, subs, _)): State<AppState>| async move { Json((*subs).clone()) }),
        )
        .route(
            "/{*route}",
            post(
                |State((received, _, answer)): State<AppState>,
                 Path(route): Path<String>,
                 body: Bytes| async move {
                    let value: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    received
                        .lock()
                        .unwrap()
                        .bodies
                        .push((route.clone(), value.clone()));
                    let (status, body) = answer(&route, &value);
                    (status, Json(body))
                },
            ),
        )
        .with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    TestApp { base, received }
}

type AppState = (Arc<Mutex<Received>>, Arc<Vec<AppSubscription>>, Answer);

impl TestApp {
    fn bodies(&self, route: &str) -> Vec<Value> {
        self.received
            .lock()
            .unwrap()
            .bodies
            .iter()
            .filter(|(r, _)| r == route)
            .map(|(_, b)| b.clone())
            .collect()
    }

    /// Waits (bounded) until `route` received `count` bodies.
    async fn wait_for(&self, route: &str, count: usize) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let bodies = self.bodies(route);
            if bodies.len() >= count || Instant::now() >= deadline {
                return bodies;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn subscription(topic: &str, route: &str) -> AppSubscription {
    AppSubscription {
        pubsub_name: "mem".into(),
        topic: topic.into(),
        route: Some(route.into()),
        ..Default::default()
    }
}

async fn start_sidecar(app: Option<&TestApp>, token: Option<&str>) -> Sidecar {
    let runtime = memory_runtime("test-app");
    let components = served_in_memory(runtime);
    let options = ServeOptions {
        app: app.map(|a| AppChannel::new(&a.base, Duration::from_secs(5)).unwrap()),
        app_id: "test-app".into(),
        api_token: token.map(str::to_string),
        ..Default::default()
    };
    Sidecar::start(components, options).await.unwrap()
}

fn success(_: &str, _: &Value) -> (StatusCode, Value) {
    (StatusCode::OK, json!({"status": "SUCCESS"}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_published_event_reaches_the_app_as_a_cloud_event() {
    let app = start_app(vec![subscription("orders", "/orders")], success).await;
    let sidecar = start_sidecar(Some(&app), None).await;
    let http = reqwest::Client::new();
    let url = format!(
        "http://{}/v1.0/publish/mem/orders?metadata.pcs-key=k1",
        sidecar.address()
    );
    let response = http
        .post(&url)
        .header("content-type", "application/json")
        .body(r#"{"orderId":7}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 204);
    let bodies = app.wait_for("orders", 1).await;
    assert_eq!(bodies.len(), 1, "one delivery: {bodies:?}");
    let event = &bodies[0];
    assert_eq!(event["data"], json!({"orderId": 7}), "{event}");
    assert_eq!(event["datacontenttype"], "application/json", "{event}");
    assert_eq!(event["topic"], "orders", "{event}");
    assert_eq!(event["specversion"], "1.0", "{event}");
    sidecar.stop().await;
}

fn bulk_statuses(route: &str, body: &Value) -> (StatusCode, Value) {
    if route != "bulk" {
        return success(route, body);
    }
    let statuses: Vec<Value> = body["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| {
            let id = entry["entryId"].as_str().unwrap().to_string();
            let status = match entry["event"]["data"].as_str() {
                Some("drop me") => "DROP",
                _ => "SUCCESS",
            };
            json!({"entryId": id, "status": status})
        })
        .collect();
    (StatusCode::OK, json!({ "statuses": statuses }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_publish_and_bulk_delivery_follow_the_documented_bodies() {
    let mut bulk = subscription("batch", "/bulk");
    bulk.bulk_subscribe = Some(pubsub_sidecar::wire::BulkSubscribe {
        enabled: true,
        max_messages_count: Some(10),
        max_await_duration_ms: Some(50),
    });
    bulk.dead_letter_topic = Some("dead".into());
    let app = start_app(vec![bulk, subscription("dead", "/dead")], bulk_statuses).await;
    let sidecar = start_sidecar(Some(&app), None).await;
    let http = reqwest::Client::new();
    let body = json!([
        {"entryId": "1", "event": {"n": 1}, "contentType": "application/json"},
        {"entryId": "2", "event": "drop me", "contentType": "text/plain"},
        {"entryId": "3", "event": "AAEC", "contentType": "application/octet-stream"},
    ]);
    let response = http
        .post(format!(
            "http://{}/v1.0-alpha1/publish/bulk/mem/batch",
            sidecar.address()
        ))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 204);
    let batches = app.wait_for("bulk", 1).await;
    let entries: Vec<Value> = batches
        .iter()
        .flat_map(|b| b["entries"].as_array().unwrap().clone())
        .collect();
    assert_eq!(entries.len(), 3, "{batches:?}");
    assert_eq!(batches[0]["topic"], "batch");
    assert_eq!(batches[0]["pubsubname"], "mem");
    for entry in &entries {
        assert_eq!(
            entry["contentType"], "application/cloudevents+json",
            "{entry}"
        );
    }
    let binary = entries
        .iter()
        .find(|e| e["event"]["datacontenttype"] == "application/octet-stream")
        .expect("the binary entry");
    assert_eq!(binary["event"]["data_base64"], "AAEC", "{binary}");
    // The DROP entry goes to the dead-letter topic, once.
    let dead = app.wait_for("dead", 1).await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0]["data"], "drop me", "{}", dead[0]);
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_the_documented_codes_and_publish_nothing() {
    let app = start_app(vec![subscription("t", "/t")], success).await;
    let sidecar = start_sidecar(Some(&app), None).await;
    let http = reqwest::Client::new();
    let base = format!("http://{}", sidecar.address());
    let cases: Vec<(String, String, u16, &str)> = vec![
        (
            format!("{base}/v1.0/publish/nope/t"),
            "x".into(),
            404,
            "ERR_PUBSUB_NOT_FOUND",
        ),
        (
            format!("{base}/v1.0/publish/mem/"),
            "x".into(),
            404,
            "ERR_TOPIC_NAME_EMPTY",
        ),
        (
            format!("{base}/v1.0/publish/mem/t?metadata.rawPayload=maybe"),
            "x".into(),
            400,
            "ERR_PUBSUB_REQUEST_METADATA",
        ),
        (
            format!("{base}/v1.0-alpha1/publish/bulk/mem/t"),
            "{not json".into(),
            400,
            "ERR_PUBSUB_EVENTS_SER",
        ),
        (
            format!("{base}/v1.0-alpha1/publish/bulk/mem/t"),
            json!([
                {"entryId": "1", "event": "a", "contentType": "text/plain"},
                {"entryId": "1", "event": "b", "contentType": "text/plain"},
            ])
            .to_string(),
            400,
            "ERR_PUBSUB_EVENTS_SER",
        ),
        (
            format!("{base}/v1.0-alpha1/publish/bulk/mem/t"),
            json!([
                {"entryId": "1", "event": "a", "contentType": "text/plain"},
                {"entryId": "2", "event": 5, "contentType": "text/plain"},
            ])
            .to_string(),
            400,
            "ERR_PUBSUB_EVENTS_SER",
        ),
        (
            format!("{base}/v1.0-alpha1/publish/bulk/mem/t"),
            json!([{"event": "a", "contentType": "text/plain"}]).to_string(),
            400,
            "ERR_PUBSUB_EVENTS_SER",
        ),
        // A topic that is not UTF-8 once decoded, on both publish paths.
        (
            format!("{base}/v1.0/publish/mem/t%FF"),
            "x".into(),
            400,
            "ERR_MALFORMED_REQUEST",
        ),
        (
            format!("{base}/v1.0-alpha1/publish/bulk/mem/t%C3%28"),
            "[]".into(),
            400,
            "ERR_MALFORMED_REQUEST",
        ),
        // Over the 4 MiB body limit (daprd's default --max-body-size).
        (
            format!("{base}/v1.0/publish/mem/t"),
            "x".repeat(4 * 1024 * 1024 + 1),
            413,
            "ERR_BODY_TOO_LARGE",
        ),
    ];
    for (url, body, status, code) in cases {
        let response = http
            .post(&url)
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        let shown = &body[..body.len().min(80)];
        assert_eq!(response.status().as_u16(), status, "{url} {shown}");
        let answer: Value = response.json().await.unwrap();
        assert_eq!(answer["errorCode"], code, "{url} {shown}: {answer}");
        assert!(
            !answer["message"].as_str().unwrap_or_default().is_empty(),
            "{answer}"
        );
    }
    // A sentinel published after the refused requests arrives alone: nothing of them
    // was half-published.
    let sentinel = http
        .post(format!("{base}/v1.0/publish/mem/t"))
        .header("content-type", "text/plain")
        .body("sentinel")
        .send()
        .await
        .unwrap();
    assert_eq!(sentinel.status().as_u16(), 204);
    let bodies = app.wait_for("t", 1).await;
    assert_eq!(bodies.len(), 1, "{bodies:?}");
    assert_eq!(bodies[0]["data"], "sentinel");
    sidecar.stop().await;
}

fn answers_by_route(route: &str, _: &Value) -> (StatusCode, Value) {
    match route {
        "missing" => (StatusCode::NOT_FOUND, json!({})),
        "flaky" => (StatusCode::INTERNAL_SERVER_ERROR, json!({})),
        _ => (StatusCode::OK, json!({})),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_404_drops_to_the_dead_letter_topic_and_a_500_is_retried() {
    let mut missing = subscription("a", "/missing");
    missing.dead_letter_topic = Some("a-dead".into());
    let mut flaky = subscription("b", "/flaky");
    flaky.metadata.insert("maxDeliveries".into(), "3".into());
    flaky.metadata.insert("retryDelay".into(), "10ms".into());
    let app = start_app(
        vec![missing, flaky, subscription("a-dead", "/a-dead")],
        answers_by_route,
    )
    .await;
    let sidecar = start_sidecar(Some(&app), None).await;
    let http = reqwest::Client::new();
    for topic in ["a", "b"] {
        let response = http
            .post(format!(
                "http://{}/v1.0/publish/mem/{topic}",
                sidecar.address()
            ))
            .header("content-type", "text/plain")
            .body(topic.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 204);
    }
    assert_eq!(app.wait_for("a-dead", 1).await.len(), 1);
    assert_eq!(app.bodies("missing").len(), 1, "a 404 is not retried");
    let attempts = app.wait_for("flaky", 3).await;
    assert_eq!(attempts.len(), 3, "a 500 is retried up to maxDeliveries");
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_metadata_and_the_api_token() {
    let sidecar = start_sidecar(None, Some("s3cret")).await;
    let http = reqwest::Client::new();
    let base = format!("http://{}", sidecar.address());
    for path in ["/v1.0/healthz", "/v1.0/healthz/outbound"] {
        let response = http.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(response.status().as_u16(), 204, "{path} needs no token");
    }
    let refused = http
        .post(format!("{base}/v1.0/publish/mem/t"))
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status().as_u16(), 401);
    let metadata: Value = http
        .get(format!("{base}/v1.0/metadata"))
        .header("dapr-api-token", "s3cret")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(metadata["id"], "test-app");
    assert_eq!(metadata["components"][0]["name"], "mem");
    assert_eq!(metadata["components"][0]["type"], "pubsub.in-memory");
    let accepted = http
        .post(format!("{base}/v1.0/publish/mem/t"))
        .header("dapr-api-token", "s3cret")
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(accepted.status().as_u16(), 204);
    sidecar.stop().await;
}

/// How the misbehaving app answers its n-th delivery.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Misbehaviour {
    /// Reads the request and closes the connection without an answer.
    Closes,
    /// Never answers (longer than the sidecar's app timeout).
    Hangs,
    /// Answers 200 with a body that is not JSON.
    Garbage,
}

/// An app written over raw TCP, to misbehave as no framework lets it: answers
/// GET /dapr/subscribe with `subscriptions`, and each delivery as `script` says, in
/// turn (then as its last entry); counts the deliveries.
async fn start_raw_app(
    subscriptions: Value,
    script: Vec<Misbehaviour>,
) -> (
    String,
    Arc<std::sync::atomic::AtomicUsize>,
    Arc<tokio::sync::Notify>,
) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let deliveries = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let delivered = Arc::new(tokio::sync::Notify::new());
    let (counted, told) = (deliveries.clone(), delivered.clone());
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let (subscriptions, script, counted, told) = (
                subscriptions.clone(),
                script.clone(),
                counted.clone(),
                told.clone(),
            );
            tokio::spawn(async move {
                // One request per connection is all this app reads.
                let mut request = Vec::new();
                let mut buffer = [0u8; 4096];
                let head_end = loop {
                    let Ok(n) = socket.read(&mut buffer).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    request.extend_from_slice(&buffer[..n]);
                    if let Some(at) = request.windows(4).position(|w| w == b"\r\n\r\n") {
                        break at + 4;
                    }
                };
                let head = String::from_utf8_lossy(&request[..head_end]).to_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                while request.len() < head_end + length {
                    let Ok(n) = socket.read(&mut buffer).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    request.extend_from_slice(&buffer[..n]);
                }
                let answer = |body: &str| {
                    format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    )
                };
                if head.starts_with("get /dapr/subscribe") {
                    let _ = socket
                        .write_all(answer(&subscriptions.to_string()).as_bytes())
                        .await;
                    return;
                }
                let n = counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                told.notify_waiters();
                match script[n.min(script.len() - 1)] {
                    Misbehaviour::Closes => drop(socket),
                    Misbehaviour::Hangs => {
                        tokio::time::sleep(Duration::from_secs(30)).await;
                    }
                    Misbehaviour::Garbage => {
                        let _ = socket.write_all(answer("<not json>").as_bytes()).await;
                    }
                }
            });
        }
    });
    (base, deliveries, delivered)
}

/// An app that closes the connection, then hangs past the app timeout, then answers
/// 2xx with garbage: daprd's HTTP postman reads the first two as failures (RETRY)
/// and the last as SUCCESS (a 2xx whose body is not a status), so the message is
/// delivered three times and then no more: nothing is lost, nothing loops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_that_closes_hangs_or_answers_garbage_is_read_as_daprd_reads_it() {
    let subscriptions = json!([{
        "pubsubname": "mem", "topic": "rough", "route": "/rough",
        "metadata": {"retryDelay": "50ms", "maxDeliveries": "10"}
    }]);
    let (base, deliveries, delivered) = start_raw_app(
        subscriptions,
        vec![
            Misbehaviour::Closes,
            Misbehaviour::Hangs,
            Misbehaviour::Garbage,
        ],
    )
    .await;
    let runtime = Runtime::new("mem", Arc::new(MemoryComponent::default()));
    let components = served_in_memory(runtime);
    let app_timeout = Duration::from_millis(500);
    let sidecar = Sidecar::start(
        components,
        ServeOptions {
            app: Some(AppChannel::new(&base, app_timeout).unwrap()),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let published = reqwest::Client::new()
        .post(format!(
            "http://{}/v1.0/publish/mem/rough",
            sidecar.address()
        ))
        .body("hello")
        .send()
        .await
        .unwrap();
    assert_eq!(published.status(), 204);
    let deadline = Instant::now() + Duration::from_secs(10);
    while deliveries.load(std::sync::atomic::Ordering::SeqCst) < 3 {
        let counted = delivered.notified();
        if deliveries.load(std::sync::atomic::Ordering::SeqCst) >= 3
            || tokio::time::timeout_at(deadline, counted).await.is_err()
        {
            break;
        }
    }
    assert_eq!(
        deliveries.load(std::sync::atomic::Ordering::SeqCst),
        3,
        "closed, then timed out, then answered: three deliveries"
    );
    // The garbage 2xx settled it: a further delivery would come within the retry
    // delay (50 ms) plus the app timeout; four times that passes without one.
    tokio::time::sleep(4 * (app_timeout + Duration::from_millis(50))).await;
    assert_eq!(
        deliveries.load(std::sync::atomic::Ordering::SeqCst),
        3,
        "a 2xx answer without a status is SUCCESS: not delivered again"
    );
    sidecar.stop().await;
}
