//! The bench results as text.

use pubsub_reports::BenchReport;

/// The bench results as a text table.
pub fn bench_table(report: &BenchReport) -> String {
    let mut out = format!("{}: {}\n", report.component, report.settings);
    out.push_str(&format!(
        "{:<44} {:>9} {:>8} {:>10} {:>19}  ratio\n",
        "measurement", "messages", "seconds", "msg/s", "spread (min..max)"
    ));
    for m in &report.measurements {
        let ratio = m
            .ratio
            .map(|r| format!("{r:.2}x vs {}", m.baseline.as_deref().unwrap_or("?")))
            .unwrap_or_default();
        let spread = m
            .spread()
            .map(|(min, max)| format!("{min:.0}..{max:.0}"))
            .unwrap_or_default();
        out.push_str(&format!(
            "{:<44} {:>9} {:>8.3} {:>10.0} {spread:>19}  {ratio}\n",
            m.label, m.messages, m.seconds, m.rate
        ));
    }
    if let Some(l) = &report.latency {
        out.push_str(&format!(
            "end-to-end latency ({} samples): p50 {} µs, p99 {} µs, max {} µs\n",
            l.samples, l.p50_us, l.p99_us, l.max_us
        ));
    }
    out
}
