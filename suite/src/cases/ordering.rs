//! Ordering within the declared scope, also after an unrelated RETRY.

use super::key_of;
use crate::catalogue::{Bound, Case, Level};
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
            bound: Bound::new("4 x delivery bound", |c| c.delivery_bound * 4),
            run: |ctx| Box::pin(ordering(ctx, false)),
        },
        Case {
            id: "ordering.after-retry",
            must: "Order within the declared scope MUST hold for all other messages after one message is answered RETRY.",
            requires: &[Feature::Ordering],
            level: Level::Feature,
            injects: &[],
            bound: Bound::new("4 x delivery bound + redelivery bound", |c| c.delivery_bound * 4 + c.redelivery_bound),
            run: |ctx| Box::pin(ordering(ctx, true)),
        },
    ]
}

async fn ordering(ctx: CaseContext, with_retry: bool) -> CaseRun {
    let topic = ctx.topic("t");
    if ctx.caps.partitions.is_some() {
        ctx.runtime
            .component()
            .create_topic(&topic, 4)
            .await
            .doing("creating a topic with 4 partitions")?;
    }
    let subscription = Subscription::new(&topic, ctx.group("g"));
    ctx.create_group(&subscription).await?;
    let count = if with_retry { 400 } else { 1000 };
    let mut keys = Vec::with_capacity(count);
    // Published before subscribing, so the subscriber receives them in large batches.
    for i in 0..count {
        let key = format!("m-{i:04}");
        let request = ctx
            .message(&topic, &key)
            .with_metadata("partitionKey", format!("k-{:02}", i % KEYS));
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
    let mut expectation = ctx.expectation();
    expectation.ordering = Some(ctx.caps.ordering);
    if with_retry {
        expectation.unordered_keys.insert(retried);
    }
    let mut outcome = ctx.check(&expectation);
    outcome.note(format!(
        "{count} messages over {KEYS} keys, checked per {:?}",
        ctx.caps.ordering
    ));
    Ok(outcome)
}
