//! Topics as AMQP routing keys: a topic's key spells it one character per word
//! (`a.b-c` -> `a.%2E.b.-.c`), so that a glob pattern maps exactly onto a binding
//! pattern (`*` -> `#`, which matches any run of words), and the key of a delivery
//! names its topic again.

use super::short;
use crate::error::{PubSubError, Result};
use lapin::types::ShortString;

/// AMQP routing keys are at most 255 bytes; a topic spelled one character per word
/// takes up to 4 bytes per character.
const MAX_ROUTED_TOPIC: usize = 63;

/// One topic character as one routing-key word: letters, digits, `-` and `_` as
/// themselves, anything else as `%XX`.
fn word(c: char) -> String {
    if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
        c.to_string()
    } else {
        format!("%{:02X}", c as u32)
    }
}

/// The routing key of a topic.
pub(super) fn routing_key(topic: &str) -> Result<ShortString> {
    if topic.chars().count() > MAX_ROUTED_TOPIC {
        return Err(PubSubError::InvalidRequest(format!(
            "topic '{topic}' is longer than {MAX_ROUTED_TOPIC} characters, the most a RabbitMQ routing key can spell"
        )));
    }
    let key: Vec<String> = topic.chars().map(word).collect();
    short(key.join("."))
}

/// The binding key of a glob pattern: `*` matches any run of words.
pub(super) fn binding_key(pattern: &str) -> Result<ShortString> {
    let key: Vec<String> = pattern
        .chars()
        .map(|c| if c == '*' { "#".into() } else { word(c) })
        .collect();
    short(key.join("."))
}

/// The topic a routing key spells.
pub(super) fn topic_of(routing_key: &str) -> String {
    routing_key
        .split('.')
        .map(|w| match w.strip_prefix('%') {
            Some(hex) => u32::from_str_radix(hex, 16)
                .ok()
                .and_then(char::from_u32)
                .map(String::from)
                .unwrap_or_default(),
            None => w.to_string(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case("orders")]
    #[case("a.b/c:d")]
    #[case("pcs-1a2b_x")]
    fn routing_keys_spell_topics_back(#[case] topic: &str) {
        let key = routing_key(topic).unwrap();
        assert_eq!(topic_of(key.as_str()), topic);
    }

    #[test]
    fn a_glob_becomes_a_binding_pattern() {
        assert_eq!(binding_key("ab*").unwrap().as_str(), "a.b.#");
        assert_eq!(binding_key("a.*").unwrap().as_str(), "a.%2E.#");
    }

    #[test]
    fn overlong_topics_are_refused_by_name() {
        let topic = "t".repeat(MAX_ROUTED_TOPIC + 1);
        let error = routing_key(&topic).unwrap_err();
        assert!(error.to_string().contains("longer than 63"), "{error}");
    }
}
