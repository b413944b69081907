//! Runs a case against a runtime: capability gate, time bound, panic capture,
//! retry-to-detect-flakiness, and the verdict with its evidence.

use crate::catalogue::{Case, Injects, Lane};
use crate::context::CaseContext;
use crate::outcome::{CaseError, CaseRun, Outcome};
use crate::provision::{Broker, HealthWatch};
use crate::replay::{self, AttemptHeader, SavedAttempt, Verdict};
use crate::row_runtime::{
    factory_for, factory_of, runtime_through, ComponentFactory, RowRuntime, RuntimeWrapper,
};
use crate::spans::LogCapture;
use futures::FutureExt;
use pubsub_components::config::ComponentDefinition;
use pubsub_components::registry::Resolved;
use pubsub_components::runtime::{
    BulkPublishEntry, BulkPublishRequest, PublishRequest, Runtime, Subscription,
};
use pubsub_components::{
    Component, ConsumerSpec, ErrorKind, Feature, MessageId, PubSubError, Support, TopicSelector,
};
use pubsub_reports::{CaseResult, Evidence, Mode, Status};
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::instrument::WithSubscriber;

/// How cases are run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Extra runs after a FAIL; a later PASS makes the cell FLAKY.
    pub retries: u32,
    /// The seed for generated inputs; `None` derives one from the case id.
    pub seed: Option<u64>,
    /// Where every attempt's history is saved (a report directory), and as which
    /// component and run; `None` saves nothing.
    pub save: Option<SaveTo>,
    /// Runs the cases of per-group operations beside a bystander group (see
    /// [`crate::bystander`]).
    pub bystander: bool,
}

/// Where a run's histories go (see [`crate::replay`]).
#[derive(Debug, Clone)]
pub struct SaveTo {
    /// The report directory.
    pub dir: std::path::PathBuf,
    /// The component's name (its folder under `histories/`).
    pub component: String,
    /// Which run of the cell this is (`certify --repeat`), from 1.
    pub run: u32,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            retries: 1,
            seed: None,
            save: None,
            bystander: true,
        }
    }
}

impl RunOptions {
    /// One attempt, no retry after a FAIL; otherwise the defaults.
    pub fn once() -> Self {
        RunOptions {
            retries: 0,
            ..RunOptions::default()
        }
    }
}

/// A stable seed per case id, so generated inputs are the same on every run.
pub fn default_seed(case_id: &str) -> u64 {
    case_id.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
    })
}

/// What the runner knows of the broker behind a runtime.
#[derive(Clone, Default)]
pub struct CaseEnvironment {
    /// The provisioned broker: watched, so that a broker dying makes the cell ERROR
    /// with the cause at once; checked after a failure, so that a FAIL is the
    /// component's; and faulted by the cases that inject faults. `None` in process.
    pub broker: Option<Arc<dyn Broker>>,
    /// The component's definition (for its expectations file).
    pub definition: Option<Arc<ComponentDefinition>>,
    /// Builds the component again connected to another endpoint (a fault proxy in
    /// front of the broker); `None` when it cannot be.
    pub connect: Option<ComponentFactory>,
    /// Turns a component built again (behind a fault proxy, after a fault) into a
    /// runtime of the row under test: through the row's sidecars for a row over
    /// HTTP; `None` in process.
    pub wrap: Option<RuntimeWrapper>,
}

impl CaseEnvironment {
    /// The environment of a provisioned broker.
    pub fn of(broker: Option<Arc<dyn Broker>>) -> Self {
        CaseEnvironment {
            broker,
            definition: None,
            connect: None,
            wrap: None,
        }
    }

    /// The environment of a broker provisioned for `definition`.
    pub fn provisioned(broker: Option<Arc<dyn Broker>>, definition: &ComponentDefinition) -> Self {
        CaseEnvironment {
            broker,
            definition: Some(Arc::new(definition.clone())),
            connect: Some(factory_of(definition)),
            wrap: None,
        }
    }

    /// The environment of a resolved component on a provisioned broker.
    pub fn of_component(broker: Option<Arc<dyn Broker>>, component: &Resolved) -> Self {
        CaseEnvironment {
            broker,
            definition: Some(Arc::new(component.definition().clone())),
            connect: Some(factory_for(component)),
            wrap: None,
        }
    }

    /// The same environment, whose components become runtimes through `wrap`.
    pub fn wrapped(mut self, wrap: Option<RuntimeWrapper>) -> Self {
        self.wrap = wrap;
        self
    }

    /// The runtime of this environment's row for `component`, named `name`.
    pub async fn runtime_for(
        &self,
        name: String,
        component: Arc<dyn Component>,
    ) -> Result<RowRuntime, String> {
        runtime_through(self.wrap.as_ref(), name, component).await
    }

    /// Why the faults `case` injects cannot be injected here, if they cannot.
    fn cannot_inject(&self, case: &Case) -> Option<String> {
        let needs: Vec<&str> = case.injects.iter().map(|i| i.name()).collect();
        if needs.is_empty() {
            return None;
        }
        let needs = needs.join(", ");
        let Some(broker) = &self.broker else {
            return Some(format!(
                "this case injects faults ({needs}); the component runs in process, so there is no broker to fault"
            ));
        };
        if !broker.can_fault() {
            return Some(format!(
                "this case injects faults ({needs}); {} is not controlled by the suite: use local-process or container provisioning",
                broker.describe()
            ));
        }
        if case.injects.contains(&Injects::Network) && self.connect.is_none() {
            return Some(format!(
                "this case cuts the network ({needs}) and builds the component again behind a fault proxy, which needs a way to build it (a definition, or a factory given to the harness)"
            ));
        }
        None
    }

    /// The broker's health (always up in process).
    pub fn health(&self) -> HealthWatch {
        self.broker
            .as_ref()
            .map_or_else(HealthWatch::always_up, |b| b.health())
    }

    /// Why the broker, not the component, explains a failure: it went away (reported
    /// within a second) or does not accept a connection now. `Ok` carries what was
    /// checked, for the evidence of a FAIL.
    async fn attribute_failure(&self) -> Result<String, String> {
        let Some(broker) = &self.broker else {
            return Ok("the component runs in process; no broker to check".into());
        };
        if let Some(reason) = self.health().gone_within(Duration::from_millis(1000)).await {
            return Err(reason);
        }
        if !matches!(broker.health().current(), crate::provision::Health::Up) {
            return Ok(format!(
                "{} was under a fault the case injected",
                broker.describe()
            ));
        }
        match broker.answers(Duration::from_secs(2)).await {
            Ok(()) => Ok(format!(
                "after the failure the harness checked the broker: {} was up and accepted a connection, so the failure is the component's",
                broker.describe()
            )),
            Err(problem) => {
                // The watch knows why (an exit, a stop) when it is told in time.
                if let Some(reason) = self.health().gone_within(Duration::from_secs(3)).await {
                    return Err(reason);
                }
                Err(format!(
                    "{} does not answer: {problem}; its log tail: {}",
                    broker.describe(),
                    broker.log_tail()
                ))
            }
        }
    }
}

enum Attempt {
    /// The body ran to an outcome; its verdict is judged from the history.
    Judged(Outcome),
    Errored(String),
    /// The case cannot provoke what it tests on this component (UNSUPPORTED).
    CannotProvoke(String),
}

/// The cell of `case` before it has run: ERROR, no attempt, no evidence; the runner
/// fills it in, and a cell left so says the case could not finish.
pub fn unfinished_cell(case: &Case, bound_ms: u64) -> CaseResult {
    CaseResult {
        id: case.id.to_string(),
        family: case.family().to_string(),
        level: case.level.name().to_string(),
        feature: (!case.requires.is_empty() || !case.injects.is_empty())
            .then(|| case.requirement()),
        must: case.must.to_string(),
        status: Status::Error,
        mode: None,
        duration_ms: 0,
        bound_ms,
        attempts: 0,
        expected_failure: None,
        runs: None,
        evidence: Evidence::default(),
    }
}

/// Runs one case and returns its cell (no broker watched: the component is in
/// process, or the caller watches nothing).
pub async fn run_case(case: &Case, runtime: &Runtime, options: &RunOptions) -> CaseResult {
    run_case_in(case, runtime, options, &CaseEnvironment::default()).await
}

/// Runs one case against a runtime whose broker is `environment`'s, and returns its
/// cell: ERROR at once when the broker is gone before or during the case.
pub async fn run_case_in(
    case: &Case,
    runtime: &Runtime,
    options: &RunOptions,
    environment: &CaseEnvironment,
) -> CaseResult {
    let started = Instant::now();
    let bound = case.bound.for_caps(runtime.capabilities());
    let seed = options.seed.unwrap_or_else(|| default_seed(case.id));
    let mut result = unfinished_cell(case, bound.as_millis() as u64);
    if let Some(reason) = environment.cannot_inject(case) {
        result.status = Status::NotProvisioned;
        result.evidence.notes.push(reason);
        return result;
    }
    if let Some(reason) = environment.health().down_reason() {
        result.evidence.notes.push(format!(
            "not run: the broker is gone ({reason}); this says nothing about the component"
        ));
        return result;
    }
    let modes: Vec<(Feature, Support)> = case
        .requires
        .iter()
        .map(|f| (*f, runtime.mode(*f)))
        .collect();
    let unsupported = modes
        .iter()
        .find(|(_, m)| *m == Support::Unsupported)
        .map(|(f, _)| *f);
    let emulated = modes.iter().any(|(_, m)| *m == Support::Emulated);
    let mode = match unsupported {
        Some(feature) => {
            result.attempts = 1;
            match probe_unsupported(feature, runtime, case.id).await {
                Ok(note) => {
                    result.status = Status::Unsupported;
                    result.evidence.notes.push(note);
                }
                Err(finding) => {
                    result.status = Status::Fail;
                    result.evidence.findings.push(finding);
                }
            }
            result.duration_ms = started.elapsed().as_millis() as u64;
            return result;
        }
        None if emulated => Mode::Emulated,
        None => Mode::Native,
    };

    let mut first_failure: Option<Outcome> = None;
    let mut verdicts: Vec<Verdict> = Vec::new();
    let mut failures = 0;
    let mut busy = 0;
    let mut busy_notes: Vec<String> = Vec::new();
    loop {
        let number = verdicts.len() as u32 + 1;
        result.attempts = number;
        let (attempt, history) =
            run_once(case, runtime, bound, seed, environment, options.bystander).await;
        let precision = runtime.capabilities().delay_precision;
        let mut header = AttemptHeader {
            component: runtime.name().to_string(),
            case: case.id.to_string(),
            run: options.save.as_ref().map_or(1, |s| s.run),
            attempt: number,
            verdict: Verdict::Error,
            body_findings: Vec::new(),
            body_timing: Vec::new(),
            precision_ms: precision.as_millis() as u64,
            decided_by: None,
        };
        let verdict = match attempt {
            Attempt::Judged(mut outcome) => {
                header.body_findings = replay::body_findings(&outcome.findings, &history);
                header.body_timing = replay::body_findings(&outcome.timing, &history);
                let saved = SavedAttempt {
                    header: header.clone(),
                    history: history.clone(),
                };
                let judged = replay::judge(&saved);
                if let Some(load) = &judged.load {
                    outcome
                        .notes
                        .push(format!("machine while the case ran: {}", load.describe()));
                }
                header.verdict = judged.verdict;
                match judged.verdict {
                    Verdict::Pass => {
                        result.mode = Some(mode);
                        match first_failure.take() {
                            None => {
                                result.status = Status::Pass;
                                result.evidence = evidence(outcome);
                            }
                            Some(failure) => {
                                result.status = Status::Flaky;
                                result.evidence = evidence(failure);
                                result.evidence.notes.push(format!(
                                    "passed on attempt {number}; the findings are from the first failing attempt"
                                ));
                            }
                        }
                    }
                    Verdict::Busy => {
                        let load = judged
                            .load
                            .as_ref()
                            .map(|l| l.describe())
                            .unwrap_or_default();
                        busy_notes.push(format!(
                            "attempt {number} could not be judged: only timing findings ({}), made while the machine was too busy to judge timing: {load}",
                            outcome.findings.join("; ")
                        ));
                        if first_failure.is_none() {
                            let p99 = judged
                                .load
                                .as_ref()
                                .map_or(0, |l| l.control_p99.as_millis());
                            result.status = Status::Error;
                            result.evidence = evidence(outcome);
                            let seen = std::mem::take(&mut result.evidence.findings);
                            result.evidence.notes.insert(
                                0,
                                format!(
                                    "machine too busy to judge timing: control latency p99 {p99} ms (the declared delay precision is {precision:?}); what the case saw is below, it says nothing about the component: {}",
                                    seen.join("; ")
                                ),
                            );
                        }
                    }
                    Verdict::Fail => match environment.attribute_failure().await {
                        Ok(checked) => {
                            outcome.notes.push(checked);
                            result.status = Status::Fail;
                            result.evidence = evidence(outcome.clone());
                            first_failure.get_or_insert(outcome);
                        }
                        Err(reason) => {
                            header.verdict = Verdict::Error;
                            header.decided_by = Some(format!("the broker failed: {reason}"));
                            result.status = Status::Error;
                            result.evidence = evidence(outcome);
                            result.evidence.notes.insert(
                                0,
                                format!(
                                    "the broker failed, not the component: {reason}; this says nothing about the component, and the findings below are only what the case saw"
                                ),
                            );
                        }
                    },
                    Verdict::Error | Verdict::CannotProvoke => {}
                }
                header.verdict
            }
            Attempt::CannotProvoke(reason) => {
                header.verdict = Verdict::CannotProvoke;
                header.decided_by = Some(reason.clone());
                result.status = Status::Unsupported;
                result.evidence = Evidence {
                    notes: vec![format!("not applicable as declared: {reason}")],
                    ..Evidence::default()
                };
                Verdict::CannotProvoke
            }
            Attempt::Errored(message) => {
                header.decided_by = Some(message.clone());
                result.status = Status::Error;
                result.evidence = Evidence {
                    notes: vec![message],
                    ..Evidence::default()
                };
                Verdict::Error
            }
        };
        if verdict == Verdict::Fail && !result.evidence.findings.is_empty() {
            // The excerpt keeps the records of the keys the findings name.
            result.evidence.history =
                history.excerpt_naming(EXCERPT_LINES, &result.evidence.findings);
        }
        if let Some(save) = &options.save {
            if history.evidence_len() > EXCERPT_LINES {
                let path = replay::history_path(Path::new(""), &save.component, case.id);
                result.evidence.notes.push(format!(
                    "the history excerpt shows {EXCERPT_LINES} of {} records; the whole history is {} in the report directory",
                    history.evidence_len(),
                    path.display()
                ));
            }
            let saved = SavedAttempt {
                header: AttemptHeader {
                    component: save.component.clone(),
                    ..header
                },
                history,
            };
            if let Err(e) = replay::save(&save.dir, &saved) {
                result
                    .evidence
                    .notes
                    .push(format!("the history could not be saved: {e:#}"));
            }
        }
        verdicts.push(verdict);
        let again = match verdict {
            Verdict::Pass | Verdict::Error | Verdict::CannotProvoke => false,
            Verdict::Fail => {
                failures += 1;
                failures <= options.retries && result.status == Status::Fail
            }
            Verdict::Busy => {
                busy += 1;
                first_failure.is_none() && busy <= replay::BUSY_RERUNS
            }
        };
        if !again {
            break;
        }
    }
    debug_assert_eq!(replay::cell_status(&verdicts), result.status);
    result.evidence.notes.extend(busy_notes);
    result.evidence.notes.push(format!(
        "seed {seed}; bound {bound:?} ({})",
        case.bound.rule
    ));
    result.duration_ms = started.elapsed().as_millis() as u64;
    result
}

/// How many lines of a history a cell's evidence shows.
const EXCERPT_LINES: usize = 40;

fn evidence(outcome: Outcome) -> Evidence {
    Evidence {
        findings: outcome.findings,
        warnings: outcome.warnings,
        notes: outcome.notes,
        history: outcome.history,
        logs: outcome.logs,
        timeline: outcome.timeline,
    }
}

/// Runs the case body once (with the timing probe beside it for a timed case) and
/// gives what came of it and the history it recorded.
async fn run_once(
    case: &Case,
    runtime: &Runtime,
    bound: Duration,
    seed: u64,
    environment: &CaseEnvironment,
    bystander: bool,
) -> (Attempt, crate::history::History) {
    let mut context = CaseContext::new(runtime.clone(), case.id, bound, seed);
    context.broker = environment.broker.clone();
    context.connect = environment.connect.clone();
    context.wrap = environment.wrap.clone();
    context.partitions = case.partitions;
    // Only where a topic can have several groups.
    let bystander = (bystander && case.bystander && runtime.capabilities().fan_out)
        .then(|| Arc::new(crate::bystander::Bystander::new(context.group("bystander"))));
    context.bystander = bystander.clone();
    let recorder = context.recorder.clone();
    let ack_time = context.ack_time();
    let probe = if case.lane == Lane::Timed {
        Some(
            crate::load::Probe::start(
                runtime,
                &recorder,
                context.topic("ctl"),
                context.group("ctl"),
            )
            .await,
        )
    } else {
        None
    };
    let logs = LogCapture::default();
    let body = AssertUnwindSafe((case.run)(context))
        .catch_unwind()
        .with_subscriber(logs.dispatch());
    let mut health = environment.health();
    let attempt = tokio::select! {
        biased;
        reason = health.gone() => Attempt::Errored(format!(
            "the broker died during the case: {reason}; this says nothing about the component"
        )),
        attempt = run_body(case, bound, body, &recorder, &ack_time) => attempt,
    };
    if let Some(probe) = probe {
        probe.stop().await;
    }
    let attempt = match attempt {
        Attempt::Judged(mut o) => {
            o.logs = logs.lines();
            if let Some(bystander) = bystander {
                let caps = runtime.capabilities();
                let within = caps.delivery_bound + caps.redelivery_bound;
                let seen = bystander
                    .conclude(runtime, &recorder.history(), caps.delivery, within)
                    .await;
                o = o.merge(seen);
            }
            Attempt::Judged(o)
        }
        other => other,
    };
    (attempt, recorder.history())
}

async fn run_body(
    case: &Case,
    bound: Duration,
    body: impl std::future::Future<Output = std::thread::Result<CaseRun>>,
    recorder: &crate::history::Recorder,
    ack_time: &crate::context::AckTime,
) -> Attempt {
    // A little slack past the bound lets a case report its own findings at its deadline;
    // the bound moves back by the time the case spent in publish and subscribe calls.
    let started = tokio::time::Instant::now();
    let limit = || started + bound + ack_time.extension() + Duration::from_millis(500);
    tokio::pin!(body);
    let finished = loop {
        tokio::select! {
            done = &mut body => break Some(done),
            _ = tokio::time::sleep_until(limit()) => {
                if tokio::time::Instant::now() >= limit() {
                    break None;
                }
            }
        }
    };
    match finished.ok_or(()) {
        Err(()) => {
            let mut outcome = Outcome::new().with_history(&recorder.history());
            let finding = format!(
                "did not finish within its bound of {bound:?} ({}), plus the {:?} it spent waiting for publishes and subscriptions to be acknowledged",
                case.bound.rule,
                ack_time.extension()
            );
            // A timed case overrunning its bound is a timing finding.
            if case.lane == Lane::Timed {
                outcome.fail_timing(finding);
            } else {
                outcome.fail(finding);
            }
            Attempt::Judged(outcome)
        }
        Ok(Err(panic)) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            Attempt::Errored(format!("the case panicked (a suite defect): {message}"))
        }
        Ok(Ok(Ok(outcome))) => Attempt::Judged(outcome),
        Ok(Ok(Err(CaseError::Component(message)))) => {
            let mut outcome = Outcome::new().with_history(&recorder.history());
            outcome.fail(message);
            Attempt::Judged(outcome)
        }
        Ok(Ok(Err(CaseError::Harness(message)))) => Attempt::Errored(message),
        Ok(Ok(Err(CaseError::CannotProvoke(message)))) => Attempt::CannotProvoke(message),
    }
}

/// Checks that using a feature declared unsupported gives a clear `Unsupported` error.
async fn probe_unsupported(
    feature: Feature,
    runtime: &Runtime,
    case_id: &str,
) -> Result<String, String> {
    let names = CaseContext::new(runtime.clone(), case_id, Duration::from_secs(5), 0);
    let topic = names.topic("probe");
    let group = names.group("probe");
    let outcome: Result<(), PubSubError> =
        match feature {
            Feature::Ordering => return Ok(
                "declared ordering: none; ordering has no API to refuse, so no ordering is checked"
                    .into(),
            ),
            Feature::BulkPublish => runtime
                .bulk_publish(BulkPublishRequest {
                    topic,
                    entries: vec![BulkPublishEntry {
                        entry_id: "1".into(),
                        event: b"x".to_vec(),
                        ..Default::default()
                    }],
                    ..Default::default()
                })
                .await
                .map(drop),
            Feature::BulkSubscribe => {
                let mut subscription = Subscription::new(topic, group);
                subscription.bulk = Some(Default::default());
                let handler = names.recorder.bulk("probe", |_| None, |_| None);
                runtime.subscribe(subscription, handler).await.map(drop)
            }
            Feature::Ttl => runtime
                .publish(PublishRequest::new(topic, "x").with_metadata("ttlInSeconds", "60"))
                .await
                .map(drop),
            Feature::DelayedDelivery => runtime
                .publish(PublishRequest::new(topic, "x").with_metadata("deliverAfter", "1s"))
                .await
                .map(drop),
            Feature::FanOut => {
                let first = runtime
                    .subscribe(
                        Subscription::new(topic.clone(), format!("{group}-a")),
                        names.recorder.handler("probe-a"),
                    )
                    .await;
                let first = first.map_err(|e| {
                    format!(
                    "fan-out is declared unsupported, but even one group on a topic failed: {e}"
                )
                })?;
                let second = runtime
                    .subscribe(
                        Subscription::new(topic.clone(), format!("{group}-b")),
                        names.recorder.handler("probe-b"),
                    )
                    .await;
                first.stop().await;
                match second {
                    Ok(handle) => {
                        handle.stop().await;
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }
            Feature::ReceiverDelay => {
                let mut subscription = Subscription::new(topic.clone(), group);
                subscription.receiver_delay = Some(Duration::from_secs(1));
                runtime
                    .subscribe(subscription, names.recorder.handler("probe"))
                    .await
                    .map(drop)
            }
            Feature::DeadLetter => {
                let mut subscription = Subscription::new(topic.clone(), group);
                subscription.dead_letter_topic = Some(format!("{topic}-dlq"));
                runtime
                    .subscribe(subscription, names.recorder.handler("probe"))
                    .await
                    .map(drop)
            }
            Feature::MultiTopic => {
                let selector = TopicSelector::List(vec![topic.clone(), format!("{topic}-b")]);
                runtime
                    .subscribe(
                        Subscription::selecting(selector, group),
                        names.recorder.handler("probe"),
                    )
                    .await
                    .map(drop)
            }
            Feature::Seek => match runtime
                .component()
                .consumer(ConsumerSpec::new(
                    TopicSelector::Single(topic.clone()),
                    group,
                ))
                .await
            {
                Ok(consumer) => {
                    let result = consumer.seek(&MessageId::new(topic, None, 0)).await;
                    let _ = consumer.close().await;
                    result
                }
                Err(e) => Err(e),
            },
            Feature::Partitions => runtime.component().update_partitions(&topic, 2).await,
        };
    match outcome {
        Err(e) if e.kind() == ErrorKind::Unsupported => {
            Ok(format!("declared unsupported; using it is refused clearly: {e}"))
        }
        Err(e) => Err(format!(
            "{} is declared unsupported, but using it failed with a {:?} error instead of Unsupported: {e}",
            feature.name(),
            e.kind()
        )),
        Ok(()) => Err(format!(
            "{} is declared unsupported, but using it was accepted without an error",
            feature.name()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pubsub_components::memory::MemoryComponent;
    use std::sync::Arc;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cell_carries_the_logs_of_its_run() {
        let runtime = Runtime::new("memory", Arc::new(MemoryComponent::default()));
        let case = crate::catalogue::find("retry.exhausted-without-dead-letter").unwrap();
        let result = run_case(case, &runtime, &RunOptions::once()).await;
        assert_eq!(result.status, Status::Pass);
        assert!(
            result
                .evidence
                .logs
                .iter()
                .any(|l| l.contains("dropping message") && l.contains("maxDeliveries")),
            "{:?}",
            result.evidence.logs
        );
    }

    #[tokio::test]
    async fn an_unsupported_feature_is_probed_not_passed() {
        let runtime = Runtime::new("redis-less", Arc::new(MemoryComponent::default()));
        // The in-memory component supports everything; a declared-unsupported feature is
        // exercised through the probe directly.
        let refused = probe_unsupported(Feature::Partitions, &runtime, "partitions.watch").await;
        assert!(
            refused.is_err(),
            "the memory component supports partitions, so the probe must not report a refusal"
        );
    }
}
