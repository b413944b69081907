//! Validation of topics and metadata, and parsing of the Dapr control keys.

use crate::error::{PubSubError, Result};
use crate::message::Metadata;
use std::time::{Duration, SystemTime};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// Wire headers the runtime adds; application metadata may not use this prefix.
pub const RESERVED_PREFIX: &str = "x-rt-";
/// Marks a payload sent `rawPayload` whose content type is nonetheless the CloudEvents
/// one, so that delivery hands it over as sent. Any other message whose content type
/// is `application/cloudevents+json` is an envelope, and carries no marker of its own
/// (the content type already says so, on every message, for nothing).
pub const HEADER_RAW: &str = "x-rt-raw";
/// Emulated TTL: absolute expiry (RFC 3339).
pub const HEADER_EXPIRATION: &str = "x-rt-expiration";
/// Emulated delayed delivery: absolute due time (RFC 3339).
pub const HEADER_DELIVER_AT: &str = "x-rt-deliver-at";
/// The message's W3C trace context, where its envelope does not carry it: on a
/// `rawPayload` message, or when the app's own CloudEvent names another trace.
pub const HEADER_TRACEPARENT: &str = "x-rt-traceparent";

/// Metadata keys that the runtime reads.
pub mod keys {
    pub const RAW_PAYLOAD: &str = "rawPayload";
    pub const TTL_IN_SECONDS: &str = "ttlInSeconds";
    pub const DELIVER_AT: &str = "deliverAt";
    pub const DELIVER_AFTER: &str = "deliverAfter";
    pub const PARTITION_KEY: &str = "partitionKey";
    pub const TRACEPARENT: &str = "traceparent";
    pub const KEEP_ORDER: &str = "batchPublishKeepOrder";
    pub const MAX_BULK_PUB_BYTES: &str = "maxBulkPubBytes";
    /// Added to dead-lettered messages.
    pub const ORIGINAL_TOPIC: &str = "originalTopic";
    /// Added to dead-lettered messages: `maxDeliveries`, `dropped` or `expired`.
    pub const DEAD_LETTER_REASON: &str = "deadLetterReason";
}

/// The longest topic name accepted.
pub const MAX_TOPIC_LEN: usize = 249;

/// Checks a topic name: 1 to 249 characters of `A-Z a-z 0-9 . _ - / :`.
pub fn validate_topic(topic: &str) -> Result<()> {
    if topic.is_empty() {
        return Err(PubSubError::InvalidRequest("topic name is empty".into()));
    }
    if topic.len() > MAX_TOPIC_LEN {
        return Err(PubSubError::InvalidRequest(format!(
            "topic name '{}...' is {} characters long; the maximum is {MAX_TOPIC_LEN}",
            &topic[..32],
            topic.len()
        )));
    }
    if let Some(bad) = topic
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/' | ':')))
    {
        return Err(PubSubError::InvalidRequest(format!(
            "topic name '{topic}' contains '{bad}'; allowed are letters, digits and . _ - / :"
        )));
    }
    Ok(())
}

/// Per-message controls read from metadata.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Controls {
    pub raw_payload: bool,
    pub ttl: Option<Duration>,
    pub deliver_at: Option<SystemTime>,
    pub partition_key: Option<String>,
    pub traceparent: Option<String>,
}

fn invalid(key: &str, value: &str, expected: &str) -> PubSubError {
    PubSubError::InvalidRequest(format!(
        "metadata '{key}' has value '{value}'; expected {expected}"
    ))
}

/// Parses a `true`/`false` metadata value.
pub fn parse_bool(key: &str, value: &str) -> Result<bool> {
    match value {
        "true" | "True" | "TRUE" => Ok(true),
        "false" | "False" | "FALSE" => Ok(false),
        _ => Err(invalid(key, value, "'true' or 'false'")),
    }
}

/// Formats a time as RFC 3339 (UTC, nanoseconds).
pub fn format_time(at: SystemTime) -> String {
    OffsetDateTime::from(at)
        .format(&Rfc3339)
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".into())
}

/// Parses an RFC 3339 time with any offset.
pub fn parse_time(text: &str) -> Option<SystemTime> {
    OffsetDateTime::parse(text, &Rfc3339)
        .ok()
        .map(SystemTime::from)
}

/// The latest time a message's metadata can name (RFC 3339 stops at year 9999).
fn latest_time() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(253_402_300_799)
}

/// True when `now + span` is a time RFC 3339 can write.
fn representable(now: SystemTime, span: Duration) -> bool {
    now.checked_add(span).is_some_and(|at| at <= latest_time())
}

/// Checks keys and values, and reads the control keys.
pub fn parse_controls(metadata: &Metadata, now: SystemTime) -> Result<Controls> {
    let mut controls = Controls::default();
    for (key, value) in metadata {
        if key.is_empty() {
            return Err(PubSubError::InvalidRequest(
                "metadata has an empty key".into(),
            ));
        }
        if key.starts_with(RESERVED_PREFIX) {
            return Err(PubSubError::InvalidRequest(format!(
                "metadata key '{key}' uses the prefix '{RESERVED_PREFIX}', which is reserved for the runtime"
            )));
        }
        if key.chars().any(char::is_control) || value.chars().any(|c| c.is_control() && c != '\t') {
            return Err(PubSubError::InvalidRequest(format!(
                "metadata '{key}' contains a control character"
            )));
        }
        match key.as_str() {
            keys::RAW_PAYLOAD => controls.raw_payload = parse_bool(key, value)?,
            keys::TTL_IN_SECONDS => {
                let seconds = value
                    .parse::<u64>()
                    .ok()
                    .filter(|s| *s > 0)
                    .ok_or_else(|| invalid(key, value, "a whole number of seconds above 0"))?;
                let ttl = Duration::from_secs(seconds);
                if !representable(now, ttl) {
                    return Err(invalid(
                        key,
                        value,
                        "a whole number of seconds above 0 that ends before the year 10000",
                    ));
                }
                controls.ttl = Some(ttl);
            }
            keys::DELIVER_AT => {
                let at = parse_time(value).ok_or_else(|| {
                    invalid(key, value, "an RFC 3339 time such as 2026-01-02T15:04:05Z")
                })?;
                controls.deliver_at = Some(at);
            }
            keys::DELIVER_AFTER => {
                let after = humantime::parse_duration(value)
                    .map_err(|_| invalid(key, value, "a duration such as 500ms, 5s or 1m"))?;
                if !representable(now, after) {
                    return Err(invalid(
                        key,
                        value,
                        "a duration that ends before the year 10000",
                    ));
                }
                controls.deliver_at = Some(now + after);
            }
            keys::PARTITION_KEY if value.is_empty() => {
                return Err(invalid(key, value, "a non-empty key"))
            }
            keys::PARTITION_KEY => controls.partition_key = Some(value.clone()),
            keys::TRACEPARENT => {
                if !super::trace::is_valid_traceparent(value) {
                    return Err(invalid(
                        key,
                        value,
                        "a W3C traceparent like 00-<32 hex>-<16 hex>-<2 hex>",
                    ));
                }
                controls.traceparent = Some(value.clone());
            }
            _ => {}
        }
    }
    if metadata.contains_key(keys::DELIVER_AT) && metadata.contains_key(keys::DELIVER_AFTER) {
        return Err(PubSubError::InvalidRequest(
            "metadata sets both 'deliverAt' and 'deliverAfter'; use one".into(),
        ));
    }
    Ok(controls)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::strategy::Strategy as _;
    use rstest::rstest;

    fn md(pairs: &[(&str, &str)]) -> Metadata {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[rstest]
    #[case(&[("ttlInSeconds", "0")], "ttlInSeconds")]
    #[case(&[("ttlInSeconds", "soon")], "ttlInSeconds")]
    #[case(&[("rawPayload", "yes")], "rawPayload")]
    #[case(&[("deliverAt", "tomorrow")], "deliverAt")]
    #[case(&[("deliverAfter", "5 parsecs")], "deliverAfter")]
    #[case(&[("deliverAt", "2026-01-01T00:00:00Z"), ("deliverAfter", "1s")], "both")]
    #[case(&[("x-rt-envelope", "x")], "reserved")]
    #[case(&[("traceparent", "00-abc")], "traceparent")]
    #[case(&[("partitionKey", "")], "partitionKey")]
    #[case(&[("", "v")], "empty key")]
    #[case(&[("ttlInSeconds", "-1")], "ttlInSeconds")]
    #[case(&[("ttlInSeconds", "18446744073709551615")], "before the year 10000")]
    #[case(&[("deliverAfter", "300000000years")], "before the year 10000")]
    #[case(&[("deliverAfter", "-5s")], "deliverAfter")]
    #[case(&[("deliverAt", "10000-01-01T00:00:00Z")], "deliverAt")]
    fn bad_metadata_is_named(#[case] pairs: &[(&str, &str)], #[case] named: &str) {
        let err = parse_controls(&md(pairs), SystemTime::now()).unwrap_err();
        assert!(matches!(err, PubSubError::InvalidRequest(_)));
        assert!(err.to_string().contains(named), "{err}");
    }

    #[test]
    fn controls_are_read() {
        let now = SystemTime::now();
        let c = parse_controls(
            &md(&[
                ("ttlInSeconds", "30"),
                ("deliverAfter", "2s"),
                ("rawPayload", "true"),
                ("partitionKey", "k"),
            ]),
            now,
        )
        .unwrap();
        assert_eq!(c.ttl, Some(Duration::from_secs(30)));
        assert_eq!(c.deliver_at, Some(now + Duration::from_secs(2)));
        assert!(c.raw_payload);
        assert_eq!(c.partition_key.as_deref(), Some("k"));
    }

    #[rstest]
    #[case("")]
    #[case("a#b")]
    #[case("a@b")]
    #[case("with space")]
    fn bad_topics_are_refused(#[case] topic: &str) {
        assert!(validate_topic(topic).is_err());
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config {
            cases: 512,
            rng_seed: proptest::test_runner::RngSeed::Fixed(0x5eed_c0de),
            failure_persistence: None,
            ..Default::default()
        })]
        /// No metadata panics the parser; what it accepts names times RFC 3339 can write.
        #[test]
        fn no_metadata_panics_the_parser(
            pairs in proptest::collection::vec(
                (
                    proptest::prop_oneof![
                        proptest::sample::select(vec![
                            "ttlInSeconds", "deliverAt", "deliverAfter", "rawPayload",
                            "partitionKey", "traceparent",
                        ]).prop_map(str::to_string),
                        ".{0,12}",
                    ],
                    proptest::prop_oneof![
                        ".{0,40}",
                        "[0-9]{1,25}",
                        "-?[0-9]{1,12}(ns|ms|s|m|h|d|years)",
                        "[0-9]{4,5}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{1,9})?(Z|[+-][0-9]{2}:[0-9]{2})",
                    ],
                ),
                0..5,
            )
        ) {
            let metadata: Metadata = pairs.into_iter().collect();
            if let Ok(controls) = parse_controls(&metadata, SystemTime::now()) {
                if let Some(at) = controls.deliver_at {
                    proptest::prop_assert!(at <= latest_time());
                }
                if let Some(ttl) = controls.ttl {
                    proptest::prop_assert!(representable(SystemTime::now(), ttl));
                }
            }
        }
    }

    #[test]
    fn times_round_trip() {
        let at = SystemTime::now();
        assert_eq!(parse_time(&format_time(at)), Some(at));
        assert!(parse_time("2026-01-02T03:04:05+02:00").is_some());
    }
}
