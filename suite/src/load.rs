//! How busy the machine was while a timed case ran, measured in the case itself:
//! undelayed control messages published beside the case's own (their
//! publish-to-delivery latency is what the machine and broker give any message at
//! that time), a 10 ms ticker's overshoot (how late the suite's own tasks run), and
//! the kernel's pressure stall information (`/proc/pressure/cpu` and `io`).
//!
//! Everything is recorded in the case's history ([`Record::Lag`] and the control
//! keys), so that [`MachineLoad::of`] judges a saved history exactly as it judged the
//! live one.

use crate::history::{is_control, History, Record, Recorder, CONTROL_KEY, KEY};
use pubsub_components::runtime::{PublishRequest, Runtime, Subscription, SubscriptionHandle};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::time::{Duration, SystemTime};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// How often a control message is published.
const CONTROL_EVERY: Duration = Duration::from_millis(100);
/// The ticker's period.
const TICK: Duration = Duration::from_millis(10);
/// How long one [`Record::Lag`] window lasts.
const WINDOW: Duration = Duration::from_millis(500);
/// A machine counts as loaded when the suite's own ticker ran this late (p99) ...
const LOADED_TICKER_P99_MS: f64 = 25.0;
/// ... or tasks were stalled on CPU or I/O for this share of a window.
const LOADED_STALL: f64 = 0.25;

/// The machine's load over one case, judged from its history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MachineLoad {
    /// Control messages judged (delivered, or long enough overdue to count).
    pub controls: usize,
    /// Their publish-to-delivery latency.
    pub control_p50: Duration,
    pub control_p99: Duration,
    /// The worst window's ticker overshoot p99 and the overall maximum, in ms.
    pub ticker_p99_ms: f64,
    pub ticker_max_ms: f64,
    /// The worst window's stall shares (0 to 1), where the kernel reports them.
    pub cpu_stall: Option<f64>,
    pub io_stall: Option<f64>,
    /// The windows in which the suite's own tasks were held up (the ticker overshot
    /// by more than [`LOADED_TICKER_P99_MS`] at worst).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stalls: Vec<HarnessStall>,
}

/// A window in which the suite's own tasks ran late.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HarnessStall {
    /// When the window ended.
    pub end: SystemTime,
    /// Its length.
    pub window: Duration,
    /// The ticker's worst overshoot in it.
    pub worst: Duration,
}

impl MachineLoad {
    /// The load recorded in `history`; `None` when no probe ran in it (the case is
    /// not a timed one, or its probe could not subscribe).
    pub fn of(history: &History) -> Option<MachineLoad> {
        let mut published: HashMap<&str, SystemTime> = HashMap::new();
        let mut delivered: HashMap<&str, SystemTime> = HashMap::new();
        let mut last = None::<SystemTime>;
        let (mut ticker_p99, mut ticker_max) = (0f64, 0f64);
        let (mut cpu, mut io) = (None::<f64>, None::<f64>);
        let mut windows = 0;
        let mut stalls = Vec::new();
        for record in &history.records {
            match record {
                Record::Published {
                    key,
                    due: Some(due),
                    outcome: Ok(_),
                    at,
                    ..
                } if is_control(key) => {
                    published.insert(key, *due);
                    last = last.max(Some(*at));
                }
                Record::Delivered {
                    key: Some(key), at, ..
                } => {
                    if is_control(key) {
                        delivered.entry(key).or_insert(*at);
                    }
                    last = last.max(Some(*at));
                }
                Record::Lag {
                    at,
                    window_ms,
                    ticker_p99_ms,
                    ticker_max_ms,
                    cpu_stall,
                    io_stall,
                } => {
                    if *ticker_max_ms > LOADED_TICKER_P99_MS {
                        stalls.push(HarnessStall {
                            end: *at,
                            window: Duration::from_millis(*window_ms),
                            worst: Duration::from_secs_f64(ticker_max_ms.max(0.0) / 1000.0),
                        });
                    }
                    windows += 1;
                    ticker_p99 = ticker_p99.max(*ticker_p99_ms);
                    ticker_max = ticker_max.max(*ticker_max_ms);
                    cpu = max_share(cpu, *cpu_stall);
                    io = max_share(io, *io_stall);
                    last = last.max(Some(*at));
                }
                _ => {}
            }
        }
        if published.is_empty() && windows == 0 {
            return None;
        }
        let last = last.unwrap_or(SystemTime::UNIX_EPOCH);
        // Controls published before the first one arrived waited for the control
        // subscription to start (a group joining), not for the machine.
        let first_arrival = delivered.values().min().copied();
        let mut latencies: Vec<Duration> = Vec::new();
        for (key, due) in &published {
            if first_arrival.is_some_and(|first| *due < first) {
                continue;
            }
            match delivered.get(key) {
                Some(at) => latencies.push(at.duration_since(*due).unwrap_or_default()),
                // Not delivered by the end: at least this late, counted once it is
                // overdue by more than a window (a control published at the very end
                // says nothing yet).
                None => {
                    let waited = last.duration_since(*due).unwrap_or_default();
                    if waited > WINDOW {
                        latencies.push(waited);
                    }
                }
            }
        }
        latencies.sort();
        Some(MachineLoad {
            controls: latencies.len(),
            control_p50: percentile(&latencies, 0.50),
            control_p99: percentile(&latencies, 0.99),
            ticker_p99_ms: ticker_p99,
            ticker_max_ms: ticker_max,
            cpu_stall: cpu,
            io_stall: io,
            stalls,
        })
    }

    /// How long the suite's own tasks were held up around `at`: the ticker's worst
    /// overshoot in the window holding `at` and the one before it. A delivery the
    /// suite recorded at `at` may have been recorded that much after it happened (the
    /// handler ran late), which sparse controls can miss.
    pub fn harness_lag_at(&self, at: SystemTime) -> Duration {
        self.stalls
            .iter()
            .filter(|stall| {
                let start = stall.end.checked_sub(stall.window).unwrap_or(stall.end);
                // The window holding `at`, or the one that ended within a window
                // before it.
                start <= at + stall.window && at <= stall.end + stall.window
            })
            .map(|stall| stall.worst)
            .max()
            .unwrap_or_default()
    }

    /// Whether the machine itself showed load: the suite's ticker ran late, or the
    /// kernel counted tasks stalled on CPU or I/O for a good share of a window.
    pub fn loaded(&self) -> bool {
        self.ticker_p99_ms > LOADED_TICKER_P99_MS
            || self.cpu_stall.is_some_and(|s| s > LOADED_STALL)
            || self.io_stall.is_some_and(|s| s > LOADED_STALL)
    }

    /// Too busy to judge timing to `precision`: the undelayed controls themselves
    /// took longer than the precision being judged, while the machine showed load. A
    /// slow control on an idle machine is the component's own slowness, not this.
    pub fn too_busy(&self, precision: Duration) -> bool {
        self.control_p99 > precision && self.loaded()
    }

    /// How much lateness the machine explains: the controls' p99 latency when it is
    /// within the precision being judged (any message took that long then), else
    /// nothing (a machine too busy to judge makes the verdict inconclusive instead;
    /// on an idle machine the slowness is the component's).
    pub fn allowance(&self, precision: Duration) -> Duration {
        if self.control_p99 <= precision {
            self.control_p99
        } else {
            Duration::ZERO
        }
    }

    /// The figures, for evidence.
    pub fn describe(&self) -> String {
        let share =
            |s: Option<f64>| s.map_or_else(|| "n/a".into(), |s| format!("{:.0}%", s * 100.0));
        format!(
            "control latency p50 {} ms, p99 {} ms over {} undelayed control messages; the suite's 10 ms ticker overshot by up to {:.1} ms (worst window p99 {:.1} ms); stalled on cpu {}, io {} (worst window, /proc/pressure)",
            self.control_p50.as_millis(),
            self.control_p99.as_millis(),
            self.controls,
            self.ticker_max_ms,
            self.ticker_p99_ms,
            share(self.cpu_stall),
            share(self.io_stall)
        )
    }
}

fn max_share(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// The `q` quantile of sorted `values` (nearest rank); zero when empty.
fn percentile(values: &[Duration], q: f64) -> Duration {
    if values.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
    values[rank - 1]
}

/// The probe running beside a timed case: control messages on a topic of their own
/// and the lag ticker, both recording into the case's history.
pub struct Probe {
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    subscription: Option<SubscriptionHandle>,
}

impl Probe {
    /// Starts the ticker, and the control messages on `topic` (group `group`)
    /// through `runtime`; a control subscription the component refuses is noted and
    /// the probe runs on with the ticker alone.
    pub async fn start(
        runtime: &Runtime,
        recorder: &Recorder,
        topic: String,
        group: String,
    ) -> Probe {
        let (stop, stopped) = watch::channel(false);
        let mut tasks = vec![tokio::spawn(tick(recorder.clone(), stopped.clone()))];
        let handler = recorder.handler("control");
        recorder.assign_group(&handler, &group);
        let subscription = Subscription::new(&topic, &group);
        // Queue and session brokers keep messages only for groups that exist.
        let subscribed = match runtime.create_group(&subscription).await {
            Ok(()) => runtime.subscribe(subscription, handler).await,
            Err(e) => Err(e),
        };
        let subscription = match subscribed {
            Ok(handle) => {
                tasks.push(tokio::spawn(publish_controls(
                    runtime.clone(),
                    recorder.clone(),
                    topic,
                    stopped,
                )));
                Some(handle)
            }
            Err(e) => {
                recorder.note(format!(
                    "the timing probe could not subscribe its control messages ({e}); the machine's load is judged by the ticker alone"
                ));
                None
            }
        };
        Probe {
            stop,
            tasks,
            subscription,
        }
    }

    /// Stops publishing and ticking, and leaves the control group.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
        if let Some(subscription) = self.subscription {
            subscription.stop().await;
        }
    }
}

async fn publish_controls(
    runtime: Runtime,
    recorder: Recorder,
    topic: String,
    mut stopped: watch::Receiver<bool>,
) {
    let mut next = Instant::now();
    for n in 0u64.. {
        tokio::select! {
            _ = stopped.changed() => return,
            _ = tokio::time::sleep_until(next) => {}
        }
        let key = format!("{CONTROL_KEY}{n}");
        let request = PublishRequest::new(&topic, key.as_bytes().to_vec())
            .with_content_type("text/plain")
            .with_metadata(KEY, &key);
        let due = SystemTime::now();
        let result = runtime.publish(request).await;
        recorder.published(
            &key,
            &topic,
            result.map(Some).map_err(|e| e.to_string()),
            None,
            Some(due),
        );
        next += CONTROL_EVERY;
        // A publish slower than the period does not make a burst afterwards.
        next = next.max(Instant::now());
    }
}

/// Ticks every 10 ms and records each window's overshoot and the kernel's stall
/// shares over it.
async fn tick(recorder: Recorder, mut stopped: watch::Receiver<bool>) {
    let mut overshoots: Vec<f64> = Vec::new();
    let mut window_start = Instant::now();
    let mut cpu_start = stall_total("cpu");
    let mut io_start = stall_total("io");
    let mut next = Instant::now() + TICK;
    loop {
        tokio::select! {
            _ = stopped.changed() => break,
            _ = tokio::time::sleep_until(next) => {}
        }
        let now = Instant::now();
        overshoots.push(now.saturating_duration_since(next).as_secs_f64() * 1000.0);
        next = now + TICK;
        if now.duration_since(window_start) >= WINDOW {
            let cpu_now = stall_total("cpu");
            let io_now = stall_total("io");
            record_window(
                &recorder,
                &mut overshoots,
                window_start,
                (cpu_start, cpu_now),
                (io_start, io_now),
            );
            window_start = now;
            cpu_start = cpu_now;
            io_start = io_now;
        }
    }
    if !overshoots.is_empty() {
        let (cpu_now, io_now) = (stall_total("cpu"), stall_total("io"));
        record_window(
            &recorder,
            &mut overshoots,
            window_start,
            (cpu_start, cpu_now),
            (io_start, io_now),
        );
    }
}

fn record_window(
    recorder: &Recorder,
    overshoots: &mut Vec<f64>,
    window_start: Instant,
    cpu: (Option<u64>, Option<u64>),
    io: (Option<u64>, Option<u64>),
) {
    let window = window_start.elapsed();
    overshoots.sort_by(f64::total_cmp);
    let rank = ((0.99 * overshoots.len() as f64).ceil() as usize).clamp(1, overshoots.len());
    let share = |(from, to): (Option<u64>, Option<u64>)| {
        let (from, to) = (from?, to?);
        let micros = window.as_micros().max(1) as f64;
        Some((to.saturating_sub(from) as f64 / micros).min(1.0))
    };
    recorder.lag(Record::Lag {
        at: SystemTime::now(),
        window_ms: window.as_millis() as u64,
        ticker_p99_ms: overshoots[rank - 1],
        ticker_max_ms: overshoots.last().copied().unwrap_or(0.0),
        cpu_stall: share(cpu),
        io_stall: share(io),
    });
    overshoots.clear();
}

/// The kernel's `some` stall total for `resource` (µs since boot), where it has
/// pressure stall information.
fn stall_total(resource: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/pressure/{resource}")).ok()?;
    parse_stall_total(&text)
}

/// The `total=` of the `some` line of a `/proc/pressure/*` file.
fn parse_stall_total(text: &str) -> Option<u64> {
    text.lines()
        .find(|l| l.starts_with("some "))?
        .split_whitespace()
        .find_map(|field| field.strip_prefix("total="))?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pubsub_components::MessageId;

    fn at(ms: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(1_000_000 + ms)
    }

    fn control(n: u64, published: u64, delivered: Option<u64>) -> Vec<Record> {
        let key = format!("{CONTROL_KEY}{n}");
        let mut records = vec![Record::Published {
            key: key.clone(),
            topic: "ctl".into(),
            at: at(published),
            outcome: Ok(None),
            partition_key: None,
            due: Some(at(published)),
            started: None,
            payload: None,
        }];
        if let Some(d) = delivered {
            records.push(Record::Delivered {
                key: Some(key),
                topic: "ctl".into(),
                id: MessageId::new("ctl", None, n),
                at: at(d),
                attempt: 1,
                batch: None,
                subscriber: "control".into(),
                group: None,
                event_id: None,
                payload: None,
            });
        }
        records
    }

    fn lag(ticker: f64, io: f64) -> Record {
        Record::Lag {
            at: at(5000),
            window_ms: 500,
            ticker_p99_ms: ticker,
            ticker_max_ms: ticker,
            cpu_stall: Some(0.0),
            io_stall: Some(io),
        }
    }

    #[test]
    fn control_latency_and_load_are_read_from_the_history() {
        let mut records = Vec::new();
        for n in 0..10 {
            records.extend(control(n, n * 100, Some(n * 100 + 5 + n)));
        }
        records.push(lag(2.0, 0.01));
        let load = MachineLoad::of(&History { records }).unwrap();
        // The first control, published before any had arrived, is a warm-up.
        assert_eq!(load.controls, 9);
        assert_eq!(load.control_p50, Duration::from_millis(10));
        assert_eq!(load.control_p99, Duration::from_millis(14));
        assert!(!load.loaded());
        assert!(!load.too_busy(Duration::from_millis(300)));
        assert_eq!(
            load.allowance(Duration::from_millis(300)),
            Duration::from_millis(14)
        );
    }

    #[test]
    fn a_slow_control_is_too_busy_only_on_a_loaded_machine() {
        let mut records = control(0, 0, Some(10));
        records.extend(control(1, 100, Some(900)));
        records.extend(control(2, 200, None));
        records.extend(control(3, 4900, None));
        records.push(lag(3.0, 0.6));
        let history = History { records };
        let load = MachineLoad::of(&history).unwrap();
        // The control never delivered counts as at least 4.8 s late; the one
        // published at the end is not counted, nor the warm-up.
        assert_eq!(load.controls, 2);
        assert_eq!(load.control_p50, Duration::from_millis(800));
        assert_eq!(load.control_p99, Duration::from_millis(4800));
        assert!(load.loaded());
        assert!(load.too_busy(Duration::from_millis(300)));
        // The same slow controls on an idle machine: the component's own slowness.
        let mut idle = history.clone();
        idle.records.pop();
        idle.records.push(lag(3.0, 0.0));
        let idle = MachineLoad::of(&idle).unwrap();
        assert!(!idle.too_busy(Duration::from_millis(300)));
        assert_eq!(idle.allowance(Duration::from_millis(300)), Duration::ZERO);
    }

    /// A delivered message due at `due` ms, recorded at `delivered` ms.
    fn delayed(key: &str, due: u64, delivered: u64) -> Vec<Record> {
        let mut records = control(0, 0, None);
        if let Record::Published {
            key: k,
            due: d,
            at: a,
            ..
        } = &mut records[0]
        {
            *k = key.into();
            *d = Some(at(due));
            *a = at(0);
        }
        records.push(Record::Delivered {
            key: Some(key.into()),
            topic: "t".into(),
            id: MessageId::new("t", None, 1),
            at: at(delivered),
            attempt: 1,
            batch: None,
            subscriber: "s1".into(),
            group: None,
            event_id: None,
            payload: None,
        });
        records
    }

    #[test]
    fn a_delivery_recorded_while_the_suite_stalled_is_late_only_beyond_the_stall() {
        use crate::checker::check;
        use crate::criteria::{Criteria, Timing};
        let mut criteria = Criteria::delivery(pubsub_components::DeliveryGuarantee::AtLeastOnce);
        criteria.timing = Some(Timing {
            early_tolerance: Duration::from_millis(50),
            late_precision: Duration::from_millis(300),
        });
        let stall = |worst_ms: f64| Record::Lag {
            at: at(1500),
            window_ms: 500,
            ticker_p99_ms: worst_ms,
            ticker_max_ms: worst_ms,
            cpu_stall: Some(0.9),
            io_stall: Some(0.0),
        };
        // Due at 1000 ms, recorded 120 ms past the precision, in a window where the
        // suite's ticker ran 200 ms late: the suite's stall explains it.
        let mut records = delayed("m", 1000, 1420);
        records.push(stall(200.0));
        let findings = check(&History { records }, &criteria);
        assert!(findings.late.is_empty(), "{:?}", findings.late);
        // No stall then: late.
        let mut records = delayed("m", 1000, 1420);
        records.push(stall(5.0));
        let findings = check(&History { records }, &criteria);
        assert_eq!(findings.late.len(), 1, "{:?}", findings.late);
        // Late by more than the precision plus the stall (twice the precision, as
        // the faulty DeliversLate is): late, naming the stall.
        let mut records = delayed("m", 1000, 1000 + 300 + 200 + 150);
        records.push(stall(200.0));
        let findings = check(&History { records }, &criteria);
        assert!(
            findings.late.len() == 1 && findings.late[0].contains("the suite itself stalled"),
            "{:?}",
            findings.late
        );
        // A stall in a window far from the delivery explains nothing.
        let mut records = delayed("m", 3000, 3420);
        records.push(stall(200.0));
        let findings = check(&History { records }, &criteria);
        assert_eq!(findings.late.len(), 1, "{:?}", findings.late);
    }

    #[test]
    fn no_probe_no_load() {
        assert_eq!(MachineLoad::of(&History::default()), None);
    }

    #[test]
    fn pressure_totals_are_parsed() {
        let text = "some avg10=0.36 avg60=1.70 avg300=0.78 total=3206868\nfull avg10=0.26 avg60=1.48 avg300=0.70 total=2893415\n";
        assert_eq!(parse_stall_total(text), Some(3206868));
        assert_eq!(parse_stall_total("garbage"), None);
    }
}
