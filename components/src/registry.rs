//! The table of component types: the built-in ones this build compiles in (each
//! module owns its typed settings, see [`TypedSettings`]) and those another crate adds
//! with [`register`] (a third-party adapter). It knows nothing of any one type.

use crate::component::Component;
use crate::config::{ComponentDefinition, ConfigError};
use crate::error::PubSubError;
use futures::future::BoxFuture;
use std::marker::PhantomData;
use std::sync::{Arc, RwLock};

pub use crate::typed_settings::{Connecting, TypedSettings};

/// One row of the table: a component type, whatever its settings.
pub trait ComponentType: Send + Sync {
    /// The type, as written after `pubsub.` in `spec.type`.
    fn name(&self) -> &'static str;
    /// The built-in type whose broker serves it (itself for a built-in type with a
    /// broker); `None`: in process.
    fn broker_of(&self) -> Option<&'static str>;
    /// The published crate it adapts, with its version (third-party rows only).
    fn adapts(&self) -> Option<&'static str> {
        None
    }
    /// Checks a definition without connecting anywhere; the endpoint it names.
    fn validate(&self, definition: &ComponentDefinition) -> Result<Validated, ConfigError>;
    /// Checks the definition and builds the component; `endpoint` (`host:port`)
    /// replaces the definition's.
    fn build(
        &self,
        definition: ComponentDefinition,
        endpoint: Option<String>,
    ) -> BoxFuture<'static, Result<Arc<dyn Component>, BuildError>>;
}

/// A checked definition.
#[derive(Debug, Clone, PartialEq)]
pub struct Validated {
    /// The broker endpoint it names (`host:port`), for types that have one.
    pub endpoint: Option<String>,
}

/// The row of a built-in type, from its settings.
struct Typed<S>(PhantomData<fn() -> S>);

impl<S: TypedSettings> Typed<S> {
    const ROW: Self = Typed(PhantomData);
}

impl<S: TypedSettings> ComponentType for Typed<S> {
    fn name(&self) -> &'static str {
        S::TYPE
    }

    fn broker_of(&self) -> Option<&'static str> {
        S::HAS_BROKER.then_some(S::TYPE)
    }

    fn validate(&self, definition: &ComponentDefinition) -> Result<Validated, ConfigError> {
        let settings = S::from_definition(definition)?;
        Ok(Validated {
            endpoint: settings.endpoint(),
        })
    }

    fn build(
        &self,
        definition: ComponentDefinition,
        endpoint: Option<String>,
    ) -> BoxFuture<'static, Result<Arc<dyn Component>, BuildError>> {
        Box::pin(async move {
            let mut settings = S::from_definition(&definition)?;
            if let Some(endpoint) = endpoint {
                settings.aim_at(&endpoint);
            }
            Ok(settings.connect().await?)
        })
    }
}

/// The built-in types this build compiles in (each broker's behind its cargo feature).
static BUILT_IN: &[&dyn ComponentType] = &[
    &Typed::<crate::memory::MemoryConfig>::ROW,
    #[cfg(feature = "redis")]
    &Typed::<crate::redis_streams::RedisConfig>::ROW,
    #[cfg(feature = "postgres")]
    &Typed::<crate::postgres::PostgresConfig>::ROW,
    #[cfg(feature = "nats")]
    &Typed::<crate::nats::NatsConfig>::ROW,
    #[cfg(feature = "rabbitmq")]
    &Typed::<crate::rabbitmq::RabbitConfig>::ROW,
    #[cfg(feature = "mqtt")]
    &Typed::<crate::mqtt::MqttConfig>::ROW,
    #[cfg(feature = "kafka")]
    &Typed::<crate::kafka::KafkaConfig>::ROW,
];

/// Every built-in type with the cargo feature that compiles it in (`None`: always).
pub const BUILT_IN_TYPES: &[(&str, Option<&str>)] = &[
    ("in-memory", None),
    ("redis-streams", Some("redis")),
    ("postgres", Some("postgres")),
    ("nats-jetstream", Some("nats")),
    ("rabbitmq", Some("rabbitmq")),
    ("mqtt5", Some("mqtt")),
    ("kafka", Some("kafka")),
];

/// The cargo feature that would compile in a built-in type this build leaves out.
pub fn compiled_out(type_name: &str) -> Option<&'static str> {
    BUILT_IN_TYPES
        .iter()
        .find(|(name, _)| *name == type_name)
        .and_then(|(_, feature)| *feature)
        .filter(|_| !BUILT_IN.iter().any(|t| t.name() == type_name))
}

fn is_built_in_name(type_name: &str) -> bool {
    BUILT_IN_TYPES.iter().any(|(name, _)| *name == type_name)
}

/// Builds a registered type's component from its definition, at the given endpoint
/// (`host:port`) when one is given.
pub type ExternalBuild = fn(
    ComponentDefinition,
    Option<String>,
) -> BoxFuture<'static, Result<Arc<dyn Component>, BuildError>>;

/// A component type added by a crate outside this one (an adapter for a published
/// queue library): certified like a built-in type, on the broker of the built-in type
/// it names.
#[derive(Clone, Copy)]
pub struct ExternalType {
    /// The type, as written after `pubsub.` in `spec.type` (e.g. `omniqueue-redis`).
    pub name: &'static str,
    /// The built-in type whose broker it runs on (`redis-streams`, `rabbitmq`...), so
    /// the suite provisions, watches and faults that broker; `None`: in process.
    pub broker_of: Option<&'static str>,
    /// The metadata field that names the broker (`host:port` or a URI).
    pub endpoint_field: Option<&'static str>,
    /// The published crate it adapts, with its version (`omniqueue 0.3.0`): reports
    /// mark its rows as third-party.
    pub adapts: &'static str,
    /// Checks a definition without connecting anywhere.
    pub validate: fn(&ComponentDefinition) -> Result<(), ConfigError>,
    /// Builds the component.
    pub build: ExternalBuild,
}

impl std::fmt::Debug for ExternalType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExternalType")
            .field("name", &self.name)
            .field("broker_of", &self.broker_of)
            .field("adapts", &self.adapts)
            .finish()
    }
}

impl ComponentType for ExternalType {
    fn name(&self) -> &'static str {
        self.name
    }

    fn broker_of(&self) -> Option<&'static str> {
        self.broker_of
    }

    fn adapts(&self) -> Option<&'static str> {
        Some(self.adapts)
    }

    fn validate(&self, definition: &ComponentDefinition) -> Result<Validated, ConfigError> {
        (self.validate)(definition)?;
        Ok(Validated {
            endpoint: self
                .endpoint_field
                .and_then(|field| definition.metadata.get(field).cloned()),
        })
    }

    fn build(
        &self,
        definition: ComponentDefinition,
        endpoint: Option<String>,
    ) -> BoxFuture<'static, Result<Arc<dyn Component>, BuildError>> {
        if let Err(e) = (self.validate)(&definition) {
            return Box::pin(async move { Err(e.into()) });
        }
        let named = self
            .endpoint_field
            .and_then(|field| definition.metadata.get(field).cloned());
        (self.build)(definition, endpoint.or(named))
    }
}

static EXTERNAL: RwLock<Vec<ExternalType>> = RwLock::new(Vec::new());

/// Adds a component type for this process (again under the same name: replaced).
/// Refused when the name is a built-in type or its broker is not one.
pub fn register(external: ExternalType) -> Result<(), String> {
    if is_built_in_name(external.name) {
        return Err(format!(
            "'{}' is a built-in type and cannot be registered again",
            external.name
        ));
    }
    if let Some(broker) = external.broker_of {
        if !is_built_in_name(broker) || broker == "in-memory" {
            return Err(format!(
                "'{}' runs on the broker of '{broker}', which is not a built-in type with a broker (known: {})",
                external.name,
                built_in_names().join(", ")
            ));
        }
    }
    let mut types = EXTERNAL.write().unwrap_or_else(|e| e.into_inner());
    types.retain(|t| t.name != external.name);
    types.push(external);
    Ok(())
}

fn built_in_names() -> Vec<&'static str> {
    BUILT_IN_TYPES.iter().map(|(name, _)| *name).collect()
}

/// The registered type of that name.
pub fn external(type_name: &str) -> Option<ExternalType> {
    EXTERNAL
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .find(|t| t.name == type_name)
        .copied()
}

/// The row of a type: compiled in, or registered (copied out of the lock).
#[derive(Clone, Copy)]
enum Row {
    BuiltIn(&'static dyn ComponentType),
    External(ExternalType),
}

impl std::ops::Deref for Row {
    type Target = dyn ComponentType;

    fn deref(&self) -> &Self::Target {
        match self {
            Row::BuiltIn(row) => *row,
            Row::External(row) => row,
        }
    }
}

fn row(type_name: &str) -> Option<Row> {
    match BUILT_IN.iter().find(|t| t.name() == type_name) {
        Some(built_in) => Some(Row::BuiltIn(*built_in)),
        None => external(type_name).map(Row::External),
    }
}

/// The types this process can build: the built-in ones compiled in, then the
/// registered ones.
pub fn known_types() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = BUILT_IN.iter().map(|t| t.name()).collect();
    names.extend(
        EXTERNAL
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|t| t.name),
    );
    names
}

/// Whether the type is compiled in or registered.
pub fn is_known(type_name: &str) -> bool {
    row(type_name).is_some()
}

/// The built-in type whose broker serves `type_name`: itself for a built-in type
/// (compiled in or not), the one it names when registered (`in-memory` for a type
/// that runs in process).
pub fn broker_type(type_name: &str) -> &str {
    match row(type_name) {
        Some(t) => t.broker_of().unwrap_or("in-memory"),
        None => type_name,
    }
}

/// The published crate a registered type adapts (`None` for built-in types).
pub fn third_party(type_name: &str) -> Option<&'static str> {
    row(type_name).and_then(|t| t.adapts())
}

/// Why a component could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("{0}")]
    Connect(#[from] PubSubError),
}

/// Checks a definition's type and every metadata value without connecting anywhere,
/// so a bad file is reported before any work starts.
pub fn validate(definition: &ComponentDefinition) -> Result<Validated, ConfigError> {
    match row(&definition.component_type) {
        Some(t) => t.validate(definition),
        None => Err(unknown_type(definition)),
    }
}

fn unknown_type(definition: &ComponentDefinition) -> ConfigError {
    let name = &definition.component_type;
    match compiled_out(name) {
        Some(feature) => definition.error(
            "spec.type",
            format!(
                "type 'pubsub.{name}' is not compiled into this build; enable the cargo feature '{feature}' (of pubsub-conformance or pubsub-components)"
            ),
        ),
        None => definition.error(
            "spec.type",
            format!(
                "unknown type 'pubsub.{name}'; known: {}",
                known_types().join(", ")
            ),
        ),
    }
}

/// Builds the component a definition describes; `endpoint` (`host:port`) replaces the
/// definition's broker address when given.
pub async fn build(
    definition: &ComponentDefinition,
    endpoint: Option<&str>,
) -> Result<Arc<dyn Component>, BuildError> {
    let Some(t) = row(&definition.component_type) else {
        return Err(unknown_type(definition).into());
    };
    t.build(definition.clone(), endpoint.map(str::to_string))
        .await
}

/// A definition whose type was looked up once: what a caller keeps to build the
/// component again (behind a proxy, after a fault), name its broker and its crate,
/// without looking the type up by name each time.
#[derive(Clone)]
pub struct Resolved {
    definition: Arc<ComponentDefinition>,
    row: Row,
}

impl std::fmt::Debug for Resolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolved")
            .field("name", &self.definition.name)
            .field("type", &self.row.name())
            .finish()
    }
}

impl Resolved {
    /// The definition.
    pub fn definition(&self) -> &ComponentDefinition {
        &self.definition
    }

    /// The same component under another name (a row of it over another path).
    pub fn renamed(&self, name: String) -> Resolved {
        let mut definition = (*self.definition).clone();
        definition.name = name;
        Resolved {
            definition: Arc::new(definition),
            row: self.row,
        }
    }

    /// The built-in type whose broker serves it (`in-memory` in process); see
    /// [`broker_type`].
    pub fn broker_type(&self) -> &'static str {
        self.row.broker_of().unwrap_or("in-memory")
    }

    /// The published crate a registered type adapts (`None` for built-in types).
    pub fn third_party(&self) -> Option<&'static str> {
        self.row.adapts()
    }

    /// Builds the component; `endpoint` (`host:port`) replaces the definition's
    /// broker address when given.
    pub fn build(
        &self,
        endpoint: Option<&str>,
    ) -> BoxFuture<'static, Result<Arc<dyn Component>, BuildError>> {
        self.row
            .build((*self.definition).clone(), endpoint.map(str::to_string))
    }
}

/// Looks a definition's type up once; an unknown or compiled-out type is the error
/// [`validate`] gives.
pub fn resolve(definition: &ComponentDefinition) -> Result<Resolved, ConfigError> {
    match row(&definition.component_type) {
        Some(row) => Ok(Resolved {
            definition: Arc::new(definition.clone()),
            row,
        }),
        None => Err(unknown_type(definition)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryComponent;
    use std::path::Path;

    #[test]
    fn every_built_in_type_is_compiled_in_or_names_its_feature() {
        for (name, feature) in BUILT_IN_TYPES {
            match compiled_out(name) {
                Some(missing) => assert_eq!(Some(missing), *feature),
                None => assert!(is_known(name), "{name} is neither compiled in nor left out"),
            }
        }
        assert_eq!(
            BUILT_IN.len(),
            BUILT_IN_TYPES
                .iter()
                .filter(|(name, _)| compiled_out(name).is_none())
                .count(),
            "the table holds each compiled-in type once"
        );
    }

    fn definition(kind: &str, metadata: &str) -> ComponentDefinition {
        let text = format!(
            "apiVersion: dapr.io/v1alpha1\nkind: Component\nmetadata:\n  name: x\nspec:\n  type: pubsub.{kind}\n  version: v1\n  metadata:\n{metadata}"
        );
        ComponentDefinition::parse(&text, Path::new("x.yaml")).unwrap()
    }

    fn external(name: &'static str, broker_of: Option<&'static str>) -> ExternalType {
        ExternalType {
            name,
            broker_of,
            endpoint_field: Some("where"),
            adapts: "somequeue 1.2.3",
            validate: |d| d.check_known(&["where"]),
            build: |_, _| {
                Box::pin(async { Ok(Arc::new(MemoryComponent::default()) as Arc<dyn Component>) })
            },
        }
    }

    #[tokio::test]
    async fn a_registered_type_validates_builds_and_names_its_broker_and_crate() {
        register(external("test-somequeue", Some("redis-streams"))).unwrap();
        let good = definition(
            "test-somequeue",
            "    - name: where\n      value: \"h:1\"\n",
        );
        assert_eq!(validate(&good).unwrap().endpoint, Some("h:1".to_string()));
        assert!(build(&good, Some("h:2")).await.is_ok());
        let resolved = resolve(&good).unwrap();
        assert_eq!(resolved.broker_type(), "redis-streams");
        assert_eq!(resolved.third_party(), Some("somequeue 1.2.3"));
        assert!(resolved.build(Some("h:2")).await.is_ok());
        assert!(is_known("test-somequeue"));
        assert_eq!(broker_type("test-somequeue"), "redis-streams");
        assert_eq!(broker_type("postgres"), "postgres");
        assert_eq!(third_party("test-somequeue"), Some("somequeue 1.2.3"));
        assert_eq!(third_party("postgres"), None);

        let bad = definition("test-somequeue", "    - name: wher\n      value: \"h:1\"\n");
        let error = validate(&bad).unwrap_err().to_string();
        assert!(error.contains("wher"), "{error}");
        let unknown = definition("nothing-such", "    - name: a\n      value: b\n");
        let error = validate(&unknown).unwrap_err().to_string();
        assert!(
            error.contains("nothing-such") && error.contains("test-somequeue"),
            "the known types include the registered ones: {error}"
        );
    }

    #[test]
    fn built_in_names_and_unknown_brokers_are_refused() {
        let error = register(external("redis-streams", None)).unwrap_err();
        assert!(error.contains("built-in"), "{error}");
        let error = register(external("test-elsewhere", Some("activemq"))).unwrap_err();
        assert!(error.contains("activemq"), "{error}");
        assert!(!is_known("test-elsewhere"));
    }

    use proptest::strategy::Strategy as _;

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config {
            cases: 512,
            rng_seed: proptest::test_runner::RngSeed::Fixed(0x0dd_ba11),
            failure_persistence: None,
            ..Default::default()
        })]
        /// No definition text panics the parser or a type's validation, and every
        /// refusal names the file and a field.
        #[test]
        fn no_definition_panics_and_every_refusal_names_its_field(
            component_type in proptest::sample::select(vec![
                "in-memory", "redis-streams", "postgres", "nats-jetstream", "rabbitmq",
                "mqtt5", "kafka", "",
            ]),
            metadata in proptest::collection::vec(
                (
                    proptest::prop_oneof![
                        proptest::sample::select(vec![
                            "ackWaitMs", "claimIdleMs", "connectionString", "exchange",
                            "expiryGraceMs", "host", "keyPrefix", "maxMessageBytes",
                            "natsURL", "partitions", "prefetch", "queueExpiryMs",
                            "redisHost", "sessionExpirySeconds", "streamName",
                            "tablePrefix", "topicPrefix", "visibilityTimeoutMs",
                        ]).prop_map(str::to_string),
                        "[a-zA-Z]{0,10}",
                    ],
                    proptest::prop_oneof![
                        "-?[0-9]{1,22}",
                        "[a-z]{1,8}://[^\\s\"]{0,30}",
                        "[^\"\\\\]{0,20}",
                    ],
                ),
                0..6,
            ),
            garbage in "\\PC{0,60}",
        ) {
            let mut text = format!(
                "apiVersion: dapr.io/v1alpha1\nkind: Component\nmetadata:\n  name: p\nspec:\n  type: pubsub.{component_type}\n  metadata:\n"
            );
            for (name, value) in &metadata {
                text.push_str(&format!("    - name: \"{name}\"\n      value: \"{value}\"\n"));
            }
            let source = Path::new("prop.yaml");
            let candidates: [String; 3] = [text.clone(), garbage.clone(), format!("{text}{garbage}")];
            for candidate in candidates {
                match ComponentDefinition::parse(&candidate, source) {
                    Ok(definition) => {
                        if let Err(e) = validate(&definition) {
                            proptest::prop_assert!(e.file == "prop.yaml" && !e.field.is_empty(), "{e}");
                        }
                    }
                    Err(e) => proptest::prop_assert!(e.file == "prop.yaml" && !e.field.is_empty(), "{e}"),
                }
            }
        }
    }
}
