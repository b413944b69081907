//! What a case body gets: the runtime under test, fresh names, deadlines derived from
//! the case's bound, a recorder, and helpers that publish while recording.

use crate::checker::check;
use crate::criteria::Criteria;
use crate::history::{Recorder, KEY};
use crate::outcome::{CaseError, Context, Outcome};
use pubsub_components::runtime::{
    BulkPublishRequest, BulkPublishResponse, Handler, PublishRequest, Runtime, Subscription,
    SubscriptionHandle,
};
use pubsub_components::{Capabilities, Consumer, ConsumerSpec, MessageId, PubSubError};
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// The key of the marker [`CaseContext::await_subscribed`] publishes.
pub const SUBSCRIBED_MARKER: &str = "subscribed-marker";

/// What a case leaves, of its bound, for stopping its subscription once it waited for
/// late messages.
const STOP_ALLOWANCE: Duration = Duration::from_secs(1);

/// The environment of one run of one case.
pub struct CaseContext {
    /// The id of the case that runs.
    pub case_id: String,
    pub runtime: Runtime,
    pub caps: Capabilities,
    pub recorder: Recorder,
    /// The broker behind the runtime, for cases that inject faults; `None` in process.
    pub broker: Option<std::sync::Arc<dyn crate::provision::Broker>>,
    /// Builds the component again against another endpoint (behind a fault proxy);
    /// `None` when it cannot be.
    pub connect: Option<crate::row_runtime::ComponentFactory>,
    /// Turns such a component into a runtime of the row under test (through its
    /// sidecars); `None` in process.
    pub wrap: Option<crate::row_runtime::RuntimeWrapper>,
    /// The bystander group beside the case's own groups, when the case runs with one.
    pub bystander: Option<std::sync::Arc<crate::bystander::Bystander>>,
    /// The partition count of the topics [`CaseContext::new_topic`] makes, in a
    /// partitioned twin (see [`crate::catalogue::Case::partitions`]).
    pub partitions: Option<u32>,
    prefix: String,
    deadline: Instant,
    /// How far the deadline has moved for time spent waiting on the broker's
    /// acknowledgement of publishes and subscriptions (see [`AckTime`]).
    ack_time: AckTime,
    seed: u64,
}

/// Time a case spent waiting in the component's publish, subscribe and group-creation
/// calls. The contract bounds delivery, not how long a publish or a subscription takes
/// to be acknowledged (a confirm after a disk write on a contended disk, eighteen
/// queue declarations on a busy broker), so that time moves the case's deadline back, up to
/// [`AckTime::MAX_FACTOR`] times the bound. Shared with the runner, whose timeout
/// moves with it.
/// A call still waiting counts for the time it has waited so far (the runner must not
/// cut a case at its bound while the case waits on a slow subscription).
#[derive(Clone)]
pub struct AckTime {
    waits: std::sync::Arc<std::sync::Mutex<Waits>>,
    cap: Duration,
}

/// The waits of an [`AckTime`]: those over, and when each one still waiting began.
#[derive(Default)]
struct Waits {
    over: Duration,
    next: u64,
    waiting: std::collections::BTreeMap<u64, Instant>,
}

/// One wait of an [`AckTime`]; it ends when dropped (also when its call is abandoned).
struct Waiting<'a> {
    time: &'a AckTime,
    id: u64,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut waits = self.time.lock();
        if let Some(started) = waits.waiting.remove(&self.id) {
            waits.over += started.elapsed();
        }
    }
}

impl AckTime {
    /// The deadline moves back by at most this many bounds.
    pub const MAX_FACTOR: u32 = 4;

    fn new(bound: Duration) -> Self {
        AckTime {
            waits: Default::default(),
            cap: bound * Self::MAX_FACTOR,
        }
    }

    /// How far the deadline has moved so far: the waits that are over, and those
    /// still waiting as far as they got.
    pub fn extension(&self) -> Duration {
        let waits = self.lock();
        let waiting: Duration = waits.waiting.values().map(|s| s.elapsed()).sum();
        (waits.over + waiting).min(self.cap)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Waits> {
        self.waits.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Begins a wait, which ends when what this returns is dropped.
    fn begin(&self) -> Waiting<'_> {
        let mut waits = self.lock();
        let id = waits.next;
        waits.next += 1;
        waits.waiting.insert(id, Instant::now());
        Waiting { time: self, id }
    }
}

impl CaseContext {
    /// A context whose names are unique to this run and whose waits end by `bound`.
    pub fn new(runtime: Runtime, case_id: &str, bound: Duration, seed: u64) -> Self {
        let run = uuid::Uuid::new_v4().simple().to_string();
        CaseContext {
            case_id: case_id.to_string(),
            caps: runtime.capabilities().clone(),
            runtime,
            recorder: Recorder::new(),
            broker: None,
            connect: None,
            wrap: None,
            bystander: None,
            partitions: None,
            prefix: format!("pcs-{}-{}", &run[..8], name_part(case_id)),
            deadline: Instant::now() + bound,
            ack_time: AckTime::new(bound),
            seed,
        }
    }

    /// The time spent in publish calls, which moves the deadline back.
    pub fn ack_time(&self) -> AckTime {
        self.ack_time.clone()
    }

    /// A fresh topic name.
    pub fn topic(&self, label: &str) -> String {
        format!("{}-{label}", self.prefix)
    }

    /// A fresh topic laid out as the case's topology asks: created with the
    /// partitioned twin's partitions, or (in one partition) left for its first
    /// publish to create.
    pub async fn new_topic(&self, label: &str) -> Result<String, CaseError> {
        let topic = self.topic(label);
        if let Some(partitions) = self.partitions {
            self.create_topic(&topic, partitions).await?;
        }
        Ok(topic)
    }

    /// A fresh consumer-group name.
    pub fn group(&self, label: &str) -> String {
        format!("{}-g-{label}", self.prefix)
    }

    /// The seed for generated inputs (reported in the notes).
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The end of the case's bound, moved back by the time spent in publish and
    /// subscribe calls.
    pub fn deadline(&self) -> Instant {
        self.deadline + self.ack_time.extension()
    }

    /// Now plus `wait`, but never past the case's bound.
    pub fn within(&self, wait: Duration) -> Instant {
        (Instant::now() + wait).min(self.deadline())
    }

    /// The deadline for messages published now to be delivered.
    pub fn delivery_deadline(&self) -> Instant {
        self.within(self.caps.delivery_bound)
    }

    /// How long a message that must not arrive is waited for after a sentinel that
    /// was published later arrived: the declared redelivery bound.
    pub fn quiet_window(&self) -> Instant {
        self.within(self.caps.redelivery_bound)
    }

    /// The delivery criteria matching the declared guarantee.
    pub fn criteria(&self) -> Criteria {
        Criteria::delivery(self.caps.delivery)
    }

    /// Checks the recorded history and attaches an excerpt of it.
    /// The check is recorded in the history with its findings, so that a saved
    /// history can be judged again offline.
    pub fn check(&self, criteria: &Criteria) -> Outcome {
        let history = self.recorder.history();
        let outcome = check(&history, criteria)
            .outcome(criteria)
            .with_history(&history);
        self.recorder
            .checked(criteria, outcome.findings.clone(), history.records.len());
        outcome
    }

    /// Waits up to the delivery deadline for every one of `keys`, stops `subscription`,
    /// and checks what happened against the case's criteria. What has not come by the
    /// delivery deadline is waited for on until the case's bound, so that a finding
    /// tells the late (`late: ... by X`) from the lost.
    pub async fn conclude(&self, keys: &[String], subscription: SubscriptionHandle) -> Outcome {
        let due = self.delivery_deadline();
        let due_at = SystemTime::now() + due.saturating_duration_since(Instant::now());
        let in_time = self.recorder.wait_for_keys(keys, due).await;
        let missing: Vec<String> = if in_time {
            Vec::new()
        } else {
            let delivered = self.recorder.history().delivered_keys();
            keys.iter()
                .filter(|k| !delivered.contains(k.as_str()))
                .cloned()
                .collect()
        };
        if !missing.is_empty() {
            // Until the bound, less what stopping the subscription may take (over the
            // wire, a stop waits for deliveries in flight), so that the case reports
            // its own findings rather than being cut at its bound.
            let until = self.deadline().checked_sub(STOP_ALLOWANCE).unwrap_or(due);
            self.recorder.wait_for_keys(&missing, until.max(due)).await;
        }
        subscription.stop().await;
        let mut outcome = self.check(&self.criteria());
        let late = self
            .recorder
            .history()
            .first_deliveries_after(&missing, due_at);
        if !late.is_empty() {
            let shown: Vec<String> = late
                .iter()
                .map(|(key, by)| format!("{key} by {by:?}"))
                .collect();
            outcome.fail(format!(
                "late: {} acknowledged publishes were delivered only after the delivery bound ({:?}): {}",
                late.len(),
                self.caps.delivery_bound,
                crate::checker::examples(&shown)
            ));
        }
        outcome
    }

    /// The machine's load so far, where a timing probe runs beside the case.
    pub fn machine_load(&self) -> Option<crate::load::MachineLoad> {
        crate::load::MachineLoad::of(&self.recorder.history())
    }

    /// How much lateness against `precision` the machine explains so far (what the
    /// undelayed control messages took; zero without a probe).
    pub fn lateness_allowance(&self, precision: Duration) -> Duration {
        self.machine_load()
            .map_or(Duration::ZERO, |load| load.allowance(precision))
    }

    /// A message for `topic` tagged with `key`, with the key as its payload.
    pub fn message(&self, topic: &str, key: &str) -> PublishRequest {
        PublishRequest::new(topic, key.as_bytes().to_vec())
            .with_content_type("text/plain")
            .with_metadata(KEY, key)
    }

    /// Subscribes, failing the case when the component refuses.
    pub async fn subscribe(
        &self,
        subscription: Subscription,
        handler: Handler,
    ) -> Result<SubscriptionHandle, CaseError> {
        let what = format!("subscribing to {}", subscription.topics.describe());
        self.recorder.assign_group(&handler, &subscription.group);
        // The bystander's group comes after the case's own, so that a path with one
        // group per topic refuses the bystander, never the case.
        let bystander_on = self.bystander.as_ref().map(|_| subscription.clone());
        let handle = self
            .acknowledged(self.runtime.subscribe(subscription, handler))
            .await
            .doing(&what)?;
        if let (Some(bystander), Some(subscription)) = (&self.bystander, bystander_on) {
            bystander
                .join(&self.runtime, &subscription.topics, &subscription.group)
                .await;
        }
        Ok(handle)
    }

    /// Awaits a publish, subscribe or group-creation call whose duration moves the
    /// deadline back (see [`AckTime`]), for cases that inspect the call's error.
    pub async fn acknowledged<T>(&self, call: impl std::future::Future<Output = T>) -> T {
        let _waiting = self.ack_time.begin();
        call.await
    }

    /// Creates a subscription's group before anything is published for it, so that
    /// queue and session brokers keep those messages for it.
    pub async fn create_group(&self, subscription: &Subscription) -> Result<(), CaseError> {
        let what = format!(
            "creating group {} on {}",
            subscription.group,
            subscription.topics.describe()
        );
        self.acknowledged(self.runtime.create_group(subscription))
            .await
            .doing(&what)?;
        if let Some(bystander) = &self.bystander {
            bystander
                .join(&self.runtime, &subscription.topics, &subscription.group)
                .await;
        }
        Ok(())
    }

    /// Opens a consumer of the component itself (for cases that drive it directly);
    /// `what` names the consumer in a refusal.
    pub async fn open_consumer(
        &self,
        spec: ConsumerSpec,
        what: &str,
    ) -> Result<Box<dyn Consumer>, CaseError> {
        let (topics, group) = (spec.topics.clone(), spec.group.clone());
        let consumer = self.runtime.component().consumer(spec).await.doing(what)?;
        if let Some(bystander) = &self.bystander {
            bystander.join(&self.runtime, &topics, &group).await;
        }
        Ok(consumer)
    }

    /// Creates a topic of the component with `partitions` partitions.
    pub async fn create_topic(&self, topic: &str, partitions: u32) -> Result<(), CaseError> {
        self.runtime
            .component()
            .create_topic(topic, partitions)
            .await
            .doing(&format!("creating a topic with {partitions} partitions"))
    }

    /// Creates a consumer's group (for cases that drive the component directly)
    /// before anything is published for it.
    pub async fn create_consumer_group(&self, spec: &ConsumerSpec) -> Result<(), CaseError> {
        let what = format!(
            "creating group {} on {}",
            spec.group,
            spec.topics.describe()
        );
        self.acknowledged(self.runtime.component().create_group(spec))
            .await
            .doing(&what)?;
        if let Some(bystander) = &self.bystander {
            bystander
                .join(&self.runtime, &spec.topics, &spec.group)
                .await;
        }
        Ok(())
    }

    /// Subscribes group `g` to `topic` with the recorder's SUCCESS handler `s1`: the
    /// plain subscriber most cases need.
    pub async fn subscribe_recorded(&self, topic: &str) -> Result<SubscriptionHandle, CaseError> {
        self.subscribe(
            Subscription::new(topic, self.group("g")),
            self.recorder.handler("s1"),
        )
        .await
    }

    /// Subscribes to `topic` in `group` as the member `label`, recording what it gets.
    pub async fn subscribe_member(
        &self,
        topic: &str,
        group: &str,
        label: &str,
    ) -> Result<SubscriptionHandle, CaseError> {
        let handler = self.recorder.handler(label);
        self.subscribe(Subscription::new(topic, group), handler)
            .await
    }

    /// Waits until the subscription on `topic` delivers: publishes an undelayed
    /// marker (`subscribed-marker`, judged like any other message) and waits for it
    /// up to a delivery bound plus `held` (a receiverDelay the marker also waits).
    /// Timed cases start their clocks after it: a member still joining its group is
    /// bounded by the delivery bound, not by the delay precision being judged.
    pub async fn await_subscribed(&self, topic: &str, held: Duration) -> Result<(), CaseError> {
        let key = SUBSCRIBED_MARKER.to_string();
        self.publish(self.message(topic, &key))
            .await
            .doing("publishing the marker that shows the subscriber receives")?;
        let ready = self
            .recorder
            .wait_for_keys(&[key], self.within(self.caps.delivery_bound + held))
            .await;
        if !ready {
            self.recorder.note(format!(
                "the subscriber did not deliver its marker within the delivery bound {:?}; timed messages published anyway",
                self.caps.delivery_bound + held
            ));
        }
        Ok(())
    }

    /// Publishes and records the attempt; returns the outcome.
    pub async fn publish(&self, request: PublishRequest) -> Result<MessageId, PubSubError> {
        self.publish_via(&self.runtime, request).await
    }

    /// Publishes through `runtime` (e.g. one behind a fault proxy) and records the
    /// attempt; returns the outcome.
    pub async fn publish_via(
        &self,
        runtime: &Runtime,
        request: PublishRequest,
    ) -> Result<MessageId, PubSubError> {
        let publish = crate::history::Published {
            key: request.metadata.get(KEY).cloned().unwrap_or_default(),
            topic: request.topic.clone(),
            partition_key: request.metadata.get("partitionKey").cloned(),
            due: due_time(&request.metadata),
            started: Some(SystemTime::now()),
            payload: crate::history::fingerprint(&request.data),
        };
        if let Some(bystander) = &self.bystander {
            if request.metadata.contains_key("ttlInSeconds") {
                bystander.expiring(&publish.key);
            }
        }
        let waiting = self.ack_time.begin();
        let result = runtime.publish(request).await;
        drop(waiting);
        self.recorder.published_with(
            publish,
            result
                .as_ref()
                .map(|id| Some(id.clone()))
                .map_err(|e| e.to_string()),
        );
        result
    }

    /// Publishes `count` messages `{label}-{i}` one after the other; a refused publish
    /// fails the case. Returns the keys.
    pub async fn publish_numbered(
        &self,
        topic: &str,
        label: &str,
        count: usize,
    ) -> Result<Vec<String>, CaseError> {
        let mut keys = Vec::with_capacity(count);
        for i in 0..count {
            let key = format!("{label}-{i}");
            self.publish(self.message(topic, &key))
                .await
                .doing(&format!("publishing {key} to {topic}"))?;
            keys.push(key);
        }
        Ok(keys)
    }

    /// Bulk-publishes and records each entry's reported outcome (entries carry their
    /// key in metadata `pcs-key`).
    pub async fn bulk_publish(
        &self,
        request: BulkPublishRequest,
    ) -> Result<BulkPublishResponse, PubSubError> {
        self.bulk_publish_via(&self.runtime, request).await
    }

    /// Bulk-publishes through `runtime` and records each entry's reported outcome.
    pub async fn bulk_publish_via(
        &self,
        runtime: &Runtime,
        request: BulkPublishRequest,
    ) -> Result<BulkPublishResponse, PubSubError> {
        let entries: Vec<(String, crate::history::Published)> = request
            .entries
            .iter()
            .map(|e| {
                (
                    e.entry_id.clone(),
                    crate::history::Published {
                        key: e
                            .metadata
                            .get(KEY)
                            .or(request.metadata.get(KEY))
                            .cloned()
                            .unwrap_or_default(),
                        topic: request.topic.clone(),
                        partition_key: e
                            .metadata
                            .get("partitionKey")
                            .or(request.metadata.get("partitionKey"))
                            .cloned(),
                        due: None,
                        started: None,
                        payload: crate::history::fingerprint(&e.event),
                    },
                )
            })
            .collect();
        if let Some(bystander) = &self.bystander {
            for entry in &request.entries {
                if entry.metadata.contains_key("ttlInSeconds")
                    || request.metadata.contains_key("ttlInSeconds")
                {
                    let key = entry.metadata.get(KEY).or(request.metadata.get(KEY));
                    bystander.expiring(key.map_or("", String::as_str));
                }
            }
        }
        let waiting = self.ack_time.begin();
        let result = runtime.bulk_publish(request).await;
        drop(waiting);
        for (entry_id, publish) in entries {
            let outcome = match &result {
                Ok(response) => match response
                    .failed_entries
                    .iter()
                    .find(|f| f.entry_id == entry_id)
                {
                    Some(failed) => Err(failed.error.clone()),
                    None => Ok(None),
                },
                Err(e) => Err(format!("request rejected: {e}")),
            };
            self.recorder.published_with(publish, outcome);
        }
        result
    }
}

/// The most characters of a case id that go into the names of its topics and groups.
const NAME_PART_CHARS: usize = 40;

/// A case id as it goes into names: `.`, `@` and `+` as `-`, and an id longer than
/// [`NAME_PART_CHARS`] cut short, ending in a hash of the whole, so that a topic name
/// fits the shortest limit of a broker (63 characters for a RabbitMQ routing key).
fn name_part(case_id: &str) -> String {
    let name = case_id.replace(['.', '@', '+'], "-");
    if name.chars().count() <= NAME_PART_CHARS {
        return name;
    }
    let hash = pubsub_components::component::stable_hash(case_id.as_bytes()) & 0xfff_ffff;
    let head: String = name.chars().take(NAME_PART_CHARS - 8).collect();
    format!("{head}-{hash:07x}")
}

/// The due time a request's metadata asks for, read by the runtime's own parser.
fn due_time(metadata: &pubsub_components::Metadata) -> Option<SystemTime> {
    pubsub_components::runtime::controls::parse_controls(metadata, SystemTime::now())
        .ok()
        .and_then(|controls| controls.deliver_at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_case_ids_are_cut_short_in_names_and_stay_apart() {
        assert_eq!(name_part("ttl.live@partitioned"), "ttl-live-partitioned");
        let a = name_part("pairs.ttl+retry+dead-letter+receiver-delay+deliver-at");
        let b = name_part("pairs.ttl+retry+dead-letter+receiver-delay+bulk-publish");
        assert_eq!(a.chars().count(), NAME_PART_CHARS);
        assert!(a.starts_with("pairs-ttl-retry-dead-letter-rec"), "{a}");
        assert_ne!(a, b);
    }
}
