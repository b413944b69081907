//! Certification under faults and load: members leaving a group, concurrent publishers.

use crate::catalogue::{Bound, Case, Level};
use crate::context::CaseContext;
use crate::history::KEY;
use crate::outcome::{CaseRun, Context, Outcome};
use pubsub_components::runtime::{BulkPublishEntry, BulkPublishRequest};
use pubsub_components::{ConsumerSpec, Metadata, TopicSelector};
use std::collections::BTreeSet;
use tokio::time::Instant;

pub fn cases() -> Vec<Case> {
    vec![
        Case {
            id: "certification.consumer-leaves",
            must: "When a consumer leaves its group with messages received but not acknowledged, those messages MUST be delivered to another member; nothing is lost.",
            requires: &[],
            level: Level::Certification,
            injects: &[],
            bound: Bound::new("2 x delivery bound + redelivery bound", |c| c.delivery_bound * 2 + c.redelivery_bound),
            run: |ctx| Box::pin(consumer_leaves(ctx)),
        },
        Case {
            id: "certification.concurrent-publishers",
            must: "Under concurrent single and bulk publishers every acknowledged message MUST be delivered, and nothing unpublished may appear.",
            requires: &[],
            level: Level::Certification,
            injects: &[],
            bound: Bound::new("4 x delivery bound", |c| c.delivery_bound * 4),
            run: |ctx| Box::pin(concurrent_publishers(ctx)),
        },
    ]
}

async fn consumer_leaves(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let spec = ConsumerSpec::new(TopicSelector::Single(topic.clone()), ctx.group("g"));
    let component = ctx.runtime.component().clone();
    ctx.create_consumer_group(&spec).await?;
    let keys = ctx.publish_numbered(&topic, "m", 40).await?;
    let leaving = component
        .consumer(spec.clone())
        .await
        .doing("opening the first member")?;
    let mut received = Vec::new();
    while received.len() < 20 && Instant::now() < ctx.delivery_deadline() {
        let wait = ctx
            .delivery_deadline()
            .saturating_duration_since(Instant::now());
        received.extend(
            leaving
                .receive(20 - received.len(), wait)
                .await
                .doing("receiving")?,
        );
    }
    let mut done = BTreeSet::new();
    for message in received.iter().take(10) {
        leaving.ack(&message.id).await.doing("acking")?;
        done.insert(message.metadata.get(KEY).cloned().unwrap_or_default());
    }
    leaving.close().await.doing("closing the first member")?;
    let staying = component
        .consumer(spec)
        .await
        .doing("opening the second member")?;
    let deadline = ctx.within(ctx.caps.redelivery_bound + ctx.caps.delivery_bound);
    while done.len() < keys.len() && Instant::now() < deadline {
        let wait = deadline.saturating_duration_since(Instant::now());
        for message in staying.receive(40, wait).await.doing("receiving")? {
            staying.ack(&message.id).await.doing("acking")?;
            done.insert(message.metadata.get(KEY).cloned().unwrap_or_default());
        }
    }
    let _ = staying.close().await;
    let mut outcome = Outcome::new();
    outcome.note(format!(
        "the first member received {} and acked 10 before leaving",
        received.len()
    ));
    let lost: Vec<&String> = keys.iter().filter(|k| !done.contains(*k)).collect();
    outcome.expect(lost.is_empty(), || {
        format!(
            "lost: {} messages never reached a member after the first left: {lost:?}",
            lost.len()
        )
    });
    Ok(outcome)
}

async fn concurrent_publishers(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let handle = ctx.subscribe_recorded(&topic).await?;
    let labels: Vec<String> = (0..4).map(|p| format!("p{p}")).collect();
    let singles = labels
        .iter()
        .map(|label| ctx.publish_numbered(&topic, label, 50));
    let bulks = (0..2).map(|b| {
        let entries: Vec<BulkPublishEntry> = (0..50)
            .map(|i| {
                let key = format!("b{b}-{i}");
                super::keyed_entry(&key)
            })
            .collect();
        ctx.bulk_publish(BulkPublishRequest {
            topic: topic.clone(),
            entries,
            metadata: Metadata::new(),
        })
    });
    let (single_results, bulk_results) = futures::join!(
        futures::future::join_all(singles),
        futures::future::join_all(bulks)
    );
    let mut keys = Vec::new();
    for result in single_results {
        keys.extend(result?);
    }
    for result in bulk_results {
        let response = result.doing("bulk publishing concurrently")?;
        keys.extend(
            (0..2)
                .flat_map(|b| (0..50).map(move |i| format!("b{b}-{i}")))
                .filter(|k| !response.failed(k)),
        );
    }
    keys.sort();
    keys.dedup();
    ctx.recorder
        .wait_for_keys(&keys, ctx.within(ctx.caps.delivery_bound * 2))
        .await;
    handle.stop().await;
    Ok(ctx.check(&ctx.expectation()))
}
