//! dead-letter.*: exhausted and dropped messages go to the dead-letter topic, once.

use super::record_dead_letters;
use super::retry::check_dead_letter;
use crate::context::CaseContext;
use crate::outcome::{CaseRun, Context};
use pubsub_components::runtime::{PublishRequest, Status, Subscription};

pub(super) async fn drop_to_dead_letter(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let dlq_topic = ctx.topic("dlq");
    let dlq_subscription = Subscription::new(&dlq_topic, ctx.group("dlq"));
    let (dlq, dlq_handle) = record_dead_letters(&ctx, dlq_subscription, true).await?;
    let mut subscription = Subscription::new(&topic, ctx.group("g"));
    subscription.dead_letter_topic = Some(dlq_topic.clone());
    ctx.create_group(&subscription).await?;
    let request: PublishRequest = ctx
        .message(&topic, "dropped")
        .with_metadata("app-origin", "drop ✓");
    ctx.publish(request)
        .await
        .doing("publishing the message to drop")?;
    let handle = ctx
        .subscribe(subscription, ctx.recorder.scripted("s1", |_| Status::Drop))
        .await?;
    dlq.wait_for_keys(
        &["dropped".to_string()],
        ctx.within(ctx.caps.delivery_bound * 2),
    )
    .await;
    ctx.recorder
        .wait_until(ctx.quiet_window(), |h| h.delivery_count("dropped") > 1)
        .await;
    handle.stop().await;
    if let Some(handle) = dlq_handle {
        handle.stop().await;
    }
    let mut outcome = ctx.check(&ctx.criteria());
    let count = ctx.recorder.history().delivery_count("dropped");
    outcome.expect(count == 1, || {
        format!("the message answered DROP was delivered {count} times")
    });
    Ok(outcome.merge(check_dead_letter(
        &dlq,
        "dropped",
        &topic,
        "dropped",
        "drop ✓",
        super::Crossing::of(&ctx.runtime),
    )))
}
