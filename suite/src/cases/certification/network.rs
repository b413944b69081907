//! certification.* under network faults between the component and its broker: cut,
//! black-holed, slowed.

use super::{acknowledged, numbered, publish_bounded, FAULT_LENGTH};
use crate::cases::keyed_entry;
use crate::context::CaseContext;
use crate::fault_injection::Faults;
use crate::fault_proxy::NetworkFault;
use crate::outcome::{CaseRun, Context, Outcome};
use pubsub_components::runtime::{BulkPublishRequest, Runtime, Status, Subscription};
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// The shortest time between two single publishes of a stream.
const PACE: Duration = Duration::from_millis(1);

/// The most single publishes `certification.network-cut-single-publishes` streams.
const STREAM_LIMIT: usize = 5000;

/// Bulk-publishes `keys` through `runtime`, giving up after `wait` (every entry is
/// then recorded as unknown). Returns the keys reported SUCCESS.
async fn bulk_publish_bounded(
    ctx: &CaseContext,
    runtime: &Runtime,
    topic: &str,
    keys: &[String],
    wait: Duration,
) -> Vec<String> {
    let request = BulkPublishRequest::new(
        topic.to_string(),
        keys.iter().map(|k| keyed_entry(k)).collect(),
    );
    match tokio::time::timeout(wait, ctx.bulk_publish_via(runtime, request)).await {
        Ok(Ok(response)) => keys
            .iter()
            .filter(|k| !response.failed(k))
            .cloned()
            .collect(),
        Ok(Err(_)) => Vec::new(),
        Err(_) => {
            for key in keys {
                ctx.recorder.published(
                    key,
                    topic,
                    Err(format!(
                        "outcome unknown: the bulk call did not return within {wait:?} during a fault"
                    )),
                    None,
                    None,
                );
            }
            Vec::new()
        }
    }
}

pub(in crate::cases) async fn network_fault(ctx: CaseContext, fault: NetworkFault) -> CaseRun {
    let faults = Faults::of(&ctx)?;
    let (proxied, proxy) = faults.proxied_runtime().await?;
    let topic = ctx.topic("t");
    // The subscriber is not behind the proxy: it sees what the broker stored.
    let handle = ctx.subscribe_recorded(&topic).await?;
    bulk_publish_bounded(
        &ctx,
        &proxied,
        &topic,
        &numbered("a", 20),
        ctx.caps.delivery_bound,
    )
    .await;

    faults.network(&proxy, fault);
    let during_keys = numbered("b", 20);
    let during = bulk_publish_bounded(
        &ctx,
        &proxied,
        &topic,
        &during_keys,
        FAULT_LENGTH + ctx.caps.recovery_bound,
    );
    let restore = async {
        tokio::time::sleep(FAULT_LENGTH).await;
        faults.network(&proxy, NetworkFault::Pass);
    };
    let (during_ok, ()) = tokio::join!(during, restore);
    let back = Instant::now();

    let mut outcome = Outcome::new();
    outcome.note(format!(
        "{} of 20 entries published during the fault were reported SUCCESS",
        during_ok.len()
    ));
    let recovery_deadline = ctx.within(ctx.caps.recovery_bound);
    let mut pending = numbered("c", 20);
    let mut recovered_at = None;
    while !pending.is_empty() && Instant::now() < recovery_deadline {
        let wait = recovery_deadline
            .saturating_duration_since(Instant::now())
            .min(ctx.caps.delivery_bound);
        let done = bulk_publish_bounded(&ctx, &proxied, &topic, &pending, wait).await;
        if !done.is_empty() && recovered_at.is_none() {
            recovered_at = Some(Instant::now());
        }
        pending.retain(|k| !done.contains(k));
        if !pending.is_empty() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    match recovered_at {
        Some(at) => outcome.note(format!(
            "bulk publishing worked again {} ms after the network was back",
            (at - back).as_millis()
        )),
        None => outcome.fail(format!(
            "the publisher did not recover: no entry was published within the declared recovery bound of {:?} after the network was back",
            ctx.caps.recovery_bound
        )),
    };
    outcome.expect(pending.is_empty(), || {
        format!(
            "{} entries could not be published within the recovery bound after the network was back",
            pending.len()
        )
    });
    let expected: Vec<String> = acknowledged(&ctx.recorder.history()).into_iter().collect();
    ctx.recorder
        .wait_for_keys(&expected, ctx.within(ctx.caps.delivery_bound * 2))
        .await;
    handle.stop().await;
    proxied.retire().await;
    drop(proxy);
    Ok(outcome.merge(ctx.check(&ctx.criteria())))
}

pub(in crate::cases) async fn network_cut_single_publishes(ctx: CaseContext) -> CaseRun {
    let faults = Faults::of(&ctx)?;
    let (proxied, proxy) = faults.proxied_runtime().await?;
    let topic = ctx.topic("t");
    // The subscriber is not behind the proxy: it sees what the broker stored.
    let handle = ctx.subscribe_recorded(&topic).await?;
    let each_wait = FAULT_LENGTH + ctx.caps.recovery_bound;
    let stop = std::sync::atomic::AtomicBool::new(false);
    let acknowledged_count = std::sync::atomic::AtomicUsize::new(0);
    let recovered: Mutex<Option<Instant>> = Mutex::new(None);
    let back: Mutex<Option<Instant>> = Mutex::new(None);
    let progress = Notify::new();
    // Publishes back to back, each bounded, until the schedule stops it (or a
    // component that answers without waiting for the broker has been sent enough).
    let publisher = async {
        let mut sent = 0usize;
        while !stop.load(std::sync::atomic::Ordering::Acquire) && sent < STREAM_LIMIT {
            // A publish that answers at once never suspends: yield so the schedule
            // (polled in the same task) runs.
            tokio::task::yield_now().await;
            let key = format!("s-{sent:05}");
            let began = Instant::now();
            let published = publish_bounded(&ctx, &proxied, &topic, &key, each_wait).await;
            if began.elapsed() < PACE {
                // At most about one publish a millisecond: a stream, not a flood.
                tokio::time::sleep(PACE).await;
            }
            if published {
                acknowledged_count.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                let restored = *back.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(restored) = restored {
                    recovered
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .get_or_insert_with(|| Instant::now().max(restored));
                }
            } else {
                // A refused publish during the cut: do not spin.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            progress.notify_waiters();
            sent += 1;
        }
        sent
    };
    let schedule = async {
        // The cut lands while publishes are streaming: after 50 of them.
        let started = Instant::now();
        while acknowledged_count.load(std::sync::atomic::Ordering::Acquire) < 50
            && started.elapsed() < ctx.caps.delivery_bound
        {
            let _ = tokio::time::timeout(Duration::from_millis(50), progress.notified()).await;
        }
        faults.network(&proxy, NetworkFault::Cut);
        tokio::time::sleep(FAULT_LENGTH).await;
        faults.network(&proxy, NetworkFault::Pass);
        *back.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        let deadline = ctx.within(ctx.caps.recovery_bound);
        while recovered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_none()
            && Instant::now() < deadline
        {
            let _ = tokio::time::timeout(Duration::from_millis(50), progress.notified()).await;
        }
        stop.store(true, std::sync::atomic::Ordering::Release);
    };
    let (sent, ()) = tokio::join!(publisher, schedule);
    let mut outcome = Outcome::new();
    let acknowledged_keys: Vec<String> =
        acknowledged(&ctx.recorder.history()).into_iter().collect();
    outcome.note(format!(
        "{sent} single publishes streamed across the cut, {} acknowledged",
        acknowledged_keys.len()
    ));
    let back = back.into_inner().unwrap_or_else(|p| p.into_inner());
    match (recovered.into_inner().unwrap_or_else(|p| p.into_inner()), back) {
        (Some(at), Some(back)) => outcome.note(format!(
            "publishing worked again {} ms after the network was back",
            (at - back).as_millis()
        )),
        _ => outcome.fail(format!(
            "the publisher did not recover: no publish succeeded within the declared recovery bound of {:?} after the network was back",
            ctx.caps.recovery_bound
        )),
    };
    ctx.recorder
        .wait_for_keys(&acknowledged_keys, ctx.within(ctx.caps.delivery_bound * 2))
        .await;
    handle.stop().await;
    proxied.retire().await;
    drop(proxy);
    Ok(outcome.merge(ctx.check(&ctx.criteria())))
}

pub(in crate::cases) async fn slow_network_bulk_subscribe(ctx: CaseContext) -> CaseRun {
    let faults = Faults::of(&ctx)?;
    let (proxied, proxy) = faults.proxied_runtime().await?;
    let topic = ctx.topic("t");
    faults.network(
        &proxy,
        NetworkFault::Latency {
            base: Duration::from_millis(20),
            jitter: Duration::from_millis(20),
        },
    );
    let max = 10;
    let mut subscription = Subscription::new(topic.clone(), ctx.group("g"));
    subscription.bulk = Some(pubsub_components::runtime::BulkSubscribeOptions {
        max_messages_count: max,
        max_await_duration: Duration::from_millis(300),
    });
    let handler = ctx.recorder.bulk("s1", |_| Some(Status::Success), |_| None);
    let handle = proxied
        .subscribe(subscription, handler)
        .await
        .doing("bulk subscribing over a slow network")?;
    let mut keys = Vec::new();
    for burst in 0..3 {
        keys.extend(
            ctx.publish_numbered(&topic, &format!("m{burst}"), 20)
                .await?,
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    ctx.recorder
        .wait_for_keys(&keys, ctx.within(ctx.caps.delivery_bound * 3))
        .await;
    handle.stop().await;
    faults.network(&proxy, NetworkFault::Pass);
    proxied.retire().await;
    let history = ctx.recorder.history();
    let mut outcome = Outcome::new();
    let oversize: Vec<String> = history
        .batches()
        .filter(|(_, _, _, size)| *size > max)
        .map(|(id, _, _, size)| format!("{} ({size} entries)", &id[..8.min(id.len())]))
        .collect();
    outcome.expect(oversize.is_empty(), || {
        format!(
            "batches exceed maxMessagesCount {max} over a slow network: {}",
            oversize.join(", ")
        )
    });
    outcome.note(format!(
        "{} batches over a link with 20-40 ms latency each way",
        history.batches().count()
    ));
    Ok(outcome.merge(ctx.check(&ctx.criteria())))
}
