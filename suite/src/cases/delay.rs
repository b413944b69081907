//! Delayed delivery: `deliverAfter`, `deliverAt` and subscription `receiverDelay`.

use crate::catalogue::{Bound, Case, Level};
use crate::checker::Timing;
use crate::context::CaseContext;
use crate::outcome::{CaseRun, Context};
use pubsub_components::runtime::controls::format_time;
use pubsub_components::runtime::Subscription;
use pubsub_components::Feature;
use std::time::{Duration, SystemTime};

const LONGEST: Duration = Duration::from_millis(1200);

pub fn cases() -> Vec<Case> {
    let bound = Bound::new("1.2 s delay + delay precision + 2 x delivery bound", |c| {
        LONGEST + c.delay_precision + c.delivery_bound * 2
    });
    vec![
        Case {
            id: "delay.deliver-after",
            must: "A message with deliverAfter MUST NOT be delivered before publish time + delay (beyond the clock tolerance), MUST be delivered by then + the declared precision, and MUST NOT be lost.",
            requires: &[Feature::DelayedDelivery],
            level: Level::Feature,
            injects: &[],
            bound,
            run: |ctx| Box::pin(deliver_after(ctx)),
        },
        Case {
            id: "delay.deliver-at",
            must: "A message with deliverAt (RFC 3339) MUST NOT be delivered before that time (beyond the clock tolerance) and MUST be delivered by it + the declared precision.",
            requires: &[Feature::DelayedDelivery],
            level: Level::Feature,
            injects: &[],
            bound,
            run: |ctx| Box::pin(deliver_at(ctx)),
        },
        Case {
            id: "delay.receiver-delay",
            must: "With a subscription receiverDelay a message MUST NOT be delivered before its publish time + receiverDelay, and MUST be delivered by then + the declared precision.",
            requires: &[Feature::DelayedDelivery],
            level: Level::Feature,
            injects: &[],
            bound,
            run: |ctx| Box::pin(receiver_delay(ctx)),
        },
    ]
}

fn timing(ctx: &CaseContext) -> Timing {
    Timing {
        early_tolerance: ctx.caps.clock_tolerance,
        late_precision: ctx.caps.delay_precision,
    }
}

async fn finish(
    ctx: CaseContext,
    keys: Vec<String>,
    handle: pubsub_components::runtime::SubscriptionHandle,
) -> CaseRun {
    ctx.recorder
        .wait_for_keys(
            &keys,
            ctx.within(LONGEST + ctx.caps.delay_precision + ctx.caps.delivery_bound),
        )
        .await;
    handle.stop().await;
    let mut expectation = ctx.expectation();
    expectation.timing = Some(timing(&ctx));
    Ok(ctx.check(&expectation))
}

async fn deliver_after(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let handle = ctx.subscribe_recorded(&topic).await?;
    let mut keys = Vec::new();
    for (i, ms) in [1200u64, 300, 900, 600, 300, 1200, 600, 900]
        .into_iter()
        .enumerate()
    {
        let key = format!("after-{ms}ms-{i}");
        ctx.publish(
            ctx.message(&topic, &key)
                .with_metadata("deliverAfter", format!("{ms}ms")),
        )
        .await
        .doing(&format!("publishing {key}"))?;
        keys.push(key);
    }
    // One undelayed message shows the subscriber runs while the others wait.
    keys.extend(ctx.publish_numbered(&topic, "now", 1).await?);
    finish(ctx, keys, handle).await
}

async fn deliver_at(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let handle = ctx.subscribe_recorded(&topic).await?;
    let mut keys = Vec::new();
    for (i, ms) in [800u64, 400, 1200, 400].into_iter().enumerate() {
        let key = format!("at-{ms}ms-{i}");
        let at = format_time(SystemTime::now() + Duration::from_millis(ms));
        ctx.publish(ctx.message(&topic, &key).with_metadata("deliverAt", at))
            .await
            .doing(&format!("publishing {key}"))?;
        keys.push(key);
    }
    finish(ctx, keys, handle).await
}

async fn receiver_delay(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let delay = Duration::from_millis(700);
    let mut subscription = Subscription::new(&topic, ctx.group("g"));
    subscription.receiver_delay = Some(delay);
    let handle = ctx
        .subscribe(subscription, ctx.recorder.handler("s1"))
        .await?;
    let mut keys = Vec::new();
    for i in 0..6 {
        let key = format!("delayed-{i}");
        let due = SystemTime::now() + delay;
        let result = ctx.runtime.publish(ctx.message(&topic, &key)).await;
        ctx.recorder.published(
            &key,
            &topic,
            result
                .as_ref()
                .map(|id| Some(id.clone()))
                .map_err(|e| e.to_string()),
            None,
            Some(due),
        );
        result.doing(&format!("publishing {key}"))?;
        keys.push(key);
    }
    finish(ctx, keys, handle).await
}
