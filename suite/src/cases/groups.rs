//! Consumer groups over time: a group keeps its messages while it has no member,
//! and an acknowledged message is settled for good.

use crate::catalogue::{Bound, Case, Level};
use crate::context::CaseContext;
use crate::outcome::{CaseRun, Context};
use pubsub_components::runtime::Subscription;
use std::time::Duration;

/// Messages of the settlement case: enough that a defect hitting 1 in 100 shows.
const SETTLED_MESSAGES: usize = 300;

pub fn cases() -> Vec<Case> {
    vec![
        Case {
            id: "subscribe.group-without-members",
            must: "A group MUST keep its messages while it has no connected member: what is published to a group that exists is delivered when a member returns.",
            requires: &[],
            level: Level::Core,
            injects: &[],
            bound: Bound::new("3 x delivery bound", |c| c.delivery_bound * 3),
            run: |ctx| Box::pin(group_without_members(ctx)),
        },
        Case {
            id: "subscribe.acked-not-redelivered",
            must: "Without a fault, a message whose acknowledgement succeeded MUST never be delivered again in its group, for as long as the component's redelivery window (lease + redelivery bound); checked over 300 messages.",
            requires: &[],
            level: Level::Core,
            injects: &[],
            bound: Bound::new("2 x delivery bound + lease + 2 x redelivery bound", |c| {
                c.delivery_bound * 2 + c.lease + c.redelivery_bound * 2
            }),
            run: |ctx| Box::pin(acked_not_redelivered(ctx)),
        },
    ]
}

/// A member consumes, leaves; messages published while the group is empty must reach
/// the member that returns (the group existed all along).
async fn group_without_members(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let group = ctx.group("g");
    let first = ctx
        .subscribe(
            Subscription::new(&topic, &group),
            ctx.recorder.handler("member-1"),
        )
        .await?;
    let before = ctx.publish_numbered(&topic, "before", 5).await?;
    let all_before = ctx
        .recorder
        .wait_for_keys(&before, ctx.delivery_deadline())
        .await;
    first.stop().await;
    if !all_before {
        ctx.recorder
            .note("not every message reached the first member before it left");
    }
    // Trickle and burst while nobody is connected.
    let mut while_empty = Vec::new();
    for i in 0..5 {
        let key = format!("while-empty-{i}");
        ctx.publish(ctx.message(&topic, &key))
            .await
            .doing(&format!("publishing {key} while the group has no member"))?;
        while_empty.push(key);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    while_empty.extend(ctx.publish_numbered(&topic, "burst", 45).await?);
    let second = ctx
        .subscribe(
            Subscription::new(&topic, &group),
            ctx.recorder.handler("member-2"),
        )
        .await?;
    ctx.recorder
        .wait_for_keys(&while_empty, ctx.delivery_deadline())
        .await;
    second.stop().await;
    let mut outcome = ctx.check(&ctx.expectation());
    let history = ctx.recorder.history();
    let missing: Vec<&String> = while_empty
        .iter()
        .filter(|k| history.delivery_count(k) == 0)
        .collect();
    outcome.expect(missing.is_empty(), || {
        format!(
            "lost while the group had no member: {} of {} messages published between the last member leaving and the next joining never arrived: {:?}",
            missing.len(),
            while_empty.len(),
            missing.iter().take(8).collect::<Vec<_>>()
        )
    });
    Ok(outcome)
}

/// Hundreds of messages answered SUCCESS; then the case waits out the redelivery
/// window: nothing may come back.
async fn acked_not_redelivered(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let subscription = Subscription::new(&topic, ctx.group("g"));
    let handle = ctx
        .subscribe(subscription, ctx.recorder.handler("s1"))
        .await?;
    let keys = ctx.publish_numbered(&topic, "m", SETTLED_MESSAGES).await?;
    ctx.recorder
        .wait_for_keys(&keys, ctx.delivery_deadline())
        .await;
    // The window in which an unsettled message would come back: the lease (claim
    // idle time, ack wait, visibility timeout) plus the redelivery bound.
    let window = ctx.caps.lease + ctx.caps.redelivery_bound;
    ctx.recorder.note(format!(
        "all answered; watching {window:?} (lease {:?} + redelivery bound {:?}) for redeliveries",
        ctx.caps.lease, ctx.caps.redelivery_bound
    ));
    ctx.recorder
        .wait_until(ctx.within(window), |h| {
            keys.iter().any(|k| h.delivery_count(k) > 1)
        })
        .await;
    handle.stop().await;
    Ok(ctx.check(&ctx.expectation()))
}
