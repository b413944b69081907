//! Bulk publish: per-entry status, partial failures, entry ids, metadata merge,
//! `batchPublishKeepOrder`, size limits.

use super::{after_refusals, generate, keyed_entry};
use crate::context::CaseContext;
use crate::history::KEY;
use crate::outcome::{CaseError, CaseRun, Context, Outcome};
use pubsub_components::runtime::{BulkPublishEntry, BulkPublishRequest};
use pubsub_components::ErrorKind;

/// An entry the broker must refuse: a raw payload one byte over the declared maximum.
fn oversize(ctx: &CaseContext, key: &str) -> Result<BulkPublishEntry, CaseError> {
    let max = ctx.caps.max_message_bytes.ok_or_else(|| {
        CaseError::CannotProvoke(
            "the case makes one entry of a request fail by sending it one byte over the declared maximum message size, and the component declares none (no limit); declare `max_message_bytes` to run it".into(),
        )
    })?;
    let mut entry = keyed_entry(key);
    entry.event = vec![b'x'; max + 1];
    entry.content_type = Some("application/octet-stream".into());
    entry.metadata.insert("rawPayload".into(), "true".into());
    Ok(entry)
}

pub(super) async fn all_success(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let subscription = ctx.subscribe_recorded(&topic).await?;
    let keys: Vec<String> = (0..100).map(|i| format!("e-{i}")).collect();
    let response = ctx
        .bulk_publish(BulkPublishRequest::new(
            &topic,
            keys.iter().map(|k| keyed_entry(k)).collect(),
        ))
        .await
        .doing("bulk publishing 100 entries")?;
    let mut outcome = ctx.conclude(&keys, subscription).await;
    outcome.expect(
        response.failed_entries.is_empty() && response.http_status() == 204,
        || {
            format!(
                "valid entries reported failed: {:?}",
                response.failed_entries
            )
        },
    );
    Ok(outcome)
}

pub(super) async fn partial_failure(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let mut entries = Vec::new();
    for i in 0..20 {
        let key = format!("e-{i}");
        entries.push(if i % 4 == 1 {
            oversize(&ctx, &key)?
        } else {
            keyed_entry(&key)
        });
    }
    let subscription = ctx.subscribe_recorded(&topic).await?;
    let response = ctx
        .bulk_publish(BulkPublishRequest::new(topic.as_str(), entries))
        .await
        .doing("bulk publishing with oversize entries")?;
    let reported_ok: Vec<String> = (0..20)
        .map(|i| format!("e-{i}"))
        .filter(|k| !response.failed(k))
        .collect();
    ctx.recorder
        .wait_for_keys(&reported_ok, ctx.delivery_deadline())
        .await;
    subscription.stop().await;
    let mut outcome = ctx.check(&ctx.criteria());
    if response.failed_entries.is_empty() {
        outcome
            .warn("no entry failed: the broker accepted payloads over its declared maximum size");
    } else {
        outcome.expect(response.http_status() == 500, || {
            "failures present but status is not 500".into()
        });
        outcome.note(format!(
            "{} entries reported failed: {:?}",
            response.failed_entries.len(),
            response
                .failed_entries
                .iter()
                .map(|f| &f.entry_id)
                .collect::<Vec<_>>()
        ));
    }
    Ok(outcome)
}

pub(super) async fn status_mapping(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let subscription = ctx.subscribe_recorded(&topic).await?;
    let strategy = (
        proptest::collection::vec(proptest::bool::weighted(0.3), 1..30),
        proptest::bool::ANY,
    );
    let mut expected = Vec::new();
    for (r, (failing, keep_order)) in generate(strategy, ctx.seed(), 8).into_iter().enumerate() {
        let mut entries = Vec::new();
        for (i, fail) in failing.iter().enumerate() {
            let key = format!("r{r}-e{i}");
            entries.push(if *fail {
                oversize(&ctx, &key)?
            } else {
                keyed_entry(&key)
            });
        }
        let mut req = BulkPublishRequest::new(topic.as_str(), entries);
        if keep_order {
            req.metadata
                .insert("batchPublishKeepOrder".into(), "true".into());
        }
        let response = ctx
            .bulk_publish(req)
            .await
            .doing(&format!("bulk request {r}"))?;
        expected.extend(
            (0..failing.len())
                .map(|i| format!("r{r}-e{i}"))
                .filter(|k| !response.failed(k)),
        );
    }
    ctx.recorder
        .wait_for_keys(&expected, ctx.delivery_deadline())
        .await;
    subscription.stop().await;
    let mut outcome = ctx.check(&ctx.criteria());
    outcome.note(format!(
        "8 generated requests (seed {}), {} entries reported successful",
        ctx.seed(),
        expected.len()
    ));
    Ok(outcome)
}

pub(super) async fn entry_ids(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let subscription = ctx.subscribe_recorded(&topic).await?;
    let mut blank = keyed_entry("bad-1");
    blank.entry_id = "   ".into();
    let mut missing = keyed_entry("bad-3");
    missing.entry_id = String::new();
    let attempts = vec![
        (
            "missing entryId",
            vec![keyed_entry("bad-0"), missing],
            "index 1",
        ),
        (
            "blank entryId",
            vec![blank, keyed_entry("bad-2")],
            "index 0",
        ),
        (
            "duplicate entryId",
            vec![
                keyed_entry("bad-4"),
                keyed_entry("bad-5"),
                keyed_entry("bad-4"),
            ],
            "bad-4",
        ),
    ];
    let mut outcome = Outcome::new();
    for (what, entries, named) in attempts {
        match ctx
            .runtime
            .bulk_publish(BulkPublishRequest::new(topic.as_str(), entries))
            .await
        {
            Ok(response) => {
                outcome.fail(format!(
                    "{what}: accepted ({} failed entries) instead of rejected whole",
                    response.failed_entries.len()
                ));
            }
            Err(e) if e.kind() == ErrorKind::Unsupported && ctx.runtime.is_remote() => {
                // A client (an SDK) that cannot send this request: nothing to judge.
                outcome.note(format!("{what}: cannot be sent through this client: {e}"));
            }
            Err(e) if e.kind() != ErrorKind::InvalidRequest || !e.to_string().contains(named) => {
                outcome.fail(format!(
                    "{what}: the error is not an InvalidRequest naming {named}: {e}"
                ));
            }
            Err(e) => {
                outcome.note(format!("{what}: {e}"));
            }
        }
    }
    match ctx
        .runtime
        .bulk_publish(BulkPublishRequest::new(topic.as_str(), Vec::new()))
        .await
    {
        Ok(response) if response.failed_entries.is_empty() => {}
        other => {
            outcome.fail(format!(
                "an empty entry list must be a no-op success, got {other:?}"
            ));
        }
    }
    let checked = after_refusals(&ctx, &topic, subscription, true).await?;
    Ok(outcome.merge(checked))
}

/// Entry ids across their space, each with whether the case makes its entry fail: of
/// every pair that a sidecar folding case, punctuation or length would confuse, one
/// fails and the other does not.
fn entry_ids_across_their_space() -> Vec<(String, bool)> {
    let long = format!("long-{}", "x".repeat(195));
    let mut long_twin = long.clone();
    long_twin.pop();
    long_twin.push('y');
    vec![
        ("e-Case".into(), true),
        ("e-case".into(), false),
        ("e.1".into(), true),
        ("e_1".into(), false),
        ("e-1".into(), false),
        ("e/1".into(), true),
        ("e:1".into(), false),
        ("ключ-鍵".into(), true),
        ("ключ-键".into(), false),
        (long, true),
        (long_twin, false),
        ("k".into(), false),
        ("K".into(), true),
        ("two words".into(), false),
        ("null".into(), true),
        ("0".into(), false),
        ("true".into(), false),
    ]
}

pub(super) async fn entry_id_space(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let failing_possible = ctx.caps.max_message_bytes.is_some();
    let mut entries = Vec::new();
    let mut expected_failed = std::collections::BTreeSet::new();
    for (i, (id, fails)) in entry_ids_across_their_space().into_iter().enumerate() {
        let key = format!("id-{i}");
        let mut entry = match fails && failing_possible {
            true => {
                expected_failed.insert(id.clone());
                oversize(&ctx, &key)?
            }
            false => keyed_entry(&key),
        };
        entry.entry_id = id;
        entries.push(entry);
    }
    let subscription = ctx.subscribe_recorded(&topic).await?;
    let sent: Vec<(String, String)> = entries
        .iter()
        .map(|e| (e.entry_id.clone(), e.metadata[KEY].clone()))
        .collect();
    let mut outcome = Outcome::new();
    let response = match ctx
        .bulk_publish(BulkPublishRequest::new(topic.as_str(), entries))
        .await
    {
        Ok(response) => response,
        Err(e) => {
            outcome.fail(format!(
                "a bulk request whose entry ids are all distinct was refused: {e}"
            ));
            subscription.stop().await;
            return Ok(outcome);
        }
    };
    let reported: std::collections::BTreeSet<String> = response
        .failed_entries
        .iter()
        .map(|f| f.entry_id.clone())
        .collect();
    if reported != expected_failed {
        let unknown: Vec<&String> = reported
            .iter()
            .filter(|id| !sent.iter().any(|(sent, _)| sent == *id))
            .collect();
        let wrongly: Vec<&String> = reported
            .iter()
            .filter(|id| !expected_failed.contains(*id) && !unknown.contains(id))
            .collect();
        let unreported: Vec<&String> = expected_failed
            .iter()
            .filter(|id| !reported.contains(*id))
            .collect();
        outcome.fail(format!(
            "entry ids not reported as sent: failed entries reported as {reported:?}; ids never sent: {unknown:?}; succeeded but reported failed: {wrongly:?}; failed but not reported: {unreported:?}"
        ));
    }
    let delivered: Vec<String> = sent
        .iter()
        .filter(|(id, _)| !expected_failed.contains(id))
        .map(|(_, key)| key.clone())
        .collect();
    ctx.recorder
        .wait_for_keys(&delivered, ctx.delivery_deadline())
        .await;
    subscription.stop().await;
    if !failing_possible {
        outcome.note("the component declares no maximum message size: no entry made to fail, only acceptance and delivery checked");
    }
    outcome.note(format!(
        "{} entry ids sent, {} made to fail: {:?}",
        sent.len(),
        expected_failed.len(),
        expected_failed
    ));
    Ok(outcome.merge(ctx.check(&ctx.criteria())))
}

pub(super) async fn metadata_merge(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let subscription = ctx.subscribe_recorded(&topic).await?;
    let mut overriding = keyed_entry("e-1");
    overriding.metadata.insert("app-b".into(), "entry-b".into());
    let own_map = keyed_entry("e-2");
    let mut no_map = keyed_entry("e-3");
    no_map.metadata.clear();
    let mut req = BulkPublishRequest::new(topic.as_str(), vec![overriding, own_map, no_map]);
    req.metadata.insert("app-a".into(), "request-a".into());
    req.metadata.insert("app-b".into(), "request-b".into());
    // The entry without a map of its own gets its key from the request metadata.
    req.metadata.insert(KEY.into(), "e-3".into());
    let response = ctx
        .bulk_publish(req)
        .await
        .doing("bulk publishing with request metadata")?;
    let keys: Vec<String> = ["e-1", "e-2", "e-3"].map(String::from).to_vec();
    let mut outcome = ctx.conclude(&keys, subscription).await;
    outcome.expect_no_failed_entries(&response);
    let expected = [
        ("e-1", "entry-b"),
        ("e-2", "request-b"),
        ("e-3", "request-b"),
    ];
    for event in ctx.recorder.events() {
        let key = super::key_of(&event).to_string();
        let Some((_, b)) = expected.iter().find(|(k, _)| *k == key) else {
            continue;
        };
        let a_value = event.metadata.get("app-a").map(String::as_str);
        let b_value = event.metadata.get("app-b").map(String::as_str);
        outcome.expect(a_value == Some("request-a") && b_value == Some(*b), || {
            format!(
                "{key}: app-a={a_value:?} app-b={b_value:?}, expected app-a=request-a app-b={b}"
            )
        });
    }
    Ok(outcome)
}

pub(super) async fn keep_order(ctx: CaseContext) -> CaseRun {
    let topic = ctx.new_topic("t").await?;
    const FAILING: usize = 12;
    let mut entries = Vec::new();
    for i in 0..30 {
        let key = format!("e-{i:02}");
        entries.push(if i == FAILING {
            oversize(&ctx, &key)?
        } else {
            keyed_entry(&key)
        });
    }
    let subscription = ctx.subscribe_recorded(&topic).await?;
    let mut req = BulkPublishRequest::new(topic.as_str(), entries);
    req.metadata
        .insert("batchPublishKeepOrder".into(), "true".into());
    let response = ctx
        .bulk_publish(req)
        .await
        .doing("bulk publishing in order")?;
    let before: Vec<String> = (0..FAILING).map(|i| format!("e-{i:02}")).collect();
    ctx.recorder
        .wait_for_keys(&before, ctx.delivery_deadline())
        .await;
    // Later entries must not have been published: give them the time a delivery takes.
    ctx.recorder
        .wait_until(ctx.quiet_window(), |h| {
            (FAILING + 1..30).any(|i| h.delivery_count(&format!("e-{i:02}")) > 0)
        })
        .await;
    subscription.stop().await;
    let mut criteria = ctx.criteria();
    criteria.ordering = Some(ctx.caps.ordering);
    criteria.note_over_reported = false;
    let mut outcome = ctx.check(&criteria);
    let history = ctx.recorder.history();
    for i in FAILING..30 {
        let key = format!("e-{i:02}");
        outcome.expect(response.failed(&key), || {
            format!("{key} (at or after the first failure) was reported published")
        });
        if i > FAILING {
            outcome.expect(history.delivery_count(&key) == 0, || {
                format!("{key} was published after the first failed entry")
            });
        }
    }
    Ok(outcome)
}

pub(super) async fn size_limit(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let subscription = ctx.subscribe_recorded(&topic).await?;
    let entries: Vec<BulkPublishEntry> = (0..10)
        .map(|i| {
            let mut e = keyed_entry(&format!("big-{i}"));
            e.event = vec![b'a' + i as u8; 1000];
            e.metadata.insert("rawPayload".into(), "true".into());
            e
        })
        .collect();
    let mut req = BulkPublishRequest::new(topic.as_str(), entries);
    req.metadata.insert("maxBulkPubBytes".into(), "4000".into());
    let mut outcome = Outcome::new();
    let keys: Vec<String> = (0..10).map(|i| format!("big-{i}")).collect();
    match ctx.bulk_publish(req).await {
        Err(e)
            if e.kind() == ErrorKind::InvalidRequest
                && e.to_string().contains("maxBulkPubBytes") =>
        {
            outcome.note(format!("rejected: {e}"));
        }
        Err(e) => {
            outcome.fail(format!(
                "rejected without naming maxBulkPubBytes as an InvalidRequest: {e}"
            ));
        }
        Ok(response) => {
            outcome.note(format!(
                "accepted (split), {} failed entries",
                response.failed_entries.len()
            ));
            let ok: Vec<String> = keys
                .iter()
                .filter(|k| !response.failed(k))
                .cloned()
                .collect();
            ctx.recorder
                .wait_for_keys(&ok, ctx.delivery_deadline())
                .await;
        }
    }
    let sentinel = ctx.publish_numbered(&topic, "ok", 1).await?;
    ctx.recorder
        .wait_for_keys(&sentinel, ctx.delivery_deadline())
        .await;
    subscription.stop().await;
    let mut criteria = ctx.criteria();
    criteria.note_over_reported = true;
    let checked = ctx.check(&criteria);
    // A rejected request publishes nothing: any delivery of it is a half-publish.
    let history = ctx.recorder.history();
    let half: Vec<&String> = keys
        .iter()
        .filter(|k| history.delivery_count(k) > 0)
        .collect();
    if outcome
        .notes
        .first()
        .is_some_and(|n| n.starts_with("rejected"))
    {
        outcome.expect(half.is_empty(), || {
            format!("the rejected request was half-published: {half:?}")
        });
    }
    let events = ctx.recorder.events();
    for event in events
        .iter()
        .filter(|e| super::key_of(e).starts_with("big-"))
    {
        outcome.expect(event.data.len() == 1000, || {
            format!(
                "{} truncated to {} bytes",
                super::key_of(event),
                event.data.len()
            )
        });
    }
    Ok(outcome.merge(checked))
}
