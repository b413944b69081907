//! The component beside the broker's raw client ([`raw`]): its bulk paths batch by
//! batch in turn with the raw client's on the same messages, and its single publish
//! against the raw client one at a time. A row's ratio is how many times the raw
//! client's time the component takes for the same work.

use super::publish::{discarding, publish_batch_in_turn, publish_bulk};
use super::raw;
use super::sizing::{measurement, sized_messages, timed_rounds, Timed};
use super::BenchOptions;
use futures::future::LocalBoxFuture;
use pubsub_components::runtime::Runtime;
use pubsub_reports::Measurement;
use std::cell::Cell;
use std::sync::Mutex;
use std::time::Duration;

/// The component's bulk paths (enveloped and rawPayload) and the raw client's x100
/// run in turn, batch by batch, on the same messages: each raw batch is followed by
/// the component's enveloped and rawPayload batches of the same ids, so all three
/// meet the broker in the same state (a shared machine's load drifts, a broker slows
/// as it fills). The count is sized so that the fastest of the three lasts the
/// minimum. Returns the rawPayload row (its ratio to `bulk_100`), and the rows beside
/// the raw client (none without a raw client for `kind` at `endpoint`).
pub(super) async fn bulk(
    runtime: &Runtime,
    kind: &str,
    endpoint: Option<&str>,
    prefix: &str,
    bulk_100: Option<&Measurement>,
    options: &BenchOptions,
) -> anyhow::Result<(Measurement, Vec<Measurement>)> {
    let probe_topic = format!("{prefix}-raw-100-probe");
    let probing = publish_bulk(runtime, &probe_topic, 100, true, options);
    let probe = discarding(runtime, &[&probe_topic], probing).await?;
    // The enveloped path runs in turn only where a raw client is there to compare
    // with; the raw client's label comes with its runs.
    let raw_100_label = Mutex::new(None::<String>);
    let (messages, mut paths) =
        timed_rounds(options, sized_messages(options, probe), |run, sized| {
            let raw_100_label = &raw_100_label;
            async move {
                // After each raw batch: the enveloped batch, then the rawPayload one.
                let raw_payload_topic = format!("{prefix}-raw-100-{run}");
                let enveloped_topic = format!("{prefix}-beside-raw-100-{run}");
                let rows = async {
                    let beside_paths = [
                        (runtime, enveloped_topic.as_str(), false),
                        (runtime, &raw_payload_topic, true),
                    ];
                    let payload = vec![b'x'; sized.payload_bytes];
                    let times = [Cell::new(Duration::ZERO), Cell::new(Duration::ZERO)];
                    let (paths, payload, times_ref) = (&beside_paths, &payload, &times);
                    let mut beside = move |ids: Vec<usize>| -> LocalBoxFuture<'_, _> {
                        Box::pin(async move {
                            publish_batch_in_turn(paths, &ids, payload, times_ref).await
                        })
                    };
                    // The raw client sends the app's bytes, then exactly the component's
                    // enveloped bytes: what the envelope's size costs the broker alone.
                    let shapes = [
                        raw::Shape::Plain,
                        raw::Shape::Enveloped {
                            runtime,
                            topic: &enveloped_topic,
                        },
                    ];
                    let raw = match endpoint {
                        Some(endpoint) => {
                            raw_publish(kind, endpoint, 100, &sized, &shapes, &mut beside).await?
                        }
                        None => None,
                    };
                    match raw {
                        Some((label, raw_times)) => {
                            *raw_100_label.lock().unwrap_or_else(|p| p.into_inner()) = Some(label);
                            // In the order of the rows: rawPayload, enveloped, raw client,
                            // raw client with the enveloped bytes.
                            let [enveloped, raw_payload] = times.map(Cell::into_inner);
                            let mut row_times = vec![raw_payload, enveloped];
                            row_times.extend(raw_times);
                            Ok(row_times)
                        }
                        None => Ok(vec![
                            publish_bulk(runtime, &raw_payload_topic, 100, true, &sized).await?,
                        ]),
                    }
                };
                discarding(runtime, &[&raw_payload_topic, &enveloped_topic], rows).await
            }
        })
        .await?;
    let timed_path = |path: Vec<Duration>| Timed {
        messages,
        times: path,
    };
    let raw_100_runs = paths.get_mut(2).map(std::mem::take);
    let raw_100_enveloped_runs = paths.get_mut(3).map(std::mem::take);
    let enveloped_runs = paths.get_mut(1).map(std::mem::take);
    let raw_payload = measurement(
        "bulk publish x100, rawPayload (no envelope)",
        &timed_path(std::mem::take(&mut paths[0])),
        bulk_100,
    );
    let mut beside_raw = Vec::new();
    if let (Some(raw_runs), Some(enveloped_runs), Some(label)) = (
        raw_100_runs,
        enveloped_runs,
        raw_100_label
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take(),
    ) {
        let raw = measurement(&label, &timed_path(raw_runs), None);
        let enveloped = measurement(
            "bulk publish x100, in turn with the raw client",
            &timed_path(enveloped_runs),
            None,
        );
        // The envelope's cost against the raw client run beside it.
        beside_raw.push(Measurement {
            ratio: Some(raw.rate / enveloped.rate),
            baseline: Some(format!("{label} (component time / raw time)")),
            ..enveloped.clone()
        });
        beside_raw.push(against_raw(&raw, &raw_payload, &raw_payload.label));
        // The same bytes sent by the raw client: what is left of the component's cost
        // once the envelope's size is the broker's for both.
        if let Some(runs) = raw_100_enveloped_runs {
            let same_bytes = measurement(
                &format!("{label}{}", raw::ENVELOPED_LABEL),
                &timed_path(runs),
                None,
            );
            beside_raw.push(against_raw(&same_bytes, &enveloped, &enveloped.label));
        }
    }
    Ok((raw_payload, beside_raw))
}

/// The raw client one at a time, on as many messages as the component's `single`
/// publish took: its row, against `single` (`None` without a raw client for `kind`).
pub(super) async fn single(
    kind: &str,
    endpoint: &str,
    single: &Measurement,
    options: &BenchOptions,
) -> anyhow::Result<Option<Measurement>> {
    let sized_1 = BenchOptions {
        messages: single.messages as usize,
        ..options.clone()
    };
    let mut raw_1_runs = Vec::new();
    for _ in 0..options.repeats.max(1) {
        raw_1_runs.extend(
            raw_publish(
                kind,
                endpoint,
                1,
                &sized_1,
                &[raw::Shape::Plain],
                &mut raw::nothing_beside(),
            )
            .await?
            .map(|(label, times)| (label, times.into_iter().sum::<Duration>())),
        );
    }
    if let Some((label, _)) = raw_1_runs.first().cloned() {
        let raw = measurement(
            &label,
            &Timed {
                messages: sized_1.messages,
                times: raw_1_runs.into_iter().map(|(_, elapsed)| elapsed).collect(),
            },
            None,
        );
        return Ok(Some(against_raw(&raw, single, &single.label)));
    }
    Ok(None)
}

/// How many times the raw client's time the component takes for the same work.
fn against_raw(raw: &Measurement, component: &Measurement, label: &str) -> Measurement {
    Measurement {
        ratio: Some(raw.rate / component.rate),
        baseline: Some(format!("{label} (component time / raw time)")),
        ..raw.clone()
    }
}

/// The same publishing work done with the broker's client library directly, for each
/// of `shapes` in turn batch by batch: the measurement's label and the raw client's
/// time per shape (its batches only, not `beside`'s), or `None` for types without a
/// raw client here.
async fn raw_publish(
    component_type: &str,
    endpoint: &str,
    batch: usize,
    options: &BenchOptions,
    shapes: &[raw::Shape<'_>],
    beside: &mut raw::Beside<'_>,
) -> anyhow::Result<Option<(String, Vec<Duration>)>> {
    let Some(publish) = crate::brokers::raw_client(component_type) else {
        return Ok(None);
    };
    let run = raw::RawRun {
        endpoint,
        batch,
        options,
    };
    Ok(Some(publish(run, shapes, beside).await?))
}
