//! `serve` over gRPC: Dapr's runtime service (`dapr.proto.runtime.v1.Dapr`) for the
//! pub/sub API, beside the HTTP one and with its semantics: `PublishEvent`,
//! `BulkPublishEvent` and its Alpha1 twin, `GetMetadata` (the JavaScript SDK polls it
//! before its first call) and streaming subscriptions
//! (`SubscribeTopicEventsAlpha1`, [`stream`]). Every other method of the service
//! answers `Unimplemented` ([`unimplemented`]). Toward an app that speaks gRPC,
//! [`app`] delivers. Messages and service traits are the
//! generated code of the pinned `dapr` crate.

pub mod app;
mod stream;
mod unimplemented;

use crate::publish::{self, ReadEntry};
use crate::serve::{ApiState, SubscriptionKind};
use crate::wire::{ApiError, API_TOKEN_HEADER};
use dapr::dapr::proto::runtime::v1 as runtime;
use dapr::dapr::proto::runtime::v1::dapr_server::DaprServer;
use pubsub_components::runtime::{BulkPublishRequest, PublishRequest};
use pubsub_components::Metadata;
use std::collections::HashMap;
use std::sync::Arc;
use tonic::codegen::{http, Service};
use tonic::{Request, Response, Status};
use tonic_types::{ErrorDetail, ErrorInfo, ResourceInfo, StatusExt};

/// The domain of daprd's `ErrorInfo` details.
const ERROR_DOMAIN: &str = "dapr.io";

/// Dapr's runtime service over `serve`'s components.
pub(crate) struct RuntimeApi {
    state: Arc<ApiState>,
}

/// The gRPC service of the runtime API: messages up to `max_message_bytes` (daprd's
/// `--max-body-size` bounds both transports), a request without the API token
/// refused where one is set.
pub(crate) fn service(
    state: Arc<ApiState>,
    api_token: Option<String>,
    max_message_bytes: usize,
) -> tonic::service::Routes {
    let server = DaprServer::new(RuntimeApi { state })
        .max_decoding_message_size(max_message_bytes)
        .max_encoding_message_size(max_message_bytes);
    let checked =
        tonic::service::interceptor::InterceptedService::new(server, move |request: Request<()>| {
            let Some(token) = &api_token else {
                return Ok(request);
            };
            let given = request
                .metadata()
                .get(API_TOKEN_HEADER)
                .and_then(|v| v.to_str().ok());
            if given == Some(token.as_str()) {
                Ok(request)
            } else {
                Err(status(ApiError::unauthorized()))
            }
        });
    tonic::service::Routes::new(TooLargeAsExhausted(checked))
}

/// tonic refuses a message over the limit as `OutOfRange`; gRPC's status codes (and
/// daprd, on grpc-go) say `ResourceExhausted`, which this wrapper answers instead.
#[derive(Clone)]
struct TooLargeAsExhausted<S>(S);

impl<S: tonic::server::NamedService> tonic::server::NamedService for TooLargeAsExhausted<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, B, R> Service<http::Request<B>> for TooLargeAsExhausted<S>
where
    S: Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let answer = self.0.call(request);
        Box::pin(async move {
            let mut response = answer.await?;
            let headers = response.headers_mut();
            let too_large = Status::from_header_map(headers).is_some_and(|s| {
                s.code() == tonic::Code::OutOfRange && s.message().contains("length too large")
            });
            if too_large {
                let code = tonic::Code::ResourceExhausted as i32;
                headers.insert("grpc-status", http::HeaderValue::from(code));
            }
            Ok(response)
        })
    }
}

/// An API error as daprd sends it over gRPC: its code and message, and as details a
/// `ResourceInfo` naming the pub/sub (where daprd adds one) followed by an
/// `ErrorInfo` with the reason. The details repeat the status's code and message
/// (the Python SDK refuses details that differ).
pub fn status(error: ApiError) -> Status {
    let mut details = Vec::new();
    if let Some(pubsub) = &error.grpc.resource {
        details.push(ErrorDetail::from(ResourceInfo::new(
            "pubsub",
            pubsub.clone(),
            "",
            error.body.message.clone(),
        )));
    }
    if !error.grpc.reason.is_empty() {
        let metadata: HashMap<String, String> = error.grpc.metadata.clone().into_iter().collect();
        details.push(ErrorDetail::from(ErrorInfo::new(
            error.grpc.reason,
            ERROR_DOMAIN,
            metadata,
        )));
    }
    Status::with_error_details_vec(error.grpc.code, error.body.message, details)
}

fn subscription_type(kind: SubscriptionKind) -> runtime::PubsubSubscriptionType {
    match kind {
        SubscriptionKind::Programmatic => runtime::PubsubSubscriptionType::Programmatic,
        SubscriptionKind::Declarative => runtime::PubsubSubscriptionType::Declarative,
        SubscriptionKind::Streaming => runtime::PubsubSubscriptionType::Streaming,
    }
}

/// A request's metadata map, as the runtime keeps metadata.
fn metadata(map: HashMap<String, String>) -> Metadata {
    map.into_iter().collect()
}

impl RuntimeApi {
    async fn publish_event(
        &self,
        request: Request<runtime::PublishEventRequest>,
    ) -> Result<Response<()>, Status> {
        let traceparent = request
            .metadata()
            .get("traceparent")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let request = request.into_inner();
        let served = self.target(&request.pubsub_name, &request.topic, &request.metadata)?;
        // Unless specified, Dapr assumes text/plain (the API reference).
        let content_type = match request.data_content_type.as_str() {
            "" => "text/plain",
            given => given,
        };
        let mut publish = PublishRequest::new(request.topic.clone(), request.data)
            .with_content_type(content_type);
        publish.metadata = metadata(request.metadata);
        if let Some(traceparent) = traceparent {
            publish
                .metadata
                .entry("traceparent".to_string())
                .or_insert(traceparent);
        }
        publish::publish(served, &request.pubsub_name, publish)
            .await
            .map_err(status)?;
        Ok(Response::new(()))
    }

    async fn bulk_publish_event(
        &self,
        request: Request<runtime::BulkPublishRequest>,
    ) -> Result<Response<runtime::BulkPublishResponse>, Status> {
        let request = request.into_inner();
        let served = self.target(&request.pubsub_name, &request.topic, &request.metadata)?;
        let read = request
            .entries
            .into_iter()
            .map(|entry| ReadEntry {
                entry_id: entry.entry_id,
                event: Ok(entry.event),
                content_type: Some(entry.content_type),
                metadata: metadata(entry.metadata),
            })
            .collect();
        let entries =
            publish::bulk_entries(&request.pubsub_name, &request.topic, read).map_err(status)?;
        let bulk = BulkPublishRequest {
            topic: request.topic.clone(),
            entries,
            metadata: metadata(request.metadata),
        };
        // Entries that failed are listed in an OK answer, as Dapr's documentation
        // has it (daprd's own gRPC code answers Internal instead: docs/dapr-and-sidecars.md).
        let failed = publish::bulk_publish(served, &request.pubsub_name, bulk)
            .await
            .map_err(status)?;
        Ok(Response::new(runtime::BulkPublishResponse {
            failed_entries: failed
                .into_iter()
                .map(|f| runtime::BulkPublishResponseFailedEntry {
                    entry_id: f.entry_id,
                    error: f.error,
                })
                .collect(),
        }))
    }

    async fn bulk_publish_event_alpha1(
        &self,
        request: Request<runtime::BulkPublishRequest>,
    ) -> Result<Response<runtime::BulkPublishResponse>, Status> {
        self.bulk_publish_event(request).await
    }

    async fn get_metadata(
        &self,
        _request: Request<runtime::GetMetadataRequest>,
    ) -> Result<Response<runtime::GetMetadataResponse>, Status> {
        let state = &self.state;
        let registered_components = state
            .components
            .iter()
            .map(|(name, served)| runtime::RegisteredComponents {
                name: name.clone(),
                r#type: served.component_type.clone(),
                version: "v1".into(),
                capabilities: Vec::new(),
            })
            .collect();
        let subscriptions = state
            .subscriptions()
            .into_iter()
            .map(|(s, kind)| runtime::PubsubSubscription {
                pubsub_name: s.pubsub_name.clone(),
                topic: s.topic.clone(),
                metadata: s.metadata.clone().into_iter().collect(),
                rules: Some(runtime::PubsubSubscriptionRules {
                    rules: vec![runtime::PubsubSubscriptionRule {
                        r#match: String::new(),
                        path: s.path().unwrap_or_default(),
                    }],
                }),
                dead_letter_topic: s.dead_letter_topic.clone().unwrap_or_default(),
                r#type: subscription_type(kind) as i32,
            })
            .collect();
        Ok(Response::new(runtime::GetMetadataResponse {
            id: state.app_id.clone(),
            registered_components,
            subscriptions,
            runtime_version: state.runtime_version(),
            enabled_features: state.enabled_features(),
            ..Default::default()
        }))
    }

    async fn subscribe_topic_events_alpha1(
        &self,
        request: Request<tonic::Streaming<runtime::SubscribeTopicEventsRequestAlpha1>>,
    ) -> Result<Response<stream::Events>, Status> {
        stream::open(self.state.clone(), request.into_inner())
            .await
            .map(Response::new)
    }

    /// The component a publish names, its topic and metadata checked in daprd's order
    /// (the pub/sub name, the topic, `rawPayload`).
    fn target(
        &self,
        pubsub: &str,
        topic: &str,
        metadata: &HashMap<String, String>,
    ) -> Result<&crate::serve::ServedComponent, Status> {
        let served = publish::component(&self.state.components, pubsub).map_err(status)?;
        if topic.is_empty() {
            return Err(status(ApiError::topic_empty(pubsub)));
        }
        let metadata: Metadata = metadata.clone().into_iter().collect();
        publish::check_metadata(pubsub, &metadata).map_err(status)?;
        Ok(served)
    }
}
