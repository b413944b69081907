//! Ordering within the declared scope, also after an unrelated RETRY, and with
//! partition keys across their space.

use super::key_of;
use crate::context::CaseContext;
use crate::outcome::{CaseRun, Context};
use pubsub_components::runtime::{Status, Subscription};

const KEYS: usize = 16;

/// The partition keys a case spreads its messages over.
#[derive(Clone, Copy)]
pub(super) enum Keys {
    /// `k-00` to `k-15`.
    Plain,
    /// [`odd_keys`].
    Odd,
}

/// Partition keys across their space, each distinct from every other.
pub(super) fn odd_keys() -> Vec<String> {
    let long = "x".repeat(1023);
    [
        "k", "K", "k.", "k_", "k-", "k/", "k:", " k", "k ", "ключ", "鍵", "🔑", ">", "*", "+", "#",
        "$share", "null",
    ]
    .into_iter()
    .map(str::to_string)
    .chain([format!("{long}a"), format!("{long}b")])
    .collect()
}

pub(super) async fn ordering(ctx: CaseContext, with_retry: bool, key_space: Keys) -> CaseRun {
    // One partition here; four in the partitioned twin.
    let topic = ctx.new_topic("t").await?;
    let subscription = Subscription::new(&topic, ctx.group("g"));
    ctx.create_group(&subscription).await?;
    let partition_keys: Vec<String> = match key_space {
        Keys::Plain => (0..KEYS).map(|k| format!("k-{k:02}")).collect(),
        Keys::Odd => odd_keys(),
    };
    let count = match (with_retry, key_space) {
        (true, _) | (_, Keys::Odd) => 400,
        (false, Keys::Plain) => 1000,
    };
    let mut keys = Vec::with_capacity(count);
    // Published before subscribing, so the subscriber receives them in large batches.
    for i in 0..count {
        let key = format!("m-{i:04}");
        let request = ctx.message(&topic, &key).with_metadata(
            "partitionKey",
            partition_keys[i % partition_keys.len()].clone(),
        );
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
    let mut criteria = ctx.criteria();
    criteria.ordering = Some(ctx.caps.ordering);
    if with_retry {
        criteria.unordered_keys.insert(retried);
    }
    let mut outcome = ctx.check(&criteria);
    outcome.note(format!(
        "{count} messages over {} keys, checked per {:?}",
        partition_keys.len(),
        ctx.caps.ordering
    ));
    Ok(outcome)
}
