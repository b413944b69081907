//! The conformance cases: their data in `catalogue.yaml` (id, MUST, capabilities,
//! level, lane, faults, bound rule), their bodies one module per family, named after
//! it (`bulk-publish.*` in `bulk_publish.rs`; `certification.*` in a folder, by what
//! each case exercises), joined by id in `bodies.rs`; [`all`] gathers them.

mod bodies;
pub mod bound;
pub mod case;

mod bulk_publish;
mod bulk_subscribe;
mod certification;
mod dead_letter;
mod delay;
mod envelope;
mod groups;
mod message_id;
mod multi_topic;
mod ordering;
pub mod pairs;
mod partitions;
mod publish;
mod retry;
mod subscribe;
mod topics;
mod tracing;
mod ttl;
pub mod values;

use crate::context::CaseContext;
use crate::history::{Recorder, KEY};
use crate::outcome::{CaseError, Outcome};
use bound::Bound;
use case::{Case, Injects, Lane, Level};
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use pubsub_components::runtime::{BulkPublishEntry, Event, Subscription, SubscriptionHandle};
use pubsub_components::{Capabilities, Feature, Metadata};
use serde::Deserialize;
use std::sync::LazyLock;

/// One entry of `catalogue.yaml`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    id: String,
    must: String,
    level: Level,
    #[serde(default)]
    requires: Vec<Feature>,
    #[serde(default = "shared")]
    lane: Lane,
    #[serde(default)]
    injects: Vec<Injects>,
    #[serde(default)]
    bystander: bool,
    /// True: the case also runs as its partitioned twin (see [`partitioned_twin`]).
    #[serde(default)]
    topology: bool,
    bound: String,
}

fn shared() -> Lane {
    Lane::Shared
}

static ENTRIES: LazyLock<Vec<Entry>> = LazyLock::new(|| {
    serde_yaml::from_str(include_str!("catalogue.yaml"))
        .unwrap_or_else(|e| panic!("suite/src/cases/catalogue.yaml: {e}"))
});

/// Every case of `catalogue.yaml`, in its order, each with its body and bound. A
/// case without a body, a body or custom bound without a case, or a bound rule that
/// does not parse is a mistake in the suite itself: it stops with the case's id.
pub fn all() -> Vec<Case> {
    let listed = |id: &str| ENTRIES.iter().any(|entry| entry.id == id);
    let strays: Vec<&str> = bodies::BODIES
        .iter()
        .map(|(id, _)| *id)
        .chain(bodies::CUSTOM_BOUNDS.iter().map(|(id, _)| *id))
        .filter(|id| !listed(id))
        .collect();
    assert!(
        strays.is_empty(),
        "bodies.rs names cases catalogue.yaml does not list: {strays:?}"
    );
    let mut cases = Vec::new();
    for entry in ENTRIES.iter() {
        let case = case_of(entry);
        if entry.topology {
            cases.push(partitioned_twin(&case));
        }
        cases.push(case);
    }
    cases.extend(pairs::cases());
    cases
}

/// How many partitions the topics of a partitioned twin have.
pub const TWIN_PARTITIONS: u32 = 4;

/// The suffix of a partitioned twin's id.
pub const TWIN_SUFFIX: &str = "@partitioned";

/// The topology dimension: `case` again, on topics of [`TWIN_PARTITIONS`] partitions
/// (for components that declare partitions), its id suffixed `@partitioned`. Its body
/// is the case's own; its topics come from [`CaseContext::new_topic`], which creates
/// them partitioned, and it judges ids, acknowledgements, seeks and order per owner
/// partition, so that a component that confuses a topic with one of its partitions
/// fails it. (Built once per catalogue: its texts live as long as the program.)
fn partitioned_twin(case: &Case) -> Case {
    let id: &'static str = Box::leak(format!("{}{TWIN_SUFFIX}", case.id).into_boxed_str());
    let must: &'static str = Box::leak(
        format!(
            "{} (On topics of {TWIN_PARTITIONS} partitions, with ids, acknowledgements, seeks and order per partition.)",
            case.must
        )
        .into_boxed_str(),
    );
    let mut requires = case.requires.to_vec();
    if !requires.contains(&Feature::Partitions) {
        requires.push(Feature::Partitions);
    }
    Case {
        id,
        must,
        requires: Box::leak(requires.into_boxed_slice()),
        partitions: Some(TWIN_PARTITIONS),
        ..case.clone()
    }
}

fn case_of(entry: &'static Entry) -> Case {
    let id = entry.id.as_str();
    let run = bodies::BODIES
        .iter()
        .find(|(body, _)| *body == id)
        .unwrap_or_else(|| panic!("catalogue.yaml lists {id}, but bodies.rs has no body for it"))
        .1;
    let bound = match bodies::CUSTOM_BOUNDS
        .iter()
        .find(|(custom, _)| *custom == id)
    {
        Some((_, compute)) => Bound::custom(&entry.bound, *compute),
        None => Bound::parse(&entry.bound).unwrap_or_else(|e| panic!("{id}: {e}")),
    };
    Case {
        id,
        must: &entry.must,
        requires: &entry.requires,
        level: entry.level,
        injects: &entry.injects,
        lane: entry.lane,
        bystander: entry.bystander,
        partitions: None,
        bound,
        run,
    }
}

/// Subscribes a recorder of its own to `subscription`, a dead-letter topic's, when
/// `watch`: what reaches it, and the handle that keeps it subscribed.
pub(super) async fn record_dead_letters(
    ctx: &CaseContext,
    subscription: Subscription,
    watch: bool,
) -> Result<(Recorder, Option<SubscriptionHandle>), CaseError> {
    let recorder = Recorder::new();
    let handle = if watch {
        let handler = recorder.handler("dead-letters");
        Some(ctx.subscribe(subscription, handler).await?)
    } else {
        None
    };
    Ok((recorder, handle))
}

/// Expects each of `keys` among the dead letters `dlq` recorded, with `reason`.
pub(super) fn expect_dead_letter_reasons(
    outcome: &mut Outcome,
    dlq: &Recorder,
    keys: &[String],
    reason: &str,
) {
    let dead = dlq.events();
    for key in keys {
        let found = dead
            .iter()
            .find(|e| key_of(e) == key)
            .and_then(|e| e.metadata.get("deadLetterReason").cloned());
        outcome.expect(found.as_deref() == Some(reason), || {
            format!("{key}: dead-letter reason {found:?}, expected {reason}")
        });
    }
}

/// Concludes a case whose refused messages have keys `bad-*`: publishes a sentinel
/// after them and waits for it, and, where a refused message that was published anyway
/// could trail it (`trailing`), waits a quiet window for one; then stops the
/// subscription and checks what happened.
pub(super) async fn after_refusals(
    ctx: &CaseContext,
    topic: &str,
    subscription: SubscriptionHandle,
    trailing: bool,
) -> Result<Outcome, CaseError> {
    let sentinel = ctx.publish_numbered(topic, "ok", 1).await?;
    ctx.recorder
        .wait_for_keys(&sentinel, ctx.delivery_deadline())
        .await;
    if trailing {
        ctx.recorder
            .wait_until(ctx.quiet_window(), |h| {
                h.delivered_keys().iter().any(|k| k.starts_with("bad-"))
            })
            .await;
    }
    subscription.stop().await;
    Ok(ctx.check(&ctx.criteria()))
}

/// How long a closed member's unacknowledged messages may take to return beyond the
/// redelivery bound: its lease, where the component declares they return only then.
/// The declaration covers reads still in flight when the member closed, and what they
/// fetch after it.
pub(super) fn returned_after(caps: &Capabilities) -> std::time::Duration {
    if caps.returns_on_close {
        std::time::Duration::ZERO
    } else {
        caps.lease
    }
}

/// Lets a `ttlInSeconds` of 1 pass, by the clock tolerance and a little more: waiting
/// for a point in time, not for an event.
pub(super) async fn outlive_one_second_ttl(ctx: &CaseContext) {
    let margin = ctx.caps.clock_tolerance + std::time::Duration::from_millis(50);
    tokio::time::sleep(std::time::Duration::from_secs(1) + margin).await;
}

/// A proptest runner whose generator is seeded by `seed`: it draws the same values on
/// every run with the same seed.
pub fn seeded_runner(seed: u64) -> TestRunner {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &bytes),
    )
}

/// `count` values drawn from `strategy` with a generator seeded by `seed`: the same
/// values on every run with the same seed.
pub fn generate<S: Strategy>(strategy: S, seed: u64, count: usize) -> Vec<S::Value> {
    let mut runner = seeded_runner(seed);
    (0..count)
        .map(|_| {
            strategy
                .new_tree(&mut runner)
                .expect("strategy generates")
                .current()
        })
        .collect()
}

/// The case key a received message carries (empty when it carries none).
pub fn received_key(message: &pubsub_components::ReceivedMessage) -> String {
    message.metadata.get(KEY).cloned().unwrap_or_default()
}

/// The case key a delivered event carries.
pub fn key_of(event: &Event) -> &str {
    event.metadata.get(KEY).map(String::as_str).unwrap_or("")
}

/// One message whose payload, content type and metadata must survive unchanged.
#[derive(Debug, Clone)]
pub struct Sample {
    pub key: String,
    pub data: Vec<u8>,
    pub content_type: Option<String>,
    /// Everything the app sets, including `pcs-key` and `rawPayload`.
    pub metadata: Metadata,
}

impl Sample {
    /// The sample published singly to `topic`.
    pub fn request(&self, topic: &str) -> pubsub_components::runtime::PublishRequest {
        pubsub_components::runtime::PublishRequest {
            topic: topic.to_string(),
            data: self.data.clone(),
            content_type: self.content_type.clone(),
            metadata: self.metadata.clone(),
        }
    }

    /// The sample as a bulk entry whose id is its key.
    pub fn entry(&self) -> BulkPublishEntry {
        BulkPublishEntry {
            entry_id: self.key.clone(),
            event: self.data.clone(),
            content_type: self.content_type.clone(),
            metadata: self.metadata.clone(),
        }
    }
}

/// Fixed edge cases (binary, empty, unicode, JSON, large) in both envelope modes, an
/// app's CloudEvent sent rawPayload, plus `random` samples drawn across the value
/// space with edge bias ([`values`]).
pub fn samples(caps: &Capabilities, seed: u64, random: usize) -> Vec<Sample> {
    let large = caps
        .max_message_bytes
        .map_or(256 * 1024, |max| (max / 3).min(256 * 1024));
    let fixed: Vec<(&str, Vec<u8>, Option<&str>)> = vec![
        (
            "binary",
            (0..=255u8).collect(),
            Some("application/octet-stream"),
        ),
        ("empty", Vec::new(), Some("application/octet-stream")),
        (
            "unicode",
            "héllo wörld ✓ 日本語 🚀".as_bytes().to_vec(),
            Some("text/plain; charset=utf-8"),
        ),
        (
            "json",
            br#"{"order": 17, "items": ["a", "b"], "nested": {"x": null}}"#.to_vec(),
            Some("application/json"),
        ),
        (
            "large",
            (0..large).map(|i| (i * 31 % 251) as u8).collect(),
            Some("application/octet-stream"),
        ),
        ("untyped", b"no content type".to_vec(), None),
        ("one-byte", vec![0x7f], Some("application/octet-stream")),
        (
            "odd-type",
            b"content type with parameters and odd casing".to_vec(),
            Some("Text/Plain; Charset=UTF-8"),
        ),
    ];
    // An app's own CloudEvent sent rawPayload: delivered as sent, not unwrapped (the
    // runtime marks it, since its content type is the one that marks envelopes). Sent
    // enveloped it is completed instead, which `envelope.app-cloudevent` checks.
    let app_event = (
        "app-cloudevent",
        br#"{"specversion":"1.0","id":"app-1","source":"shop","type":"order.placed","data":{"n":1}}"#
            .to_vec(),
        Some("application/cloudevents+json"),
    );
    let mut out = Vec::new();
    for raw in [false, true] {
        let raw_only = raw.then_some(&app_event);
        for (label, data, content_type) in fixed.iter().chain(raw_only) {
            let key = format!("{label}-{}", if raw { "raw" } else { "ce" });
            let mut metadata = Metadata::new();
            metadata.insert(KEY.into(), key.clone());
            metadata.insert("app-label".into(), format!("{label} ✓ value"));
            // Values at the edges of their space: padded, only spaces, a tab, empty,
            // long.
            metadata.insert("app-padded".into(), format!("  {label}  "));
            metadata.insert("app-spaces".into(), "   ".into());
            metadata.insert("app-tab".into(), "a\tb".into());
            metadata.insert("app-empty".into(), String::new());
            metadata.insert("app-long".into(), label.repeat(4096 / label.len() + 1));
            // Keys at the edges of theirs: differing only in case, punctuation,
            // non-ASCII, long, one character, reserved-looking words.
            metadata.insert("app-Case".into(), "upper".into());
            metadata.insert("app-case".into(), "lower".into());
            metadata.insert("app.dot/slash:colon_under".into(), "punctuation".into());
            metadata.insert("app-ключ-鍵".into(), "non-ascii key".into());
            metadata.insert(format!("app-{}", "k".repeat(200)), "long key".into());
            metadata.insert("k".into(), "one-character key".into());
            metadata.insert("null".into(), "reserved-looking key".into());
            if raw {
                metadata.insert("rawPayload".into(), "true".into());
            }
            out.push(Sample {
                key,
                data: data.clone(),
                content_type: content_type.map(str::to_string),
                metadata,
            });
        }
    }
    out.extend(values::samples(caps, seed, random));
    out
}

/// Whether Dapr's HTTP API can carry `sample`'s content type to a subscriber as it
/// is. It cannot say "no content type" (the API assumes text/plain), a raw payload
/// reaches a subscription without rawPayload wrapped as application/octet-stream, and
/// a bulk entry whose bytes its type cannot carry (not text, or JSON-typed but not
/// JSON) travels as application/octet-stream.
fn http_carries_content_type(sample: &Sample, delivered: Option<&str>) -> bool {
    let raw = sample
        .metadata
        .get("rawPayload")
        .is_some_and(|v| v == "true");
    let octet = delivered == Some("application/octet-stream");
    let text = std::str::from_utf8(&sample.data).ok();
    let json_typed = sample
        .content_type
        .as_deref()
        .is_some_and(|t| t.contains("json"));
    let not_expressible = text.is_none()
        || (json_typed
            && text.is_some_and(|t| serde_json::from_str::<serde_json::Value>(t).is_err()));
    !(sample.content_type.is_none() || (raw && octet) || (not_expressible && octet))
}

/// How delivered events crossed from publisher to subscriber: what a fidelity
/// check can compare.
#[derive(Debug, Clone, Copy, Default)]
pub struct Crossing {
    /// Over Dapr's API, HTTP or gRPC (see [`fidelity_problems`]).
    pub over_the_wire: bool,
    /// Delivered over gRPC, whose metadata names are fewer than HTTP's.
    pub over_grpc: bool,
    /// JSON payloads were serialized again (an SDK's client or app): they are
    /// compared as JSON values, not bytes.
    pub json_reserialized: bool,
    /// The subscriber's handler sees only data and metadata (an SDK's app): content
    /// types are not compared.
    pub data_only: bool,
}

impl Crossing {
    /// How events published and received through `runtime` cross.
    pub fn of(runtime: &pubsub_components::runtime::Runtime) -> Self {
        Crossing {
            over_the_wire: runtime.is_remote(),
            over_grpc: runtime.delivers_metadata_over_grpc(),
            json_reserialized: runtime.reserializes_json(),
            data_only: runtime.hands_over_data_only().is_some(),
        }
    }

    /// Notes on a fidelity case's outcome what this crossing leaves uncompared.
    pub fn note_what_is_not_compared(
        self,
        outcome: &mut crate::outcome::Outcome,
        runtime: &pubsub_components::runtime::Runtime,
    ) {
        if self.over_the_wire {
            outcome.note(OVER_THE_WIRE_NOTE);
        }
        if self.json_reserialized {
            outcome.note(RESERIALIZED_JSON_NOTE);
        }
        if let Some(why) = runtime.hands_over_data_only() {
            outcome.note(format!("content types not compared: {why}"));
        }
    }
}

/// What a fidelity case leaves uncompared over Dapr's API (HTTP or gRPC).
const OVER_THE_WIRE_NOTE: &str = "over Dapr's API (HTTP headers, or gRPC metadata, carry the metadata): payload bytes compared as always; content types the API cannot carry (none given, a raw payload's at a subscription without rawPayload, a bulk entry's bytes its type cannot hold) the case of metadata keys, the leading and trailing whitespace of metadata values (HTTP headers: RFC 9110 5.5 excludes it from a field value), and metadata keys no header name can spell (not an RFC 9110 token: non-ASCII, '/', ':') or that differ from another only in case are not compared";

/// What a fidelity case compares differently when an SDK handles JSON payloads.
const RESERIALIZED_JSON_NOTE: &str = "JSON payloads cross an SDK as values (its client serializes what an app hands it; its server hands the handler what it parsed): a JSON-typed payload is compared as a JSON value, not byte for byte";

/// A case that judges a delivered event's CloudEvent cannot run where the
/// subscriber's handler sees only data and metadata (an SDK's app): UNSUPPORTED,
/// saying why.
pub fn needs_whole_events(
    ctx: &crate::context::CaseContext,
) -> Result<(), crate::outcome::CaseError> {
    match ctx.runtime.hands_over_data_only() {
        Some(why) => Err(crate::outcome::CaseError::CannotProvoke(format!(
            "the case judges each delivered event's CloudEvent: {why}"
        ))),
        None => Ok(()),
    }
}

/// Whether `content_type` declares JSON (`application/json`, `...+json`, any case).
pub fn is_json_type(content_type: &str) -> bool {
    pubsub_components::runtime::envelope::declares_json(content_type)
}

/// Whether two payloads are the same JSON value (both must parse).
pub fn same_json(a: &[u8], b: &[u8]) -> bool {
    match (
        serde_json::from_slice::<serde_json::Value>(a),
        serde_json::from_slice::<serde_json::Value>(b),
    ) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// Compares a delivered event with its sample; returns what differs. `crossing.over_the_wire`:
/// the event crossed Dapr's HTTP API, which cannot carry some content types (see
/// [`http_carries_content_type`]) and sends metadata as headers, whose names have no
/// case; those are not compared there (payload bytes always are).
pub fn fidelity_problems(sample: &Sample, event: &Event, crossing: Crossing) -> Vec<String> {
    let over_the_wire = crossing.over_the_wire;
    let mut problems = Vec::new();
    let equal_as_json = crossing.json_reserialized
        && sample.content_type.as_deref().is_some_and(is_json_type)
        && same_json(&event.data, &sample.data);
    if event.data != sample.data && !equal_as_json {
        let first_diff = event
            .data
            .iter()
            .zip(&sample.data)
            .position(|(a, b)| a != b)
            .unwrap_or(event.data.len().min(sample.data.len()));
        problems.push(format!(
            "{}: payload differs ({} bytes published as {}, {} delivered, first difference at byte {first_diff})",
            sample.key,
            sample.data.len(),
            sample.content_type.as_deref().unwrap_or("no content type"),
            event.data.len()
        ));
    }
    let compare_type = !crossing.data_only
        && (!over_the_wire || http_carries_content_type(sample, event.content_type.as_deref()));
    if compare_type && event.content_type != sample.content_type {
        problems.push(format!(
            "{}: content type {:?} published, {:?} delivered",
            sample.key, sample.content_type, event.content_type
        ));
    }
    // Over HTTP metadata travels as headers: names without case, values without
    // leading or trailing whitespace (RFC 9110 5.5: a field value excludes it), and
    // only names that are HTTP tokens, each once whatever its case.
    let (published, delivered) = match over_the_wire {
        true => (
            as_headers(&sample.metadata, &sample.metadata, crossing.over_grpc),
            as_headers(&event.metadata, &sample.metadata, crossing.over_grpc),
        ),
        false => (sample.metadata.clone(), event.metadata.clone()),
    };
    if published != delivered {
        problems.push(format!(
            "{}: metadata not delivered as published: {}",
            sample.key,
            metadata_differences(&published, &delivered)
        ));
    }
    problems
}

/// Metadata as HTTP headers can carry it, to compare with `published` as it would
/// arrive: names in lower case, values without surrounding spaces and tabs, and
/// without the names no header can carry (not an RFC 9110 token; over gRPC, not a
/// gRPC metadata name) or that differ from another published name only in case (two
/// headers become one).
fn as_headers(metadata: &Metadata, published: &Metadata, grpc: bool) -> Metadata {
    let lowered_count = |name: &str| {
        published
            .keys()
            .filter(|k| k.eq_ignore_ascii_case(name))
            .count()
    };
    metadata
        .iter()
        .filter(|(k, _)| is_http_token(k) && (!grpc || is_grpc_name(k)) && lowered_count(k) <= 1)
        .map(|(k, v)| {
            (
                k.to_lowercase(),
                v.trim_matches(|c| c == ' ' || c == '\t').to_string(),
            )
        })
        .collect()
}

/// Whether `name` can be an HTTP field name (RFC 9110 5.6.2, `token`).
fn is_http_token(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Whether `name`, lowercased, can be a gRPC metadata name carrying text (digits,
/// lowercase letters, `_`, `-`, `.`; not ending in `-bin`, which names binary values).
fn is_grpc_name(name: &str) -> bool {
    !name.is_empty()
        && !name.to_ascii_lowercase().ends_with("-bin")
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
}

/// What differs between published and delivered metadata, key by key: missing
/// keys, keys that were not published, changed values (shortened).
fn metadata_differences(published: &Metadata, delivered: &Metadata) -> String {
    let short = |value: &str| -> String {
        let mut shown: String = value.chars().take(40).collect();
        if shown.len() < value.len() {
            shown.push_str("...");
        }
        format!("{shown:?}")
    };
    let mut differences = Vec::new();
    for (key, value) in published {
        match delivered.get(key) {
            None => differences.push(format!("{key:?} missing")),
            Some(got) if got != value => differences.push(format!(
                "{key:?} is {}, published {}",
                short(got),
                short(value)
            )),
            Some(_) => {}
        }
    }
    for (key, value) in delivered {
        if !published.contains_key(key) {
            differences.push(format!("{key:?} = {} was not published", short(value)));
        }
    }
    differences.join("; ")
}

/// A bulk entry tagged with `key` (also its entry id and its text payload).
pub fn keyed_entry(key: &str) -> BulkPublishEntry {
    let mut metadata = Metadata::new();
    metadata.insert(KEY.into(), key.into());
    BulkPublishEntry {
        entry_id: key.into(),
        event: key.as_bytes().to_vec(),
        content_type: Some("text/plain".into()),
        metadata,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(data: &[u8], content_type: Option<&str>, raw: bool) -> Sample {
        let mut metadata = Metadata::new();
        if raw {
            metadata.insert("rawPayload".into(), "true".into());
        }
        Sample {
            key: "k".into(),
            data: data.to_vec(),
            content_type: content_type.map(str::to_string),
            metadata,
        }
    }

    #[test]
    fn json_reserialized_by_an_sdk_is_compared_as_a_value() {
        assert!(same_json(
            br#"{"a": 1, "b": [1, 2]}"#,
            br#"{"b":[1,2],"a":1}"#
        ));
        assert!(!same_json(br#"{"a": 1}"#, br#"{"a": 2}"#));
        assert!(
            !same_json(b"{x", b"{x"),
            "unparsable payloads are compared as bytes"
        );
        assert!(is_json_type("application/json; charset=utf-8"));
        assert!(is_json_type("application/cloudevents+json"));
        assert!(!is_json_type("text/plain"));
        assert!(!is_json_type("application/jsonl"));
        assert!(is_json_type("Application/JSON"));
        assert!(is_json_type("application/CloudEvents+JSON; charset=utf-8"));
    }

    #[test]
    fn over_the_wire_only_what_the_api_cannot_carry_goes_uncompared() {
        let octet = Some("application/octet-stream");
        // Carried as it is: compared.
        assert!(http_carries_content_type(
            &sample(b"hi", Some("text/plain"), false),
            octet
        ));
        assert!(http_carries_content_type(
            &sample(b"{}", Some("application/json"), false),
            octet
        ));
        // None given; a raw payload at a non-raw subscription; bytes its type cannot hold.
        assert!(!http_carries_content_type(
            &sample(b"hi", None, false),
            Some("text/plain")
        ));
        assert!(!http_carries_content_type(
            &sample(b"hi", Some("text/plain"), true),
            octet
        ));
        assert!(!http_carries_content_type(
            &sample(&[0xff], Some("text/plain"), false),
            octet
        ));
        assert!(!http_carries_content_type(
            &sample(b"{x", Some("application/json"), false),
            octet
        ));
        // ...but only as octet-stream: another type is a finding.
        assert!(http_carries_content_type(
            &sample(b"hi", Some("text/plain"), true),
            Some("text/html")
        ));
    }

    #[test]
    fn over_grpc_only_grpc_metadata_names_are_compared() {
        let mut published = Metadata::new();
        published.insert("App-Key".into(), "v".into());
        published.insert("app-17%20".into(), "v".into());
        published.insert("app-x-bin".into(), "v".into());
        let mut delivered = Metadata::new();
        delivered.insert("app-key".into(), "v".into());
        let event = |metadata: &Metadata| Event {
            id: "e".into(),
            topic: "t".into(),
            data: b"x".to_vec(),
            content_type: None,
            metadata: metadata.clone(),
            message_id: pubsub_components::MessageId::new("t", None, 0),
            attempt: 1,
            trace_parent: None,
            cloud_event: None,
            published_at: std::time::SystemTime::now(),
        };
        let sample = Sample {
            key: "k".into(),
            data: b"x".to_vec(),
            content_type: Some("text/plain".into()),
            metadata: published.clone(),
        };
        let over = |over_grpc| Crossing {
            over_the_wire: true,
            over_grpc,
            data_only: true,
            ..Crossing::default()
        };
        // Over gRPC, '%' and '-bin' names cannot arrive: not compared.
        assert_eq!(
            fidelity_problems(&sample, &event(&delivered), over(true)),
            Vec::<String>::new()
        );
        // Over HTTP they are headers like any other: missing is a finding.
        let problems = fidelity_problems(&sample, &event(&delivered), over(false));
        assert!(
            problems.iter().any(|p| p.contains("app-17%20")),
            "{problems:?}"
        );
        assert!(is_grpc_name("a-b_c.9") && !is_grpc_name("a%b") && !is_grpc_name("A-BIN"));
    }
}
