//! Time-sized measurements: how many messages make a publish run last the minimum,
//! rounds of runs that share one count (sized again when a run ends too soon), and the
//! measurement a report row shows from them.

use super::BenchOptions;
use pubsub_reports::Measurement;
use std::time::Duration;

/// The runs of one time-sized measurement.
#[derive(Debug, Clone)]
pub(super) struct Timed {
    /// Messages per run.
    pub(super) messages: usize,
    /// Each run's time.
    pub(super) times: Vec<Duration>,
}

impl Timed {
    fn median(&self) -> Duration {
        let mut times = self.times.clone();
        times.sort();
        times[times.len() / 2]
    }
}

/// How many messages make a run last `options.min_seconds`, from a probe run of
/// `options.messages` that took `probe`: a multiple of 100, at least `messages`, at
/// most `max_messages`.
pub(super) fn sized_messages(options: &BenchOptions, probe: Duration) -> usize {
    let probe = probe.as_secs_f64().max(1e-6);
    if probe >= options.min_seconds {
        return options.messages;
    }
    // 10% over, so that a run a little faster than the probe still lasts long enough.
    let scaled = (options.messages as f64 * options.min_seconds / probe * 1.1).ceil() as usize;
    scaled
        .min(options.max_messages)
        .max(options.messages)
        .div_ceil(100)
        * 100
}

/// How many times a run may be sized again because it ended too soon.
const MAX_RESIZES: usize = 3;

/// The count to run again with when a run of `messages` that took `elapsed` ended
/// well before `options.min_seconds` (the probe it was sized from ran slow, as a
/// first run on a cold connection does), or `None` when the run counts as it is.
fn resized(options: &BenchOptions, messages: usize, elapsed: Duration) -> Option<usize> {
    let short = elapsed.as_secs_f64() < options.min_seconds * 0.8;
    let again = sized_messages(
        &BenchOptions {
            messages,
            ..options.clone()
        },
        elapsed,
    );
    (short && again > messages).then_some(again)
}

/// Runs rounds of measurements that share one message count, starting from
/// `messages`: each round runs every path once (`measure` returns their times, in
/// order, each on fresh names) until there are `options.repeats` rounds. When the
/// fastest path of a round ends well short of the minimum, the count is sized again
/// from it and the rounds start over, so every run of a path has the same count.
/// Returns the count and each path's times.
pub(super) async fn timed_rounds<F, Fut>(
    options: &BenchOptions,
    mut messages: usize,
    mut measure: F,
) -> anyhow::Result<(usize, Vec<Vec<Duration>>)>
where
    F: FnMut(String, BenchOptions) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Vec<Duration>>>,
{
    let mut paths: Vec<Vec<Duration>> = Vec::new();
    let (mut rounds, mut run, mut resizes) = (0, 0, 0);
    while rounds < options.repeats.max(1) {
        let sized = BenchOptions {
            messages,
            ..options.clone()
        };
        let times = measure(run.to_string(), sized).await?;
        run += 1;
        let fastest = times.iter().min().copied().unwrap_or_default();
        match resized(options, messages, fastest) {
            Some(again) if resizes < MAX_RESIZES => {
                messages = again;
                resizes += 1;
                rounds = 0;
                paths.clear();
            }
            _ => {
                paths.resize_with(times.len(), Vec::new);
                for (path, time) in paths.iter_mut().zip(times) {
                    path.push(time);
                }
                rounds += 1;
            }
        }
    }
    Ok((messages, paths))
}

/// Runs a measurement sized by time: a probe run of `options.messages` (not kept)
/// sets how many messages make a run last `options.min_seconds`, then
/// `options.repeats` runs of that many, each on fresh names, so one disturbed run
/// does not decide a ratio. A run that ends well short of the minimum sizes the
/// measurement again from itself, and the runs start over (every run of a
/// measurement has the same count).
pub(super) async fn timed<F, Fut>(options: &BenchOptions, mut measure: F) -> anyhow::Result<Timed>
where
    F: FnMut(String, BenchOptions) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Duration>>,
{
    let probe = measure("probe".into(), options.clone()).await?;
    let (messages, mut paths) =
        timed_rounds(options, sized_messages(options, probe), |run, sized| {
            let one = measure(run, sized);
            async move { Ok(vec![one.await?]) }
        })
        .await?;
    Ok(Timed {
        messages,
        times: paths.pop().unwrap_or_default(),
    })
}

/// A measurement from time-sized runs: the median's rate, each run's rate, and the
/// ratio to `baseline`'s.
pub(super) fn measurement(
    label: &str,
    timed: &Timed,
    baseline: Option<&Measurement>,
) -> Measurement {
    let rate_of = |elapsed: Duration| timed.messages as f64 / elapsed.as_secs_f64().max(1e-9);
    let median = timed.median();
    let rate = rate_of(median);
    Measurement {
        label: label.to_string(),
        messages: timed.messages as u64,
        seconds: median.as_secs_f64(),
        rate,
        ratio: baseline.map(|b| rate / b.rate),
        baseline: baseline.map(|b| b.label.clone()),
        runs: timed.times.iter().map(|t| rate_of(*t)).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_sized_to_last_the_minimum_time() {
        let options = BenchOptions::default();
        // 2000 messages in 0.1 s: eleven times as many last a second, with 10% slack.
        assert_eq!(sized_messages(&options, Duration::from_millis(100)), 22_000);
        // Already long enough: the count stays.
        assert_eq!(sized_messages(&options, Duration::from_secs(2)), 2000);
        // A very fast path is capped.
        assert_eq!(
            sized_messages(&options, Duration::from_micros(10)),
            options.max_messages
        );
        // 0 s asks for no sizing.
        let no_sizing = BenchOptions {
            min_seconds: 0.0,
            ..BenchOptions::default()
        };
        assert_eq!(sized_messages(&no_sizing, Duration::from_millis(1)), 2000);
    }

    #[test]
    fn a_run_far_shorter_than_the_minimum_is_sized_again() {
        let options = BenchOptions::default();
        // 22000 messages sized from a slow probe took 0.4 s: sized again from that run
        // (2.75 times as many, 10% over, in hundreds).
        assert_eq!(
            resized(&options, 22_000, Duration::from_millis(400)),
            Some(60_600)
        );
        // 0.9 s is close enough to the minimum: kept.
        assert_eq!(resized(&options, 22_000, Duration::from_millis(900)), None);
        // At the cap nothing can grow: kept.
        assert_eq!(
            resized(&options, options.max_messages, Duration::from_millis(100)),
            None
        );
    }

    #[tokio::test]
    async fn a_measurement_whose_runs_end_too_soon_starts_over_on_a_larger_count() {
        let options = BenchOptions {
            repeats: 3,
            ..BenchOptions::default()
        };
        // A cold probe: 2000 messages in 0.2 s, as if the path ran at 10000 msg/s;
        // the path really runs at 50000 msg/s once warm.
        let seen = std::sync::Mutex::new(Vec::new());
        let timed = timed(&options, |run, sized| {
            seen.lock().unwrap().push((run.clone(), sized.messages));
            async move {
                let rate = if run == "probe" { 10_000.0 } else { 50_000.0 };
                Ok(Duration::from_secs_f64(sized.messages as f64 / rate))
            }
        })
        .await
        .unwrap();
        assert_eq!(timed.times.len(), 3);
        assert!(
            timed
                .times
                .iter()
                .all(|t| t.as_secs_f64() >= options.min_seconds),
            "{timed:?}; runs: {:?}",
            seen.lock().unwrap()
        );
    }

    #[test]
    fn a_measurement_keeps_the_median_and_every_run() {
        let timed = Timed {
            messages: 1000,
            times: vec![
                Duration::from_millis(500),
                Duration::from_millis(250),
                Duration::from_millis(1000),
            ],
        };
        let m = measurement("bulk publish x100", &timed, None);
        assert_eq!(m.seconds, 0.5);
        assert_eq!(m.rate, 2000.0);
        assert_eq!(m.spread(), Some((1000.0, 4000.0)));
    }
}
