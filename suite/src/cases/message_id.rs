//! message-id.*: the id a publish returns is the id its delivery carries.

use super::generate;
use crate::context::CaseContext;
use crate::outcome::{CaseRun, Context, Outcome};
use pubsub_components::{ConsumerSpec, MessageId, TopicSelector};
use std::time::Duration;

pub(super) async fn message_id_round_trip(ctx: CaseContext) -> CaseRun {
    let mut outcome = Outcome::new();
    // Arbitrary ids, generated from the case seed.
    let strategy = (
        proptest::option::of("[a-zA-Z0-9._/:-]{1,60}"),
        proptest::option::of(0u32..4096),
        proptest::num::u64::ANY,
    );
    for (topic, partition, position) in generate(strategy, ctx.seed(), 256) {
        let partition = topic.as_ref().and(partition);
        let id = MessageId {
            topic,
            partition,
            position,
        };
        let text = id.to_string();
        match text.parse::<MessageId>() {
            Ok(back) if back == id => {}
            other => {
                outcome.fail(format!("id {id:?} -> '{text}' -> {other:?}"));
            }
        }
    }
    // Delivered ids: owner topic named, and acceptable to ack after the round trip.
    let topic = ctx.new_topic("t").await?;
    let group = ctx.group("g");
    let spec = ConsumerSpec::new(TopicSelector::Single(topic.clone()), &group);
    ctx.create_consumer_group(&spec).await?;
    let keys = ctx.publish_numbered(&topic, "m", 5).await?;
    let consumer = ctx
        .open_consumer(spec.clone(), "opening a consumer")
        .await?;
    let mut received = Vec::new();
    while received.len() < keys.len() && tokio::time::Instant::now() < ctx.delivery_deadline() {
        let wait = ctx
            .delivery_deadline()
            .saturating_duration_since(tokio::time::Instant::now());
        received.extend(
            consumer
                .receive(keys.len(), wait)
                .await
                .doing("receiving")?,
        );
    }
    outcome.expect(received.len() == keys.len(), || {
        format!("received {} of {} messages", received.len(), keys.len())
    });
    for message in &received {
        outcome.expect(message.id.topic.as_deref() == Some(topic.as_str()), || {
            format!(
                "delivered id {} does not name its owner topic '{topic}'",
                message.id
            )
        });
        let json = serde_json::to_string(&message.id).unwrap_or_default();
        let back: Option<MessageId> = serde_json::from_str(&json).ok();
        outcome.expect(back.as_ref() == Some(&message.id), || {
            format!("id {} -> {json} -> {back:?}", message.id)
        });
        if let Some(back) = back {
            if let Err(e) = consumer.ack(&back).await {
                outcome.fail(format!("ack of round-tripped id {back} refused: {e}"));
            }
        }
    }
    let _ = consumer.close().await;
    // Acked through round-tripped ids: a new member of the group gets nothing back.
    let again = ctx.open_consumer(spec, "reopening the consumer").await?;
    let redelivered = again
        .receive(
            keys.len(),
            ctx.caps.redelivery_bound.min(Duration::from_secs(2)),
        )
        .await
        .doing("receiving after acks")?;
    let _ = again.close().await;
    outcome.expect(redelivered.is_empty(), || {
        format!(
            "{} messages acked through round-tripped ids came back: {:?}",
            redelivered.len(),
            redelivered
                .iter()
                .map(|m| m.id.to_string())
                .collect::<Vec<_>>()
        )
    });
    Ok(outcome)
}
