//! Cancellation: a receive whose future is dropped (a timeout, a `select!` that took
//! another branch) loses nothing and strands nothing, wherever it was dropped.

use super::generate;
use crate::catalogue::{Bound, Case, Level};
use crate::context::CaseContext;
use crate::history::KEY;
use crate::outcome::{CaseRun, Context, Outcome};
use pubsub_components::{Consumer, ConsumerSpec, TopicSelector};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tokio::time::Instant;

/// Messages published in each phase of the case.
const PER_PHASE: usize = 30;

pub fn cases() -> Vec<Case> {
    vec![Case {
        id: "subscribe.cancelled-receive",
        must: "A receive or batch receive whose future is dropped at any point (before messages are ready, as they become ready, mid-batch) MUST lose and strand nothing: without a close, the same member and another member of its group receive every message within the delivery bound (or the lease, where the component declares that unsettled messages return only then).",
        requires: &[],
        level: Level::Core,
        injects: &[],
        bound: Bound::new("3 x delivery bound + redelivery bound + lease", |c| {
            c.delivery_bound * 3 + c.redelivery_bound + c.lease
        }),
        run: |ctx| Box::pin(cancelled_receive(ctx)),
    }]
}

/// Which phase a key was published in: the drop point it met.
fn phase_of(key: &str) -> &str {
    key.split('-').next().unwrap_or(key)
}

/// Receives what is ready on `member` and acknowledges it, recording the keys.
async fn take_ready(
    member: &dyn Consumer,
    wait: Duration,
    taken: &mut BTreeMap<String, usize>,
) -> Result<(), crate::outcome::CaseError> {
    for message in member.receive(50, wait).await.doing("receiving")? {
        member.ack(&message.id).await.doing("acknowledging")?;
        let key = message.metadata.get(KEY).cloned().unwrap_or_default();
        *taken.entry(key).or_insert(0) += 1;
    }
    Ok(())
}

async fn cancelled_receive(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let spec = ConsumerSpec::new(TopicSelector::Single(topic.clone()), ctx.group("g"));
    let component = ctx.runtime.component().clone();
    ctx.create_consumer_group(&spec).await?;
    let member = component
        .consumer(spec.clone())
        .await
        .doing("opening the member")?;
    // Drop points, picked from the case's seed: how long each dropped receive runs.
    let drops: Vec<u64> = generate(0u64..40, ctx.seed(), 24);
    let mut taken: BTreeMap<String, usize> = BTreeMap::new();
    let mut dropped = 0usize;

    // 1. Before anything is ready: receives dropped while they wait.
    for wait in drops.iter().take(6) {
        let receive = member.receive(10, Duration::from_secs(5));
        if tokio::time::timeout(Duration::from_millis(*wait), receive)
            .await
            .is_err()
        {
            dropped += 1;
        }
    }
    let mut keys = ctx.publish_numbered(&topic, "ready", PER_PHASE).await?;

    // 2. As messages become ready: a publisher runs while receives are dropped after
    // a few milliseconds (a receive that completes is taken as it is).
    let publishing = ctx.publish_numbered(&topic, "arriving", PER_PHASE);
    let receiving = async {
        let mut outcome: Result<(), crate::outcome::CaseError> = Ok(());
        for wait in drops.iter().skip(6).take(12) {
            let receive = member.receive(5, Duration::from_millis(200));
            match tokio::time::timeout(Duration::from_millis(*wait), receive).await {
                Err(_) => dropped += 1,
                Ok(Ok(messages)) => {
                    for message in messages {
                        if let Err(e) = member.ack(&message.id).await.doing("acknowledging") {
                            outcome = Err(e);
                        }
                        let key = message.metadata.get(KEY).cloned().unwrap_or_default();
                        *taken.entry(key).or_insert(0) += 1;
                    }
                }
                Ok(Err(e)) => outcome = Err(e).doing("receiving"),
            }
        }
        outcome
    };
    let (published, received) = tokio::join!(publishing, receiving);
    keys.extend(published?);
    received?;

    // 3. Mid-batch: batch receives (native ones; else receives of up to a batch)
    // dropped before their wait ends, with messages already collected.
    keys.extend(ctx.publish_numbered(&topic, "batch", PER_PHASE).await?);
    let native_batches = ctx.caps.bulk_subscribe == pubsub_components::Support::Native;
    for wait in drops.iter().skip(18) {
        let receive = async {
            if native_batches {
                member
                    .receive_batch(PER_PHASE, Duration::from_millis(300))
                    .await
            } else {
                member.receive(PER_PHASE, Duration::from_millis(300)).await
            }
        };
        match tokio::time::timeout(Duration::from_millis(*wait), receive).await {
            Err(_) => dropped += 1,
            Ok(messages) => {
                for message in messages.doing("receiving a batch")? {
                    member.ack(&message.id).await.doing("acknowledging")?;
                    let key = message.metadata.get(KEY).cloned().unwrap_or_default();
                    *taken.entry(key).or_insert(0) += 1;
                }
            }
        }
    }

    // Without a close: the same member and a second one must get everything.
    let other = component
        .consumer(spec)
        .await
        .doing("opening a second member")?;
    let deadline = ctx.within(ctx.caps.delivery_bound + ctx.caps.redelivery_bound + ctx.caps.lease);
    let all: BTreeSet<&String> = keys.iter().collect();
    while Instant::now() < deadline && !all.iter().all(|k| taken.contains_key(*k)) {
        take_ready(member.as_ref(), Duration::from_millis(100), &mut taken).await?;
        take_ready(other.as_ref(), Duration::from_millis(100), &mut taken).await?;
    }
    let _ = member.close().await;
    let _ = other.close().await;

    let mut outcome = Outcome::new();
    outcome.note(format!(
        "{} messages in three phases; {dropped} receives dropped (drop points {drops:?} ms, from the seed)",
        keys.len()
    ));
    let mut missing: BTreeMap<&str, Vec<&String>> = BTreeMap::new();
    for key in &keys {
        if !taken.contains_key(key) {
            missing.entry(phase_of(key)).or_default().push(key);
        }
    }
    for (phase, lost) in missing {
        let point = match phase {
            "ready" => "receives dropped while nothing was ready",
            "arriving" => "receives dropped as messages became ready",
            _ => "batch receives dropped mid-batch",
        };
        outcome.fail(format!(
            "lost after a dropped receive: {} messages published around {point} never reached a member: {:?}",
            lost.len(),
            lost.iter().take(8).collect::<Vec<_>>()
        ));
    }
    Ok(outcome)
}
