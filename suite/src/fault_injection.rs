//! Fault injection for the certification level: the network faults of a
//! [`FaultProxy`] between a component and its broker, and the broker faults of [`crate::provision::Broker`] (kill,
//! restart, pause, resume), each recorded in the case's history with its time.

use crate::context::CaseContext;
use crate::fault_proxy::{FaultProxy, NetworkFault};
use crate::outcome::CaseError;
use crate::provision::Broker;
use crate::row_runtime::RowRuntime;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The faults a case can inject into its broker and network, each recorded in the
/// case's history with its time (and drawn on the cell's timeline).
pub struct Faults<'a> {
    ctx: &'a CaseContext,
    broker: Arc<dyn Broker>,
}

impl<'a> Faults<'a> {
    /// The faults of `ctx`'s broker; a harness error when it has none (the runner
    /// gates fault cases before they run, so this is a suite defect).
    pub fn of(ctx: &'a CaseContext) -> Result<Self, CaseError> {
        let broker = ctx.broker.clone().ok_or_else(|| {
            CaseError::Harness("this case injects faults but was given no broker".into())
        })?;
        Ok(Faults { ctx, broker })
    }

    /// The broker, for its description.
    pub fn broker(&self) -> &dyn Broker {
        self.broker.as_ref()
    }

    fn record(&self, what: impl Into<String>) {
        self.ctx.recorder.fault(what);
    }

    /// Kills the broker as a crash would (SIGKILL).
    pub async fn kill_broker(&self) -> Result<(), CaseError> {
        self.record(format!(
            "broker killed (SIGKILL): {}",
            self.broker.describe()
        ));
        self.broker.kill().await.map_err(CaseError::Harness)
    }

    /// Starts the killed broker again on the same endpoint and data; returns how long
    /// it took to accept connections.
    pub async fn restart_broker(&self) -> Result<Duration, CaseError> {
        let started = Instant::now();
        self.broker.restart().await.map_err(CaseError::Harness)?;
        let took = started.elapsed();
        self.record(format!(
            "broker back (restart took {} ms)",
            took.as_millis()
        ));
        Ok(took)
    }

    /// Freezes the broker (SIGSTOP, `docker pause`).
    pub async fn pause_broker(&self) -> Result<(), CaseError> {
        self.record("broker paused (SIGSTOP)");
        self.broker.pause().await.map_err(CaseError::Harness)
    }

    /// Thaws the broker.
    pub async fn resume_broker(&self) -> Result<(), CaseError> {
        self.broker.resume().await.map_err(CaseError::Harness)?;
        self.record("broker resumed (SIGCONT)");
        Ok(())
    }

    /// A fault proxy in front of the broker and a runtime whose component connects
    /// through it (built the way the component under test is, and run the way the
    /// row runs it: in process, or behind the row's sidecars). Retire the runtime
    /// when done.
    pub async fn proxied_runtime(&self) -> Result<(RowRuntime, FaultProxy), CaseError> {
        let connect = self.ctx.connect.clone().ok_or_else(|| {
            CaseError::Harness(
                "this case needs a way to build the component behind a fault proxy".into(),
            )
        })?;
        let proxy = FaultProxy::start_with(&self.broker.endpoint(), self.broker.proxy_wire())
            .await
            .map_err(|e| CaseError::Harness(format!("cannot start the fault proxy: {e}")))?;
        let component = connect(proxy.endpoint()).await.map_err(|e| {
            CaseError::Component(format!(
                "building the component against the fault proxy at {} (forwarding to {}): {e}",
                proxy.endpoint(),
                proxy.upstream()
            ))
        })?;
        let name = format!("{}-via-proxy", self.ctx.runtime.name());
        let runtime = crate::row_runtime::runtime_through(self.ctx.wrap.as_ref(), name, component)
            .await
            .map_err(|e| {
                CaseError::Harness(format!(
                    "running the component behind the fault proxy the way the row runs it: {e}"
                ))
            })?;
        self.ctx.recorder.note(format!(
            "the component built again behind a fault proxy at {} (forwarding to {}){}",
            proxy.endpoint(),
            proxy.upstream(),
            match runtime.is_remote() {
                true => ", run behind the row's sidecars",
                false => "",
            }
        ));
        Ok((runtime, proxy))
    }

    /// Applies a network fault through `proxy` (and records it).
    pub fn network(&self, proxy: &FaultProxy, fault: NetworkFault) {
        self.record(fault.describe());
        proxy.set(fault);
    }
}

#[cfg(all(test, feature = "kafka"))]
mod tests {
    use super::*;
    use crate::provision::broker_spec;
    use crate::provision::BrokerProcess;
    use pubsub_components::config::ComponentDefinition;
    use pubsub_components::OutgoingMessage;

    /// Every connection a Kafka client opens goes through the Kafka-aware proxy (the
    /// broker's advertised address is rewritten to the proxy's): a publish cannot
    /// reach the broker while the proxy cuts the network, and does once it is back.
    /// Relaying bytes alone, the client would bootstrap through the proxy and then
    /// produce straight to the broker, untouched by the cut.
    #[tokio::test]
    async fn a_kafka_client_behind_the_proxy_reaches_the_broker_only_through_it() {
        let spec = broker_spec("kafka").unwrap();
        let broker = BrokerProcess::spawn(&spec)
            .await
            .unwrap_or_else(|e| panic!("spawning tansu (scripts/install.sh --broker kafka): {e}"));
        let software = broker.software().unwrap_or_default();
        assert!(software.starts_with("tansu "), "'{software}'");
        let proxy = FaultProxy::start_with(&broker.endpoint(), spec.proxy_wire)
            .await
            .unwrap();
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/kafka.yaml");
        let definition = ComponentDefinition::from_file(&root).unwrap();
        let component = pubsub_components::registry::build(&definition, Some(&proxy.endpoint()))
            .await
            .unwrap();
        let topic = format!("pcs-proxy-{}", uuid::Uuid::new_v4().simple());
        let publish = |key: &str| {
            let message = OutgoingMessage::new(topic.clone(), key.as_bytes().to_vec());
            let component = component.clone();
            async move { component.publish(message).await }
        };
        publish("before")
            .await
            .expect("publishing through the proxy");

        proxy.set(NetworkFault::Cut);
        let during = tokio::time::timeout(Duration::from_secs(3), publish("during")).await;
        assert!(
            !matches!(during, Ok(Ok(_))),
            "a publish reached the broker while the proxy cut the network: the client went around it"
        );

        proxy.set(NetworkFault::Pass);
        let after = tokio::time::timeout(Duration::from_secs(30), publish("after")).await;
        assert!(matches!(after, Ok(Ok(_))), "{after:?}");
        broker.shutdown().await;
    }
}
