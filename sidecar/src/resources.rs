//! Declarative subscriptions: `kind: Subscription` resources in a sidecar's
//! resources directory, as daprd loads them at start and, with its `HotReload`
//! feature, whenever the directory changes. The suite writes them to subscribe an
//! attached sidecar's app; `serve` reads them.

use crate::wire::AppSubscription;
use anyhow::Context as _;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The API version of a declarative subscription with routes.
pub const SUBSCRIPTION_API_VERSION: &str = "dapr.io/v2alpha1";

/// A declarative subscription, as Dapr documents it (`dapr.io/v2alpha1`; the
/// `v1alpha1` form, with `route` instead of `routes`, reads the same).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubscriptionResource {
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    pub kind: String,
    pub metadata: ResourceName,
    pub spec: AppSubscription,
    /// The app ids it applies to; none: every app.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
}

/// A resource's `metadata`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceName {
    pub name: String,
}

impl SubscriptionResource {
    /// A subscription named `name` for the app `scope`.
    pub fn new(name: &str, spec: AppSubscription, scope: &str) -> Self {
        SubscriptionResource {
            api_version: SUBSCRIPTION_API_VERSION.into(),
            kind: "Subscription".into(),
            metadata: ResourceName { name: name.into() },
            spec,
            scopes: vec![scope.to_string()],
        }
    }

    /// Whether it applies to the app `app_id`.
    pub fn applies_to(&self, app_id: &str) -> bool {
        self.scopes.is_empty() || self.scopes.iter().any(|s| s == app_id)
    }
}

/// The subscriptions for app `app_id` declared in `dir`'s YAML files, by name.
/// Documents of other kinds (components, configurations) are left alone; a
/// subscription that does not read, or a name declared twice, is an error naming
/// its file.
pub fn load_subscriptions(
    dir: &Path,
    app_id: &str,
) -> anyhow::Result<BTreeMap<String, AppSubscription>> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read the resources directory {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    paths.sort();
    let mut found = BTreeMap::new();
    for path in paths {
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            // Removed between the listing and the read.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(anyhow::anyhow!("cannot read {}: {e}", path.display())),
        };
        for document in serde_yaml::Deserializer::from_str(&text) {
            let value = serde_yaml::Value::deserialize(document)
                .with_context(|| format!("{} is not YAML", path.display()))?;
            if value.get("kind").and_then(serde_yaml::Value::as_str) != Some("Subscription") {
                continue;
            }
            let resource: SubscriptionResource = serde_yaml::from_value(value)
                .with_context(|| format!("a Subscription in {} does not read", path.display()))?;
            if !resource.applies_to(app_id) {
                continue;
            }
            let name = resource.metadata.name.clone();
            if found.insert(name.clone(), resource.spec).is_some() {
                anyhow::bail!(
                    "the subscription '{name}' is declared twice (again in {})",
                    path.display()
                );
            }
        }
    }
    Ok(found)
}

/// Whether the document at `path` is a Subscription (a file that cannot be read
/// as YAML is not).
pub fn is_subscription_file(path: &Path) -> bool {
    std::fs::read_to_string(path).is_ok_and(|text| {
        serde_yaml::Deserializer::from_str(&text).any(|document| {
            serde_yaml::Value::deserialize(document).is_ok_and(|value| {
                value.get("kind").and_then(serde_yaml::Value::as_str) == Some("Subscription")
            })
        })
    })
}

/// Writes `resource` to `dir` as `<name>.yaml`, whole (written aside, then renamed,
/// so that a sidecar watching the directory never reads half of it); returns the
/// path.
pub fn write_subscription(dir: &Path, resource: &SubscriptionResource) -> anyhow::Result<PathBuf> {
    let text = serde_yaml::to_string(resource)?;
    let path = dir.join(format!("{}.yaml", resource.metadata.name));
    let aside = dir.join(format!(".{}.yaml.tmp", resource.metadata.name));
    std::fs::write(&aside, text).with_context(|| format!("cannot write {}", aside.display()))?;
    std::fs::rename(&aside, &path)
        .with_context(|| format!("cannot move {} into place", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscriptions_are_read_with_their_scopes_and_other_kinds_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let spec = AppSubscription {
            pubsub_name: "ps".into(),
            topic: "orders".into(),
            route: Some("/orders".into()),
            ..Default::default()
        };
        write_subscription(
            dir.path(),
            &SubscriptionResource::new("mine", spec.clone(), "app"),
        )
        .unwrap();
        write_subscription(
            dir.path(),
            &SubscriptionResource::new("theirs", spec.clone(), "other"),
        )
        .unwrap();
        std::fs::write(
            dir.path().join("component.yaml"),
            "apiVersion: dapr.io/v1alpha1\nkind: Component\nmetadata:\n  name: ps\nspec:\n  type: pubsub.in-memory\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("both.yaml"),
            "apiVersion: dapr.io/v2alpha1\nkind: Subscription\nmetadata:\n  name: v2\nspec:\n  pubsubname: ps\n  topic: t2\n  routes:\n    default: /t2\n  bulkSubscribe:\n    enabled: true\n    maxMessagesCount: 5\n---\napiVersion: dapr.io/v1alpha1\nkind: Subscription\nmetadata:\n  name: v1\nspec:\n  pubsubname: ps\n  topic: t1\n  route: /t1\n",
        )
        .unwrap();
        let found = load_subscriptions(dir.path(), "app").unwrap();
        assert_eq!(
            found.keys().cloned().collect::<Vec<_>>(),
            ["mine", "v1", "v2"]
        );
        assert_eq!(found["mine"], spec);
        assert_eq!(found["v2"].path().unwrap(), "/t2");
        assert_eq!(
            found["v2"].bulk_subscribe.unwrap().max_messages_count,
            Some(5)
        );
        assert_eq!(found["v1"].path().unwrap(), "/t1");
        assert!(is_subscription_file(&dir.path().join("mine.yaml")));
        assert!(!is_subscription_file(&dir.path().join("component.yaml")));
    }

    #[test]
    fn a_subscription_that_does_not_read_names_its_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("bad.yaml"),
            "apiVersion: dapr.io/v2alpha1\nkind: Subscription\nmetadata:\n  name: x\nspec:\n  topic: 7\n",
        )
        .unwrap();
        let error = format!("{:#}", load_subscriptions(dir.path(), "app").unwrap_err());
        assert!(error.contains("bad.yaml"), "{error}");
    }
}
