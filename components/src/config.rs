//! Dapr-style component definitions (`kind: Component`) read from YAML.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

/// A definition file could not be used; the message names the file and the field.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {field}: {message}")]
pub struct ConfigError {
    pub file: String,
    pub field: String,
    pub message: String,
}

/// A component definition as written in `fixtures/*.yaml`.
#[derive(Debug, Clone, PartialEq)]
pub struct ComponentDefinition {
    /// Where it was read from (for error messages).
    pub source: PathBuf,
    /// `metadata.name`: the pub/sub name and the name used on the command line.
    pub name: String,
    /// `spec.type` without the `pubsub.` prefix, e.g. `in-memory`.
    pub component_type: String,
    /// `spec.version`.
    pub version: String,
    /// `spec.metadata` as name -> value.
    pub metadata: BTreeMap<String, String>,
    /// `metadata.annotations`: settings for the suite rather than the component, e.g.
    /// `pubsub-conformance/container-image`.
    pub annotations: BTreeMap<String, String>,
}

/// The annotation naming the container image to run the broker from.
pub const CONTAINER_IMAGE_ANNOTATION: &str = "pubsub-conformance/container-image";

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawDefinition {
    api_version: String,
    kind: String,
    metadata: RawMeta,
    spec: RawSpec,
}

#[derive(Deserialize)]
struct RawMeta {
    name: String,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSpec {
    #[serde(rename = "type")]
    component_type: String,
    #[serde(default = "default_version")]
    version: String,
    #[serde(default)]
    metadata: Vec<RawItem>,
}

fn default_version() -> String {
    "v1".into()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawItem {
    name: String,
    value: serde_yaml::Value,
}

impl ComponentDefinition {
    /// Reads and checks a definition file.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: path.display().to_string(),
            field: "(file)".into(),
            message: format!("cannot read: {e}"),
        })?;
        Self::parse(&text, path)
    }

    /// Parses and checks definition text; `source` names it in errors.
    pub fn parse(text: &str, source: &Path) -> Result<Self, ConfigError> {
        let file = source.display().to_string();
        let error = |field: &str, message: String| ConfigError {
            file: file.clone(),
            field: field.into(),
            message,
        };
        let raw: RawDefinition = serde_yaml::from_str(text).map_err(|e| {
            let at = e
                .location()
                .map(|l| format!("line {} column {}", l.line(), l.column()))
                .unwrap_or_else(|| "(document)".into());
            error(&at, e.to_string())
        })?;
        if raw.api_version != "dapr.io/v1alpha1" {
            return Err(error(
                "apiVersion",
                format!("expected 'dapr.io/v1alpha1', got '{}'", raw.api_version),
            ));
        }
        if raw.kind != "Component" {
            return Err(error(
                "kind",
                format!("expected 'Component', got '{}'", raw.kind),
            ));
        }
        if raw.metadata.name.is_empty()
            || !raw
                .metadata
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-')
        {
            return Err(error(
                "metadata.name",
                format!(
                    "'{}' must be non-empty letters, digits and '-'",
                    raw.metadata.name
                ),
            ));
        }
        let component_type = raw
            .spec
            .component_type
            .strip_prefix("pubsub.")
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                error(
                    "spec.type",
                    format!(
                        "expected 'pubsub.<name>', got '{}'",
                        raw.spec.component_type
                    ),
                )
            })?
            .to_string();
        let mut metadata = BTreeMap::new();
        for (index, item) in raw.spec.metadata.into_iter().enumerate() {
            let field = format!("spec.metadata[{index}] ({})", item.name);
            let value = match item.value {
                serde_yaml::Value::String(s) => s,
                serde_yaml::Value::Number(n) => n.to_string(),
                serde_yaml::Value::Bool(b) => b.to_string(),
                other => {
                    return Err(error(
                        &field,
                        format!("value must be a string, number or boolean, got {other:?}"),
                    ))
                }
            };
            if metadata.insert(item.name.clone(), value).is_some() {
                return Err(error(&field, "is set twice".into()));
            }
        }
        for key in raw.metadata.annotations.keys() {
            if key.starts_with("pubsub-conformance/") && key != CONTAINER_IMAGE_ANNOTATION {
                return Err(error(
                    &format!("metadata.annotations.{key}"),
                    format!("unknown suite annotation; known: {CONTAINER_IMAGE_ANNOTATION}"),
                ));
            }
        }
        Ok(ComponentDefinition {
            source: source.to_path_buf(),
            annotations: raw.metadata.annotations,
            name: raw.metadata.name,
            component_type,
            version: raw.spec.version,
            metadata,
        })
    }

    /// The error for a field of this definition.
    pub fn error(&self, field: &str, message: impl Into<String>) -> ConfigError {
        ConfigError {
            file: self.source.display().to_string(),
            field: field.into(),
            message: message.into(),
        }
    }

    /// Refuses metadata names outside `known`, catching typos.
    pub fn check_known(&self, known: &[&str]) -> Result<(), ConfigError> {
        match self.metadata.keys().find(|k| !known.contains(&k.as_str())) {
            Some(unknown) => Err(self.error(
                &format!("spec.metadata ({unknown})"),
                format!(
                    "unknown for type pubsub.{}; known: {}",
                    self.component_type,
                    known.join(", ")
                ),
            )),
            None => Ok(()),
        }
    }

    /// The error for the metadata field `name` (named `spec.metadata (<name>)`).
    pub fn field_error(&self, name: &str, message: impl Into<String>) -> ConfigError {
        self.error(&format!("spec.metadata ({name})"), message)
    }

    /// Checks that `value`, the setting `name`, is `host:port` with a port number.
    pub fn check_host_port(&self, name: &str, value: &str) -> Result<(), ConfigError> {
        let valid = value
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
        if valid {
            return Ok(());
        }
        Err(self.field_error(name, format!("expected host:port, got '{value}'")))
    }

    /// A typed metadata value, or `None` when not set.
    pub fn value<T: FromStr>(&self, name: &str, expected: &str) -> Result<Option<T>, ConfigError> {
        self.metadata
            .get(name)
            .map(|raw| {
                raw.parse::<T>().map_err(|_| {
                    self.field_error(name, format!("expected {expected}, got '{raw}'"))
                })
            })
            .transpose()
    }

    /// A metadata value as written, or `default` when not set.
    pub fn text_or(&self, name: &str, default: String) -> String {
        self.metadata.get(name).cloned().unwrap_or(default)
    }

    /// A duration given in milliseconds, or `None` when not set.
    pub fn millis(&self, name: &str) -> Result<Option<Duration>, ConfigError> {
        Ok(self
            .value::<u64>(name, "milliseconds")?
            .map(Duration::from_millis))
    }

    /// A duration given in milliseconds that may not be shorter than `min`, or `None`
    /// when not set.
    pub fn millis_at_least(
        &self,
        name: &str,
        min: Duration,
    ) -> Result<Option<Duration>, ConfigError> {
        let value = self.millis(name)?;
        if value.is_some_and(|value| value < min) {
            let message = format!("must be at least {} ms", min.as_millis());
            return Err(self.field_error(name, message));
        }
        Ok(value)
    }

    /// `maxMessageBytes`, the largest payload a component accepts, or `default` when
    /// not set.
    pub fn max_message_bytes(&self, default: usize) -> Result<usize, ConfigError> {
        Ok(self
            .value::<usize>("maxMessageBytes", "a number of bytes")?
            .unwrap_or(default))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    const GOOD: &str = "apiVersion: dapr.io/v1alpha1\nkind: Component\nmetadata:\n  name: memory\nspec:\n  type: pubsub.in-memory\n  version: v1\n  metadata:\n    - name: maxMessageBytes\n      value: 1024\n";

    #[test]
    fn reads_a_definition() {
        let def = ComponentDefinition::parse(GOOD, Path::new("memory.yaml")).unwrap();
        assert_eq!(def.name, "memory");
        assert_eq!(def.component_type, "in-memory");
        assert_eq!(
            def.value::<usize>("maxMessageBytes", "bytes").unwrap(),
            Some(1024)
        );
    }

    #[rstest]
    #[case(GOOD.replace("dapr.io/v1alpha1", "v2"), "apiVersion")]
    #[case(GOOD.replace("kind: Component", "kind: Thing"), "kind")]
    #[case(GOOD.replace("pubsub.in-memory", "state.redis"), "spec.type")]
    #[case(GOOD.replace("name: memory", "name: 'bad name'"), "metadata.name")]
    #[case(GOOD.replace("value: 1024", "value: [1]"), "maxMessageBytes")]
    #[case(GOOD.replace("  version: v1\n", "  versoin: v1\n"), "versoin")]
    #[case("apiVersion: [".to_string(), "line")]
    fn bad_definitions_name_file_and_field(#[case] text: String, #[case] field: &str) {
        let err = ComponentDefinition::parse(&text, Path::new("fixtures/x.yaml")).unwrap_err();
        let message = err.to_string();
        assert!(message.starts_with("fixtures/x.yaml: "), "{message}");
        assert!(message.contains(field), "{message}");
    }

    #[test]
    fn bad_values_name_the_field() {
        let def =
            ComponentDefinition::parse(&GOOD.replace("1024", "lots"), Path::new("m.yaml")).unwrap();
        let err = def
            .value::<usize>("maxMessageBytes", "a number of bytes")
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "m.yaml: spec.metadata (maxMessageBytes): expected a number of bytes, got 'lots'"
        );
        assert!(def
            .check_known(&["other"])
            .unwrap_err()
            .to_string()
            .contains("maxMessageBytes"));
    }

    #[test]
    fn typed_readers_default_and_name_the_field_they_refuse() {
        let text = GOOD.replace(
            "    - name: maxMessageBytes\n      value: 1024\n",
            "    - name: waitMs\n      value: 50\n    - name: host\n      value: h:1\n",
        );
        let def = ComponentDefinition::parse(&text, Path::new("m.yaml")).unwrap();
        assert_eq!(def.text_or("host", "d".into()), "h:1");
        assert_eq!(def.text_or("other", "d".into()), "d");
        assert_eq!(
            def.millis("waitMs").unwrap(),
            Some(Duration::from_millis(50))
        );
        assert_eq!(def.millis("otherMs").unwrap(), None);
        assert_eq!(def.max_message_bytes(7).unwrap(), 7);
        assert_eq!(
            def.millis_at_least("waitMs", Duration::from_millis(100))
                .unwrap_err()
                .to_string(),
            "m.yaml: spec.metadata (waitMs): must be at least 100 ms"
        );
        assert_eq!(
            def.millis_at_least("otherMs", Duration::from_millis(100))
                .unwrap(),
            None
        );
    }

    #[rstest]
    #[case("localhost:6379", true)]
    #[case("[::1]:6379", true)]
    #[case("broker:1", true)]
    #[case("localhost", false)]
    #[case(":6379", false)]
    #[case("broker:port", false)]
    #[case("broker:65536", false)]
    #[case("", false)]
    fn host_port_needs_a_host_and_a_port_number(#[case] value: &str, #[case] valid: bool) {
        let def = ComponentDefinition::parse(GOOD, Path::new("m.yaml")).unwrap();
        let checked = def.check_host_port("host", value);
        assert_eq!(checked.is_ok(), valid, "{value}: {checked:?}");
        if let Err(e) = checked {
            let text = e.to_string();
            assert!(
                text.contains("(host)") && text.contains("expected host:port"),
                "{text}"
            );
        }
    }
}
