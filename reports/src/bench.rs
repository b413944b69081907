//! Benchmark results, stored in the report beside the matrix.

use serde::{Deserialize, Serialize};

/// One component's benchmark run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchReport {
    pub component: String,
    /// The settings, stated: message size, counts, acks.
    pub settings: String,
    pub measurements: Vec<Measurement>,
    pub latency: Option<LatencySummary>,
}

/// One measured throughput.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    /// e.g. `single publish`, `bulk publish x100`.
    pub label: String,
    pub messages: u64,
    pub seconds: f64,
    /// Messages per second.
    pub rate: f64,
    /// This rate divided by the baseline's, from the same run.
    pub ratio: Option<f64>,
    /// What `ratio` compares against.
    pub baseline: Option<String>,
    /// The rate of each repeat (`rate` is their median), for the spread.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<f64>,
}

impl Measurement {
    /// The lowest and highest rate over the repeats, when there were several.
    pub fn spread(&self) -> Option<(f64, f64)> {
        if self.runs.len() < 2 {
            return None;
        }
        let min = self.runs.iter().copied().fold(f64::INFINITY, f64::min);
        let max = self.runs.iter().copied().fold(0.0, f64::max);
        Some((min, max))
    }
}

/// End-to-end latency from publish call to handler, in microseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    pub samples: u64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
}
