//! Ordering within the declared scope, also after an unrelated RETRY, and with
//! partition keys across their space.

use super::case::{Bound, Case, Lane, Level};
use super::key_of;
use crate::context::CaseContext;
use crate::outcome::{CaseRun, Context};
use pubsub_components::runtime::{Status, Subscription};
use pubsub_components::Feature;

const KEYS: usize = 16;

pub fn cases() -> Vec<Case> {
    vec![
        Case {
            id: "ordering.declared-scope",
            must: "A single subscriber MUST see messages in publish order within the declared scope (topic, partition or partitionKey); checked with 1000 messages over 16 keys.",
            requires: &[Feature::Ordering],
            level: Level::Feature,
            injects: &[],
            lane: Lane::Shared,
            bound: Bound::new("4 x delivery bound", |c| c.delivery_bound * 4),
            run: |ctx| Box::pin(ordering(ctx, false, Keys::Plain)),
        },
        Case {
            id: "ordering.key-space",
            must: "Order within the declared scope MUST hold for partition keys across their space: keys that differ only in case, in punctuation or in surrounding spaces, non-ASCII keys, a one-character key, keys of 1024 characters that differ only in the last, and keys that look like wildcards or reserved words of some broker (> * + # $share null); none may be refused, lost or reordered.",
            requires: &[Feature::Ordering],
            level: Level::Feature,
            injects: &[],
            lane: Lane::Shared,
            bound: Bound::new("4 x delivery bound", |c| c.delivery_bound * 4),
            run: |ctx| Box::pin(ordering(ctx, false, Keys::Odd)),
        },
        Case {
            id: "ordering.after-retry",
            must: "Order within the declared scope MUST hold for all other messages after one message is answered RETRY.",
            requires: &[Feature::Ordering],
            level: Level::Feature,
            injects: &[],
            lane: Lane::Shared,
            bound: Bound::new("4 x delivery bound + redelivery bound", |c| c.delivery_bound * 4 + c.redelivery_bound),
            run: |ctx| Box::pin(ordering(ctx, true, Keys::Plain)),
        },
    ]
}

/// The partition keys a case spreads its messages over.
#[derive(Clone, Copy)]
enum Keys {
    /// `k-00` to `k-15`.
    Plain,
    /// [`odd_keys`].
    Odd,
}

/// Partition keys across their space, each distinct from every other.
fn odd_keys() -> Vec<String> {
    let long = "x".repeat(1023);
    [
        "k", "K", "k.", "k_", "k-", "k/", "k:", " k", "k ", "ключ", "鍵", "🔑", ">", "*", "+", "#",
        "$share", "null",
    ]
    .into_iter()
    .map(str::to_string)
    .chain([format!("{long}a"), format!("{long}b")])
    .collect()
}

async fn ordering(ctx: CaseContext, with_retry: bool, key_space: Keys) -> CaseRun {
    let topic = ctx.topic("t");
    if ctx.caps.partitions.is_some() {
        ctx.create_topic(&topic, 4).await?;
    }
    let subscription = Subscription::new(&topic, ctx.group("g"));
    ctx.create_group(&subscription).await?;
    let partition_keys: Vec<String> = match key_space {
        Keys::Plain => (0..KEYS).map(|k| format!("k-{k:02}")).collect(),
        Keys::Odd => odd_keys(),
    };
    let count = match (with_retry, key_space) {
        (true, _) | (_, Keys::Odd) => 400,
        (false, Keys::Plain) => 1000,
    };
    let mut keys = Vec::with_capacity(count);
    // Published before subscribing, so the subscriber receives them in large batches.
    for i in 0..count {
        let key = format!("m-{i:04}");
        let request = ctx.message(&topic, &key).with_metadata(
            "partitionKey",
            partition_keys[i % partition_keys.len()].clone(),
        );
        ctx.publish(request)
            .await
            .doing(&format!("publishing {key}"))?;
        keys.push(key);
    }
    let retried = "m-0100".to_string();
    let target = retried.clone();
    let handler = ctx.recorder.scripted("s1", move |event| {
        if with_retry && key_of(event) == target && event.attempt == 1 {
            Status::Retry
        } else {
            Status::Success
        }
    });
    let handle = ctx.subscribe(subscription, handler).await?;
    ctx.recorder
        .wait_for_keys(&keys, ctx.within(ctx.caps.delivery_bound * 3))
        .await;
    handle.stop().await;
    let mut criteria = ctx.criteria();
    criteria.ordering = Some(ctx.caps.ordering);
    if with_retry {
        criteria.unordered_keys.insert(retried);
    }
    let mut outcome = ctx.check(&criteria);
    outcome.note(format!(
        "{count} messages over {} keys, checked per {:?}",
        partition_keys.len(),
        ctx.caps.ordering
    ));
    Ok(outcome)
}
