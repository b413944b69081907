//! Delayed delivery: `deliverAfter`, `deliverAt` and subscription `receiverDelay`.

use crate::context::CaseContext;
use crate::criteria::Timing;
use crate::history::Record;
use crate::outcome::{CaseRun, Context};
use pubsub_components::runtime::controls::format_time;
use pubsub_components::runtime::Subscription;
use std::time::{Duration, SystemTime};

const LONGEST: Duration = Duration::from_millis(1200);

/// The subscription delay of the publish-time case.
const RECEIVER_DELAY: Duration = Duration::from_millis(1500);
/// What the clock reads around a subscribe call may be off from the subscriber's
/// start, in `delay.receiver-delay-from-publish`.
const CLOCK_READS: Duration = Duration::from_millis(50);
/// Delayed messages queued ahead of undelayed ones: more than any prefetch window.
const QUEUED_AHEAD: usize = 600;

pub(super) async fn receiver_delay_from_publish(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let mut subscription = Subscription::new(&topic, ctx.group("g"));
    subscription.receiver_delay = Some(RECEIVER_DELAY);
    ctx.create_group(&subscription).await?;
    let keys = ctx.publish_numbered(&topic, "old", 5).await?;
    // Time is the property: the messages grow older than the delay.
    tokio::time::sleep(RECEIVER_DELAY + Duration::from_millis(100)).await;
    let subscribing = SystemTime::now();
    let handle = ctx
        .subscribe(subscription, ctx.recorder.handler("s1"))
        .await?;
    // The subscriber runs once subscribe returns: a row whose subscribe starts an app
    // (an SDK's, a process of its own) spends that start inside the call. A delay
    // counted from receipt still shows: receipt follows the call's start.
    let subscribed_at = SystemTime::now();
    ctx.recorder
        .wait_for_keys(&keys, ctx.within(RECEIVER_DELAY + ctx.caps.delivery_bound))
        .await;
    handle.stop().await;
    let mut outcome = ctx.check(&ctx.criteria());
    let precision = ctx.caps.delay_precision;
    // What the machine and broker gave undelayed messages meanwhile: a first delivery
    // that late is the machine's, not a delay counted again.
    let allowance = ctx.lateness_allowance(precision);
    for key in &keys {
        let first = ctx
            .recorder
            .history()
            .deliveries_of(key)
            .find_map(|r| match r {
                Record::Delivered { at, .. } => Some(*at),
                _ => None,
            });
        if let Some(at) = first {
            let after = at.duration_since(subscribed_at).unwrap_or_default();
            if after <= precision + allowance {
                continue;
            }
            // Held for the whole delay again while undelayed messages took far less:
            // the delay was counted from receipt. Receipt follows the subscriber's
            // start, so such a delivery comes the whole delay after it at the
            // earliest (CLOCK_READS for the clock reads around the subscribe call);
            // anything earlier is a slow delivery, judged as timing.
            let control_p99 = ctx
                .machine_load()
                .map_or(Duration::ZERO, |load| load.control_p99);
            let since_call = at.duration_since(subscribing).unwrap_or_default();
            if since_call + CLOCK_READS >= RECEIVER_DELAY && control_p99 * 2 < after {
                outcome.fail(format!("{key}: delivered {after:?} after the subscriber started though it was older than the receiverDelay {RECEIVER_DELAY:?}: held for the delay again, so the delay counted from receipt, not publish time (precision {precision:?}, undelayed control messages took {allowance:?} then)"));
            } else {
                outcome.fail_timing(format!("{key}: late: delivered {after:?} after the subscriber started though it was older than the receiverDelay {RECEIVER_DELAY:?}, beyond the precision {precision:?} and the {allowance:?} undelayed control messages took then"));
            }
        }
    }
    Ok(outcome)
}

pub(super) async fn beyond_lease(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let handle = ctx.subscribe_recorded(&topic).await?;
    ctx.await_subscribed(&topic, Duration::ZERO).await?;
    let delay = ctx.caps.lease + Duration::from_secs(1);
    let mut keys = Vec::new();
    for i in 0..4 {
        let key = format!("beyond-lease-{i}");
        ctx.publish(
            ctx.message(&topic, &key)
                .with_metadata("deliverAfter", format!("{}ms", delay.as_millis())),
        )
        .await
        .doing(&format!("publishing {key}"))?;
        keys.push(key);
    }
    // Far future: never due within the case.
    let far = format_time(SystemTime::now() + Duration::from_secs(24 * 3600));
    let far_request = ctx
        .message(&topic, "far-future")
        .with_metadata("deliverAt", far);
    ctx.runtime
        .publish(far_request)
        .await
        .doing("publishing a message due tomorrow")?;
    keys.extend(ctx.publish_numbered(&topic, "now", 1).await?);
    ctx.recorder
        .wait_for_keys(
            &keys,
            ctx.within(delay + ctx.caps.delay_precision + ctx.caps.delivery_bound),
        )
        .await;
    // Anything still on its way (a second copy after the lease) shows by then.
    ctx.recorder
        .wait_until(ctx.quiet_window(), |h| {
            keys.iter().any(|k| h.delivery_count(k) > 1) || h.delivery_count("far-future") > 0
        })
        .await;
    handle.stop().await;
    let mut criteria = ctx.criteria();
    criteria.timing = Some(timing(&ctx));
    let mut outcome = ctx.check(&criteria);
    let far_deliveries = ctx.recorder.history().delivery_count("far-future");
    outcome.expect(far_deliveries == 0, || {
        "early: the message due tomorrow was delivered".into()
    });
    outcome.note(format!(
        "delay {delay:?} (lease {:?} + 1 s)",
        ctx.caps.lease
    ));
    Ok(outcome)
}

pub(super) async fn no_starvation(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let subscription = Subscription::new(&topic, ctx.group("g"));
    ctx.create_group(&subscription).await?;
    let handle = ctx
        .subscribe(subscription, ctx.recorder.handler("s1"))
        .await?;
    let in_an_hour = Duration::from_secs(3600);
    let delayed: Vec<String> = (0..QUEUED_AHEAD).map(|i| format!("later-{i}")).collect();
    if ctx.caps.bulk_publish.is_available() {
        for chunk in delayed.chunks(100) {
            let entries = chunk.iter().map(|k| super::keyed_entry(k)).collect();
            let mut metadata = pubsub_components::Metadata::new();
            metadata.insert("deliverAfter".into(), format!("{}s", in_an_hour.as_secs()));
            let response = ctx
                .runtime
                .bulk_publish(pubsub_components::runtime::BulkPublishRequest {
                    topic: topic.clone(),
                    entries,
                    metadata,
                })
                .await
                .doing("bulk publishing delayed messages")?;
            if !response.failed_entries.is_empty() {
                ctx.recorder.note(format!(
                    "{} delayed entries failed",
                    response.failed_entries.len()
                ));
            }
        }
    } else {
        for key in &delayed {
            ctx.runtime
                .publish(
                    ctx.message(&topic, key)
                        .with_metadata("deliverAfter", format!("{}s", in_an_hour.as_secs())),
                )
                .await
                .doing(&format!("publishing {key}"))?;
        }
    }
    let published_at = tokio::time::Instant::now();
    let keys = ctx.publish_numbered(&topic, "now", 20).await?;
    let all = ctx
        .recorder
        .wait_for_keys(&keys, ctx.delivery_deadline())
        .await;
    let took = published_at.elapsed();
    handle.stop().await;
    let mut outcome = ctx.check(&ctx.criteria());
    let history = ctx.recorder.history();
    let early: Vec<&String> = delayed
        .iter()
        .filter(|k| history.delivery_count(k) > 0)
        .collect();
    outcome.expect(early.is_empty(), || {
        format!(
            "early: {} messages due in an hour were delivered: {:?}",
            early.len(),
            early.iter().take(5).collect::<Vec<_>>()
        )
    });
    if all {
        outcome.note(format!(
            "20 undelayed messages delivered {took:?} after {QUEUED_AHEAD} delayed ones"
        ));
    } else {
        outcome.fail_timing(format!(
            "starved: undelayed messages published after {QUEUED_AHEAD} delayed ones were not all delivered within the delivery bound {:?}",
            ctx.caps.delivery_bound
        ));
    }
    Ok(outcome)
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
    let mut criteria = ctx.criteria();
    criteria.timing = Some(timing(&ctx));
    Ok(ctx.check(&criteria))
}

pub(super) async fn deliver_after(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let handle = ctx.subscribe_recorded(&topic).await?;
    ctx.await_subscribed(&topic, Duration::ZERO).await?;
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

pub(super) async fn deliver_at(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let handle = ctx.subscribe_recorded(&topic).await?;
    ctx.await_subscribed(&topic, Duration::ZERO).await?;
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

pub(super) async fn receiver_delay(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let delay = Duration::from_millis(700);
    let mut subscription = Subscription::new(&topic, ctx.group("g"));
    subscription.receiver_delay = Some(delay);
    let handle = ctx
        .subscribe(subscription, ctx.recorder.handler("s1"))
        .await?;
    ctx.await_subscribed(&topic, delay).await?;
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
