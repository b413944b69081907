//! Fault injection for the certification level: a TCP fault proxy between a component
//! and its broker, and the broker faults of [`crate::provision::Broker`] (kill,
//! restart, pause, resume), each recorded in the case's history with its time.

pub mod proxy;

pub use proxy::{FaultProxy, NetworkFault};

use crate::context::CaseContext;
use crate::outcome::CaseError;
use crate::provision::Broker;
use pubsub_components::runtime::Runtime;
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
    /// through it (built the way the component under test is).
    pub async fn proxied_runtime(&self) -> Result<(Runtime, FaultProxy), CaseError> {
        let connect = self.ctx.connect.clone().ok_or_else(|| {
            CaseError::Harness(
                "this case needs a way to build the component behind a fault proxy".into(),
            )
        })?;
        let proxy = FaultProxy::start(&self.broker.endpoint())
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
        Ok((Runtime::new(name, component), proxy))
    }

    /// Applies a network fault through `proxy` (and records it).
    pub fn network(&self, proxy: &FaultProxy, fault: NetworkFault) {
        self.record(fault.describe());
        proxy.set(fault);
    }
}
