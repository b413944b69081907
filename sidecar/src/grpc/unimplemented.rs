//! The methods of Dapr's runtime service that `serve` does not serve (state,
//! invocation, actors, workflows, ...): each answers `Unimplemented`, as a daprd
//! without the building block would. The list follows the trait the pinned `dapr`
//! crate generates (its every method is required); the compiler checks it against
//! that trait.

/// `impl Dapr for $ty`: the served methods forwarded to the inherent methods of the
/// same name, every other one answering `Unimplemented`.
macro_rules! dapr_service {
    (
        impl Dapr for $ty:ty;
        served { $($served:ident($sreq:ty) -> $sresp:ty;)* }
        streams { $($stream:ident = $stype:ty;)* }
        unimplemented { $($name:ident($req:ty) -> $resp:ty;)* }
    ) => {
        #[tonic::async_trait]
        impl dapr::dapr::proto::runtime::v1::dapr_server::Dapr for $ty {
            $(type $stream = $stype;)*
            $(
                async fn $served(
                    &self,
                    request: tonic::Request<$sreq>,
                ) -> Result<tonic::Response<$sresp>, tonic::Status> {
                    <$ty>::$served(self, request).await
                }
            )*
            $(
                async fn $name(
                    &self,
                    _request: tonic::Request<$req>,
                ) -> Result<tonic::Response<$resp>, tonic::Status> {
                    Err(tonic::Status::unimplemented(concat!(
                        stringify!($name),
                        " is not served: serve answers Dapr's pub/sub API only"
                    )))
                }
            )*
        }
    };
}

/// A stream for the streaming methods that are not served (never produced).
pub(super) type NoStream<T> =
    std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<T, tonic::Status>> + Send>>;

use super::RuntimeApi;
use dapr::dapr::proto::common::v1 as common;
use dapr::dapr::proto::runtime::v1 as runtime;

dapr_service! {
    impl Dapr for RuntimeApi;
    served {
        publish_event(runtime::PublishEventRequest) -> ();
        bulk_publish_event(runtime::BulkPublishRequest) -> runtime::BulkPublishResponse;
        bulk_publish_event_alpha1(runtime::BulkPublishRequest) -> runtime::BulkPublishResponse;
        get_metadata(runtime::GetMetadataRequest) -> runtime::GetMetadataResponse;
        subscribe_topic_events_alpha1(tonic::Streaming<runtime::SubscribeTopicEventsRequestAlpha1>) -> Self::SubscribeTopicEventsAlpha1Stream;
    }
    streams {
        SubscribeTopicEventsAlpha1Stream = super::stream::Events;
        SubscribeConfigurationAlpha1Stream = NoStream<runtime::SubscribeConfigurationResponse>;
        SubscribeConfigurationStream = NoStream<runtime::SubscribeConfigurationResponse>;
        EncryptAlpha1Stream = NoStream<runtime::EncryptResponse>;
        DecryptAlpha1Stream = NoStream<runtime::DecryptResponse>;
    }
    unimplemented {
        invoke_service(runtime::InvokeServiceRequest) -> common::InvokeResponse;
        get_state(runtime::GetStateRequest) -> runtime::GetStateResponse;
        get_bulk_state(runtime::GetBulkStateRequest) -> runtime::GetBulkStateResponse;
        save_state(runtime::SaveStateRequest) -> ();
        query_state_alpha1(runtime::QueryStateRequest) -> runtime::QueryStateResponse;
        delete_state(runtime::DeleteStateRequest) -> ();
        delete_bulk_state(runtime::DeleteBulkStateRequest) -> ();
        execute_state_transaction(runtime::ExecuteStateTransactionRequest) -> ();
        invoke_binding(runtime::InvokeBindingRequest) -> runtime::InvokeBindingResponse;
        get_secret(runtime::GetSecretRequest) -> runtime::GetSecretResponse;
        get_bulk_secret(runtime::GetBulkSecretRequest) -> runtime::GetBulkSecretResponse;
        register_actor_timer(runtime::RegisterActorTimerRequest) -> ();
        unregister_actor_timer(runtime::UnregisterActorTimerRequest) -> ();
        register_actor_reminder(runtime::RegisterActorReminderRequest) -> ();
        unregister_actor_reminder(runtime::UnregisterActorReminderRequest) -> ();
        unregister_actor_reminders_by_type(runtime::UnregisterActorRemindersByTypeRequest) -> runtime::UnregisterActorRemindersByTypeResponse;
        list_actor_reminders(runtime::ListActorRemindersRequest) -> runtime::ListActorRemindersResponse;
        get_actor_state(runtime::GetActorStateRequest) -> runtime::GetActorStateResponse;
        get_actor_reminder(runtime::GetActorReminderRequest) -> runtime::GetActorReminderResponse;
        execute_actor_state_transaction(runtime::ExecuteActorStateTransactionRequest) -> ();
        invoke_actor(runtime::InvokeActorRequest) -> runtime::InvokeActorResponse;
        get_configuration_alpha1(runtime::GetConfigurationRequest) -> runtime::GetConfigurationResponse;
        get_configuration(runtime::GetConfigurationRequest) -> runtime::GetConfigurationResponse;
        subscribe_configuration_alpha1(runtime::SubscribeConfigurationRequest) -> Self::SubscribeConfigurationAlpha1Stream;
        subscribe_configuration(runtime::SubscribeConfigurationRequest) -> Self::SubscribeConfigurationStream;
        unsubscribe_configuration_alpha1(runtime::UnsubscribeConfigurationRequest) -> runtime::UnsubscribeConfigurationResponse;
        unsubscribe_configuration(runtime::UnsubscribeConfigurationRequest) -> runtime::UnsubscribeConfigurationResponse;
        try_lock_alpha1(runtime::TryLockRequest) -> runtime::TryLockResponse;
        unlock_alpha1(runtime::UnlockRequest) -> runtime::UnlockResponse;
        encrypt_alpha1(tonic::Streaming<runtime::EncryptRequest>) -> Self::EncryptAlpha1Stream;
        decrypt_alpha1(tonic::Streaming<runtime::DecryptRequest>) -> Self::DecryptAlpha1Stream;
        set_metadata(runtime::SetMetadataRequest) -> ();
        subtle_get_key_alpha1(runtime::SubtleGetKeyRequest) -> runtime::SubtleGetKeyResponse;
        subtle_encrypt_alpha1(runtime::SubtleEncryptRequest) -> runtime::SubtleEncryptResponse;
        subtle_decrypt_alpha1(runtime::SubtleDecryptRequest) -> runtime::SubtleDecryptResponse;
        subtle_wrap_key_alpha1(runtime::SubtleWrapKeyRequest) -> runtime::SubtleWrapKeyResponse;
        subtle_unwrap_key_alpha1(runtime::SubtleUnwrapKeyRequest) -> runtime::SubtleUnwrapKeyResponse;
        subtle_sign_alpha1(runtime::SubtleSignRequest) -> runtime::SubtleSignResponse;
        subtle_verify_alpha1(runtime::SubtleVerifyRequest) -> runtime::SubtleVerifyResponse;
        start_workflow_alpha1(runtime::StartWorkflowRequest) -> runtime::StartWorkflowResponse;
        get_workflow_alpha1(runtime::GetWorkflowRequest) -> runtime::GetWorkflowResponse;
        purge_workflow_alpha1(runtime::PurgeWorkflowRequest) -> ();
        terminate_workflow_alpha1(runtime::TerminateWorkflowRequest) -> ();
        pause_workflow_alpha1(runtime::PauseWorkflowRequest) -> ();
        resume_workflow_alpha1(runtime::ResumeWorkflowRequest) -> ();
        raise_event_workflow_alpha1(runtime::RaiseEventWorkflowRequest) -> ();
        start_workflow_beta1(runtime::StartWorkflowRequest) -> runtime::StartWorkflowResponse;
        get_workflow_beta1(runtime::GetWorkflowRequest) -> runtime::GetWorkflowResponse;
        purge_workflow_beta1(runtime::PurgeWorkflowRequest) -> ();
        terminate_workflow_beta1(runtime::TerminateWorkflowRequest) -> ();
        pause_workflow_beta1(runtime::PauseWorkflowRequest) -> ();
        resume_workflow_beta1(runtime::ResumeWorkflowRequest) -> ();
        raise_event_workflow_beta1(runtime::RaiseEventWorkflowRequest) -> ();
        shutdown(runtime::ShutdownRequest) -> ();
        schedule_job_alpha1(runtime::ScheduleJobRequest) -> runtime::ScheduleJobResponse;
        schedule_job(runtime::ScheduleJobRequest) -> runtime::ScheduleJobResponse;
        get_job_alpha1(runtime::GetJobRequest) -> runtime::GetJobResponse;
        get_job(runtime::GetJobRequest) -> runtime::GetJobResponse;
        delete_job_alpha1(runtime::DeleteJobRequest) -> runtime::DeleteJobResponse;
        delete_job(runtime::DeleteJobRequest) -> runtime::DeleteJobResponse;
        delete_jobs_by_prefix_alpha1(runtime::DeleteJobsByPrefixRequestAlpha1) -> runtime::DeleteJobsByPrefixResponseAlpha1;
        delete_jobs_by_prefix(runtime::DeleteJobsByPrefixRequest) -> runtime::DeleteJobsByPrefixResponse;
        list_jobs_alpha1(runtime::ListJobsRequestAlpha1) -> runtime::ListJobsResponseAlpha1;
        list_jobs(runtime::ListJobsRequest) -> runtime::ListJobsResponse;
        converse_alpha1(runtime::ConversationRequest) -> runtime::ConversationResponse;
        converse_alpha2(runtime::ConversationRequestAlpha2) -> runtime::ConversationResponseAlpha2;
        create_index_alpha1(runtime::CreateIndexRequestAlpha1) -> ();
        get_index_alpha1(runtime::GetIndexRequestAlpha1) -> runtime::GetIndexResponseAlpha1;
        list_indexes_alpha1(runtime::ListIndexesRequestAlpha1) -> runtime::ListIndexesResponseAlpha1;
        delete_index_alpha1(runtime::DeleteIndexRequestAlpha1) -> ();
        index_documents_alpha1(runtime::IndexDocumentsRequestAlpha1) -> runtime::IndexDocumentsResponseAlpha1;
        get_documents_alpha1(runtime::GetDocumentsRequestAlpha1) -> runtime::GetDocumentsResponseAlpha1;
        delete_documents_alpha1(runtime::DeleteDocumentsRequestAlpha1) -> runtime::DeleteDocumentsResponseAlpha1;
        search_alpha1(runtime::SearchRequestAlpha1) -> runtime::SearchResponseAlpha1;
        create_collection_alpha1(runtime::CreateCollectionRequestAlpha1) -> ();
        get_collection_alpha1(runtime::GetCollectionRequestAlpha1) -> runtime::GetCollectionResponseAlpha1;
        list_collections_alpha1(runtime::ListCollectionsRequestAlpha1) -> runtime::ListCollectionsResponseAlpha1;
        delete_collection_alpha1(runtime::DeleteCollectionRequestAlpha1) -> ();
        upsert_vectors_alpha1(runtime::UpsertVectorsRequestAlpha1) -> runtime::UpsertVectorsResponseAlpha1;
        delete_vectors_alpha1(runtime::DeleteVectorsRequestAlpha1) -> runtime::DeleteVectorsResponseAlpha1;
        get_vectors_alpha1(runtime::GetVectorsRequestAlpha1) -> runtime::GetVectorsResponseAlpha1;
        query_vectors_alpha1(runtime::QueryVectorsRequestAlpha1) -> runtime::QueryVectorsResponseAlpha1;
        batch_query_vectors_alpha1(runtime::BatchQueryVectorsRequestAlpha1) -> runtime::BatchQueryVectorsResponseAlpha1;
    }
}
