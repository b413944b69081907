//! How `certify` runs a component's cases: the shared lane with the others, the timed
//! lane after it, then the exclusive lane one case at a time (a backlog's turn shared
//! by the whole run), each case repeated and combined as the options say.

use super::controlled::{restart, Controlled};
use super::{CertifyOptions, Progress};
use crate::catalogue::{Case, Lane};
use crate::expectations::Expectations;
use crate::provision::{self, Broker, ProvisionKind};
use crate::row_runtime::{RowRuntime, RuntimeWrapper};
use crate::runner::{run_case_in, CaseEnvironment, RunOptions};
use pubsub_components::registry::Resolved;
use pubsub_components::runtime::Runtime;
use pubsub_reports::{CaseResult, Status};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

impl LaneState {
    /// Runs the next cases on `runtime`, retiring the one built before it.
    pub(super) async fn replace(&mut self, runtime: RowRuntime) {
        self.runtime = runtime.runtime.clone();
        if let Some(old) = self.built.replace(runtime) {
            old.retire().await;
        }
    }
}

/// The runtime the next case of a component runs on: replaced after a broker
/// restart or a certification case.
pub(super) struct LaneState {
    pub(super) runtime: Runtime,
    /// The runtime built in the run for `runtime` (after a fault case or a restart),
    /// retired when replaced; `None` for the one the run was given.
    pub(super) built: Option<RowRuntime>,
    /// Why the broker was restarted (`--restart-broker`), for the later cells.
    pub(super) restarted_after: Option<String>,
}

/// One component's run: what every case of it shares.
pub(super) struct ComponentRun {
    pub(super) component: Resolved,
    pub(super) broker_version: Option<String>,
    pub(super) broker: Option<Arc<dyn Broker>>,
    pub(super) environment: CaseEnvironment,
    pub(super) expectations: Expectations,
    pub(super) options: CertifyOptions,
    pub(super) progress: Progress,
    pub(super) state: tokio::sync::Mutex<LaneState>,
    pub(super) done: AtomicUsize,
    pub(super) total: usize,
    /// Why case tasks stopped without a cell (a suite defect).
    pub(super) panics: tokio::sync::Mutex<Vec<String>>,
}

impl ComponentRun {
    /// The runtime for the next case; a dead broker is restarted first when the run
    /// asks for it.
    pub(super) async fn next_runtime(&self) -> (Runtime, Option<String>) {
        let mut state = self.state.lock().await;
        if let (true, Some(broker)) = (self.options.restart_broker, &self.broker) {
            if let Some(reason) = broker.health().down_reason() {
                let name = &self.component.definition().name;
                (self.progress)(
                    name,
                    &format!("{name}: the broker died ({reason}); restarting it"),
                );
                let rebuilt = match restart(&self.component, broker.as_ref()).await {
                    Ok(component) => self.environment.runtime_for(name.clone(), component).await,
                    Err(e) => Err(e),
                };
                match rebuilt {
                    Ok(runtime) => {
                        state.replace(runtime).await;
                        state.restarted_after = Some(reason);
                    }
                    Err(e) => (self.progress)(name, &format!("{name}: {e}")),
                }
            }
        }
        (state.runtime.clone(), state.restarted_after.clone())
    }

    /// Runs one case on the run's broker, as many times as the run repeats cases.
    pub(super) async fn run(&self, case: &'static Case) -> CaseResult {
        let repeat = self.options.repeat.max(1);
        let mut results = Vec::new();
        for run in 1..=repeat {
            results.push(self.run_once(case, run).await);
        }
        combine_runs(results)
    }

    /// Runs one case once on the run's broker.
    pub(super) async fn run_once(&self, case: &'static Case, run_number: u32) -> CaseResult {
        let (runtime, restarted_after) = self.next_runtime().await;
        // Over the wire, the sidecar and the app run in this process beside the case:
        // such cases share one run-wide allowance (timed ones mostly wait).
        let _wire_slot = if runtime.is_remote() && case.lane != Lane::Timed {
            Some(
                WIRE_CASES
                    .acquire()
                    .await
                    .expect("the wire semaphore is never closed"),
            )
        } else {
            None
        };
        let run = run_options_for(
            &self.options,
            &self.expectations,
            case,
            self.broker_version.as_deref(),
            &self.component.definition().name,
            run_number,
        );
        let mut result = run_case_in(case, &runtime, &run, &self.environment).await;
        // Certification cases may fault the broker: the next case gets a fresh
        // component, so that a component that does not recover fails only there.
        if case.lane.is_exclusive() {
            if let (Some(broker), None) = (&self.broker, self.environment.health().down_reason()) {
                let rebuilt = match self.component.build(Some(&broker.endpoint())).await {
                    Ok(component) => {
                        self.environment
                            .runtime_for(self.component.definition().name.clone(), component)
                            .await
                    }
                    Err(e) => Err(e.to_string()),
                };
                match rebuilt {
                    Ok(runtime) => self.state.lock().await.replace(runtime).await,
                    Err(e) => result.evidence.notes.push(format!(
                        "rebuilding the component after this case failed: {e}"
                    )),
                }
            }
        }
        if let Some(version) = &self.broker_version {
            self.expectations.apply(&mut result, version);
        }
        if let Some(reason) = &restarted_after {
            result.evidence.notes.push(format!(
                "run on a restarted broker (--restart-broker) after it died: {reason}"
            ));
        }
        result
    }

    /// Counts a finished cell and tells the progress.
    pub(super) fn finished(&self, case: &Case, result: &CaseResult) {
        let done = self.done.fetch_add(1, Ordering::SeqCst) + 1;
        let name = &self.component.definition().name;
        (self.progress)(
            name,
            &format!(
                "{name}: [{done}/{}] {} {} ({} ms)",
                self.total,
                case.id,
                result.status.label(),
                result.duration_ms
            ),
        );
    }

    /// Runs `cases` of one lane, up to `jobs` at once, each in its own task; gives
    /// each cell with its index in the run.
    pub(super) async fn run_lane(
        self: &Arc<Self>,
        cases: Vec<(usize, &'static Case)>,
        jobs: usize,
    ) -> Vec<(usize, CaseResult)> {
        let mut waiting = cases.into_iter();
        let mut running = tokio::task::JoinSet::new();
        let mut results = Vec::new();
        loop {
            while running.len() < jobs {
                let Some((index, case)) = waiting.next() else {
                    break;
                };
                let run = self.clone();
                running.spawn(async move { (index, case, run.run(case).await) });
            }
            let Some(joined) = running.join_next().await else {
                break;
            };
            match joined {
                Ok((index, case, result)) => {
                    self.finished(case, &result);
                    results.push((index, result));
                }
                // A case's task that panicked: its cell stays missing, filled below.
                Err(e) => self.panics.lock().await.push(e.to_string()),
            }
        }
        results
    }
}

/// The runtime a row's cases start on, and how the runtimes built during the run
/// (after a fault case, behind a fault proxy) become the row's kind: in process, or
/// through `wrap` (sidecars in front of them).
pub(super) struct RowRuntimes {
    pub(super) first: Runtime,
    pub(super) wrap: Option<RuntimeWrapper>,
}

/// Runs a component's cases: the shared lane `jobs` at once, then the timed lane
/// `2 x jobs` at once, then the exclusive cases one by one (fault cases on a broker the
/// suite controls when the run's cannot be faulted). Cells come back in case order.
pub(super) async fn run_cases(
    component: &Resolved,
    broker_version: Option<String>,
    provisioned: &provision::Provisioned,
    runtimes: RowRuntimes,
    cases: &[&'static Case],
    options: &CertifyOptions,
    progress: &Progress,
) -> Vec<CaseResult> {
    let definition = component.definition();
    let RowRuntimes {
        first: runtime,
        wrap,
    } = runtimes;
    let run = Arc::new(ComponentRun {
        component: component.clone(),
        broker_version,
        broker: provisioned.broker.clone(),
        environment: CaseEnvironment::of_component(provisioned.broker.clone(), component)
            .wrapped(wrap.clone()),
        expectations: Expectations::load(&definition.source, &definition.name).unwrap_or_default(),
        options: options.clone(),
        progress: progress.clone(),
        state: tokio::sync::Mutex::new(LaneState {
            runtime: runtime.clone(),
            built: None,
            restarted_after: None,
        }),
        done: AtomicUsize::new(0),
        total: cases.len(),
        panics: Default::default(),
    });
    let jobs = options.jobs();
    let mut results = run.run_lane(in_lane(cases, Lane::Shared), jobs).await;
    // Timed cases mostly wait (for a delay, a TTL, a batch): twice as many at once.
    let timed_jobs = if jobs == 1 { 1 } else { 2 * jobs };
    results.extend(run.run_lane(in_lane(cases, Lane::Timed), timed_jobs).await);

    // Fault cases of a component whose broker the suite cannot fault (the auto order
    // chose a running server), or whose spawned broker keeps its data in memory (its
    // spec names other arguments for a broker that is killed), run on a second broker
    // the suite controls.
    let why_control = match &provisioned.broker {
        Some(broker) if !broker.can_fault() => Some("the run's broker cannot be faulted"),
        Some(_)
            if provisioned.kind == ProvisionKind::LocalProcess
                && provision::broker_spec(&definition.component_type)
                    .is_some_and(|spec| spec.durable_args.is_some()) =>
        {
            Some("the run's broker keeps its data in memory, the fault cases' keeps it across a kill")
        }
        _ => None,
    };
    let mut controlled: Option<Result<Controlled, String>> = None;
    for (index, case) in in_lane(cases, Lane::Exclusive) {
        // Over HTTP the fault cases kill, pause or cut the broker under sidecars whose
        // component the suite builds (`serve` in this process); a sidecar process
        // builds its own, which the suite cannot put behind a fault proxy or rebuild.
        if runtime.is_remote() && !case.injects.is_empty() && wrap.is_none() {
            let mut cell = errored(
                case,
                "not run over HTTP: a fault case kills, pauses or cuts the broker and builds the component again behind a fault proxy, and this row's sidecars build their component themselves (certify it through serve, --through-serve, for its fault cases over HTTP)".to_string(),
            );
            cell.status = Status::NotProvisioned;
            run.finished(case, &cell);
            results.push((index, cell));
            continue;
        }
        let wants_control =
            !case.injects.is_empty() && options.provision.is_none() && why_control.is_some();
        if wants_control {
            if controlled.is_none() {
                progress(
                    &definition.name,
                    &format!(
                        "{}: starting a broker the suite controls for the fault cases",
                        definition.name
                    ),
                );
                controlled = Some(Controlled::provision(component, wrap.clone()).await);
            }
            if let Some(Ok(side)) = &mut controlled {
                let options = run_options_for(
                    options,
                    &run.expectations,
                    case,
                    side.version.as_deref(),
                    &definition.name,
                    1,
                );
                let mut result =
                    run_case_in(case, &side.runtime, &options, &side.environment).await;
                side.refresh(component).await;
                if let Some(version) = side.version.as_deref() {
                    run.expectations.apply(&mut result, version);
                }
                result.evidence.notes.push(format!(
                    "run on a broker the suite controls, {}, since {}",
                    side.describe(),
                    why_control.unwrap_or_default()
                ));
                run.finished(case, &result);
                results.push((index, result));
                continue;
            }
        }
        let backlog_turn = if case.moves_a_backlog() {
            Some(backlog_turn(&definition.name, case, progress).await)
        } else {
            None
        };
        let mut result = run.run(case).await;
        drop(backlog_turn);
        if let (true, Some(Err(reason))) = (wants_control, &controlled) {
            result.evidence.notes.push(format!(
                "no broker the suite controls could be started for the fault cases: {reason}"
            ));
        }
        run.finished(case, &result);
        results.push((index, result));
    }
    if let Some(built) = run.state.lock().await.built.take() {
        built.retire().await;
    }
    if let Some(Ok(side)) = controlled {
        side.runtime.retire().await;
        side.broker.shutdown().await;
        if let Some(still) = side.broker.leftover().await {
            progress(
                &definition.name,
                &format!("cleanup: still running after shutdown (a suite defect): {still}"),
            );
        }
    }
    // A cell whose task panicked is ERROR, naming the panic.
    let panics = run.panics.lock().await.join("; ");
    for (index, case) in cases.iter().enumerate() {
        if !results.iter().any(|(i, _)| *i == index) {
            results.push((
                index,
                errored(
                    case,
                    format!("the case's task stopped: {panics} (a suite defect)"),
                ),
            ));
        }
    }
    results.sort_by_key(|(index, _)| *index);
    results.into_iter().map(|(_, result)| result).collect()
}

/// One case that moves a backlog at a time in the whole run (the rows of a matrix
/// run at once): several would starve the harness they share.
pub(super) static BACKLOG_TURN: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);

/// How many cases of rows over the wire (`via serve`, sidecars, SDKs) run at once in
/// the whole run, timed ones aside: four per core. Each such case also drives the
/// sidecar and the app it delivers to, in this process, so it weighs several times an
/// in-process case: at `--jobs 8`, seven rows at once over `serve` (56 such cases on 2
/// cores) slowed deliveries fortyfold, and cases missed their bounds with nothing wrong
/// in the component or the path (2026-12-05).
pub(super) static WIRE_CASES: std::sync::LazyLock<tokio::sync::Semaphore> =
    std::sync::LazyLock::new(|| {
        let cores = std::thread::available_parallelism().map_or(2, usize::from);
        tokio::sync::Semaphore::new(4 * cores)
    });

/// Waits for the run's turn to move a backlog, saying so when another row has it.
pub(super) async fn backlog_turn(
    row: &str,
    case: &Case,
    progress: &Progress,
) -> tokio::sync::SemaphorePermit<'static> {
    if let Ok(permit) = BACKLOG_TURN.try_acquire() {
        return permit;
    }
    progress(
        row,
        &format!(
            "{row}: {} waits while another row moves its backlog (one at a time)",
            case.id
        ),
    );
    BACKLOG_TURN
        .acquire()
        .await
        .expect("the backlog semaphore is never closed")
}

/// The cases of one lane, with their indices in the run; in the exclusive lane the
/// cases that move a backlog come last, so that a row waiting for its turn to move
/// one has run everything else.
pub(super) fn in_lane(cases: &[&'static Case], lane: Lane) -> Vec<(usize, &'static Case)> {
    let mut chosen = Vec::new();
    for (index, case) in cases.iter().enumerate() {
        if case.lane == lane || (lane == Lane::Exclusive && case.lane.is_exclusive()) {
            chosen.push((index, *case));
        }
    }
    chosen.sort_by_key(|(_, case)| case.moves_a_backlog());
    chosen
}

/// How many cells have each status, worst first, e.g. `2 FAIL, 70 PASS`.
pub(super) fn tally(results: &[CaseResult]) -> String {
    let mut counts: Vec<(Status, usize)> = Vec::new();
    for result in results {
        match counts.iter_mut().find(|(s, _)| *s == result.status) {
            Some((_, n)) => *n += 1,
            None => counts.push((result.status, 1)),
        }
    }
    counts.sort_by_key(|(s, _)| std::cmp::Reverse(s.severity()));
    counts
        .iter()
        .map(|(s, n)| format!("{n} {}", s.label()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// An ERROR cell for a case that could not finish.
pub(super) fn errored(case: &Case, note: String) -> CaseResult {
    let mut cell = crate::runner::unfinished_cell(case, 0);
    cell.evidence.notes.push(note);
    cell
}

/// The run options for `case`: a cell the expectations file predicts to FAIL is not
/// run again (a rerun only proves the known defect twice); histories go to the run's
/// report directory as `component`'s, run `run_number`.
pub(super) fn run_options_for(
    options: &CertifyOptions,
    expectations: &Expectations,
    case: &Case,
    broker_version: Option<&str>,
    component: &str,
    run_number: u32,
) -> RunOptions {
    let expected = broker_version.is_some_and(|v| expectations.for_cell(case.id, v).is_some());
    RunOptions {
        retries: if expected { 0 } else { options.run.retries },
        seed: options.run.seed,
        bystander: options.run.bystander,
        save: options.histories.as_ref().map(|dir| crate::runner::SaveTo {
            dir: dir.clone(),
            component: component.to_string(),
            run: run_number,
        }),
    }
}

/// One cell from the runs of a repeated case: PASS when every run passed, FLAKY
/// when some did, otherwise the runs' common status; the evidence of the first run
/// that did not pass (else the first), and how many passed.
pub(super) fn combine_runs(mut results: Vec<CaseResult>) -> CaseResult {
    if results.len() == 1 {
        return results.remove(0);
    }
    let statuses: Vec<Status> = results.iter().map(|r| r.status).collect();
    let passes = statuses.iter().filter(|s| **s == Status::Pass).count() as u32;
    let shown = results
        .iter()
        .position(|r| r.status != Status::Pass)
        .unwrap_or(0);
    let duration: u64 = results.iter().map(|r| r.duration_ms).sum();
    let attempts: u32 = results.iter().map(|r| r.attempts).sum();
    let mut cell = results.swap_remove(shown);
    cell.status = crate::replay::repeated_status(&statuses);
    cell.duration_ms = duration;
    cell.attempts = attempts;
    cell.runs = Some(pubsub_reports::Runs {
        runs: statuses.len() as u32,
        passes,
    });
    if cell.status != Status::Pass {
        cell.evidence.notes.push(format!(
            "passed {passes} of {} runs; the evidence is from run {}",
            statuses.len(),
            shown + 1
        ));
    }
    cell
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue::catalogue;
    use std::time::Duration;

    #[test]
    fn the_cases_that_move_a_backlog_come_last_in_the_exclusive_lane() {
        let cases: Vec<&'static Case> = catalogue().iter().collect();
        let exclusive = in_lane(&cases, Lane::Exclusive);
        let backlog: Vec<&str> = exclusive
            .iter()
            .skip_while(|(_, case)| !case.moves_a_backlog())
            .map(|(_, case)| case.id)
            .collect();
        assert_eq!(
            backlog,
            ["certification.backlog", "certification.long-drain"],
            "{:?}",
            exclusive.iter().map(|(_, c)| c.id).collect::<Vec<_>>()
        );
        // Every other exclusive case keeps the catalogue's order before them.
        let others: Vec<usize> = exclusive
            .iter()
            .filter(|(_, case)| !case.moves_a_backlog())
            .map(|(index, _)| *index)
            .collect();
        assert!(others.windows(2).all(|w| w[0] < w[1]));
        assert!(exclusive.len() > backlog.len());
    }

    #[tokio::test]
    async fn one_backlog_at_a_time_in_the_whole_run() {
        let case = catalogue()
            .iter()
            .find(|c| c.id == "certification.long-drain")
            .unwrap();
        let said = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let heard = said.clone();
        let progress: Progress = Arc::new(move |_, line| heard.lock().unwrap().push(line.into()));
        let first = backlog_turn("row a", case, &progress).await;
        let second = tokio::spawn({
            let progress = progress.clone();
            async move {
                let _turn = backlog_turn("row b", case, &progress).await;
            }
        });
        // The second row waits while the first holds the turn...
        tokio::task::yield_now().await;
        assert!(
            tokio::time::timeout(Duration::from_millis(200), async {
                while said.lock().unwrap().is_empty() {
                    tokio::task::yield_now().await;
                }
            })
            .await
            .is_ok(),
            "the waiting row says it waits"
        );
        assert!(!second.is_finished());
        assert_eq!(
            said.lock().unwrap()[0],
            "row b: certification.long-drain waits while another row moves its backlog (one at a time)"
        );
        // ... and gets it once the first is done.
        drop(first);
        tokio::time::timeout(Duration::from_secs(5), second)
            .await
            .expect("the second row gets its turn")
            .unwrap();
    }
}
