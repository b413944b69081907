//! Streaming subscriptions (`SubscribeTopicEventsAlpha1`): an app with no port of
//! its own opens a stream, names a topic in its first message, and acknowledges each
//! event it is sent by the event's id with SUCCESS, RETRY or DROP. The stream is a
//! member of the app id's group, like a subscription the app declares. An event
//! unanswered when the stream ends or breaks goes back to the runtime as a failed
//! delivery, as one to an app that does not answer: retried (to the group's other
//! members or the next stream), counting toward the subscription's `maxDeliveries`.

use super::status;
use crate::publish;
use crate::serve::{apply_subscription_metadata, ApiState};
use crate::wire::{AppSubscription, DAPR_EVENT_TYPE};
use async_trait::async_trait;
use dapr::dapr::proto::runtime::v1 as runtime;
use dapr::dapr::proto::runtime::v1::subscribe_topic_events_request_alpha1::SubscribeTopicEventsRequestType as Request;
use dapr::dapr::proto::runtime::v1::subscribe_topic_events_response_alpha1::SubscribeTopicEventsResponseType as Response;
use pubsub_components::runtime::{Event, Handler, MessageHandler, Status, Subscription};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, oneshot};

/// What a stream sends its app: the initial response, then events.
pub type Events = tokio_stream::wrappers::ReceiverStream<
    Result<runtime::SubscribeTopicEventsResponseAlpha1, tonic::Status>,
>;

/// How many messages a stream holds for an app slower than its deliveries.
const STREAM_BUFFER: usize = 64;

/// Numbers the open streams (their entries in the metadata).
static STREAMS: AtomicU64 = AtomicU64::new(0);

/// The events sent and not yet answered, by event id (oldest first where an id is
/// sent twice); `None` once the stream has ended.
type Pending = Arc<Mutex<Option<HashMap<String, VecDeque<oneshot::Sender<i32>>>>>>;

/// Opens a streaming subscription from the app's `requests`: the first must be the
/// initial request (naming a served pub/sub and a topic), answered by the initial
/// response; the rest acknowledge events. A first request that is not an initial
/// one, or that names nothing to subscribe to, is refused as `InvalidArgument`
/// (daprd answers `Unknown` there; the pub/sub not found is `InvalidArgument` in
/// both).
pub(super) async fn open(
    state: Arc<ApiState>,
    mut requests: tonic::Streaming<runtime::SubscribeTopicEventsRequestAlpha1>,
) -> Result<Events, tonic::Status> {
    // A client that opens a stream and sends nothing does not hold up the sidecar's
    // stop.
    let mut stopping = state.stopping.clone();
    let first = tokio::select! {
        first = requests.message() => first?,
        _ = stopping.wait_for(|s| *s) => {
            return Err(tonic::Status::unavailable("the sidecar is stopping"))
        }
    };
    let first = first.and_then(|r| r.subscribe_topic_events_request_type);
    let Some(Request::InitialRequest(initial)) = first else {
        return Err(tonic::Status::invalid_argument(
            "initial request is required: the first message of a stream must name the pub/sub and topic",
        ));
    };
    if initial.pubsub_name.is_empty() {
        return Err(tonic::Status::invalid_argument("pubsubName is required"));
    }
    let served = publish::component(&state.components, &initial.pubsub_name).map_err(status)?;
    if initial.topic.is_empty() {
        return Err(tonic::Status::invalid_argument("topic is required"));
    }
    let metadata: BTreeMap<String, String> = initial.metadata.clone().into_iter().collect();
    let raw_payload = publish::flag(&metadata, "rawPayload").map_err(|why| {
        status(crate::wire::ApiError::request_metadata(
            &initial.pubsub_name,
            why,
        ))
    })?;
    let mut subscription = Subscription::new(&initial.topic, &state.app_id);
    subscription.dead_letter_topic = initial.dead_letter_topic.clone().filter(|t| !t.is_empty());
    apply_subscription_metadata(&mut subscription, &metadata).map_err(|why| {
        tonic::Status::invalid_argument(format!("subscription to {}: {why}", initial.topic))
    })?;

    let (events, receiver) = mpsc::channel(STREAM_BUFFER);
    let pending: Pending = Arc::new(Mutex::new(Some(HashMap::new())));
    // The initial response comes before any event (the Python SDK drops the first
    // message it reads, taking it for this one).
    let initial_response =
        Response::InitialResponse(runtime::SubscribeTopicEventsResponseInitialAlpha1 {});
    events
        .send(Ok(runtime::SubscribeTopicEventsResponseAlpha1 {
            subscribe_topic_events_response_type: Some(initial_response),
        }))
        .await
        .map_err(|_| tonic::Status::cancelled("the app left before the stream opened"))?;
    let handler = StreamDelivery {
        events: events.clone(),
        pending: pending.clone(),
        pubsub: initial.pubsub_name.clone(),
        raw_payload,
    };
    let handle = served
        .runtime
        .subscribe(subscription, Handler::Single(Arc::new(handler)))
        .await
        .map_err(|e| {
            tonic::Status::failed_precondition(format!(
                "subscribing to {} on pubsub '{}': {e}",
                initial.topic, initial.pubsub_name
            ))
        })?;
    let stream_id = STREAMS.fetch_add(1, Ordering::Relaxed);
    state
        .streaming
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(
            stream_id,
            AppSubscription {
                pubsub_name: initial.pubsub_name.clone(),
                topic: initial.topic.clone(),
                metadata,
                dead_letter_topic: initial.dead_letter_topic.clone(),
                ..Default::default()
            },
        );
    tokio::spawn(async move {
        let ended = tokio::select! {
            ended = read_acks(&mut requests, &pending) => ended,
            _ = stopping.wait_for(|s| *s) => Some(tonic::Status::unavailable("the sidecar is stopping")),
        };
        if let Some(why) = ended {
            let _ = events.send(Err(why)).await;
        }
        // What is unanswered fails (the runtime retries it), and nothing more is sent.
        pending.lock().unwrap_or_else(|p| p.into_inner()).take();
        drop(events);
        handle.stop().await;
        state
            .streaming
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&stream_id);
    });
    Ok(tokio_stream::wrappers::ReceiverStream::new(receiver))
}

/// Reads the app's acknowledgements until its stream ends (`None`) or brings what
/// the stream cannot take (the error that ends it): a second initial request. An
/// acknowledgement of an id not awaiting one is ignored, as daprd ignores it.
async fn read_acks(
    requests: &mut tonic::Streaming<runtime::SubscribeTopicEventsRequestAlpha1>,
    pending: &Pending,
) -> Option<tonic::Status> {
    loop {
        let request = match requests.message().await {
            Ok(Some(request)) => request,
            Ok(None) => return None,
            Err(e) => {
                tracing::debug!(error = %e, "a streaming subscription broke");
                return None;
            }
        };
        match request.subscribe_topic_events_request_type {
            Some(Request::EventProcessed(processed)) => {
                // An unset status is SUCCESS, as the enum's default.
                let answer = processed.status.map_or(0, |s| s.status);
                let waiting = pending
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .as_mut()
                    .and_then(|p| {
                        let queue = p.get_mut(&processed.id)?;
                        let first = queue.pop_front();
                        if queue.is_empty() {
                            p.remove(&processed.id);
                        }
                        first
                    });
                match waiting {
                    Some(sender) => {
                        let _ = sender.send(answer);
                    }
                    None => {
                        tracing::debug!(id = %processed.id, "an acknowledgement of no event awaiting one")
                    }
                }
            }
            Some(Request::InitialRequest(_)) => {
                return Some(tonic::Status::invalid_argument(
                    "duplicate initial request received",
                ))
            }
            None => {
                return Some(tonic::Status::invalid_argument(
                    "a message with neither an initial request nor a processed event",
                ))
            }
        }
    }
}

/// Sends each event to the stream and waits for its acknowledgement.
struct StreamDelivery {
    events: mpsc::Sender<Result<runtime::SubscribeTopicEventsResponseAlpha1, tonic::Status>>,
    pending: Pending,
    pubsub: String,
    raw_payload: bool,
}

#[async_trait]
impl MessageHandler for StreamDelivery {
    async fn handle(&self, event: Event) -> Result<Status, String> {
        let message = topic_event(&event, &self.pubsub, self.raw_payload);
        let (answered, answer) = oneshot::channel();
        {
            let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
            let Some(pending) = pending.as_mut() else {
                return Err("the stream has ended".into());
            };
            pending
                .entry(message.id.clone())
                .or_default()
                .push_back(answered);
        }
        self.events
            .send(Ok(runtime::SubscribeTopicEventsResponseAlpha1 {
                subscribe_topic_events_response_type: Some(Response::EventMessage(message)),
            }))
            .await
            .map_err(|_| "the stream has ended".to_string())?;
        let answer = answer
            .await
            .map_err(|_| "the stream ended before the event was acknowledged".to_string())?;
        Ok(
            match runtime::topic_event_response::TopicEventResponseStatus::try_from(answer) {
                Ok(runtime::topic_event_response::TopicEventResponseStatus::Success) => {
                    Status::Success
                }
                Ok(runtime::topic_event_response::TopicEventResponseStatus::Drop) => Status::Drop,
                // RETRY, and a status the enum does not know (daprd retries it too).
                _ => Status::Retry,
            },
        )
    }
}

/// The CloudEvent attributes a `TopicEventRequest` carries in fields only; the others
/// (`topic` and `pubsubname` among them, as daprd sends them) go to its extensions.
const FIELDS: [&str; 7] = [
    "id",
    "source",
    "type",
    "specversion",
    "datacontenttype",
    "data",
    "data_base64",
];

/// The event as a stream (or an app callback) sends it: the envelope's attributes in
/// their fields, its data as published, the other attributes as extensions. A raw payload, published raw or
/// asked raw, is sent as its bytes with `application/octet-stream`.
pub fn topic_event(event: &Event, pubsub: &str, raw_payload: bool) -> runtime::TopicEventRequest {
    let envelope = event
        .cloud_event
        .as_ref()
        .filter(|_| !raw_payload)
        .and_then(Value::as_object);
    let Some(envelope) = envelope else {
        let data = match &event.cloud_event {
            Some(envelope) => serde_json::to_vec(envelope).unwrap_or_default(),
            None => event.data.clone(),
        };
        return runtime::TopicEventRequest {
            id: event.id.clone(),
            source: String::new(),
            r#type: DAPR_EVENT_TYPE.into(),
            spec_version: "1.0".into(),
            data_content_type: "application/octet-stream".into(),
            data,
            topic: event.topic.clone(),
            pubsub_name: pubsub.into(),
            path: String::new(),
            extensions: None,
        };
    };
    let text = |key: &str| {
        envelope
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let extensions: serde_json::Map<String, Value> = envelope
        .iter()
        .filter(|(k, _)| !FIELDS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    runtime::TopicEventRequest {
        id: text("id"),
        source: text("source"),
        r#type: text("type"),
        spec_version: text("specversion"),
        data_content_type: text("datacontenttype"),
        // The data as published: the decoded `data_base64`, a text type's text, JSON
        // (a JSON string with its quotes) in the bytes it was published with.
        data: event.data.clone(),
        // Where the event was received (daprd: the subscribed message's topic and
        // pub/sub), not the envelope's `topic`, which for a dead-lettered event names
        // the topic it was published to (an app routing by topic would not find its
        // dead-letter handler); the envelope's stay among the extensions.
        topic: event.topic.clone(),
        pubsub_name: pubsub.to_string(),
        path: String::new(),
        extensions: (!extensions.is_empty()).then(|| to_struct(extensions)),
    }
}

/// A JSON object as a protobuf `Struct`.
fn to_struct(object: serde_json::Map<String, Value>) -> prost_types::Struct {
    prost_types::Struct {
        fields: object.into_iter().map(|(k, v)| (k, to_value(v))).collect(),
    }
}

fn to_value(value: Value) -> prost_types::Value {
    use prost_types::value::Kind;
    let kind = match value {
        Value::Null => Kind::NullValue(0),
        Value::Bool(b) => Kind::BoolValue(b),
        Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or_default()),
        Value::String(s) => Kind::StringValue(s),
        Value::Array(items) => Kind::ListValue(prost_types::ListValue {
            values: items.into_iter().map(to_value).collect(),
        }),
        Value::Object(object) => Kind::StructValue(to_struct(object)),
    };
    prost_types::Value { kind: Some(kind) }
}
