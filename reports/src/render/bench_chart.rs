//! The side-by-side publish chart of every benchmarked component: single publish vs
//! bulk x10 vs bulk x100, in messages per second on a log scale, as inline SVG for
//! the HTML report and as text for `bench`'s output.

use crate::{BenchReport, Measurement};
use std::fmt::Write;

/// The measurements the chart compares, in the order drawn.
pub const CHART_SERIES: [&str; 3] = ["single publish", "bulk publish x10", "bulk publish x100"];

/// The bars of one component: (series, measurement) for those it has.
fn bars(bench: &BenchReport) -> Vec<(&'static str, &Measurement)> {
    CHART_SERIES
        .iter()
        .filter_map(|series| {
            bench
                .measurements
                .iter()
                .find(|m| m.label == *series)
                .map(|m| (*series, m))
        })
        .collect()
}

/// The decades the axis spans: 10^low .. 10^high around every charted rate.
fn decades(benches: &[BenchReport]) -> Option<(i32, i32)> {
    let rates: Vec<f64> = benches
        .iter()
        .flat_map(|b| bars(b).into_iter().map(|(_, m)| m.rate))
        .filter(|r| *r > 0.0)
        .collect();
    let low = rates.iter().copied().fold(f64::INFINITY, f64::min);
    let high = rates.iter().copied().fold(0.0, f64::max);
    if rates.is_empty() {
        return None;
    }
    let low = low.log10().floor() as i32;
    let high = (high.log10().ceil() as i32).max(low + 1);
    Some((low, high))
}

/// Where `rate` falls between the axis ends, 0.0 to 1.0.
fn position(rate: f64, (low, high): (i32, i32)) -> f64 {
    ((rate.max(1.0).log10() - f64::from(low)) / f64::from(high - low)).clamp(0.0, 1.0)
}

fn short_rate(rate: f64) -> String {
    if rate >= 1e6 {
        format!("{:.1}M", rate / 1e6)
    } else if rate >= 1e3 {
        format!("{:.1}k", rate / 1e3)
    } else {
        format!("{rate:.0}")
    }
}

/// The chart as text: a bar per component and series, log scale, with the rate and
/// the spread over the repeats.
pub fn bench_chart_text(benches: &[BenchReport]) -> String {
    const WIDTH: f64 = 40.0;
    let Some(axis) = decades(benches) else {
        return String::new();
    };
    let mut out = format!(
        "publish throughput, msg/s, log scale from 10^{} to 10^{}:\n",
        axis.0, axis.1
    );
    let name_width = benches.iter().map(|b| b.component.len()).max().unwrap_or(0);
    for bench in benches {
        for (i, (series, m)) in bars(bench).into_iter().enumerate() {
            let filled = (position(m.rate, axis) * WIDTH).round() as usize;
            let name = if i == 0 { bench.component.as_str() } else { "" };
            let _ = writeln!(
                out,
                "{name:<name_width$}  {:<6} {}{} {:>7}{}",
                series
                    .trim_start_matches("bulk publish ")
                    .trim_end_matches(" publish"),
                "█".repeat(filled),
                "·".repeat(WIDTH as usize - filled),
                short_rate(m.rate),
                m.spread()
                    .map(|(min, max)| format!(" ({}..{})", short_rate(min), short_rate(max)))
                    .unwrap_or_default()
            );
        }
    }
    out
}

/// The chart as inline SVG (no external resources): a group of bars per component.
pub fn bench_chart_svg(benches: &[BenchReport]) -> String {
    let Some(axis) = decades(benches) else {
        return String::new();
    };
    let (left, plot, bar, gap) = (150.0, 420.0, 14.0, 10.0);
    let rows: Vec<(&BenchReport, Vec<(&'static str, &Measurement)>)> =
        benches.iter().map(|b| (b, bars(b))).collect();
    let height = rows
        .iter()
        .map(|(_, bars)| bars.len() as f64 * bar + gap)
        .sum::<f64>()
        + 40.0;
    let mut out = format!(
        "<svg class=\"chart compare\" width=\"{:.0}\" height=\"{height:.0}\" role=\"img\" aria-label=\"publish throughput of every component, messages per second, log scale\">",
        left + plot + 110.0
    );
    // Gridlines and labels at each decade.
    for decade in axis.0..=axis.1 {
        let x = left + position(10f64.powi(decade), axis) * plot;
        let _ = write!(
            out,
            "<line x1=\"{x:.1}\" y1=\"0\" x2=\"{x:.1}\" y2=\"{:.0}\" stroke=\"#d0d7de\"></line><text x=\"{x:.1}\" y=\"{:.0}\" font-size=\"11\" text-anchor=\"middle\">10^{decade}</text>",
            height - 25.0,
            height - 10.0
        );
    }
    let mut y = 5.0;
    for (bench, bars) in rows {
        let _ = write!(
            out,
            "<text x=\"0\" y=\"{:.1}\" font-size=\"12\" font-weight=\"bold\">{}</text>",
            y + bar,
            super::html::esc(&bench.component)
        );
        for (i, (series, m)) in bars.into_iter().enumerate() {
            let width = (position(m.rate, axis) * plot).max(1.0);
            let spread = m
                .spread()
                .map(|(min, max)| {
                    format!(
                        ", {}..{} over the repeats",
                        short_rate(min),
                        short_rate(max)
                    )
                })
                .unwrap_or_default();
            let _ = write!(
                out,
                "<rect class=\"bar series-{i}\" x=\"{left}\" y=\"{y:.1}\" width=\"{width:.1}\" height=\"{:.1}\"><title>{}: {} {:.0} msg/s{spread}</title></rect><text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\">{} {}</text>",
                bar - 2.0,
                super::html::esc(&bench.component),
                series,
                m.rate,
                left + width + 4.0,
                y + bar - 4.0,
                series.trim_start_matches("bulk publish "),
                short_rate(m.rate)
            );
            y += bar;
        }
        y += gap;
    }
    out.push_str("</svg>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bench(component: &str, rates: [f64; 3]) -> BenchReport {
        BenchReport {
            component: component.into(),
            settings: String::new(),
            measurements: CHART_SERIES
                .iter()
                .zip(rates)
                .map(|(label, rate)| Measurement {
                    label: label.to_string(),
                    messages: 1000,
                    seconds: 1000.0 / rate,
                    rate,
                    ratio: None,
                    baseline: None,
                    runs: vec![rate * 0.9, rate, rate * 1.1],
                })
                .collect(),
            latency: None,
        }
    }

    #[test]
    fn bars_grow_with_the_logarithm_of_the_rate() {
        let benches = [
            bench("redis", [1_000.0, 10_000.0, 100_000.0]),
            bench("memory", [100_000.0, 300_000.0, 400_000.0]),
        ];
        let text = bench_chart_text(&benches);
        assert!(
            text.starts_with("publish throughput, msg/s, log scale from 10^3 to 10^6"),
            "{text}"
        );
        let lengths: Vec<usize> = text
            .lines()
            .skip(1)
            .map(|line| line.matches('█').count())
            .collect();
        // 10^3, 10^4, 10^5 are 0, 1/3 and 2/3 of the way to 10^6.
        assert_eq!(&lengths[..3], &[0, 13, 27], "{text}");
        assert!(text.contains("redis   single"), "{text}");
        assert!(
            text.contains("x100") && text.contains("100.0k (90.0k..110.0k)"),
            "{text}"
        );
        let svg = bench_chart_svg(&benches);
        assert_eq!(svg.matches("<rect class=\"bar").count(), 6);
        assert!(svg.contains("10^6") && svg.contains("memory"), "{svg}");
        assert!(bench_chart_text(&[]).is_empty());
    }
}
