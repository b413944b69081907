//! The brokers the suite runs itself, one module each, beside each other: how it is
//! spawned and its container images ([`BrokerSpec`]), its Debian versions axis, and its
//! raw client for the bench's comparison (behind the broker's cargo feature). The
//! generic code (`provision`, `provision::versions`, `bench::raw`) reads them through
//! [`ALL`]: what the suite itself needs to know of a new broker is a module here and
//! a row there.

mod kafka;
mod mqtt;
mod nats;
mod postgres;
mod rabbitmq;
mod redis;

use crate::bench::raw::RawPublish;
use crate::provision::axis::AxisPoint;
use crate::provision::spec::BrokerSpec;
use std::collections::BTreeMap;
use std::sync::LazyLock;

/// What the suite knows about one broker.
pub(crate) struct BuiltIn {
    /// The built-in component type it serves (what `registry::broker_type` names).
    pub component_type: &'static str,
    /// How to run it.
    pub spec: fn() -> BrokerSpec,
    /// Its raw client for the bench (`None`: built without its cargo feature).
    pub raw: Option<RawPublish>,
}

/// A row of [`ALL`]: the broker's module, its component type and its cargo feature.
macro_rules! built_in {
    ($broker:ident, $component_type:literal, $feature:literal) => {
        BuiltIn {
            component_type: $component_type,
            spec: $broker::spec,
            raw: {
                #[cfg(feature = $feature)]
                let raw = Some(crate::bench::raw::publish::<$broker::raw::Client> as RawPublish);
                #[cfg(not(feature = $feature))]
                let raw = None;
                raw
            },
        }
    };
}

/// Every broker the suite runs itself.
pub(crate) const ALL: &[BuiltIn] = &[
    built_in!(redis, "redis-streams", "redis"),
    built_in!(nats, "nats-jetstream", "nats"),
    built_in!(kafka, "kafka", "kafka"),
    built_in!(mqtt, "mqtt5", "mqtt"),
    built_in!(rabbitmq, "rabbitmq", "rabbitmq"),
    built_in!(postgres, "postgres", "postgres"),
];

impl BuiltIn {
    /// Its versions axis, oldest first (empty: none), from `versions.yaml`.
    pub fn versions(&self) -> &'static [AxisPoint] {
        VERSIONS.get(self.component_type).map_or(&[], Vec::as_slice)
    }
}

/// `versions.yaml` as written: each component type's points, as text.
static VERSIONS_TEXT: LazyLock<BTreeMap<String, Vec<String>>> = LazyLock::new(|| {
    serde_yaml::from_str(include_str!("versions.yaml"))
        .unwrap_or_else(|e| panic!("suite/src/brokers/versions.yaml: {e}"))
});

/// `versions.yaml`: each component type's axis.
static VERSIONS: LazyLock<BTreeMap<&'static str, Vec<AxisPoint>>> = LazyLock::new(|| {
    VERSIONS_TEXT
        .iter()
        .map(|(component_type, points)| {
            let points = points
                .iter()
                .map(|point| {
                    AxisPoint::parse(point).unwrap_or_else(|| {
                        panic!("suite/src/brokers/versions.yaml: {component_type}: `{point}` is not `broker release version`")
                    })
                })
                .collect();
            (component_type.as_str(), points)
        })
        .collect()
});

/// The broker serving the built-in component type `component_type`.
pub(crate) fn of(component_type: &str) -> Option<&'static BuiltIn> {
    ALL.iter().find(|b| b.component_type == component_type)
}

/// The raw client of the broker behind `component_type`, where this build has one.
pub(crate) fn raw_client(component_type: &str) -> Option<RawPublish> {
    of(component_type).and_then(|broker| broker.raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_broker_serves_a_type_of_its_own_under_a_name_of_its_own() {
        for (i, broker) in ALL.iter().enumerate() {
            let spec = (broker.spec)();
            for other in &ALL[i + 1..] {
                assert_ne!(broker.component_type, other.component_type);
                assert_ne!(spec.name, (other.spec)().name);
            }
            assert_eq!(
                crate::provision::broker_spec(broker.component_type),
                Some(spec)
            );
        }
    }

    /// The versions axes are the releases `scripts/images.sh` builds images from (its
    /// `releases` table), so that every point's image can be built.
    #[test]
    fn the_versions_axes_are_what_images_sh_builds() {
        let script = include_str!("../../../scripts/images.sh");
        let table = script
            .split_once("declare -A releases=(")
            .and_then(|(_, rest)| rest.split_once("\n)"))
            .expect("scripts/images.sh declares its releases table")
            .0;
        let built: BTreeMap<&str, Vec<&str>> = table
            .lines()
            .filter_map(|line| line.trim().strip_prefix('[')?.split_once("]="))
            .map(|(broker, releases)| (broker, releases.trim_matches('"').split(' ').collect()))
            .collect();
        let mut axes: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for point in ALL.iter().flat_map(|broker| broker.versions()) {
            axes.entry(point.broker).or_default().push(point.release);
        }
        assert_eq!(axes, built);
    }
}
