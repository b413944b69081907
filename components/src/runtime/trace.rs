//! W3C trace context (`traceparent`) for messages.

use rand::Rng;

/// A new sampled `traceparent` with random trace and span ids.
pub fn new_traceparent() -> String {
    let mut rng = rand::thread_rng();
    let trace: u128 = rng.gen_range(1..=u128::MAX);
    let span: u64 = rng.gen_range(1..=u64::MAX);
    format!("00-{trace:032x}-{span:016x}-01")
}

/// A `traceparent` for a new span in the trace of `parent` (same trace id, new span
/// id), or a new trace when `parent` is not a valid `traceparent`.
pub fn child_of(parent: &str) -> String {
    match trace_id(parent).filter(|_| is_valid_traceparent(parent)) {
        Some(trace) => {
            let span: u64 = rand::thread_rng().gen_range(1..=u64::MAX);
            format!("00-{trace}-{span:016x}-01")
        }
        None => new_traceparent(),
    }
}

/// True for a version-00 `traceparent` with non-zero trace and span ids.
pub fn is_valid_traceparent(value: &str) -> bool {
    let parts: Vec<&str> = value.split('-').collect();
    let hex = |s: &str, len: usize| {
        s.len() == len
            && s.chars()
                .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
    };
    parts.len() == 4
        && parts[0] == "00"
        && hex(parts[1], 32)
        && parts[1].chars().any(|c| c != '0')
        && hex(parts[2], 16)
        && parts[2].chars().any(|c| c != '0')
        && hex(parts[3], 2)
}

/// The trace id part of a `traceparent`.
pub fn trace_id(traceparent: &str) -> Option<&str> {
    traceparent.split('-').nth(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_traceparents_are_valid_and_distinct() {
        let a = new_traceparent();
        let b = new_traceparent();
        assert!(is_valid_traceparent(&a), "{a}");
        assert_ne!(a, b);
        assert_eq!(trace_id(&a).unwrap().len(), 32);
    }

    #[test]
    fn malformed_traceparents_are_refused() {
        for bad in [
            "",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        ] {
            assert!(!is_valid_traceparent(bad), "{bad}");
        }
    }
}
