//! publish.*: single publishes are delivered, their payload, content type and metadata
//! unchanged at every size, and bad requests are refused clearly.

use super::{
    after_refusals, fidelity_problems, generate, key_of, samples, values, Crossing, Sample,
};
use crate::context::CaseContext;
use crate::history::KEY;
use crate::outcome::{CaseError, CaseRun, Context, Outcome};
use pubsub_components::runtime::envelope;
use pubsub_components::runtime::{
    BulkPublishEntry, BulkPublishRequest, BulkPublishResponse, PublishRequest, Status, Subscription,
};
use pubsub_components::{ErrorKind, Feature, Metadata, OrderingScope, Support};
use std::time::Duration;

pub(super) async fn delivery(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let subscription = ctx.subscribe_recorded(&topic).await?;
    let keys = ctx.publish_numbered(&topic, "m", 50).await?;
    Ok(ctx.conclude(&keys, subscription).await)
}

/// Publishes the samples (singly or in one bulk request) and compares deliveries.
pub(super) async fn fidelity(ctx: CaseContext, bulk: bool) -> CaseRun {
    let topic = ctx.topic("t");
    let mut samples = samples(&ctx.caps, ctx.seed(), 12);
    let left_out: Vec<String> = samples
        .iter()
        .filter(|s| bulk && !bulk_carries(&ctx, s))
        .map(|s| s.key.clone())
        .collect();
    samples.retain(|s| !left_out.contains(&s.key));
    let subscription = ctx.subscribe_recorded(&topic).await?;
    if bulk {
        let request = pubsub_components::runtime::BulkPublishRequest {
            topic: topic.clone(),
            entries: samples.iter().map(Sample::entry).collect(),
            metadata: Default::default(),
        };
        let response = ctx
            .bulk_publish(request)
            .await
            .doing("bulk publishing the samples")?;
        all_accepted(&response, "bulk publish of valid samples")?;
    } else {
        for sample in &samples {
            ctx.publish(sample.request(&topic))
                .await
                .doing(&format!("publishing sample {}", sample.key))?;
        }
    }
    let keys: Vec<String> = samples.iter().map(|s| s.key.clone()).collect();
    let mut outcome = ctx.conclude(&keys, subscription).await;
    let events = ctx.recorder.events();
    let crossing = Crossing::of(&ctx.runtime);
    let mut first_failing_draw = None;
    for sample in &samples {
        if let Some(event) = events.iter().find(|e| key_of(e) == sample.key) {
            let problems = fidelity_problems(sample, event, crossing);
            if let Some(index) = sample.key.strip_prefix("random-") {
                if !problems.is_empty() && first_failing_draw.is_none() {
                    first_failing_draw = index.parse::<usize>().ok().map(|i| (i, problems.clone()));
                }
            }
            outcome.findings.extend(problems);
        }
    }
    if let Some((index, problems)) = first_failing_draw {
        let finding = smallest_failing_draw(&ctx, index, problems, bulk, crossing).await?;
        outcome.fail(finding);
    }
    outcome.note(format!("{} samples (seed {})", samples.len(), ctx.seed()));
    if !left_out.is_empty() {
        outcome.note(format!(
            "left out, their content types being neither binary, text nor JSON, which Dapr's bulk API over HTTP cannot carry: {left_out:?}"
        ));
    }
    crossing.note_what_is_not_compared(&mut outcome, &ctx.runtime);
    Ok(outcome)
}

/// Whether a bulk request through the case's runtime can carry `sample`: Dapr's bulk
/// API over HTTP carries binary, text and JSON entries only.
fn bulk_carries(ctx: &CaseContext, sample: &Sample) -> bool {
    !ctx.runtime.is_remote()
        || sample
            .content_type
            .as_deref()
            .is_none_or(envelope::bulk_http_carries)
}

/// How many smaller draws shrinking tries at most.
const SHRINK_STEPS: usize = 64;

/// Shrinks the failing draw `random-<index>` of the case seed through the same path
/// (single, or a bulk request of one entry) on a topic of its own, and says which is
/// the smallest draw found that still fails, and how.
async fn smallest_failing_draw(
    ctx: &CaseContext,
    index: usize,
    problems: Vec<String>,
    bulk: bool,
    crossing: Crossing,
) -> Result<String, CaseError> {
    let topic = ctx.topic("shrink");
    let recorder = crate::history::Recorder::new();
    let handle = ctx
        .subscribe(
            Subscription::new(&topic, ctx.group("shrink")),
            recorder.handler("shrink"),
        )
        .await?;
    let reach = values::Reach::of(&ctx.caps);
    let mut step = 0;
    let shrunk = values::shrink(reach, ctx.seed(), index, problems, SHRINK_STEPS, |drawn| {
        step += 1;
        let sample = drawn.sample(&format!("shrink-{step}"));
        let (topic, recorder) = (topic.clone(), recorder.clone());
        async move {
            if bulk && !bulk_carries(ctx, &sample) {
                // Not a draw this path can express: no evidence either way.
                return None;
            }
            let published = if bulk {
                let request = BulkPublishRequest::new(&topic, vec![sample.entry()]);
                match ctx.runtime.bulk_publish(request).await {
                    Ok(response) => match response.failed_entries.first() {
                        Some(failed) => Err(failed.error.clone()),
                        None => Ok(()),
                    },
                    Err(e) => Err(e.to_string()),
                }
            } else {
                ctx.runtime
                    .publish(sample.request(&topic))
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            };
            if let Err(e) = published {
                return Some(vec![format!("{}: refused: {e}", sample.key)]);
            }
            let keys = [sample.key.clone()];
            // Not delivered (the case's bound may be nearly spent): no evidence about
            // fidelity either way; what is lost is the checker's to say.
            if !recorder
                .wait_for_keys(&keys, ctx.within(ctx.caps.delivery_bound))
                .await
            {
                return None;
            }
            let event = recorder
                .events()
                .into_iter()
                .find(|e| key_of(e) == sample.key)?;
            let problems = fidelity_problems(&sample, &event, crossing);
            (!problems.is_empty()).then_some(problems)
        }
    })
    .await;
    handle.stop().await;
    Ok(format!(
        "smallest failing draw (seed {}, shrunk from random-{index}, {} smaller draws tried): {}: {}",
        ctx.seed(),
        shrunk.tried,
        shrunk.drawn.describe(),
        shrunk.problems.join("; ")
    ))
}

pub(super) async fn invalid_requests(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let subscription = ctx.subscribe_recorded(&topic).await?;
    let bad =
        |key: &str| PublishRequest::new(&topic, key.as_bytes().to_vec()).with_metadata(KEY, key);
    let mut attempts: Vec<(String, PublishRequest, &str)> = vec![
        (
            "empty topic".into(),
            PublishRequest::new("", "x").with_metadata(KEY, "bad-0"),
            "topic",
        ),
        (
            "topic with '#'".into(),
            PublishRequest::new(format!("{topic}#1"), "x").with_metadata(KEY, "bad-1"),
            "topic",
        ),
    ];
    // Each bad metadata value is refused naming the field (the control character's
    // refusal names what is wrong with it).
    let values = [
        (
            "reserved metadata key",
            "x-rt-envelope",
            "forged",
            "x-rt-envelope",
        ),
        ("ttlInSeconds=soon", "ttlInSeconds", "soon", "ttlInSeconds"),
        ("deliverAt=tomorrow", "deliverAt", "tomorrow", "deliverAt"),
        (
            "deliverAfter=5 parsecs",
            "deliverAfter",
            "5 parsecs",
            "deliverAfter",
        ),
        ("rawPayload=maybe", "rawPayload", "maybe", "rawPayload"),
        (
            "malformed traceparent",
            "traceparent",
            "00-xyz",
            "traceparent",
        ),
        (
            "control character in metadata",
            "app-note",
            "a\u{7}b",
            "control character",
        ),
    ];
    for (n, (what, field, value, named)) in values.into_iter().enumerate() {
        let key = format!("bad-{}", n + 2);
        attempts.push((what.into(), bad(&key).with_metadata(field, value), named));
    }
    let mut outcome = Outcome::new();
    for (what, request, named) in attempts {
        match ctx.runtime.publish(request).await {
            Ok(id) => {
                outcome.fail(format!("{what}: accepted (id {id}) instead of refused"));
            }
            Err(e) if e.kind() != ErrorKind::InvalidRequest => {
                outcome.fail(format!(
                    "{what}: refused with a {:?} error, not InvalidRequest: {e}",
                    e.kind()
                ));
            }
            Err(e) if !e.to_string().contains(named) => {
                outcome.fail(format!("{what}: the error does not name '{named}': {e}"));
            }
            Err(e) => {
                outcome.note(format!("{what}: {e}"));
            }
        }
    }
    // Without ordering, a refused-but-published message could trail the sentinel.
    let trailing = ctx.caps.ordering == OrderingScope::None;
    let checked = after_refusals(&ctx, &topic, subscription, trailing).await?;
    Ok(outcome.merge(checked))
}

/// Single publishers and bulk publishers of `publish.concurrent-fidelity`.
const CONCURRENT_SINGLE_PUBLISHERS: usize = 4;

const CONCURRENT_BULK_PUBLISHERS: usize = 2;

/// Messages each publisher sends.
const CONCURRENT_MESSAGES: usize = 25;

/// The messages publisher `label` sends: each its own payload (text, bytes or JSON
/// by turn, from the seed), content type and metadata values.
fn concurrent_samples(label: &str, seed: u64) -> Vec<Sample> {
    let strategy = (
        proptest::collection::vec(proptest::num::u8::ANY, 1..512),
        "[a-zA-Z0-9 ✓é日]{1,40}",
        "[ -~]{0,60}",
    );
    generate(strategy, seed, CONCURRENT_MESSAGES)
        .into_iter()
        .enumerate()
        .map(|(i, (bytes, text, value))| {
            let key = format!("{label}-{i}");
            let (data, content_type) = match i % 3 {
                0 => (
                    format!("{text} from {key}").into_bytes(),
                    "text/plain; charset=utf-8",
                ),
                1 => (bytes, "application/octet-stream"),
                _ => (
                    serde_json::json!({ "publisher": label, "n": i, "text": text })
                        .to_string()
                        .into_bytes(),
                    "application/json",
                ),
            };
            let mut metadata = Metadata::new();
            metadata.insert(KEY.into(), key.clone());
            metadata.insert("app-publisher".into(), label.to_string());
            metadata.insert("app-value".into(), format!("{key}:{value}"));
            Sample {
                key,
                data,
                content_type: Some(content_type.to_string()),
                metadata,
            }
        })
        .collect()
}

/// Publishers, single and bulk, run at once, each message with its own payload,
/// content type and metadata: each must arrive with its own, never another's.
pub(super) async fn concurrent_fidelity(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let subscription = ctx.subscribe_recorded(&topic).await?;
    let seed = ctx.seed();
    let single: Vec<Vec<Sample>> = (0..CONCURRENT_SINGLE_PUBLISHERS)
        .map(|p| concurrent_samples(&format!("s{p}"), seed.wrapping_add(p as u64)))
        .collect();
    let bulk: Vec<Vec<Sample>> = (0..CONCURRENT_BULK_PUBLISHERS)
        .map(|p| concurrent_samples(&format!("b{p}"), seed.wrapping_add(100 + p as u64)))
        .collect();
    let (ctx_ref, topic_ref) = (&ctx, &topic);
    let singles = single.iter().map(|samples| async move {
        for sample in samples {
            ctx_ref
                .publish(sample.request(topic_ref))
                .await
                .doing(&format!("publishing {}", sample.key))?;
        }
        Ok::<(), crate::outcome::CaseError>(())
    });
    let bulks = bulk.iter().map(|samples| {
        ctx.bulk_publish(pubsub_components::runtime::BulkPublishRequest {
            topic: topic.clone(),
            entries: samples.iter().map(Sample::entry).collect(),
            metadata: Default::default(),
        })
    });
    let (single_results, bulk_results) = futures::join!(
        futures::future::join_all(singles),
        futures::future::join_all(bulks)
    );
    for result in single_results {
        result?;
    }
    for result in bulk_results {
        let response = result.doing("bulk publishing concurrently")?;
        all_accepted(&response, "a bulk publish of valid messages")?;
    }
    let all: Vec<&Sample> = single.iter().chain(&bulk).flatten().collect();
    let keys: Vec<String> = all.iter().map(|s| s.key.clone()).collect();
    let mut outcome = ctx.conclude(&keys, subscription).await;
    let crossing = Crossing::of(&ctx.runtime);
    for event in ctx.recorder.events() {
        let key = key_of(&event).to_string();
        if let Some(sample) = all.iter().find(|s| s.key == key) {
            outcome
                .findings
                .extend(fidelity_problems(sample, &event, crossing));
        }
    }
    outcome.note(format!(
        "{} messages from {CONCURRENT_SINGLE_PUBLISHERS} single and {CONCURRENT_BULK_PUBLISHERS} bulk publishers at once (seed {seed})",
        all.len()
    ));
    crossing.note_what_is_not_compared(&mut outcome, &ctx.runtime);
    Ok(outcome)
}

/// How long the after-wait samples stay in the broker before a member receives.
const IN_BROKER: Duration = Duration::from_secs(3);

/// `sample` under a new key (its key, its metadata's key and so its entry id).
fn renamed(sample: &Sample, key: String) -> Sample {
    let mut sample = sample.clone();
    sample.metadata.insert(KEY.into(), key.clone());
    sample.key = key;
    sample
}

fn bulk_supported(ctx: &CaseContext) -> bool {
    ctx.caps.support(Feature::BulkPublish) != Support::Unsupported
}

pub(super) async fn fidelity_after_wait(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let base = samples(&ctx.caps, ctx.seed(), 6);
    let singles: Vec<Sample> = base
        .iter()
        .map(|s| renamed(s, format!("single-{}", s.key)))
        .collect();
    let bulk: Vec<Sample> = match bulk_supported(&ctx) {
        true => base
            .iter()
            .filter(|s| bulk_carries(&ctx, s))
            .map(|s| renamed(s, format!("bulk-{}", s.key)))
            .collect(),
        false => Vec::new(),
    };
    let subscription = Subscription::new(&topic, ctx.group("g"));
    ctx.create_group(&subscription).await?;
    for sample in &singles {
        ctx.publish(sample.request(&topic))
            .await
            .doing(&format!("publishing sample {}", sample.key))?;
    }
    if !bulk.is_empty() {
        let response = ctx
            .bulk_publish(BulkPublishRequest::new(
                &topic,
                bulk.iter().map(Sample::entry).collect(),
            ))
            .await
            .doing("bulk publishing the samples")?;
        all_accepted(&response, "bulk publish of valid samples")?;
    }
    // The stimulus: the messages wait in the broker with nobody receiving.
    tokio::time::sleep(IN_BROKER).await;
    let handle = ctx
        .subscribe(
            subscription,
            ctx.recorder.scripted("s1", |event| match event.attempt {
                1 => Status::Retry,
                _ => Status::Success,
            }),
        )
        .await?;
    let all: Vec<&Sample> = singles.iter().chain(&bulk).collect();
    ctx.recorder
        .wait_until(ctx.deadline(), |h| {
            all.iter().all(|s| h.delivery_count(&s.key) >= 2)
        })
        .await;
    handle.stop().await;
    let mut outcome = ctx.check(&ctx.criteria());
    let events = ctx.recorder.events();
    let crossing = Crossing::of(&ctx.runtime);
    for sample in &all {
        for event in events.iter().filter(|e| key_of(e) == sample.key) {
            let when = match event.attempt {
                1 => format!("after {} s in the broker", IN_BROKER.as_secs()),
                n => format!("redelivered (attempt {n}) after a RETRY"),
            };
            for problem in fidelity_problems(sample, event, crossing) {
                outcome.fail(format!("{when}: {problem}"));
            }
        }
    }
    outcome.note(format!(
        "{} samples singly, {} in bulk (seed {}), received {} s after publishing, each answered RETRY once",
        singles.len(),
        bulk.len(),
        ctx.seed(),
        IN_BROKER.as_secs()
    ));
    crossing.note_what_is_not_compared(&mut outcome, &ctx.runtime);
    Ok(outcome)
}

/// A raw payload of `size` bytes tagged `key`: printable, so that every path (HTTP
/// bodies, JSON entries) carries it as it is, and varied, so that a shift shows.
fn sized_entry(key: &str, size: usize) -> BulkPublishEntry {
    let mut metadata = Metadata::new();
    metadata.insert(KEY.into(), key.into());
    metadata.insert("rawPayload".into(), "true".into());
    BulkPublishEntry {
        entry_id: key.into(),
        event: (0..size).map(|i| b'a' + (i % 26) as u8).collect(),
        content_type: Some("application/octet-stream".into()),
        metadata,
    }
}

pub(super) async fn size_boundary(ctx: CaseContext) -> CaseRun {
    let max = ctx.caps.max_message_bytes.ok_or_else(|| {
        CaseError::CannotProvoke(
            "the case sends payloads of exactly the declared maximum message size and one byte over it, and the component declares none (no limit)".into(),
        )
    })?;
    let topic = ctx.topic("t");
    let subscription = ctx.subscribe_recorded(&topic).await?;
    let mut outcome = Outcome::new();
    let mut accepted: Vec<BulkPublishEntry> = Vec::new();
    let sizes = [("under", max - 1), ("max", max), ("over", max + 1)];
    for (label, size) in sizes {
        let entry = sized_entry(&format!("single-{label}"), size);
        let request = pubsub_components::runtime::PublishRequest {
            topic: topic.clone(),
            data: entry.event.clone(),
            content_type: entry.content_type.clone(),
            metadata: entry.metadata.clone(),
        };
        match (ctx.publish(request).await, label) {
            (Ok(_), "over") => outcome.fail(format!(
                "a single payload of {size} bytes, one over the declared maximum of {max}, was accepted"
            )),
            (Ok(_), _) => {
                accepted.push(entry);
                &mut outcome
            }
            (Err(e), "over") if e.kind() == ErrorKind::InvalidRequest => {
                outcome.note(format!("one byte over, singly: {e}"))
            }
            (Err(e), "over") => outcome.fail(format!(
                "a single payload one byte over the maximum was refused, but not as an InvalidRequest: {e}"
            )),
            (Err(e), "max") => outcome.fail(format!(
                "a single payload of exactly the maximum ({size} bytes) was refused: {e}"
            )),
            (Err(e), _) => outcome.fail(format!(
                "a single payload one byte under the maximum ({size} bytes) was refused: {e}"
            )),
        };
    }
    if bulk_supported(&ctx) {
        // Two requests: the accepted sizes, then one over beside a small entry, so
        // that no request body needs room for three maximal payloads.
        let requests = [
            vec![
                sized_entry("bulk-under", max - 1),
                sized_entry("bulk-max", max),
            ],
            vec![
                sized_entry("bulk-small", 1),
                sized_entry("bulk-over", max + 1),
            ],
        ];
        for entries in requests {
            let sent = entries.clone();
            let response = ctx
                .bulk_publish(BulkPublishRequest::new(&topic, entries))
                .await
                .doing("bulk publishing payloads at the maximum size")?;
            for entry in sent {
                let failed = response.failed(&entry.entry_id);
                let size = entry.event.len();
                match (entry.entry_id.as_str(), failed) {
                    ("bulk-over", false) => {
                        outcome.fail(format!(
                            "a bulk entry of {size} bytes, one over the declared maximum of {max}, was reported published"
                        ));
                    }
                    ("bulk-over", true) => {}
                    ("bulk-max", true) => {
                        outcome.fail(format!(
                            "a bulk entry of exactly the maximum ({size} bytes) was reported failed"
                        ));
                    }
                    (id, true) => {
                        outcome.fail(format!(
                            "bulk entry {id} ({size} bytes) was reported failed"
                        ));
                    }
                    (_, false) => accepted.push(entry),
                }
            }
        }
    }
    let keys: Vec<String> = accepted.iter().map(|e| e.entry_id.clone()).collect();
    ctx.recorder
        .wait_for_keys(&keys, ctx.delivery_deadline())
        .await;
    subscription.stop().await;
    let events = ctx.recorder.events();
    for entry in &accepted {
        let Some(event) = events.iter().find(|e| key_of(e) == entry.entry_id) else {
            continue; // the checker reports it lost
        };
        if event.data != entry.event {
            let first_diff = event
                .data
                .iter()
                .zip(&entry.event)
                .position(|(a, b)| a != b)
                .unwrap_or(event.data.len().min(entry.event.len()));
            let what = match entry.event.len() == max {
                true => "exactly the maximum",
                false => "under the maximum",
            };
            outcome.fail(format!(
                "{}: a payload of {what} ({} bytes) was delivered with {} bytes, first difference at byte {first_diff}",
                entry.entry_id,
                entry.event.len(),
                event.data.len()
            ));
        }
    }
    outcome.note(format!("declared maximum: {max} bytes"));
    Ok(outcome.merge(ctx.check(&ctx.criteria())))
}

/// Fails the case when a bulk publish of valid entries reported any failed.
fn all_accepted(response: &BulkPublishResponse, what: &str) -> Result<(), CaseError> {
    if response.failed_entries.is_empty() {
        return Ok(());
    }
    Err(CaseError::Component(format!(
        "{what} reported failures: {:?}",
        response.failed_entries
    )))
}
