//! W3C trace context (`traceparent`) for messages.

use rand::Rng;

/// Appends `value` as `digits` lowercase hex digits.
fn push_hex(out: &mut String, value: u128, digits: u32) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for shift in (0..digits).rev() {
        out.push(char::from(HEX[((value >> (shift * 4)) & 0xf) as usize]));
    }
}

/// `00-<trace>-<span>-01` for a trace id given as 32 hex digits.
fn sampled(trace: &str, span: u64) -> String {
    let mut out = String::with_capacity(55);
    out.push_str("00-");
    out.push_str(trace);
    out.push('-');
    push_hex(&mut out, u128::from(span), 16);
    out.push_str("-01");
    out
}

/// A new sampled `traceparent` with random trace and span ids.
pub fn new_traceparent() -> String {
    let mut rng = rand::thread_rng();
    let trace: u128 = rng.gen_range(1..=u128::MAX);
    let span: u64 = rng.gen_range(1..=u64::MAX);
    let mut trace_hex = String::with_capacity(32);
    push_hex(&mut trace_hex, trace, 32);
    sampled(&trace_hex, span)
}

/// A `traceparent` for a new span in the trace of `parent` (same trace id, new span
/// id), or a new trace when `parent` is not a valid `traceparent`.
pub fn child_of(parent: &str) -> String {
    match trace_id(parent).filter(|_| is_valid_traceparent(parent)) {
        Some(trace) => sampled(trace, rand::thread_rng().gen_range(1..=u64::MAX)),
        None => new_traceparent(),
    }
}

/// A `traceparent` for a new span in the trace `trace` (32 hex digits, taken from a
/// valid `traceparent`): [`child_of`] without checking its parent again, for the
/// entries of one bulk call.
pub fn new_span_in(trace: &str) -> String {
    sampled(trace, rand::thread_rng().gen_range(1..=u64::MAX))
}

/// True for a version-00 `traceparent` with non-zero trace and span ids (checked
/// byte by byte, without allocating: it runs for every published message).
pub fn is_valid_traceparent(value: &str) -> bool {
    let bytes = value.as_bytes();
    let lower_hex = |b: &u8| b.is_ascii_digit() || (b'a'..=b'f').contains(b);
    let not_zero = |part: &[u8]| part.iter().any(|b| *b != b'0');
    bytes.len() == 55
        && bytes.starts_with(b"00-")
        && bytes[35] == b'-'
        && bytes[52] == b'-'
        && bytes[3..35].iter().all(lower_hex)
        && not_zero(&bytes[3..35])
        && bytes[36..52].iter().all(lower_hex)
        && not_zero(&bytes[36..52])
        && bytes[53..55].iter().all(lower_hex)
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
    fn a_child_keeps_the_trace_and_takes_a_new_span() {
        let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let child = child_of(parent);
        assert!(is_valid_traceparent(&child), "{child}");
        assert_eq!(trace_id(&child), trace_id(parent));
        assert_ne!(child, parent);
        let sibling = new_span_in(trace_id(&child).unwrap());
        assert!(is_valid_traceparent(&sibling), "{sibling}");
        assert_eq!(trace_id(&sibling), trace_id(parent));
        assert_ne!(sibling, child);
        let mut hex = String::new();
        push_hex(&mut hex, 0xab, 4);
        assert_eq!(hex, "00ab");
    }

    #[test]
    fn a_well_formed_traceparent_is_accepted() {
        assert!(is_valid_traceparent(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        ));
    }

    #[test]
    fn malformed_traceparents_are_refused() {
        for bad in [
            "",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4bf92f3577b34da6a3ce929d0e0e4736+00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",
        ] {
            assert!(!is_valid_traceparent(bad), "{bad}");
        }
    }
}
