//! Values at the edges of their space that only show in some situations: messages
//! that stayed in the broker (and came back after a RETRY), and payloads exactly at
//! the declared maximum size and one byte over it.

use super::{fidelity_problems, key_of, samples, Crossing, Sample};
use crate::catalogue::{Bound, Case, Level};
use crate::context::CaseContext;
use crate::history::KEY;
use crate::outcome::{CaseError, CaseRun, Context, Outcome};
use pubsub_components::runtime::{BulkPublishEntry, BulkPublishRequest, Status, Subscription};
use pubsub_components::{ErrorKind, Feature, Metadata, Support};
use std::time::Duration;

/// How long the after-wait samples stay in the broker before a member receives.
const IN_BROKER: Duration = Duration::from_secs(3);

pub fn cases() -> Vec<Case> {
    vec![
        Case {
            id: "publish.fidelity-after-wait",
            must: "Payload bytes, content type and metadata MUST survive a stay in the broker: samples published (singly and in bulk) while their group has no receiving member, delivered 3 s later and delivered again after a RETRY, MUST each arrive as published.",
            requires: &[],
            level: Level::Core,
            injects: &[],
            bound: Bound::new("3 s in the broker + 2 x delivery bound + redelivery bound", |c| {
                IN_BROKER + c.delivery_bound * 2 + c.redelivery_bound
            }),
            run: |ctx| Box::pin(fidelity_after_wait(ctx)),
        },
        Case {
            id: "publish.size-boundary",
            must: "A payload of exactly the declared maximum size (and one byte under) MUST be accepted and delivered intact, singly and in bulk; one byte over MUST be refused (an InvalidRequest error, a failed entry), and never delivered.",
            requires: &[],
            level: Level::Core,
            injects: &[],
            bound: Bound::new("2 x delivery bound", |c| c.delivery_bound * 2),
            run: |ctx| Box::pin(size_boundary(ctx)),
        },
    ]
}

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

async fn fidelity_after_wait(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let base = samples(&ctx.caps, ctx.seed(), 6);
    let singles: Vec<Sample> = base
        .iter()
        .map(|s| renamed(s, format!("single-{}", s.key)))
        .collect();
    let bulk: Vec<Sample> = match bulk_supported(&ctx) {
        true => base
            .iter()
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
            .bulk_publish(BulkPublishRequest {
                topic: topic.clone(),
                entries: bulk.iter().map(Sample::entry).collect(),
                metadata: Metadata::new(),
            })
            .await
            .doing("bulk publishing the samples")?;
        if !response.failed_entries.is_empty() {
            return Err(CaseError::Component(format!(
                "bulk publish of valid samples reported failures: {:?}",
                response.failed_entries
            )));
        }
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
    let mut outcome = ctx.check(&ctx.expectation());
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

async fn size_boundary(ctx: CaseContext) -> CaseRun {
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
                .bulk_publish(BulkPublishRequest {
                    topic: topic.clone(),
                    entries,
                    metadata: Metadata::new(),
                })
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
    Ok(outcome.merge(ctx.check(&ctx.expectation())))
}
