//! What a runtime tells the cases about the path it runs over, pinned for mutation
//! testing (docs/mutation-testing.md): the in-memory catalogue runs in process and
//! never meets a remote runtime, whose answers decide what the rows over the wire
//! judge (attempts counted per app, JSON serialized again, spans recorded elsewhere).

use async_trait::async_trait;
use pubsub_conformance::components::runtime::{
    BulkPublishRequest, BulkPublishResponse, Handler, PublishRequest, RemoteRuntime, Runtime,
    Subscription, SubscriptionHandle,
};
use pubsub_conformance::components::{Component, MessageId, PubSubError, Result};
use std::sync::Arc;

/// A remote runtime that answers nothing, with the trait's defaults or, `per_app`,
/// counting attempts per app as Dapr's HTTP API makes a sidecar's apps do.
struct Remote {
    per_app: bool,
}

#[async_trait]
impl RemoteRuntime for Remote {
    async fn publish(&self, _: PublishRequest) -> Result<MessageId> {
        Err(PubSubError::unsupported("test remote", "publish"))
    }
    async fn bulk_publish(&self, _: BulkPublishRequest) -> Result<BulkPublishResponse> {
        Err(PubSubError::unsupported("test remote", "bulk publish"))
    }
    async fn subscribe(&self, _: Subscription, _: Handler) -> Result<SubscriptionHandle> {
        Err(PubSubError::unsupported("test remote", "subscribe"))
    }
    async fn create_group(&self, _: &Subscription) -> Result<()> {
        Err(PubSubError::unsupported("test remote", "create group"))
    }
    fn counts_attempts_per_app(&self) -> Option<&'static str> {
        self.per_app.then_some("each app counts")
    }
    fn delivers_metadata_over_grpc(&self) -> bool {
        self.per_app
    }
}

/// A remote that keeps every default of the trait.
struct Plain;

#[async_trait]
impl RemoteRuntime for Plain {
    async fn publish(&self, _: PublishRequest) -> Result<MessageId> {
        Err(PubSubError::unsupported("test remote", "publish"))
    }
    async fn bulk_publish(&self, _: BulkPublishRequest) -> Result<BulkPublishResponse> {
        Err(PubSubError::unsupported("test remote", "bulk publish"))
    }
    async fn subscribe(&self, _: Subscription, _: Handler) -> Result<SubscriptionHandle> {
        Err(PubSubError::unsupported("test remote", "subscribe"))
    }
    async fn create_group(&self, _: &Subscription) -> Result<()> {
        Err(PubSubError::unsupported("test remote", "create group"))
    }
}

fn memory() -> Arc<dyn Component> {
    Arc::new(pubsub_conformance::components::memory::MemoryComponent::default())
}

#[test]
fn in_process_the_component_counts_attempts_and_spans_are_here() {
    let runtime = Runtime::new("pubsub", memory());
    assert_eq!(runtime.counts_attempts_per_app(), None);
    assert!(runtime.records_spans_here());
    assert!(!runtime.reserializes_json());
    assert_eq!(runtime.hands_over_data_only(), None);
    assert!(!runtime.delivers_metadata_over_grpc());
}

#[test]
fn a_remote_runtime_says_what_its_path_changes() {
    let plain = Runtime::remote("pubsub", memory(), Arc::new(Plain));
    assert_eq!(plain.counts_attempts_per_app(), None, "the trait's default");
    assert!(!plain.records_spans_here(), "the trait's default");
    assert!(!plain.reserializes_json(), "the trait's default");
    assert_eq!(plain.hands_over_data_only(), None, "the trait's default");
    assert!(!plain.delivers_metadata_over_grpc(), "the trait's default");
    let per_app = Runtime::remote("pubsub", memory(), Arc::new(Remote { per_app: true }));
    assert_eq!(per_app.counts_attempts_per_app(), Some("each app counts"));
    assert!(per_app.delivers_metadata_over_grpc());
    let not = Runtime::remote("pubsub", memory(), Arc::new(Remote { per_app: false }));
    assert_eq!(not.counts_attempts_per_app(), None);
}

/// An app's answers on the wire (Dapr's HTTP shapes), read as the contract says: each
/// status by its text, an unknown or missing one as RETRY with a warning naming it, an
/// entry left out as RETRY. Only the rows over the wire read them.
#[test]
fn an_apps_statuses_on_the_wire_are_read_as_the_contract_says() {
    use pubsub_conformance::components::runtime::{BulkAnswer, Status};
    assert_eq!(Status::from_wire("SUCCESS"), Some(Status::Success));
    assert_eq!(Status::from_wire("RETRY"), Some(Status::Retry));
    assert_eq!(Status::from_wire("DROP"), Some(Status::Drop));
    assert_eq!(Status::from_wire("success"), None);
    let body = br#"{"statuses":[
        {"entryId":"c","status":"DROP"},
        {"entryId":"a","status":"SUCCESS"},
        {"entryId":"b","status":"RETRY"},
        {"entryId":"d","status":"MAYBE"},
        {"entryId":"x","status":"SUCCESS"}
    ]}"#;
    let answer = BulkAnswer::from_json(body, &["a", "b", "c", "d", "e"]).unwrap();
    let statuses: Vec<(&str, Status)> = answer
        .statuses
        .iter()
        .map(|s| (s.entry_id.as_str(), s.status))
        .collect();
    assert_eq!(
        statuses,
        [
            ("a", Status::Success),
            ("b", Status::Retry),
            ("c", Status::Drop),
            ("d", Status::Retry),
            ("e", Status::Retry),
        ]
    );
    let warnings = answer.warnings.join("\n");
    for named in ["'MAYBE'", "'x' is not in the batch", "'e'"] {
        assert!(
            warnings.contains(named),
            "no warning naming {named}: {warnings}"
        );
    }
}
