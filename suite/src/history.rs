//! The recorded history of a case: every publish attempt with its outcome and every
//! delivery with its time and id. Recorders are the handlers that write it.

use async_trait::async_trait;
use pubsub_components::runtime::{
    Batch, BulkHandler, EntryStatus, Event, Handler, MessageHandler, Status,
};
use pubsub_components::MessageId;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::sync::Notify;
use tokio::time::Instant;

/// The metadata key carrying a case's message key (`m-17`).
pub const KEY: &str = "pcs-key";

/// The key prefix of the control messages a timed case publishes beside its own
/// (see [`crate::load`]): the checker judges them only as the machine's latency.
pub const CONTROL_KEY: &str = "pcs-control-";

/// True for a control message's key.
pub fn is_control(key: &str) -> bool {
    key.starts_with(CONTROL_KEY)
}

/// One recorded event. Serialised one per line in a report's `histories/`, so a
/// verdict can be judged again offline (`pubsub-conformance check`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "record", rename_all = "snake_case")]
pub enum Record {
    Published {
        key: String,
        topic: String,
        at: SystemTime,
        /// The id, or the error text.
        outcome: Result<Option<MessageId>, String>,
        /// The partition key, for per-key ordering.
        partition_key: Option<String>,
        /// When the message is due (delayed delivery).
        due: Option<SystemTime>,
        /// When the publish call started (`at` is when it returned): the message
        /// reached the broker in between.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        started: Option<SystemTime>,
        /// The payload's fingerprint ([`fingerprint`]): a delivery whose metadata was
        /// damaged is still recognised by it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        payload: Option<String>,
    },
    Delivered {
        key: Option<String>,
        topic: String,
        id: MessageId,
        at: SystemTime,
        attempt: u32,
        /// The batch it came in, for bulk subscriptions.
        batch: Option<String>,
        subscriber: String,
        /// The consumer group of the subscriber, when the case subscribed it through
        /// [`crate::context::CaseContext::subscribe`].
        group: Option<String>,
        /// The CloudEvent `id` of the envelope (`None` for raw payloads).
        event_id: Option<String>,
        /// The delivered data's fingerprint ([`fingerprint`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        payload: Option<String>,
    },
    /// The handler's answer for a delivery: settled (SUCCESS, DROP) or asked again
    /// (RETRY, a missing status, a handler error).
    Answered {
        key: Option<String>,
        at: SystemTime,
        subscriber: String,
        group: Option<String>,
        /// SUCCESS or DROP: the runtime acknowledges the message.
        settled: bool,
        /// The answer as text (`SUCCESS`, `RETRY`, `DROP`, `missing`, `error: ...`).
        answer: String,
    },
    Batch {
        id: String,
        topic: String,
        at: SystemTime,
        size: usize,
        subscriber: String,
    },
    /// A fault the case injected (or its end), for the timeline.
    Fault {
        at: SystemTime,
        what: String,
    },
    /// How far behind the suite itself ran over a window of a timed case: the
    /// overshoot of a 10 ms ticker, and the share of the window the kernel's pressure
    /// stall information (`/proc/pressure/`) counted tasks stalled on CPU and I/O.
    Lag {
        at: SystemTime,
        /// The window's length.
        window_ms: u64,
        /// The ticker's overshoot: its 99th percentile and maximum, in ms.
        ticker_p99_ms: f64,
        ticker_max_ms: f64,
        /// `some` stall share of the window, 0 to 1; `None` without `/proc/pressure`.
        cpu_stall: Option<f64>,
        io_stall: Option<f64>,
    },
    /// A check the case made with the checker, and what the checker found: the
    /// records before it are what it judged, so it can be made again offline.
    Check {
        /// How many records the checker judged (those before this one).
        upto: usize,
        #[serde(alias = "expectation")]
        criteria: crate::criteria::Criteria,
        /// The checker's findings then.
        findings: Vec<String>,
    },
    Note {
        text: String,
    },
}

/// A payload's fingerprint: FNV-1a over its bytes, as 16 hex digits (stable across
/// builds, so a saved history is judged again the same).
pub fn fingerprint(data: &[u8]) -> String {
    format!("{:016x}", pubsub_components::component::stable_hash(data))
}

/// What a case publishes, recorded with its outcome ([`Recorder::published_with`]).
pub struct Published {
    pub key: String,
    pub topic: String,
    pub partition_key: Option<String>,
    pub due: Option<SystemTime>,
    pub started: Option<SystemTime>,
    /// The payload's [`fingerprint`].
    pub payload: String,
}

/// All records of a case, in the order they happened.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct History {
    pub records: Vec<Record>,
}

fn millis(at: SystemTime) -> String {
    let ms = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    format!("{}.{:03}", (ms / 1000) % 100_000, ms % 1000)
}

impl Record {
    /// A record of the timing probe or a check, not of the case's own messages.
    pub fn is_probe(&self) -> bool {
        match self {
            Record::Published { key, .. } => is_control(key),
            Record::Delivered { key, .. } | Record::Answered { key, .. } => {
                key.as_deref().is_some_and(is_control)
            }
            Record::Lag { .. } | Record::Check { .. } => true,
            _ => false,
        }
    }

    /// The case key the record is about, where it has one.
    pub fn key(&self) -> Option<&str> {
        match self {
            Record::Published { key, .. } => Some(key),
            Record::Delivered { key, .. } | Record::Answered { key, .. } => key.as_deref(),
            _ => None,
        }
    }

    /// One line for evidence.
    pub fn line(&self) -> String {
        match self {
            Record::Published {
                key,
                topic,
                at,
                outcome,
                partition_key,
                due,
                ..
            } => {
                let result = match outcome {
                    Ok(Some(id)) => format!("ok {id}"),
                    Ok(None) => "ok".into(),
                    Err(e) => format!("FAILED {e}"),
                };
                let key_part = partition_key
                    .as_ref()
                    .map(|k| format!(" key={k}"))
                    .unwrap_or_default();
                let due_part = due
                    .map(|d| format!(" due={}", millis(d)))
                    .unwrap_or_default();
                format!(
                    "{} publish {key} -> {topic}{key_part}{due_part}: {result}",
                    millis(*at)
                )
            }
            Record::Delivered {
                key,
                topic,
                id,
                at,
                attempt,
                batch,
                subscriber,
                ..
            } => {
                let batch = batch
                    .as_ref()
                    .map(|b| format!(" batch={}", &b[..8.min(b.len())]))
                    .unwrap_or_default();
                format!(
                    "{} deliver {} from {topic} id={id} attempt={attempt}{batch} to {subscriber}",
                    millis(*at),
                    key.as_deref().unwrap_or("(no key)")
                )
            }
            Record::Batch {
                id,
                topic,
                at,
                size,
                subscriber,
            } => format!(
                "{} batch {} of {size} from {topic} to {subscriber}",
                millis(*at),
                &id[..8.min(id.len())]
            ),
            Record::Answered {
                key,
                at,
                subscriber,
                answer,
                ..
            } => format!(
                "{} answer {} by {subscriber}: {answer}",
                millis(*at),
                key.as_deref().unwrap_or("(no key)")
            ),
            Record::Fault { at, what } => format!("{} FAULT {what}", millis(*at)),
            Record::Lag {
                at,
                window_ms,
                ticker_p99_ms,
                ticker_max_ms,
                cpu_stall,
                io_stall,
            } => {
                let share = |s: &Option<f64>| {
                    s.map_or_else(|| "n/a".to_string(), |s| format!("{:.0}%", s * 100.0))
                };
                format!(
                    "{} lag over {window_ms} ms: ticker overshoot p99 {ticker_p99_ms:.1} ms, max {ticker_max_ms:.1} ms; stalled on cpu {}, io {}",
                    millis(*at),
                    share(cpu_stall),
                    share(io_stall)
                )
            }
            Record::Check { findings, .. } => {
                format!("check: {} findings", findings.len())
            }
            Record::Note { text } => format!("note: {text}"),
        }
    }
}

impl History {
    /// The timeline of a case that injected faults (`None` when it injected none).
    pub fn timeline(&self) -> Option<pubsub_reports::Timeline> {
        use pubsub_reports::{Lane, TimelineEvent};
        if !self
            .records
            .iter()
            .any(|r| matches!(r, Record::Fault { .. }))
        {
            return None;
        }
        let at = |r: &Record| match r {
            Record::Published { at, .. }
            | Record::Delivered { at, .. }
            | Record::Batch { at, .. }
            | Record::Answered { at, .. }
            | Record::Fault { at, .. }
            | Record::Lag { at, .. } => Some(*at),
            Record::Note { .. } | Record::Check { .. } => None,
        };
        let first = self.records.iter().filter_map(at).min()?;
        let since = |t: SystemTime| t.duration_since(first).unwrap_or_default().as_millis() as u64;
        let events: Vec<TimelineEvent> = self
            .records
            .iter()
            .filter_map(|r| {
                let (lane, label) = match r {
                    Record::Published { key, outcome, .. } => (
                        if outcome.is_ok() {
                            Lane::Publish
                        } else {
                            Lane::PublishFailed
                        },
                        key.clone(),
                    ),
                    Record::Delivered { key, .. } => {
                        (Lane::Delivery, key.clone().unwrap_or_default())
                    }
                    Record::Fault { what, .. } => (Lane::Fault, what.clone()),
                    _ => return None,
                };
                Some(TimelineEvent {
                    at_ms: since(at(r)?),
                    lane,
                    label,
                })
            })
            .collect();
        Some(pubsub_reports::Timeline {
            span_ms: events.iter().map(|e| e.at_ms).max().unwrap_or(0),
            events,
        })
    }

    /// At most `max` lines: the first and last records.
    /// The timing probe's records (control messages, lag windows) and the checks are
    /// left out: the evidence's notes carry their figures.
    pub fn excerpt(&self, max: usize) -> Vec<String> {
        self.excerpt_naming(max, &[])
    }

    /// Like [`History::excerpt`], and keeping in between, besides faults, up to `max`
    /// records of the keys that `findings` name: the lines that show what a finding
    /// says.
    pub fn excerpt_naming(&self, max: usize, findings: &[String]) -> Vec<String> {
        let records: Vec<&Record> = self.records.iter().filter(|r| !r.is_probe()).collect();
        let lines: Vec<String> = records.iter().map(|r| r.line()).collect();
        if lines.len() <= max {
            return lines;
        }
        let head = max / 2;
        let tail = max - head - 1;
        let mut out = lines[..head].to_vec();
        let named = |record: &Record| {
            record
                .key()
                .is_some_and(|key| findings.iter().any(|f| names_key(f, key)))
        };
        // Faults in between are always kept: they explain what follows them.
        let mut kept: Vec<String> = Vec::new();
        let mut named_kept = 0;
        for record in &records[head..lines.len() - tail] {
            if matches!(record, Record::Fault { .. }) {
                kept.push(record.line());
            } else if named_kept < max && named(record) {
                named_kept += 1;
                kept.push(record.line());
            }
        }
        out.push(format!(
            "... {} records omitted{} ...",
            lines.len() - head - tail - kept.len(),
            match (kept.len() > named_kept, named_kept > 0) {
                (false, false) => "",
                (true, false) => " (faults kept)",
                (false, true) => " (those of keys the findings name kept)",
                (true, true) => " (faults and those of keys the findings name kept)",
            }
        ));
        out.extend(kept);
        out.extend_from_slice(&lines[lines.len() - tail..]);
        out
    }

    /// How many records an excerpt chooses from (the probe's left out).
    pub fn evidence_len(&self) -> usize {
        self.records.iter().filter(|r| !r.is_probe()).count()
    }

    /// Deliveries of `key`.
    pub fn deliveries_of<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a Record> + 'a {
        self.records
            .iter()
            .filter(move |r| matches!(r, Record::Delivered { key: Some(k), .. } if k == key))
    }

    /// How many times `key` was delivered.
    pub fn delivery_count(&self, key: &str) -> usize {
        self.deliveries_of(key).count()
    }

    /// Distinct keys delivered at least once.
    pub fn delivered_keys(&self) -> std::collections::BTreeSet<String> {
        self.records
            .iter()
            .filter_map(|r| match r {
                Record::Delivered { key: Some(k), .. } => Some(k.clone()),
                _ => None,
            })
            .collect()
    }

    /// Of `keys`, those whose first delivery came after `due`, with how long after.
    pub fn first_deliveries_after(
        &self,
        keys: &[String],
        due: SystemTime,
    ) -> Vec<(String, Duration)> {
        keys.iter()
            .filter_map(|key| {
                let first = self.deliveries_of(key).find_map(|r| match r {
                    Record::Delivered { at, .. } => Some(*at),
                    _ => None,
                })?;
                let by = first.duration_since(due).ok()?;
                Some((key.clone(), by))
            })
            .collect()
    }

    /// The batches recorded.
    pub fn batches(&self) -> impl Iterator<Item = (&String, &String, SystemTime, usize)> {
        self.records.iter().filter_map(|r| match r {
            Record::Batch {
                id,
                topic,
                at,
                size,
                ..
            } => Some((id, topic, *at, *size)),
            _ => None,
        })
    }
}

/// What a recording handler answered for one message.
#[derive(Debug, Clone)]
pub enum Answer {
    /// A status; `None` when a bulk handler left the entry out (counts as RETRY).
    Status(Option<Status>),
    /// The handler failed (counts as RETRY).
    Error(String),
}

impl Answer {
    /// True when the runtime acknowledges the message (SUCCESS, DROP).
    pub fn settles(&self) -> bool {
        matches!(self, Answer::Status(Some(Status::Success | Status::Drop)))
    }

    fn text(&self) -> String {
        match self {
            Answer::Status(Some(Status::Success)) => "SUCCESS".into(),
            Answer::Status(Some(Status::Retry)) => "RETRY".into(),
            Answer::Status(Some(Status::Drop)) => "DROP".into(),
            Answer::Status(None) => "missing (RETRY)".into(),
            Answer::Error(e) => format!("error (RETRY): {e}"),
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

type Script = dyn Fn(&Event) -> Status + Send + Sync;

struct Shared {
    history: Mutex<History>,
    events: Mutex<Vec<Event>>,
    /// Subscriber name -> consumer group, as the case subscribed it.
    groups: Mutex<HashMap<String, String>>,
    /// The recorder's handlers by address -> their subscriber name.
    handlers: Mutex<HashMap<usize, String>>,
    changed: Notify,
}

/// The address of a handler, to find the subscriber name the recorder gave it.
fn handler_address(handler: &Handler) -> usize {
    match handler {
        Handler::Single(h) => Arc::as_ptr(h) as *const () as usize,
        Handler::Bulk(h) => Arc::as_ptr(h) as *const () as usize,
    }
}

/// A shared history with handlers that record into it. Clones share it.
#[derive(Clone)]
pub struct Recorder {
    shared: Arc<Shared>,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder::new()
    }
}

impl Recorder {
    /// An empty history.
    pub fn new() -> Self {
        Recorder {
            shared: Arc::new(Shared {
                history: Mutex::new(History::default()),
                events: Mutex::new(Vec::new()),
                groups: Mutex::new(HashMap::new()),
                handlers: Mutex::new(HashMap::new()),
                changed: Notify::new(),
            }),
        }
    }

    fn push(&self, record: Record) {
        self.shared
            .history
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .records
            .push(record);
        self.shared.changed.notify_waiters();
    }

    /// Notes that `handler` (one of this recorder's) consumes in `group`, so that
    /// its deliveries and answers are judged per group.
    pub fn assign_group(&self, handler: &Handler, group: &str) {
        let subscriber = lock(&self.shared.handlers)
            .get(&handler_address(handler))
            .cloned();
        if let Some(subscriber) = subscriber {
            lock(&self.shared.groups).insert(subscriber, group.to_string());
        }
    }

    fn group_of(&self, subscriber: &str) -> Option<String> {
        lock(&self.shared.groups).get(subscriber).cloned()
    }

    fn register(&self, handler: Handler, subscriber: &str) -> Handler {
        lock(&self.shared.handlers).insert(handler_address(&handler), subscriber.to_string());
        handler
    }

    /// Records the handler's answer for `event`.
    pub fn answered(&self, event: &Event, subscriber: &str, answer: Answer) {
        self.push(Record::Answered {
            key: event.metadata.get(KEY).cloned(),
            at: SystemTime::now(),
            subscriber: subscriber.to_string(),
            group: self.group_of(subscriber),
            settled: answer.settles(),
            answer: answer.text(),
        });
    }

    /// Records a publish attempt.
    pub fn published(
        &self,
        key: &str,
        topic: &str,
        outcome: Result<Option<MessageId>, String>,
        partition_key: Option<&str>,
        due: Option<SystemTime>,
    ) {
        self.push(Record::Published {
            key: key.to_string(),
            topic: topic.to_string(),
            at: SystemTime::now(),
            outcome,
            partition_key: partition_key.map(str::to_string),
            due,
            started: None,
            payload: None,
        });
    }

    /// Records a publish attempt as [`Recorder::published`] does, with when its call
    /// started (when known) and its payload's [`fingerprint`].
    pub fn published_with(&self, publish: Published, outcome: Result<Option<MessageId>, String>) {
        self.push(Record::Published {
            key: publish.key,
            topic: publish.topic,
            at: SystemTime::now(),
            outcome,
            partition_key: publish.partition_key,
            due: publish.due,
            started: publish.started,
            payload: Some(publish.payload),
        });
    }

    /// Records a fault the case injected (or its end), stamped now.
    pub fn fault(&self, what: impl Into<String>) {
        self.push(Record::Fault {
            at: SystemTime::now(),
            what: what.into(),
        });
    }

    /// Records a note.
    pub fn note(&self, note: impl Into<String>) {
        self.push(Record::Note { text: note.into() });
    }

    /// Records a check made with the checker over the first `upto` records.
    ///
    /// `upto` is the length of the history the check judged: records that came while
    /// it ran (a timed case's control messages) are after it, as offline.
    pub fn checked(
        &self,
        criteria: &crate::criteria::Criteria,
        findings: Vec<String>,
        upto: usize,
    ) {
        self.push(Record::Check {
            upto,
            criteria: criteria.clone(),
            findings,
        });
    }

    /// Records a measurement of the machine's lag (see [`Record::Lag`]).
    pub fn lag(&self, record: Record) {
        self.push(record);
    }

    /// Records a delivery of `event` to `subscriber`.
    pub fn delivered(&self, event: &Event, subscriber: &str, batch: Option<&str>) {
        let control = event.metadata.get(KEY).is_some_and(|k| is_control(k));
        if !control {
            self.shared
                .events
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(event.clone());
        }
        self.push(Record::Delivered {
            key: event.metadata.get(KEY).cloned(),
            topic: event.topic.clone(),
            id: event.message_id.clone(),
            at: SystemTime::now(),
            attempt: event.attempt,
            batch: batch.map(str::to_string),
            subscriber: subscriber.to_string(),
            group: self.group_of(subscriber),
            event_id: event
                .cloud_event
                .as_ref()
                .and_then(|ce| ce.get("id"))
                .and_then(|id| id.as_str())
                .map(str::to_string),
            payload: Some(fingerprint(&event.data)),
        });
    }

    /// A copy of the history so far.
    pub fn history(&self) -> History {
        self.shared
            .history
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Every event delivered so far, in order.
    pub fn events(&self) -> Vec<Event> {
        self.shared
            .events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Waits, until `deadline` at the latest, for `done` to hold; returns whether it did.
    pub async fn wait_until(&self, deadline: Instant, done: impl Fn(&History) -> bool) -> bool {
        loop {
            let notified = self.shared.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if done(
                &self
                    .shared
                    .history
                    .lock()
                    .unwrap_or_else(|p| p.into_inner()),
            ) {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return done(&self.history());
            }
        }
    }

    /// Waits until every key in `keys` was delivered at least once.
    pub async fn wait_for_keys(&self, keys: &[String], deadline: Instant) -> bool {
        self.wait_until(deadline, |h| {
            let delivered = h.delivered_keys();
            keys.iter().all(|k| delivered.contains(k))
        })
        .await
    }

    /// A single-message handler that records each delivery and answers SUCCESS.
    pub fn handler(&self, subscriber: &str) -> Handler {
        self.scripted(subscriber, |_| Status::Success)
    }

    /// A single-message handler that records each delivery and answers `script(event)`.
    pub fn scripted(
        &self,
        subscriber: &str,
        script: impl Fn(&Event) -> Status + Send + Sync + 'static,
    ) -> Handler {
        let handler = Handler::Single(Arc::new(RecordingHandler {
            recorder: self.clone(),
            subscriber: subscriber.to_string(),
            script: Box::new(script),
        }));
        self.register(handler, subscriber)
    }

    /// A bulk handler that records each batch and answers `script(event)` per entry
    /// (`None` leaves the entry out of the answer); an `Err` from `fail_batch` fails
    /// the whole batch.
    pub fn bulk(
        &self,
        subscriber: &str,
        script: impl Fn(&Event) -> Option<Status> + Send + Sync + 'static,
        fail_batch: impl Fn(&Batch) -> Option<String> + Send + Sync + 'static,
    ) -> Handler {
        let handler = Handler::Bulk(Arc::new(RecordingBulkHandler {
            recorder: self.clone(),
            subscriber: subscriber.to_string(),
            script: Box::new(script),
            fail_batch: Box::new(fail_batch),
        }));
        self.register(handler, subscriber)
    }
}

struct RecordingHandler {
    recorder: Recorder,
    subscriber: String,
    script: Box<Script>,
}

#[async_trait]
impl MessageHandler for RecordingHandler {
    async fn handle(&self, event: Event) -> Result<Status, String> {
        self.recorder.delivered(&event, &self.subscriber, None);
        let status = (self.script)(&event);
        self.recorder
            .answered(&event, &self.subscriber, Answer::Status(Some(status)));
        Ok(status)
    }
}

type EntryScript = dyn Fn(&Event) -> Option<Status> + Send + Sync;
type BatchScript = dyn Fn(&Batch) -> Option<String> + Send + Sync;

struct RecordingBulkHandler {
    recorder: Recorder,
    subscriber: String,
    script: Box<EntryScript>,
    fail_batch: Box<BatchScript>,
}

#[async_trait]
impl BulkHandler for RecordingBulkHandler {
    async fn handle(&self, batch: Batch) -> Result<Vec<EntryStatus>, String> {
        self.recorder.push(Record::Batch {
            id: batch.id.clone(),
            topic: batch.topic.clone(),
            at: SystemTime::now(),
            size: batch.entries.len(),
            subscriber: self.subscriber.clone(),
        });
        for entry in &batch.entries {
            self.recorder
                .delivered(&entry.event, &self.subscriber, Some(&batch.id));
        }
        if let Some(error) = (self.fail_batch)(&batch) {
            for entry in &batch.entries {
                self.recorder.answered(
                    &entry.event,
                    &self.subscriber,
                    Answer::Error(error.clone()),
                );
            }
            return Err(error);
        }
        let mut statuses = Vec::new();
        for entry in &batch.entries {
            let status = (self.script)(&entry.event);
            self.recorder
                .answered(&entry.event, &self.subscriber, Answer::Status(status));
            if let Some(status) = status {
                statuses.push(EntryStatus {
                    entry_id: entry.entry_id.clone(),
                    status,
                });
            }
        }
        Ok(statuses)
    }
}

/// Whether `finding` names `key` as a whole word (`m-1` is not named by `m-10`).
fn names_key(finding: &str, key: &str) -> bool {
    let boundary =
        |c: Option<char>| c.is_none_or(|c| !(c.is_alphanumeric() || c == '-' || c == '_'));
    finding.match_indices(key).any(|(at, _)| {
        boundary(finding[..at].chars().next_back())
            && boundary(finding[at + key.len()..].chars().next())
    })
}
