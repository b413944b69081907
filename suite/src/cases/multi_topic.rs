//! Multi-topic subscriptions and topic message ids (Pulsar PIP-224): owner topics,
//! ack and seek on the owner topic only, refusals, `last_message_ids`.

use super::key_of;
use crate::catalogue::{Bound, Case, Level};
use crate::context::CaseContext;
use crate::outcome::{CaseError, CaseRun, Context, Outcome};
use pubsub_components::runtime::Subscription;
use pubsub_components::{
    Consumer, ConsumerSpec, ErrorKind, Feature, MessageId, ReceivedMessage, TopicSelector,
};
use std::collections::BTreeSet;
use std::time::Duration;
use tokio::time::Instant;

pub fn cases() -> Vec<Case> {
    vec![
        Case {
            id: "multi-topic.owner-topic",
            must: "On a subscription over a topic list or pattern, every delivered message id MUST name the topic the message was published to.",
            requires: &[Feature::MultiTopic],
            level: Level::Feature,
            injects: &[],
            bound: Bound::new("2 x delivery bound", |c| c.delivery_bound * 2),
            run: |ctx| Box::pin(owner_topic(ctx)),
        },
        Case {
            id: "multi-topic.ack-owner",
            must: "ack(id) on a multi-topic consumer MUST acknowledge exactly that message on its owner topic: acked messages never return, unacked ones of every topic do.",
            requires: &[Feature::MultiTopic],
            level: Level::Feature,
            injects: &[],
            bound: Bound::new("2 x delivery bound + redelivery bound", |c| c.delivery_bound * 2 + c.redelivery_bound),
            run: |ctx| Box::pin(ack_owner(ctx)),
        },
        Case {
            id: "multi-topic.ack-refused",
            must: "On a multi-topic consumer an id without an owner topic, or whose topic is not subscribed, MUST be refused with a NotAllowed error.",
            requires: &[Feature::MultiTopic],
            level: Level::Feature,
            injects: &[],
            bound: Bound::new("2 x delivery bound", |c| c.delivery_bound * 2),
            run: |ctx| Box::pin(ack_refused(ctx)),
        },
        Case {
            id: "multi-topic.seek",
            must: "seek(id) MUST reposition only the owner topic of id: its messages from id on are delivered again, other topics are untouched, and nothing received before the seek from before id comes back.",
            requires: &[Feature::MultiTopic, Feature::Seek],
            level: Level::Feature,
            injects: &[],
            bound: Bound::new("2 x delivery bound + redelivery bound", |c| c.delivery_bound * 2 + c.redelivery_bound),
            run: |ctx| Box::pin(seek(ctx)),
        },
        Case {
            id: "multi-topic.last-message-ids",
            must: "last_message_ids() MUST return exactly one id per owner topic (and partition), no duplicates, each the last message published there.",
            requires: &[Feature::MultiTopic, Feature::Seek],
            level: Level::Feature,
            injects: &[],
            bound: Bound::new("delivery bound", |c| c.delivery_bound),
            run: |ctx| Box::pin(last_message_ids(ctx)),
        },
    ]
}

/// Receives until `count` messages arrived or `deadline` passed.
async fn receive(
    consumer: &dyn Consumer,
    count: usize,
    deadline: Instant,
) -> Result<Vec<ReceivedMessage>, CaseError> {
    let mut out = Vec::new();
    while out.len() < count {
        let wait = deadline.saturating_duration_since(Instant::now());
        if wait.is_zero() {
            break;
        }
        out.extend(
            consumer
                .receive(count - out.len(), wait)
                .await
                .doing("receiving")?,
        );
    }
    Ok(out)
}

fn key(message: &ReceivedMessage) -> String {
    message
        .metadata
        .get(crate::history::KEY)
        .cloned()
        .unwrap_or_default()
}

async fn owner_topic(ctx: CaseContext) -> CaseRun {
    let (a, b) = (ctx.topic("a"), ctx.topic("b"));
    let (p1, p2) = (ctx.topic("p-one"), ctx.topic("p-two"));
    let pattern = ctx.topic("p-*");
    let list = ctx
        .subscribe(
            Subscription::selecting(
                TopicSelector::List(vec![a.clone(), b.clone()]),
                ctx.group("list"),
            ),
            ctx.recorder.handler("list"),
        )
        .await?;
    let by_pattern = ctx
        .subscribe(
            Subscription::selecting(
                TopicSelector::Pattern(pattern.clone()),
                ctx.group("pattern"),
            ),
            ctx.recorder.handler("pattern"),
        )
        .await?;
    let mut keys = Vec::new();
    for (label, topic) in [("a", &a), ("b", &b), ("p1", &p1), ("p2", &p2)] {
        keys.extend(ctx.publish_numbered(topic, label, 5).await?);
    }
    ctx.recorder
        .wait_for_keys(&keys, ctx.delivery_deadline())
        .await;
    list.stop().await;
    by_pattern.stop().await;
    let mut outcome = ctx.check(&ctx.expectation());
    for event in ctx.recorder.events() {
        let key = key_of(&event);
        let expected = match key.split('-').next() {
            Some("a") => &a,
            Some("b") => &b,
            Some("p1") => &p1,
            _ => &p2,
        };
        let owner = event.message_id.topic.as_deref();
        outcome.expect(owner == Some(expected.as_str()) && event.topic == *expected, || {
            format!("{key}: published to {expected}, delivered with id {} (owner {owner:?}, event topic {})", event.message_id, event.topic)
        });
    }
    Ok(outcome)
}

async fn ack_owner(ctx: CaseContext) -> CaseRun {
    let (a, b) = (ctx.topic("a"), ctx.topic("b"));
    let spec = ConsumerSpec::new(
        TopicSelector::List(vec![a.clone(), b.clone()]),
        ctx.group("g"),
    );
    ctx.create_consumer_group(&spec).await?;
    ctx.publish_numbered(&a, "a", 3).await?;
    ctx.publish_numbered(&b, "b", 3).await?;
    let consumer = ctx
        .runtime
        .component()
        .consumer(spec.clone())
        .await
        .doing("opening a multi-topic consumer")?;
    let first = receive(consumer.as_ref(), 6, ctx.delivery_deadline()).await?;
    let mut acked = BTreeSet::new();
    for message in &first {
        // Ack a's first two and b's first one; leave the rest unacknowledged.
        let k = key(message);
        if ["a-0", "a-1", "b-0"].contains(&k.as_str()) {
            consumer
                .ack(&message.id)
                .await
                .doing(&format!("acking {}", message.id))?;
            acked.insert(k);
        }
    }
    consumer.close().await.doing("closing the consumer")?;
    let again = ctx
        .runtime
        .component()
        .consumer(spec)
        .await
        .doing("reopening the consumer")?;
    let second = receive(
        again.as_ref(),
        3,
        ctx.within(ctx.caps.redelivery_bound + ctx.caps.delivery_bound),
    )
    .await?;
    // Anything more would be an acked message coming back.
    let extra = again
        .receive(6, Duration::from_millis(200))
        .await
        .doing("receiving")?;
    let _ = again.close().await;
    let mut outcome = Outcome::new();
    outcome.expect(first.len() == 6, || {
        format!("received {} of 6 messages", first.len())
    });
    let back: BTreeSet<String> = second.iter().chain(&extra).map(key).collect();
    let expected: BTreeSet<String> = ["a-2", "b-1", "b-2"].map(String::from).into();
    outcome.expect(back == expected, || {
        format!("after acking {acked:?} and reopening, redelivered {back:?}; expected exactly {expected:?}")
    });
    Ok(outcome)
}

async fn ack_refused(ctx: CaseContext) -> CaseRun {
    let (a, b, other) = (ctx.topic("a"), ctx.topic("b"), ctx.topic("not-subscribed"));
    let spec = ConsumerSpec::new(
        TopicSelector::List(vec![a.clone(), b.clone()]),
        ctx.group("g"),
    );
    ctx.create_consumer_group(&spec).await?;
    ctx.publish_numbered(&a, "a", 1).await?;
    ctx.publish_numbered(&other, "other", 1).await?;
    let consumer = ctx
        .runtime
        .component()
        .consumer(spec)
        .await
        .doing("opening a multi-topic consumer")?;
    let received = receive(consumer.as_ref(), 1, ctx.delivery_deadline()).await?;
    let mut outcome = Outcome::new();
    let Some(message) = received.first() else {
        outcome.fail("no message received");
        return Ok(outcome);
    };
    let no_topic = MessageId {
        topic: None,
        ..message.id.clone()
    };
    let foreign = MessageId {
        topic: Some(other.clone()),
        ..message.id.clone()
    };
    for (what, id) in [
        ("an id without owner topic", no_topic),
        ("an id of an unsubscribed topic", foreign),
    ] {
        match consumer.ack(&id).await {
            Err(e) if e.kind() == ErrorKind::NotAllowed => {
                outcome.note(format!("{what} ({id}): {e}"));
            }
            Err(e) => {
                outcome.fail(format!(
                    "ack of {what} ({id}) failed with {:?}, not NotAllowed: {e}",
                    e.kind()
                ));
            }
            Ok(()) => {
                outcome.fail(format!("ack of {what} ({id}) was accepted"));
            }
        }
    }
    consumer
        .ack(&message.id)
        .await
        .doing("acking with the proper id")?;
    let _ = consumer.close().await;
    Ok(outcome)
}

async fn seek(ctx: CaseContext) -> CaseRun {
    let (a, b) = (ctx.topic("a"), ctx.topic("b"));
    let spec = ConsumerSpec::new(
        TopicSelector::List(vec![a.clone(), b.clone()]),
        ctx.group("g"),
    );
    ctx.create_consumer_group(&spec).await?;
    ctx.publish_numbered(&a, "a", 5).await?;
    ctx.publish_numbered(&b, "b", 5).await?;
    let consumer = ctx
        .runtime
        .component()
        .consumer(spec)
        .await
        .doing("opening a multi-topic consumer")?;
    let first = receive(consumer.as_ref(), 10, ctx.delivery_deadline()).await?;
    let mut outcome = Outcome::new();
    outcome.expect(first.len() == 10, || {
        format!("received {} of 10 messages", first.len())
    });
    let Some(target) = first.iter().find(|m| key(m) == "a-2").map(|m| m.id.clone()) else {
        outcome.fail("a-2 was not received");
        return Ok(outcome);
    };
    // a-0 stays received but unacknowledged across the seek: it was prefetched before it.
    for message in first.iter().filter(|m| key(m) != "a-0") {
        consumer
            .ack(&message.id)
            .await
            .doing(&format!("acking {}", message.id))?;
    }
    consumer
        .seek(&target)
        .await
        .doing(&format!("seeking to {target}"))?;
    let after = receive(consumer.as_ref(), 3, ctx.delivery_deadline()).await?;
    let extra = consumer
        .receive(
            10,
            ctx.caps.redelivery_bound.min(Duration::from_millis(500)),
        )
        .await
        .doing("receiving")?;
    let _ = consumer.close().await;
    let got: Vec<String> = after.iter().chain(&extra).map(key).collect();
    let expected = vec!["a-2".to_string(), "a-3".to_string(), "a-4".to_string()];
    let touched: Vec<&String> = got.iter().filter(|k| k.starts_with("b-")).collect();
    outcome.expect(touched.is_empty(), || {
        format!("seek on {a} repositioned {b} too: redelivered {touched:?}")
    });
    outcome.expect(
        !got.contains(&"a-0".to_string()) && !got.contains(&"a-1".to_string()),
        || format!("messages before the seek position came back: {got:?}"),
    );
    let from_a: Vec<String> = got
        .iter()
        .filter(|k| k.starts_with("a-"))
        .cloned()
        .collect();
    outcome.expect(from_a == expected, || {
        format!("after seek to a-2 ({target}) got {from_a:?} from {a}; expected {expected:?}")
    });
    Ok(outcome)
}

async fn last_message_ids(ctx: CaseContext) -> CaseRun {
    let (a, b) = (ctx.topic("a"), ctx.topic("b"));
    let spec = ConsumerSpec::new(
        TopicSelector::List(vec![a.clone(), b.clone()]),
        ctx.group("g"),
    );
    ctx.create_consumer_group(&spec).await?;
    let mut last = Vec::new();
    for (topic, label, count) in [(&a, "a", 3), (&b, "b", 2)] {
        let mut id = None;
        for i in 0..count {
            id = Some(
                ctx.publish(ctx.message(topic, &format!("{label}-{i}")))
                    .await
                    .doing("publishing")?,
            );
        }
        last.extend(id);
    }
    let consumer = ctx
        .runtime
        .component()
        .consumer(spec)
        .await
        .doing("opening a multi-topic consumer")?;
    let ids = consumer
        .last_message_ids()
        .await
        .doing("asking for the last message ids")?;
    let _ = consumer.close().await;
    let mut outcome = Outcome::new();
    let owners: Vec<Option<String>> = ids.iter().map(MessageId::owner).collect();
    let distinct: BTreeSet<&Option<String>> = owners.iter().collect();
    outcome.expect(distinct.len() == ids.len(), || {
        format!("duplicate owner topics in {ids:?}")
    });
    outcome.expect(owners.iter().all(Option::is_some), || {
        format!("ids without owner topic in {ids:?}")
    });
    let got: BTreeSet<String> = ids.iter().map(ToString::to_string).collect();
    let expected: BTreeSet<String> = last.iter().map(ToString::to_string).collect();
    outcome.expect(got == expected, || {
        format!("last_message_ids returned {got:?}; the last publishes were {expected:?}")
    });
    Ok(outcome)
}
