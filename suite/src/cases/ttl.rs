//! TTL: expired messages are never handed to the app; live ones are delivered.

use super::{expect_dead_letter_reasons, outlive_one_second_ttl, record_dead_letters};
use crate::context::CaseContext;
use crate::outcome::{CaseRun, Context, Outcome};
use pubsub_components::runtime::{BulkPublishEntry, BulkPublishRequest, Subscription};
use pubsub_components::Metadata;
use std::time::Duration;

/// The TTL of the late-in-life case: three delivery bounds in whole seconds, so that
/// after waiting two thirds of it a subscriber still has a delivery bound to start
/// (join its group, as the contract allows) and deliver.
pub(super) fn late_ttl(caps: &pubsub_components::Capabilities) -> Duration {
    Duration::from_secs((caps.delivery_bound * 3).as_secs_f64().ceil().max(3.0) as u64)
}

/// Messages wait two thirds of their TTL for their subscriber.
pub(super) async fn late_in_life(ctx: CaseContext) -> CaseRun {
    let ttl = late_ttl(&ctx.caps);
    let ttl_text = ttl.as_secs().to_string();
    let topic = ctx.topic("t");
    let subscription = Subscription::new(&topic, ctx.group("g"));
    ctx.create_group(&subscription).await?;
    let mut keys = Vec::new();
    let first_publish = tokio::time::Instant::now();
    for i in 0..3 {
        let key = format!("single-{i}");
        ctx.publish(
            ctx.message(&topic, &key)
                .with_metadata("ttlInSeconds", &ttl_text),
        )
        .await
        .doing(&format!("publishing {key}"))?;
        keys.push(key);
    }
    if ctx.caps.bulk_publish.is_available() {
        // Per entry: each entry carries its own TTL, next to one without any.
        let entries: Vec<BulkPublishEntry> = (0..3)
            .map(|i| {
                let key = format!("entry-ttl-{i}");
                keys.push(key.clone());
                let mut entry = super::keyed_entry(&key);
                if i < 2 {
                    entry
                        .metadata
                        .insert("ttlInSeconds".into(), ttl_text.clone());
                }
                entry
            })
            .collect();
        let response = ctx
            .bulk_publish(BulkPublishRequest::new(&topic, entries))
            .await
            .doing("bulk publishing with per-entry TTLs")?;
        if !response.failed_entries.is_empty() {
            ctx.recorder
                .note(format!("failed entries: {:?}", response.failed_entries));
        }
        // Per request.
        let entries: Vec<BulkPublishEntry> = (0..3)
            .map(|i| {
                let key = format!("request-ttl-{i}");
                keys.push(key.clone());
                super::keyed_entry(&key)
            })
            .collect();
        let mut metadata = Metadata::new();
        metadata.insert("ttlInSeconds".into(), ttl_text.clone());
        ctx.bulk_publish(BulkPublishRequest {
            topic: topic.clone(),
            entries,
            metadata,
        })
        .await
        .doing("bulk publishing with a request TTL")?;
    }
    // Time is the property: two thirds of the TTL (counted from the first publish)
    // pass before anyone reads; the subscriber then has until just before the first
    // message expires.
    let lived = first_publish.elapsed();
    tokio::time::sleep((ttl * 2 / 3).saturating_sub(lived)).await;
    let handle = ctx
        .subscribe(subscription, ctx.recorder.handler("s1"))
        .await?;
    let expiry = first_publish + ttl - Duration::from_millis(100);
    ctx.recorder
        .wait_for_keys(&keys, expiry.min(ctx.deadline()))
        .await;
    handle.stop().await;
    let mut outcome = ctx.check(&ctx.criteria());
    let history = ctx.recorder.history();
    let missing: Vec<&String> = keys
        .iter()
        .filter(|k| history.delivery_count(k) == 0)
        .collect();
    outcome.expect_timely(missing.is_empty(), || {
        format!(
            "lost inside their TTL: {missing:?} were not delivered before their {ttl:?} TTL ran out, though their subscriber started after two thirds of it (expired early?)"
        )
    });
    Ok(outcome)
}

pub(super) async fn expired(ctx: CaseContext, with_dead_letter: bool) -> CaseRun {
    let topic = ctx.topic("t");
    let dlq_topic = ctx.topic("dlq");
    let dlq_subscription = Subscription::new(&dlq_topic, ctx.group("dlq"));
    let mut subscription = Subscription::new(&topic, ctx.group("g"));
    subscription.dead_letter_topic = with_dead_letter.then(|| dlq_topic.clone());
    if with_dead_letter {
        ctx.create_group(&dlq_subscription).await?;
    }
    ctx.create_group(&subscription).await?;
    let mut expiring = Vec::new();
    // Per message, through the single path.
    for i in 0..3 {
        let key = format!("expired-single-{i}");
        let request = ctx.message(&topic, &key).with_metadata("ttlInSeconds", "1");
        ctx.runtime
            .publish(request)
            .await
            .doing(&format!("publishing {key}"))?;
        expiring.push(key);
    }
    let mut outcome = Outcome::new();
    // Per request, through the bulk path (where the path has one).
    if ctx.caps.bulk_publish.is_available() {
        let entries: Vec<BulkPublishEntry> = (0..3)
            .map(|i| {
                let key = format!("expired-bulk-{i}");
                expiring.push(key.clone());
                super::keyed_entry(&key)
            })
            .collect();
        let mut request_metadata = Metadata::new();
        request_metadata.insert("ttlInSeconds".into(), "1".into());
        let response = ctx
            .runtime
            .bulk_publish(BulkPublishRequest {
                topic: topic.clone(),
                entries,
                metadata: request_metadata,
            })
            .await
            .doing("bulk publishing with a request TTL")?;
        outcome.expect(response.failed_entries.is_empty(), || {
            format!("bulk entries failed: {:?}", response.failed_entries)
        });
    }
    outlive_one_second_ttl(&ctx).await;

    let (dlq, dlq_handle) = record_dead_letters(&ctx, dlq_subscription, with_dead_letter).await?;
    let handle = ctx
        .subscribe(subscription, ctx.recorder.handler("s1"))
        .await?;
    let live = ctx.publish_numbered(&topic, "live", 1).await?;
    ctx.recorder
        .wait_for_keys(&live, ctx.delivery_deadline())
        .await;
    if with_dead_letter {
        dlq.wait_for_keys(&expiring, ctx.delivery_deadline()).await;
    } else {
        ctx.recorder
            .wait_until(ctx.quiet_window(), |h| {
                expiring.iter().any(|k| h.delivery_count(k) > 0)
            })
            .await;
    }
    handle.stop().await;
    if let Some(h) = dlq_handle {
        h.stop().await;
    }
    let history = ctx.recorder.history();
    for key in &expiring {
        outcome.expect(history.delivery_count(key) == 0, || {
            format!("{key} was delivered after its 1 s TTL had passed")
        });
    }
    outcome.expect_timely(history.delivery_count("live-0") > 0, || {
        "the live message published after them was not delivered within the delivery bound".into()
    });
    if with_dead_letter {
        expect_dead_letter_reasons(&mut outcome, &dlq, &expiring, "expired");
    }
    Ok(outcome.with_history(&history))
}

pub(super) async fn live(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let handle = ctx.subscribe_recorded(&topic).await?;
    let mut keys = Vec::new();
    for i in 0..5 {
        let key = format!("live-{i}");
        ctx.publish(
            ctx.message(&topic, &key)
                .with_metadata("ttlInSeconds", "60"),
        )
        .await
        .doing(&format!("publishing {key}"))?;
        keys.push(key);
    }
    Ok(ctx.conclude(&keys, handle).await)
}
