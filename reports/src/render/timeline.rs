//! A fault case's timeline as a small self-contained SVG: faults as red markers with
//! their labels, publishes (failed ones in orange) and deliveries as ticks in their
//! own lanes, on one time axis.

use crate::{Lane, Timeline};
use std::fmt::Write;

const WIDTH: f64 = 640.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 10.0;

fn esc(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The SVG markup of `timeline`.
pub fn timeline_svg(timeline: &Timeline) -> String {
    let faults: Vec<_> = timeline
        .events
        .iter()
        .filter(|e| e.lane == Lane::Fault)
        .collect();
    let height = 96.0 + 14.0 * faults.len() as f64;
    let span = timeline.span_ms.max(1) as f64;
    let x = |at: u64| LEFT + (WIDTH - LEFT - RIGHT) * (at as f64 / span);
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"timeline\" width=\"{WIDTH}\" height=\"{height}\" viewBox=\"0 0 {WIDTH} {height}\" role=\"img\" aria-label=\"timeline of faults, publishes and deliveries\">"
    );
    let lanes = [
        (Lane::Fault, "faults", 14.0),
        (Lane::Publish, "publishes", 38.0),
        (Lane::Delivery, "deliveries", 62.0),
    ];
    for (_, name, y) in lanes {
        let _ = write!(
            svg,
            "<text x=\"4\" y=\"{}\" font-size=\"11\">{name}</text><line x1=\"{LEFT}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\" stroke=\"#ddd\"/>",
            y + 4.0,
            WIDTH - RIGHT
        );
    }
    for event in &timeline.events {
        let (y, colour) = match event.lane {
            Lane::Fault => continue,
            Lane::Publish => (38.0, "#2b6cb0"),
            Lane::PublishFailed => (38.0, "#dd6b20"),
            Lane::Delivery => (62.0, "#2f855a"),
        };
        let _ = write!(
            svg,
            "<line x1=\"{0:.1}\" y1=\"{1}\" x2=\"{0:.1}\" y2=\"{2}\" stroke=\"{colour}\"><title>{3}</title></line>",
            x(event.at_ms),
            y - 7.0,
            y + 7.0,
            esc(&event.label)
        );
    }
    for (index, fault) in faults.iter().enumerate() {
        let fx = x(fault.at_ms);
        let label_y = 88.0 + 14.0 * index as f64;
        let _ = write!(
            svg,
            "<line x1=\"{fx:.1}\" y1=\"4\" x2=\"{fx:.1}\" y2=\"{}\" stroke=\"#c53030\" stroke-dasharray=\"3 2\"/><circle cx=\"{fx:.1}\" cy=\"14\" r=\"4\" fill=\"#c53030\"/><text x=\"{:.1}\" y=\"{label_y}\" font-size=\"10\" fill=\"#c53030\">{:.1} s: {}</text>",
            label_y - 10.0,
            (fx + 3.0).min(WIDTH - 200.0),
            fault.at_ms as f64 / 1000.0,
            esc(&fault.label)
        );
    }
    let _ = write!(
        svg,
        "<text x=\"{LEFT}\" y=\"80\" font-size=\"10\">0 s</text><text x=\"{}\" y=\"80\" font-size=\"10\" text-anchor=\"end\">{:.1} s</text></svg>",
        WIDTH - RIGHT,
        span / 1000.0
    );
    svg
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TimelineEvent;

    #[test]
    fn draws_every_lane_and_labels_faults() {
        let event = |at_ms, lane, label: &str| TimelineEvent {
            at_ms,
            lane,
            label: label.into(),
        };
        let svg = timeline_svg(&Timeline {
            span_ms: 4000,
            events: vec![
                event(0, Lane::Publish, "m-0"),
                event(10, Lane::Delivery, "m-0"),
                event(1000, Lane::Fault, "broker killed <SIGKILL>"),
                event(1100, Lane::PublishFailed, "m-1"),
                event(3000, Lane::Fault, "broker restarted"),
                event(4000, Lane::Delivery, "m-1"),
            ],
        });
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert!(svg.contains("1.0 s: broker killed &lt;SIGKILL&gt;"));
        assert!(svg.contains("3.0 s: broker restarted"));
        assert_eq!(svg.matches("#dd6b20").count(), 1);
        assert_eq!(svg.matches("<title>m-").count(), 4);
        assert!(svg.contains("4.0 s</text>"));
    }
}
