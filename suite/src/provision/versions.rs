//! The broker-version axis: the broker versions a component is certified against,
//! one container image each, built by `scripts/images.sh` from the Debian release
//! that carries the version. A component row per version is the component's
//! definition with its container image set to that version's (`<component> on
//! <broker> <version>`). Each broker's points are in its module in `crate::brokers`.

use super::container::image_present;
use pubsub_components::config::{ComponentDefinition, CONTAINER_IMAGE_ANNOTATION};
use std::path::PathBuf;
use std::time::Duration;

pub use super::axis::AxisPoint;

/// Every version of the broker behind `component_type` that Debian's releases carry,
/// oldest first; empty for components without a versioned broker image.
pub fn axis(component_type: &str) -> Vec<AxisPoint> {
    crate::brokers::of(pubsub_components::registry::broker_type(component_type))
        .map_or_else(Vec::new, |broker| broker.versions().to_vec())
}

/// Which versions `--broker-versions` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionSelection {
    /// Every point of each component's axis.
    All,
    /// Points named by a Debian release (`trixie`), a version (`8.0.2`, `15`), or
    /// either after a broker (`valkey@forky`, `valkey-9.1.2`).
    Named(Vec<String>),
}

impl std::str::FromStr for VersionSelection {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text == "all" {
            return Ok(VersionSelection::All);
        }
        let names: Vec<String> = text
            .split(',')
            .map(|name| name.trim().to_string())
            .collect();
        if names.iter().any(String::is_empty) {
            return Err(format!(
                "'{text}': an empty version in the list (give 'all' or versions, Debian releases or broker@release, separated by commas)"
            ));
        }
        Ok(VersionSelection::Named(names))
    }
}

impl VersionSelection {
    /// The points of `axis` it selects (oldest first).
    pub fn select(&self, axis: &[AxisPoint]) -> Vec<AxisPoint> {
        match self {
            VersionSelection::All => axis.to_vec(),
            VersionSelection::Named(names) => axis
                .iter()
                .filter(|point| names.iter().any(|name| names_point(name, point)))
                .copied()
                .collect(),
        }
    }

    /// An error naming each version that is on none of `axes`, with what they have.
    pub fn check(&self, axes: &[Vec<AxisPoint>]) -> Result<(), String> {
        let VersionSelection::Named(names) = self else {
            return Ok(());
        };
        let unknown: Vec<&String> = names
            .iter()
            .filter(|name| !axes.iter().flatten().any(|point| names_point(name, point)))
            .collect();
        if unknown.is_empty() {
            return Ok(());
        }
        let known: Vec<String> = axes
            .iter()
            .flatten()
            .map(|p| format!("{} {} ({})", p.broker, p.known_version, p.release))
            .collect();
        Err(format!(
            "no broker version {} on the selected components' axes (they have: {})",
            unknown
                .iter()
                .map(|n| format!("'{n}'"))
                .collect::<Vec<_>>()
                .join(", "),
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        ))
    }
}

/// Whether `name` (a release, a version, or either after `<broker>@` or `<broker>-`)
/// names `point`.
fn names_point(name: &str, point: &AxisPoint) -> bool {
    let rest = match name.split_once(['@', '-']) {
        Some((broker, rest)) if broker == point.broker => rest,
        Some((broker, _)) if is_broker(broker) => return false,
        _ => name,
    };
    point.release == rest || point.known_version == rest
}

/// Whether `name` is a broker of some axis.
fn is_broker(name: &str) -> bool {
    crate::brokers::ALL
        .iter()
        .flat_map(|broker| broker.versions())
        .any(|point| point.broker == name)
}

/// A point whose image is on the engine, with the version the image recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    pub point: AxisPoint,
    /// The broker's version as the image recorded it (`org.pcs.version`).
    pub version: String,
}

/// The script that builds broker images.
fn images_script() -> PathBuf {
    let here = PathBuf::from("scripts/images.sh");
    if here.exists() {
        return here;
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/images.sh")
}

/// Makes sure the point's image is on the engine, building it with `scripts/images.sh`
/// when it is missing (`progress` hears each line of the build), and reads the version
/// it recorded. The error says why there is none.
pub async fn prepare(
    point: AxisPoint,
    progress: &(dyn Fn(&str) + Send + Sync),
) -> Result<Prepared, String> {
    let image = point.image();
    let present = image_present(&image).await;
    if !present || recorded_version(&image).await?.is_none() {
        progress(&match present {
            false => format!(
                "building {image} ({} from Debian {}; a few minutes, kept for later runs)",
                point.broker, point.release
            ),
            true => format!("{image} records no broker version: reading it into the image"),
        });
        let script = images_script();
        let output = tokio::process::Command::new("bash")
            .arg(&script)
            .arg(format!("{}@{}", point.broker, point.release))
            .kill_on_drop(true)
            .output();
        let output = tokio::time::timeout(Duration::from_secs(1200), output)
            .await
            .map_err(|_| format!("building {image} took over 20 minutes"))?
            .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
        let log = String::from_utf8_lossy(&output.stdout).to_string()
            + &String::from_utf8_lossy(&output.stderr);
        for line in log.lines() {
            progress(line);
        }
        if !output.status.success() {
            let tail: Vec<&str> = log.lines().rev().take(5).collect();
            return Err(format!(
                "building {image} failed: {}",
                tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
            ));
        }
    }
    match recorded_version(&image).await? {
        Some(version) => Ok(Prepared { point, version }),
        None => Err(format!(
            "{image} records no broker version (scripts/images.sh {}@{} records it)",
            point.broker, point.release
        )),
    }
}

/// The broker version `image` recorded (label `org.pcs.version`), if any.
async fn recorded_version(image: &str) -> Result<Option<String>, String> {
    let label = tokio::process::Command::new("docker")
        .args([
            "image",
            "inspect",
            "--format",
            "{{ index .Config.Labels \"org.pcs.version\" }}",
            image,
        ])
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| format!("cannot inspect {image}: {e}"))?;
    let version = String::from_utf8_lossy(&label.stdout).trim().to_string();
    Ok(
        (label.status.success() && !version.is_empty() && version != "<no value>")
            .then_some(version),
    )
}

/// The row name of a component on one broker version, e.g. `redis on valkey 9.1.2
/// (forky)`: the Debian release too, since two releases may carry one upstream version
/// (Mosquitto 2.0.11 in bullseye and bookworm), each with its own patches.
pub fn row_name(component: &str, prepared: &Prepared) -> String {
    format!(
        "{component} on {} {} ({})",
        prepared.point.broker, prepared.version, prepared.point.release
    )
}

/// The component's name in a row name (without ` on <broker> <version>`).
pub fn component_of(row: &str) -> &str {
    row.split_once(" on ")
        .map_or(row, |(component, _)| component)
}

/// The annotation a version row's definition carries (set here, never read from a
/// file): `<component> <broker> <version> <release>`.
const AXIS_ANNOTATION: &str = "pubsub-conformance/broker-axis";

/// The definition of the component on one broker version: its own row name, and the
/// version's image for the container kind.
pub fn on_version(definition: &ComponentDefinition, prepared: &Prepared) -> ComponentDefinition {
    let mut row = definition.clone();
    row.name = row_name(&definition.name, prepared);
    row.annotations.insert(
        CONTAINER_IMAGE_ANNOTATION.to_string(),
        prepared.point.image(),
    );
    row.annotations.insert(
        AXIS_ANNOTATION.to_string(),
        format!(
            "{} {} {} {}",
            definition.name, prepared.point.broker, prepared.version, prepared.point.release
        ),
    );
    row
}

/// Where a version row's definition sits on the axis; `None` for other definitions.
pub fn axis_of(definition: &ComponentDefinition) -> Option<crate::reports::BrokerAxis> {
    let text = definition.annotations.get(AXIS_ANNOTATION)?;
    let mut words = text.rsplitn(4, ' ');
    let release = words.next()?.to_string();
    let version = words.next()?.to_string();
    let broker = words.next()?.to_string();
    let component = words.next()?.to_string();
    Some(crate::reports::BrokerAxis {
        component,
        broker,
        version,
        release,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redis() -> Vec<AxisPoint> {
        axis("redis-streams")
    }

    #[test]
    fn every_versioned_broker_has_its_debian_releases() {
        assert_eq!(redis().len(), 6);
        assert_eq!(axis("rabbitmq").len(), 4);
        assert_eq!(axis("nats-jetstream").len(), 3);
        assert_eq!(axis("mqtt5").len(), 4);
        assert_eq!(axis("postgres").len(), 4);
        assert!(axis("in-memory").is_empty());
    }

    #[test]
    fn versions_are_named_by_release_version_or_broker() {
        let pick = |text: &str| {
            text.parse::<VersionSelection>()
                .unwrap()
                .select(&redis())
                .iter()
                .map(|p| format!("{}@{}", p.broker, p.release))
                .collect::<Vec<_>>()
        };
        assert_eq!(pick("all").len(), 6);
        assert_eq!(
            pick("7.0.15,trixie"),
            ["redis@bookworm", "redis@trixie", "valkey@trixie"]
        );
        assert_eq!(pick("valkey@forky"), ["valkey@forky"]);
        assert_eq!(pick("valkey-9.1.2"), ["valkey@forky"]);
        assert!(pick("rabbitmq@trixie").is_empty());
        let unknown = "5.0,trixie"
            .parse::<VersionSelection>()
            .unwrap()
            .check(&[redis(), axis("rabbitmq")])
            .unwrap_err();
        assert!(
            unknown.contains("'5.0'")
                && !unknown.contains("'trixie'")
                && unknown.contains("redis 8.0.2 (trixie)"),
            "{unknown}"
        );
        assert!("7.0.15,,8.0.2".parse::<VersionSelection>().is_err());
    }

    #[test]
    fn a_version_row_keeps_its_component_and_names_its_image() {
        let definition = ComponentDefinition {
            source: PathBuf::from("fixtures/redis.yaml"),
            name: "redis".into(),
            component_type: "redis-streams".into(),
            version: "v1".into(),
            metadata: Default::default(),
            annotations: Default::default(),
        };
        let prepared = Prepared {
            point: redis()[5],
            version: "9.1.2".into(),
        };
        let row = on_version(&definition, &prepared);
        assert_eq!(row.name, "redis on valkey 9.1.2 (forky)");
        assert_eq!(component_of(&row.name), "redis");
        assert_eq!(
            row.annotations
                .get(CONTAINER_IMAGE_ANNOTATION)
                .map(String::as_str),
            Some("pcs/valkey:forky")
        );
    }
}
