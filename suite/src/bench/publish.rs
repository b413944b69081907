//! The component's publish paths through the runtime: single and bulk publishes,
//! several paths batch by batch in turn on the same messages, and two paths measured
//! in turn against each other; each measurement's topics are freed after it.

use super::sizing::{measurement, sized_messages, timed_rounds, Timed};
use super::BenchOptions;
use crate::history::KEY;
use anyhow::Context as _;
use pubsub_components::runtime::{BulkPublishEntry, BulkPublishRequest, PublishRequest, Runtime};
use pubsub_components::Metadata;
use pubsub_reports::Measurement;
use std::cell::Cell;
use std::time::{Duration, Instant};

/// Awaits a measurement on `topics`, then lets the component free them (an
/// in-process broker holds every message in this process: a bench of many
/// time-sized runs would hold millions).
pub(super) async fn discarding<T>(
    runtime: &Runtime,
    topics: &[&str],
    measuring: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    let measured = measuring.await;
    let mut discarded = Ok(());
    for topic in topics {
        let result = runtime.component().discard_topic(topic).await;
        if discarded.is_ok() {
            discarded = result.with_context(|| format!("discarding the bench topic '{topic}'"));
        }
    }
    // A failed measurement's error goes first: it says more than a failed cleanup.
    let measured = measured?;
    discarded.map(|()| measured)
}

/// Single publishes of `options.messages` to `topic`: the time of the calls.
pub(super) async fn publish_single(
    runtime: &Runtime,
    topic: &str,
    options: &BenchOptions,
) -> anyhow::Result<Duration> {
    let times = publish_paths_in_turn(&[(runtime, topic, false)], 1, options).await?;
    Ok(times[0])
}

/// Bulk publishes of `options.messages` to `topic` in batches of `batch`: the time of
/// the calls.
pub(super) async fn publish_bulk(
    runtime: &Runtime,
    topic: &str,
    batch: usize,
    raw_payload: bool,
    options: &BenchOptions,
) -> anyhow::Result<Duration> {
    let times = publish_in_turn(&[(runtime, topic, raw_payload)], batch, options).await?;
    Ok(times[0])
}

/// A bulk path of the component: the runtime it goes through, its topic, and whether
/// its entries are sent rawPayload.
pub(super) type BulkPath<'a> = (&'a Runtime, &'a str, bool);

/// Bulk publishes of `options.messages` through each path, batch by batch in turn on
/// the same messages: each path's time.
async fn publish_in_turn(
    paths: &[BulkPath<'_>],
    batch: usize,
    options: &BenchOptions,
) -> anyhow::Result<Vec<Duration>> {
    let payload = vec![b'x'; options.payload_bytes];
    let ids: Vec<usize> = (0..options.messages).collect();
    let times = vec![Cell::new(Duration::ZERO); paths.len()];
    for chunk in ids.chunks(batch) {
        publish_batch_in_turn(paths, chunk, &payload, &times).await?;
    }
    Ok(times.into_iter().map(Cell::into_inner).collect())
}

/// Publishes the messages through each path in turn: batches of `batch` as bulk
/// requests, or with `batch` 1 each message as a single publish.
async fn publish_paths_in_turn(
    paths: &[BulkPath<'_>],
    batch: usize,
    options: &BenchOptions,
) -> anyhow::Result<Vec<Duration>> {
    if batch > 1 {
        return publish_in_turn(paths, batch, options).await;
    }
    let payload = vec![b'x'; options.payload_bytes];
    let mut times = vec![Duration::ZERO; paths.len()];
    for i in 0..options.messages {
        for ((runtime, topic, _), time) in paths.iter().zip(times.iter_mut()) {
            let request = PublishRequest::new(*topic, payload.clone())
                .with_content_type("application/octet-stream")
                .with_metadata(KEY, i.to_string());
            let started = Instant::now();
            runtime.publish(request).await?;
            *time += started.elapsed();
        }
    }
    Ok(times)
}

/// One batch of the messages `ids` through each path in turn, each call's time added
/// to its path's slot in `times`.
pub(super) async fn publish_batch_in_turn(
    paths: &[BulkPath<'_>],
    ids: &[usize],
    payload: &[u8],
    times: &[Cell<Duration>],
) -> anyhow::Result<()> {
    for ((runtime, topic, raw_payload), time) in paths.iter().zip(times) {
        time.set(time.get() + publish_chunk(runtime, topic, ids, payload, *raw_payload).await?);
    }
    Ok(())
}

/// One bulk publish of the messages `ids`, and the time of its call.
async fn publish_chunk(
    runtime: &Runtime,
    topic: &str,
    ids: &[usize],
    payload: &[u8],
    raw_payload: bool,
) -> anyhow::Result<Duration> {
    let request = bulk_request(topic, ids, payload, raw_payload);
    let started = Instant::now();
    let response = runtime.bulk_publish(request).await?;
    let elapsed = started.elapsed();
    anyhow::ensure!(
        response.failed_entries.is_empty(),
        "bulk publish failed entries: {:?}",
        response.failed_entries
    );
    Ok(elapsed)
}

/// The app's request for the messages `ids`, built just before its call (as an app
/// builds it) and outside the timer: the time is the runtime's and the broker's.
fn bulk_request(
    topic: &str,
    ids: &[usize],
    payload: &[u8],
    raw_payload: bool,
) -> BulkPublishRequest {
    BulkPublishRequest {
        topic: topic.to_string(),
        entries: ids
            .iter()
            .map(|i| BulkPublishEntry {
                entry_id: i.to_string(),
                event: payload.to_vec(),
                content_type: Some("application/octet-stream".into()),
                metadata: if raw_payload {
                    Metadata::from([
                        (KEY.to_string(), i.to_string()),
                        ("rawPayload".to_string(), "true".to_string()),
                    ])
                } else {
                    Metadata::from([(KEY.to_string(), i.to_string())])
                },
            })
            .collect(),
        metadata: Metadata::new(),
    }
}

/// Paths measured against each other: the same messages through each, batch by batch
/// in turn (single publishes when `batch` is 1), so that none meets a quieter machine
/// or an emptier broker than the others. Each path is its runtime, the word in its
/// topics' names (`<prefix>-<word>-<batch>-<run>`) and its row's label; the count is
/// sized from a probe of the last path, and the topics are freed through the first's
/// runtime. Returns the first path's measurement, then each other's with its ratio to
/// the first.
pub(super) async fn in_turn(
    paths: &[(&Runtime, &str, &str)],
    prefix: &str,
    batch: usize,
    options: &BenchOptions,
) -> anyhow::Result<Vec<Measurement>> {
    let (Some((owner, _, _)), Some((probed, probed_word, _))) = (paths.first(), paths.last())
    else {
        anyhow::bail!("a measurement in turn needs at least one path");
    };
    let probe_topic = format!("{prefix}-{probed_word}-{batch}-probe");
    let probe_path = [(*probed, probe_topic.as_str(), false)];
    let probing = publish_paths_in_turn(&probe_path, batch, options);
    let probe = discarding(owner, &[&probe_topic], probing).await?[0];
    let (messages, mut times) = timed_rounds(
        options,
        sized_messages(options, probe),
        |run, sized| async move {
            let topics: Vec<String> = paths
                .iter()
                .map(|(_, word, _)| format!("{prefix}-{word}-{batch}-{run}"))
                .collect();
            let runs: Vec<_> = paths
                .iter()
                .zip(&topics)
                .map(|((runtime, _, _), topic)| (*runtime, topic.as_str(), false))
                .collect();
            let publishing = publish_paths_in_turn(&runs, batch, &sized);
            let names: Vec<&str> = topics.iter().map(String::as_str).collect();
            discarding(owner, &names, publishing).await
        },
    )
    .await?;
    let mut timed = |i: usize| Timed {
        messages,
        times: times.get_mut(i).map(std::mem::take).unwrap_or_default(),
    };
    let first = measurement(paths[0].2, &timed(0), None);
    let mut measurements = vec![first.clone()];
    for (i, (_, _, label)) in paths.iter().enumerate().skip(1) {
        measurements.push(measurement(label, &timed(i), Some(&first)));
    }
    Ok(measurements)
}
