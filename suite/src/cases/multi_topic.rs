//! Multi-topic subscriptions and topic message ids (Pulsar PIP-224): owner topics,
//! ack and seek on the owner topic only, refusals, `last_message_ids`.

use super::{key_of, received_key as key};
use crate::context::CaseContext;
use crate::outcome::{CaseError, CaseRun, Context, Outcome};
use pubsub_components::runtime::Subscription;
use pubsub_components::{
    Consumer, ConsumerSpec, ErrorKind, MessageId, PubSubError, ReceivedMessage, StartPosition,
    TopicSelector,
};
use std::collections::BTreeSet;
use std::time::Duration;
use tokio::time::Instant;

pub(super) async fn ack_cumulative(ctx: CaseContext) -> CaseRun {
    let (a, b, consumer, _) = two_topics(&ctx, 5).await?;
    let got = receive(consumer.as_ref(), 10, ctx.delivery_deadline()).await?;
    let mut outcome = Outcome::new();
    outcome.expect(got.len() == 10, || {
        format!("received {} of 10 messages", got.len())
    });
    let Some(target) = got.iter().find(|m| key(m) == "a-2").map(|m| m.id.clone()) else {
        outcome.fail("a-2 was not received");
        return Ok(outcome);
    };
    let refused = [
        (
            "an id without an owner topic",
            MessageId {
                topic: None,
                ..target.clone()
            },
        ),
        (
            "an id of a topic the consumer does not subscribe",
            MessageId::new(ctx.topic("not-subscribed"), None, target.position),
        ),
    ];
    for (what, id) in refused {
        match consumer.ack_cumulative(&id).await {
            Ok(()) => {
                outcome.fail(format!("a cumulative ack of {what} ({id}) was accepted"));
            }
            Err(e) if e.kind() == ErrorKind::NotAllowed => {}
            Err(e) => {
                outcome.fail(format!(
                    "a cumulative ack of {what} was refused with {:?}, expected NotAllowed: {e}",
                    e.kind()
                ));
            }
        }
    }
    consumer
        .ack_cumulative(&target)
        .await
        .doing(&format!("acknowledging {a} up to a-2 cumulatively"))?;
    // What was not acknowledged goes to the next member once this one leaves.
    let _ = consumer.close().await;
    let next = ctx
        .runtime
        .component()
        .consumer(ConsumerSpec::new(
            TopicSelector::List(vec![a.clone(), b.clone()]),
            ctx.group("g"),
        ))
        .await
        .doing("opening the next member")?;
    // Settled: what the owner of a-2 (its topic and partition) held up to it.
    let settled =
        |m: &ReceivedMessage| same_owner(&m.id, &target) && m.id.position <= target.position;
    let mut expected: Vec<String> = got.iter().filter(|m| !settled(m)).map(key).collect();
    expected.sort();
    let mut back = keys_of(&receive(next.as_ref(), expected.len(), ctx.delivery_deadline()).await?);
    back.extend(keys_of(
        &drain(
            next.as_ref(),
            Duration::from_millis(300),
            ctx.quiet_window(),
        )
        .await?,
    ));
    let _ = next.close().await;
    back.sort();
    back.dedup();
    outcome.expect(back == expected, || {
        format!("after a cumulative ack up to a-2 ({target}), the next member got {back:?}; expected {expected:?} (what {} held up to a-2 acknowledged, nothing of another topic or partition)", owner_text(&target))
    });
    Ok(outcome)
}

/// A multi-topic consumer over two fresh topics with `per_topic` messages each
/// (`a-i`, `b-i`), its group created before publishing; returns the publish ids.
async fn two_topics(
    ctx: &CaseContext,
    per_topic: usize,
) -> Result<(String, String, Box<dyn Consumer>, Vec<(String, MessageId)>), CaseError> {
    let (a, b, spec) = two_topic_group(ctx).await?;
    let mut published = Vec::new();
    for (label, topic) in [("a", &a), ("b", &b)] {
        for i in 0..per_topic {
            let key = format!("{label}-{i}");
            let id = ctx
                .publish(ctx.message(topic, &key))
                .await
                .doing(&format!("publishing {key}"))?;
            published.push((key, id));
        }
    }
    let consumer = ctx
        .open_consumer(spec, "opening a multi-topic consumer")
        .await?;
    Ok((a, b, consumer, published))
}

/// Receives until nothing more arrives within `quiet` (or `deadline` passes).
async fn drain(
    consumer: &dyn Consumer,
    quiet: Duration,
    deadline: Instant,
) -> Result<Vec<ReceivedMessage>, CaseError> {
    let mut out = Vec::new();
    loop {
        let wait = quiet.min(deadline.saturating_duration_since(Instant::now()));
        if wait.is_zero() {
            return Ok(out);
        }
        let got = consumer.receive(64, wait).await.doing("receiving")?;
        if got.is_empty() {
            return Ok(out);
        }
        out.extend(got);
    }
}

fn keys_of(messages: &[ReceivedMessage]) -> Vec<String> {
    messages.iter().map(key).collect()
}

/// Whether two ids name the same owner: topic and partition (no partition and
/// partition 0 alike), what a cumulative ack, a seek and the last ids act on.
fn same_owner(a: &MessageId, b: &MessageId) -> bool {
    a.topic == b.topic && a.partition.unwrap_or(0) == b.partition.unwrap_or(0)
}

/// An id's owner as text: `topic` or `topic#partition`.
fn owner_text(id: &MessageId) -> String {
    id.owner().unwrap_or_else(|| "(no owner)".into())
}

/// The publish id of `key` with the topic it went to (PIP-224's
/// `TopicMessageId.create`), whichever topic the component's publish id names.
fn published_id(published: &[(String, MessageId)], key: &str, topic: &str) -> Option<MessageId> {
    published
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, id)| MessageId {
            topic: Some(topic.to_string()),
            ..id.clone()
        })
}

pub(super) async fn seek_refused(ctx: CaseContext) -> CaseRun {
    let (a, _b, consumer, published) = two_topics(&ctx, 3).await?;
    let extra = publish_to_first_partition(&ctx, &a).await?;
    let got = receive(consumer.as_ref(), 6 + extra, ctx.delivery_deadline()).await?;
    let mut outcome = Outcome::new();
    let position = published[1].1.position;
    let foreign = ctx.topic("not-subscribed");
    for (what, id) in [
        (
            "an id without an owner topic",
            MessageId {
                topic: None,
                partition: None,
                position,
            },
        ),
        (
            "an id of a topic the consumer does not subscribe",
            MessageId::new(&foreign, None, position),
        ),
    ] {
        let result = consumer.seek(&id).await;
        judge_refusal(&mut outcome, "seek to", what, &id, result, ONLY_NOT_ALLOWED);
    }
    if let Some(on_first) = first_partition_id(&got, &a) {
        for (what, id) in partition_edges(&ctx, &on_first) {
            let result = consumer.seek(&id).await;
            judge_refusal(
                &mut outcome,
                "seek to",
                what,
                &id,
                result,
                PARTITION_REFUSALS,
            );
        }
    }
    // Nothing moved: acknowledging what was received leaves nothing to come back.
    for message in &got {
        consumer.ack(&message.id).await.doing("acking")?;
    }
    let again = drain(
        consumer.as_ref(),
        Duration::from_millis(300),
        ctx.quiet_window(),
    )
    .await?;
    let _ = consumer.close().await;
    outcome.expect(again.is_empty(), || {
        format!(
            "after the refused seeks on {a}, messages came again: {:?}",
            keys_of(&again)
        )
    });
    Ok(outcome)
}

pub(super) async fn seek_publish_id(ctx: CaseContext) -> CaseRun {
    let (a, b, consumer, published) = two_topics(&ctx, 5).await?;
    // Some messages of each topic received (unacknowledged), the rest not yet.
    let first = receive(consumer.as_ref(), 4, ctx.delivery_deadline()).await?;
    let mut outcome = Outcome::new();
    let publish_id = |key: &str| {
        let topic = if key.starts_with("a-") { &a } else { &b };
        published_id(&published, key, topic)
    };
    let Some(target) = publish_id("a-2") else {
        outcome.fail("a-2 has no publish id");
        return Ok(outcome);
    };
    let sought = owner_text(&target);
    consumer
        .seek(&target)
        .await
        .doing(&format!("seeking to the publish id of a-2 ({target})"))?;
    // The sought topic starts again (its next message within the delivery bound:
    // the broker may have to fetch it again), then whatever else comes.
    let mut rest = Vec::new();
    let deadline = ctx.delivery_deadline();
    while !rest
        .iter()
        .any(|m: &ReceivedMessage| same_owner(&m.id, &target))
        && Instant::now() < deadline
    {
        let wait = deadline.saturating_duration_since(Instant::now());
        rest.extend(consumer.receive(64, wait).await.doing("receiving")?);
    }
    rest.extend(drain(consumer.as_ref(), Duration::from_millis(500), deadline).await?);
    let before: Vec<String> = keys_of(&first);
    let after: Vec<String> = keys_of(&rest);
    outcome.note(format!("before the seek: {before:?}; after it: {after:?}"));
    // From the sought owner (a's partition holding a-2): a-2 first, nothing before it.
    let from_sought: Vec<&ReceivedMessage> =
        rest.iter().filter(|m| same_owner(&m.id, &target)).collect();
    outcome.expect(
        from_sought.first().map(|m| key(m)).as_deref() == Some("a-2"),
        || {
            format!(
                "after seek to a-2's publish id the first message of {sought} was {:?}",
                from_sought.first().map(|m| key(m))
            )
        },
    );
    let earlier: Vec<String> = from_sought
        .iter()
        .filter(|m| m.id.position < target.position)
        .map(|m| key(m))
        .collect();
    outcome.expect(earlier.is_empty(), || {
        format!("messages of {sought} before the seek position came back: {earlier:?}")
    });
    // Every other owner (b; a's other partitions) untouched: nothing lost, nothing
    // received before the seek delivered again.
    let others: BTreeSet<String> = published
        .iter()
        .filter(|(k, _)| publish_id(k).is_some_and(|id| !same_owner(&id, &target)))
        .map(|(k, _)| k.clone())
        .collect();
    let seen: BTreeSet<String> = before.iter().chain(&after).cloned().collect();
    let missing: Vec<&String> = others.difference(&seen).collect();
    outcome.expect(missing.is_empty(), || {
        format!("the seek on {sought} lost messages of other topics or partitions: {missing:?}")
    });
    let repeated: Vec<&String> = after
        .iter()
        .filter(|k| others.contains(*k) && before.contains(k))
        .collect();
    outcome.expect(repeated.is_empty(), || {
        format!("the seek on {sought} delivered received messages of other topics or partitions again: {repeated:?}")
    });
    // Acknowledge the sought messages through their publish ids with topic.
    for m in &from_sought {
        let k = key(m);
        let Some(id) = publish_id(&k) else { continue };
        if let Err(e) = consumer.ack(&id).await {
            outcome.fail(format!(
                "ack of {k} by its publish id with topic ({id}) was refused: {e}"
            ));
        }
    }
    let _ = consumer.close().await;
    Ok(outcome)
}

pub(super) async fn seek_earliest_latest(ctx: CaseContext) -> CaseRun {
    let (a, b, consumer, _) = two_topics(&ctx, 3).await?;
    let first = receive(consumer.as_ref(), 6, ctx.delivery_deadline()).await?;
    for message in &first {
        consumer.ack(&message.id).await.doing("acking")?;
    }
    let mut outcome = Outcome::new();
    consumer
        .seek_all(StartPosition::Earliest)
        .await
        .doing("seeking every topic to earliest")?;
    let again = receive(consumer.as_ref(), 6, ctx.delivery_deadline()).await?;
    let mut got: Vec<String> = keys_of(&again);
    got.sort();
    let all = ["a-0", "a-1", "a-2", "b-0", "b-1", "b-2"];
    outcome.expect(got == all, || {
        format!("after seeking to earliest, {a} and {b} gave {got:?}; expected all of {all:?}")
    });
    for message in &again {
        consumer.ack(&message.id).await.doing("acking")?;
    }
    // Published before the seek to latest: skipped. After it: delivered.
    for (label, topic) in [("a", &a), ("b", &b)] {
        let key = format!("{label}-skipped");
        ctx.runtime
            .publish(ctx.message(topic, &key))
            .await
            .doing(&format!("publishing {key}"))?;
    }
    consumer
        .seek_all(StartPosition::Latest)
        .await
        .doing("seeking every topic to latest")?;
    let mut fresh = Vec::new();
    for (label, topic) in [("a", &a), ("b", &b)] {
        let key = format!("{label}-fresh");
        ctx.publish(ctx.message(topic, &key))
            .await
            .doing(&format!("publishing {key}"))?;
        fresh.push(key);
    }
    let mut after = keys_of(&receive(consumer.as_ref(), 2, ctx.delivery_deadline()).await?);
    after.extend(keys_of(
        &drain(
            consumer.as_ref(),
            Duration::from_millis(300),
            ctx.quiet_window(),
        )
        .await?,
    ));
    let _ = consumer.close().await;
    after.sort();
    outcome.expect(after == ["a-fresh", "b-fresh"], || {
        format!("after seeking to latest, got {after:?}; expected only a-fresh and b-fresh (a-skipped and b-skipped were published before the seek)")
    });
    Ok(outcome)
}

pub(super) async fn seek_edges(ctx: CaseContext) -> CaseRun {
    let (a, _b, consumer, _) = two_topics(&ctx, 3).await?;
    let first = receive(consumer.as_ref(), 6, ctx.delivery_deadline()).await?;
    let mut outcome = Outcome::new();
    outcome.expect(first.len() == 6, || {
        format!("received {} of 6 messages", first.len())
    });
    for message in &first {
        consumer.ack(&message.id).await.doing("acking")?;
    }
    // The last message of one of a's owners (a itself; a partition of it in the twin).
    let lasts = consumer
        .last_message_ids()
        .await
        .doing("asking for the last message ids")?;
    let Some(last) = lasts
        .into_iter()
        .find(|id| id.topic.as_deref() == Some(a.as_str()))
    else {
        outcome.fail(format!("last_message_ids named no owner of {a}"));
        return Ok(outcome);
    };
    let sought = owner_text(&last);
    let Some(last_key) = first
        .iter()
        .find(|m| same_owner(&m.id, &last) && m.id.position == last.position)
        .map(key)
    else {
        outcome.fail(format!(
            "no message received carries the last id of {sought} ({last})"
        ));
        return Ok(outcome);
    };
    // Seek to the last id: that message, and only it, comes again.
    consumer
        .seek(&last)
        .await
        .doing(&format!("seeking to the last id of {sought} ({last})"))?;
    let mut again = receive(consumer.as_ref(), 1, ctx.delivery_deadline()).await?;
    again.extend(
        drain(
            consumer.as_ref(),
            Duration::from_millis(300),
            ctx.quiet_window(),
        )
        .await?,
    );
    for message in &again {
        consumer.ack(&message.id).await.doing("acking")?;
    }
    let again = keys_of(&again);
    outcome.expect(again == [last_key.clone()], || {
        format!("after seeking to the last id of {sought} ({last_key}, {last}) got {again:?}; expected {last_key} alone")
    });
    // Seek past it (the position the next message takes): nothing old comes back, and
    // what is published next is delivered, once, from its first message.
    let past = MessageId {
        position: last.position + 1,
        ..last.clone()
    };
    consumer
        .seek(&past)
        .await
        .doing(&format!("seeking past the last id of {sought} ({past})"))?;
    let old = keys_of(
        &drain(
            consumer.as_ref(),
            Duration::from_millis(300),
            ctx.quiet_window(),
        )
        .await?,
    );
    outcome.expect(old.is_empty(), || {
        format!("after seeking past the last id of {sought} ({past}), messages published before came back: {old:?}")
    });
    // Published to a until one lands on the sought owner (a partition of a is chosen
    // by key in the twin), at most 16.
    let mut fresh = Vec::new();
    for i in 0..16 {
        let key = format!("a-fresh-{i}");
        let id = ctx
            .publish(ctx.message(&a, &key))
            .await
            .doing(&format!("publishing {key}"))?;
        fresh.push(key);
        if id.partition.unwrap_or(0) == last.partition.unwrap_or(0) {
            break;
        }
    }
    let mut after =
        keys_of(&receive(consumer.as_ref(), fresh.len(), ctx.delivery_deadline()).await?);
    after.extend(keys_of(
        &drain(
            consumer.as_ref(),
            Duration::from_millis(300),
            ctx.quiet_window(),
        )
        .await?,
    ));
    let _ = consumer.close().await;
    after.sort();
    fresh.sort();
    outcome.expect(after == fresh, || {
        format!("after seeking past the last id of {sought}, got {after:?}; expected exactly what was published after the seek, {fresh:?}")
    });
    Ok(outcome)
}

pub(super) async fn ack_many(ctx: CaseContext) -> CaseRun {
    let (a, b, consumer, _) = two_topics(&ctx, 3).await?;
    let got = receive(consumer.as_ref(), 6, ctx.delivery_deadline()).await?;
    let mut outcome = Outcome::new();
    outcome.expect(got.len() == 6, || {
        format!("received {} of 6 messages", got.len())
    });
    let ids: Vec<MessageId> = got.iter().map(|m| m.id.clone()).collect();
    let foreign = MessageId::new(ctx.topic("not-subscribed"), None, 1);
    let with_foreign: Vec<MessageId> = ids.iter().cloned().chain([foreign]).collect();
    match consumer.ack_many(&with_foreign).await {
        Ok(()) => {
            outcome.fail(
                "ack_many with an id of a topic the consumer does not subscribe was accepted",
            );
        }
        Err(e) if e.kind() == ErrorKind::NotAllowed => {
            outcome.note(format!("refused whole: {e}"));
        }
        Err(e) => {
            outcome.fail(format!(
                "ack_many with a foreign id was refused with {:?}, expected NotAllowed: {e}",
                e.kind()
            ));
        }
    }
    // The refused call acknowledged nothing: a new member gets all of them.
    let _ = consumer.close().await;
    let spec = || {
        ConsumerSpec::new(
            TopicSelector::List(vec![a.clone(), b.clone()]),
            ctx.group("g"),
        )
    };
    let open = |what: &'static str| {
        let component = ctx.runtime.component().clone();
        let spec = spec();
        async move { component.consumer(spec).await.doing(what) }
    };
    let second = open("opening a second member").await?;
    let returned = receive(second.as_ref(), 6, ctx.delivery_deadline()).await?;
    let mut back: Vec<String> = keys_of(&returned);
    back.sort();
    outcome.expect(back.len() == 6, || {
        format!("after the refused ack_many only {back:?} came back to the next member: the refused call acknowledged some ids")
    });
    let ids: Vec<MessageId> = returned.iter().map(|m| m.id.clone()).collect();
    second
        .ack_many(&ids)
        .await
        .doing("acknowledging ids of both topics at once")?;
    // Acknowledged on their owner topics: nothing comes back, to this member or, once
    // it leaves, to the next.
    let window = ctx.caps.lease + ctx.caps.redelivery_bound;
    let again = drain(second.as_ref(), window, ctx.within(window)).await?;
    let _ = second.close().await;
    let third = open("opening a third member").await?;
    let later = drain(
        third.as_ref(),
        Duration::from_millis(500),
        ctx.quiet_window(),
    )
    .await?;
    let _ = third.close().await;
    let back: Vec<String> = keys_of(&again).into_iter().chain(keys_of(&later)).collect();
    outcome.expect(back.is_empty(), || {
        format!("messages acknowledged with ack_many came back: {back:?}")
    });
    Ok(outcome)
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

pub(super) async fn owner_topic(ctx: CaseContext) -> CaseRun {
    let (a, b) = (ctx.new_topic("a").await?, ctx.new_topic("b").await?);
    let (p1, p2) = (ctx.new_topic("p-one").await?, ctx.new_topic("p-two").await?);
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
    let mut outcome = ctx.check(&ctx.criteria());
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
        if let Some(partitions) = ctx.partitions {
            let partition = event.message_id.partition;
            outcome.expect(partition.is_some_and(|p| p < partitions), || {
                format!("{key}: delivered from a topic of {partitions} partitions with id {}, which names partition {partition:?}", event.message_id)
            });
        }
    }
    Ok(outcome)
}

pub(super) async fn ack_owner(ctx: CaseContext) -> CaseRun {
    let (a, b, spec) = two_topic_group(&ctx).await?;
    ctx.publish_numbered(&a, "a", 3).await?;
    ctx.publish_numbered(&b, "b", 3).await?;
    let consumer = ctx
        .open_consumer(spec.clone(), "opening a multi-topic consumer")
        .await?;
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
    let again = ctx.open_consumer(spec, "reopening the consumer").await?;
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

pub(super) async fn ack_refused(ctx: CaseContext) -> CaseRun {
    let (a, _, spec) = two_topic_group(&ctx).await?;
    let other = ctx.topic("not-subscribed");
    ctx.publish_numbered(&a, "a", 1).await?;
    let extra = publish_to_first_partition(&ctx, &a).await?;
    ctx.publish_numbered(&other, "other", 1).await?;
    let consumer = ctx
        .open_consumer(spec, "opening a multi-topic consumer")
        .await?;
    let received = receive(consumer.as_ref(), 1 + extra, ctx.delivery_deadline()).await?;
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
        let result = consumer.ack(&id).await;
        judge_refusal(&mut outcome, "ack of", what, &id, result, ONLY_NOT_ALLOWED);
    }
    let on_first = first_partition_id(&received, &a).unwrap_or_else(|| message.id.clone());
    for (what, id) in partition_edges(&ctx, &on_first) {
        let result = consumer.ack(&id).await;
        judge_refusal(
            &mut outcome,
            "ack of",
            what,
            &id,
            result,
            PARTITION_REFUSALS,
        );
    }
    // An id one past the last message of its owner names none yet: whatever the ack
    // answers, it settles nothing, and the message that takes that place later comes.
    let last = received
        .iter()
        .filter(|m| same_owner(&m.id, &message.id))
        .map(|m| m.id.clone())
        .max_by_key(|id| id.position)
        .unwrap_or_else(|| message.id.clone());
    let next = MessageId {
        position: last.position + 1,
        ..last.clone()
    };
    match consumer.ack(&next).await {
        Ok(()) => outcome.note(format!(
            "ack of the id after the last ({next}) was accepted"
        )),
        Err(e) => outcome.note(format!("ack of the id after the last ({next}): {e}")),
    };
    for m in &received {
        consumer
            .ack(&m.id)
            .await
            .doing(&format!("acking {} with its proper id", m.id))?;
    }
    // Published to a until one lands on the owner of that id, at most 16.
    let mut later = Vec::new();
    for i in 0..16 {
        let key = format!("a-later-{i}");
        let id = ctx
            .publish(ctx.message(&a, &key))
            .await
            .doing(&format!("publishing {key}"))?;
        later.push(key);
        if id.partition.unwrap_or(0) == last.partition.unwrap_or(0) {
            break;
        }
    }
    let came = receive(consumer.as_ref(), later.len(), ctx.delivery_deadline()).await?;
    let _ = consumer.close().await;
    let came: BTreeSet<String> = came.iter().map(key).collect();
    let missing: Vec<&String> = later.iter().filter(|k| !came.contains(*k)).collect();
    outcome.expect(missing.is_empty(), || {
        format!(
            "after an ack of the id after the last of {} ({next}), messages published later never came: {missing:?}",
            owner_text(&last)
        )
    });
    Ok(outcome)
}

pub(super) async fn seek(ctx: CaseContext) -> CaseRun {
    let (a, b, spec) = two_topic_group(&ctx).await?;
    // One partition each here (a-0..a-4 in order on a); spread in the partitioned twin.
    ctx.publish_numbered(&a, "a", 5).await?;
    ctx.publish_numbered(&b, "b", 5).await?;
    let consumer = ctx
        .open_consumer(spec, "opening a multi-topic consumer")
        .await?;
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
    let sought = owner_text(&target);
    // From the sought owner (a's partition holding a-2) again: a-2 and what follows it.
    let mut expected: Vec<&ReceivedMessage> = first
        .iter()
        .filter(|m| same_owner(&m.id, &target) && m.id.position >= target.position)
        .collect();
    expected.sort_by_key(|m| m.id.position);
    let expected: Vec<String> = expected.into_iter().map(key).collect();
    let after = receive(consumer.as_ref(), expected.len(), ctx.delivery_deadline()).await?;
    let extra = consumer
        .receive(
            10,
            ctx.caps.redelivery_bound.min(Duration::from_millis(500)),
        )
        .await
        .doing("receiving")?;
    let _ = consumer.close().await;
    let got: Vec<&ReceivedMessage> = after.iter().chain(&extra).collect();
    let touched: Vec<String> = got
        .iter()
        .filter(|m| !same_owner(&m.id, &target))
        .map(|m| format!("{} ({})", key(m), m.id))
        .collect();
    outcome.expect(touched.is_empty(), || {
        format!(
            "seek on {sought} repositioned other topics or partitions too: redelivered {touched:?}"
        )
    });
    let earlier: Vec<String> = got
        .iter()
        .filter(|m| same_owner(&m.id, &target) && m.id.position < target.position)
        .map(|m| key(m))
        .collect();
    outcome.expect(earlier.is_empty(), || {
        format!("messages before the seek position came back: {earlier:?}")
    });
    let from_sought: Vec<String> = got
        .iter()
        .filter(|m| same_owner(&m.id, &target))
        .map(|m| key(m))
        .collect();
    outcome.expect(from_sought == expected, || {
        format!(
            "after seek to a-2 ({target}) got {from_sought:?} from {sought}; expected {expected:?}"
        )
    });
    Ok(outcome)
}

pub(super) async fn last_message_ids(ctx: CaseContext) -> CaseRun {
    let (a, b, spec) = two_topic_group(&ctx).await?;
    // The last publish per owner (topic, and partition in the partitioned twin).
    let mut last: std::collections::BTreeMap<String, MessageId> = Default::default();
    for (topic, label, count) in [(&a, "a", 3), (&b, "b", 2)] {
        for i in 0..count {
            let id = ctx
                .publish(ctx.message(topic, &format!("{label}-{i}")))
                .await
                .doing("publishing")?;
            last.insert(owner_text(&id), id);
        }
    }
    let consumer = ctx
        .open_consumer(spec, "opening a multi-topic consumer")
        .await?;
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
    let expected: BTreeSet<String> = last.values().map(ToString::to_string).collect();
    outcome.expect(got == expected, || {
        format!("last_message_ids returned {got:?}; the last publishes were {expected:?}")
    });
    Ok(outcome)
}

/// In a partitioned twin, publishes to `topic` until a message lands on its partition 0
/// (at most 16: unkeyed messages are spread by the component), so that one of the
/// delivered ids is on the partition an id naming none is most likely read as. Returns
/// how many it published (none on one partition).
async fn publish_to_first_partition(ctx: &CaseContext, topic: &str) -> Result<usize, CaseError> {
    if ctx.partitions.is_none() {
        return Ok(0);
    }
    for i in 0..16 {
        let key = format!("first-{i}");
        let id = ctx
            .publish(ctx.message(topic, &key))
            .await
            .doing(&format!("publishing {key}"))?;
        if id.partition == Some(0) {
            return Ok(i + 1);
        }
    }
    Ok(16)
}

/// The id of a message of `topic` among `received`, on its partition 0 if one is.
fn first_partition_id(received: &[ReceivedMessage], topic: &str) -> Option<MessageId> {
    let of_topic = || {
        received
            .iter()
            .filter(|m| m.id.topic.as_deref() == Some(topic))
    };
    of_topic()
        .find(|m| m.id.partition == Some(0))
        .or_else(|| of_topic().next())
        .map(|m| m.id.clone())
}

/// Ids of `id`'s owner topic that name no partition of it, in a partitioned twin (where
/// the count is the one the case created): the first partition past its last and, on
/// more than one partition, none at all. A consumer cannot tell which message such an
/// id means.
fn partition_edges(ctx: &CaseContext, id: &MessageId) -> Vec<(&'static str, MessageId)> {
    let Some(count) = ctx.partitions else {
        return Vec::new();
    };
    let mut edges = vec![(
        "an id naming a partition its topic lacks",
        MessageId {
            partition: Some(count),
            ..id.clone()
        },
    )];
    if count > 1 {
        edges.push((
            "an id naming no partition of a partitioned topic",
            MessageId {
                partition: None,
                ..id.clone()
            },
        ));
    }
    edges
}

/// The refusals of an id naming no partition of its topic: as not allowed, as an
/// invalid request, or as naming no message the consumer holds.
const PARTITION_REFUSALS: &[ErrorKind] = &[
    ErrorKind::NotAllowed,
    ErrorKind::InvalidRequest,
    ErrorKind::NotFound,
];

/// The refusal an id naming no message of the consumer's topics must get (MT-3, MT-5).
const ONLY_NOT_ALLOWED: &[ErrorKind] = &[ErrorKind::NotAllowed];

/// Judges the answer to `call` (`"ack of"`, `"seek to"`) `what` (`id`): it MUST be
/// refused with one of the `refusals` kinds.
fn judge_refusal(
    outcome: &mut Outcome,
    call: &str,
    what: &str,
    id: &MessageId,
    result: Result<(), PubSubError>,
    refusals: &[ErrorKind],
) {
    match result {
        Ok(()) => outcome.fail(format!("{call} {what} ({id}) was accepted")),
        Err(e) if refusals.contains(&e.kind()) => {
            outcome.note(format!("{call} {what} ({id}): {e}"))
        }
        Err(e) => {
            let expected: Vec<String> = refusals.iter().map(|k| format!("{k:?}")).collect();
            outcome.fail(format!(
                "{call} {what} ({id}) was refused with {:?}, expected {}: {e}",
                e.kind(),
                expected.join(" or ")
            ))
        }
    };
}

/// Topics `a` and `b`, and the spec of a group reading both, created.
async fn two_topic_group(ctx: &CaseContext) -> Result<(String, String, ConsumerSpec), CaseError> {
    let (a, b) = (ctx.new_topic("a").await?, ctx.new_topic("b").await?);
    let spec = ConsumerSpec::new(
        TopicSelector::List(vec![a.clone(), b.clone()]),
        ctx.group("g"),
    );
    ctx.create_consumer_group(&spec).await?;
    Ok((a, b, spec))
}
