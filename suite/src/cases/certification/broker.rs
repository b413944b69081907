//! certification.* under broker faults: a broker killed and restarted or paused
//! and thawed loses nothing acknowledged and brings nothing exhausted back.

use super::{
    acknowledged, delivered_to, listed, numbered, publish_bounded, publish_until_recovered,
    subscribe_until_recovered, FAULT_LENGTH,
};
use crate::context::CaseContext;
use crate::fault_injection::Faults;
use crate::outcome::{CaseRun, Outcome};
use pubsub_components::runtime::Subscription;
use std::time::Duration;
use tokio::time::Instant;

pub(in crate::cases) async fn broker_restart(ctx: CaseContext) -> CaseRun {
    let faults = Faults::of(&ctx)?;
    let topic = ctx.topic("t");
    let backlog = Subscription::new(topic.clone(), ctx.group("backlog"));
    ctx.create_group(&backlog).await?;
    let live = ctx.subscribe_recorded(&topic).await?;
    let before = ctx.publish_numbered(&topic, "before", 20).await?;
    ctx.recorder
        .wait_for_keys(&before, ctx.delivery_deadline())
        .await;

    faults.kill_broker().await?;
    for key in numbered("during", 3) {
        publish_bounded(&ctx, &ctx.runtime, &topic, &key, Duration::from_millis(500)).await;
    }
    let restart = faults.restart_broker().await?;
    let back = Instant::now();
    let recovery_deadline = ctx.within(ctx.caps.recovery_bound);
    let mut outcome = Outcome::new();
    outcome.note(format!(
        "{} killed and restarted; the restart took {} ms",
        faults.broker().describe(),
        restart.as_millis()
    ));
    let Some(recovered) =
        publish_until_recovered(&ctx, &ctx.runtime, &topic, "after-0", recovery_deadline).await
    else {
        live.stop().await;
        outcome.fail(format!(
            "the publisher did not recover: no publish succeeded within the declared recovery bound of {:?} after the broker was back",
            ctx.caps.recovery_bound
        ));
        return Ok(outcome.with_history(&ctx.recorder.history()));
    };
    outcome.note(format!(
        "the publisher recovered {} ms after the broker was back",
        (recovered - back).as_millis()
    ));
    let mut after = Vec::new();
    if ctx.caps.durable {
        // The broker kept the group's subscription: what it acknowledged since it is
        // back must reach the running subscriber.
        after.push("after-0".to_string());
    } else {
        // A broker that keeps nothing across a crash forgets the subscription too:
        // only what is published once the subscriber has subscribed again must
        // arrive. Probes find that moment.
        let mut probes = 0;
        let subscribed_again = loop {
            probes += 1;
            let probe = format!("probe-{probes}");
            publish_bounded(&ctx, &ctx.runtime, &topic, &probe, ctx.caps.delivery_bound).await;
            let seen = ctx
                .recorder
                .wait_until(ctx.within(Duration::from_millis(200)), |h| {
                    delivered_to(h, "s1")
                        .iter()
                        .any(|k| k.starts_with("probe-"))
                })
                .await;
            if seen || Instant::now() >= recovery_deadline {
                break seen;
            }
        };
        if subscribed_again {
            outcome.note(format!(
                "declared not durable: the subscriber subscribed again {} ms after the broker was back ({probes} probes; what was published before that is not required)",
                back.elapsed().as_millis()
            ));
        } else {
            live.stop().await;
            outcome.fail(format!(
                "the subscriber did not recover: no probe published after the restart reached it within the declared recovery bound of {:?}",
                ctx.caps.recovery_bound
            ));
            return Ok(outcome.with_history(&ctx.recorder.history()));
        }
    }
    for key in numbered("after", 20).into_iter().skip(1) {
        if publish_bounded(&ctx, &ctx.runtime, &topic, &key, ctx.caps.delivery_bound).await {
            after.push(key);
        }
    }
    let subscriber_deadline = ctx.within(ctx.caps.recovery_bound + ctx.caps.delivery_bound);
    let live_recovered = ctx
        .recorder
        .wait_for_keys(&after, subscriber_deadline)
        .await;
    outcome.note(format!(
        "the running subscriber {} ms after the broker was back",
        if live_recovered {
            format!("had every later message {}", back.elapsed().as_millis())
        } else {
            "still missed messages".to_string()
        }
    ));
    live.stop().await;
    let history = ctx.recorder.history();
    let got = delivered_to(&history, "s1");
    let acked = acknowledged(&history);
    let lied: Vec<&String> = acked
        .iter()
        .filter(|k| k.starts_with("during-") && !got.contains(*k))
        .collect();
    outcome.expect(lied.is_empty(), || {
        format!(
            "lost: {} publishes reported successful while the broker was down never arrived: {}",
            lied.len(),
            listed(&lied)
        )
    });
    let missed: Vec<&String> = after.iter().filter(|k| !got.contains(*k)).collect();
    outcome.expect(missed.is_empty(), || {
        format!(
            "the subscriber did not recover: {} messages acknowledged after the restart never reached it within the recovery and delivery bounds: {}",
            missed.len(),
            listed(&missed)
        )
    });

    // The group that had no member during the crash: what it stored must survive.
    let stored = subscribe_until_recovered(
        &ctx,
        || backlog.clone(),
        || ctx.recorder.handler("s2"),
        ctx.within(ctx.caps.recovery_bound),
    )
    .await?;
    ctx.recorder
        .wait_until(ctx.within(ctx.caps.delivery_bound), |h| {
            let got = delivered_to(h, "s2");
            before.iter().all(|k| got.contains(k))
        })
        .await;
    stored.stop().await;
    let got = delivered_to(&ctx.recorder.history(), "s2");
    let lost: Vec<&String> = before.iter().filter(|k| !got.contains(*k)).collect();
    if ctx.caps.durable {
        outcome.expect(lost.is_empty(), || {
            format!(
                "lost across the restart: {} messages acknowledged before the crash, stored for a group with no member, never came back (the component declares the broker durable): {}",
                lost.len(),
                listed(&lost)
            )
        });
    } else {
        outcome.note(format!(
            "declared not durable: {} of {} messages stored before the crash came back (not required)",
            before.len() - lost.len(),
            before.len()
        ));
    }
    Ok(outcome.with_history(&ctx.recorder.history()))
}

pub(in crate::cases) async fn broker_pause(ctx: CaseContext) -> CaseRun {
    let faults = Faults::of(&ctx)?;
    let topic = ctx.topic("t");
    let handle = ctx.subscribe_recorded(&topic).await?;
    ctx.publish_numbered(&topic, "before", 10).await?;
    faults.pause_broker().await?;
    let during = async {
        for key in numbered("during", 5) {
            publish_bounded(&ctx, &ctx.runtime, &topic, &key, FAULT_LENGTH * 2).await;
        }
    };
    let thaw = async {
        tokio::time::sleep(FAULT_LENGTH).await;
        faults.resume_broker().await
    };
    let ((), resumed) = tokio::join!(during, thaw);
    resumed?;
    let back = Instant::now();
    let mut outcome = Outcome::new();
    let recovered = publish_until_recovered(
        &ctx,
        &ctx.runtime,
        &topic,
        "after-0",
        ctx.within(ctx.caps.recovery_bound),
    )
    .await;
    match recovered {
        Some(at) => {
            outcome.note(format!(
                "publishing worked again {} ms after the broker thawed",
                (at - back).as_millis()
            ));
            for key in numbered("after", 10).into_iter().skip(1) {
                publish_bounded(&ctx, &ctx.runtime, &topic, &key, ctx.caps.delivery_bound).await;
            }
        }
        None => {
            outcome.fail(format!(
                "the publisher did not recover within the declared recovery bound of {:?} after the broker thawed",
                ctx.caps.recovery_bound
            ));
        }
    }
    let expected: Vec<String> = acknowledged(&ctx.recorder.history()).into_iter().collect();
    ctx.recorder
        .wait_for_keys(
            &expected,
            ctx.within(ctx.caps.recovery_bound + ctx.caps.delivery_bound),
        )
        .await;
    handle.stop().await;
    Ok(outcome.merge(ctx.check(&ctx.criteria())))
}
