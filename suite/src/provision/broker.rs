//! The broker behind a provisioned component, as the harness controls it: its
//! health, and the faults the suite can inject (kill, restart, pause, resume).

use super::health::HealthWatch;
use async_trait::async_trait;
use std::time::Duration;

/// A provisioned broker the harness watches and, where it can, faults.
#[async_trait]
pub trait Broker: Send + Sync {
    /// What it is and where, e.g. `nats-server (local process, pid 4711) at 127.0.0.1:4222`.
    fn describe(&self) -> String;

    /// `host:port` the component connects to.
    fn endpoint(&self) -> String;

    /// Its health, as the runner watches it.
    fn health(&self) -> HealthWatch;

    /// The last lines of its log, for evidence.
    fn log_tail(&self) -> String;

    /// The broker's software and version where its protocol does not tell the
    /// component (e.g. `tansu 0.6.0` behind the Kafka protocol), for the evidence.
    fn software(&self) -> Option<String> {
        None
    }

    /// How a fault proxy in front of it must relay its protocol.
    fn proxy_wire(&self) -> crate::fault_proxy::Wire {
        crate::fault_proxy::Wire::Opaque
    }

    /// True when the suite can kill, restart, pause and resume it.
    fn can_fault(&self) -> bool;

    /// Kills it as a crash would (SIGKILL) and waits until it is gone. The health
    /// shows the fault as the suite's own, not as an environment failure.
    async fn kill(&self) -> Result<(), String>;

    /// Starts it again on the same endpoint and data, and waits until it answers.
    async fn restart(&self) -> Result<(), String>;

    /// Freezes it (SIGSTOP, `docker pause`): connections stay open, nothing answers.
    async fn pause(&self) -> Result<(), String>;

    /// Thaws a paused broker.
    async fn resume(&self) -> Result<(), String>;

    /// Stops and removes it, and whatever it left (end of run). Dropping it does the
    /// same as a last resort.
    async fn shutdown(&self);

    /// After [`Broker::shutdown`]: what of it is still running (a process, a
    /// container), or `None` when nothing is.
    async fn leftover(&self) -> Option<String>;

    /// Checks, within `wait`, that it accepts connections; the error says what failed.
    async fn answers(&self, wait: Duration) -> Result<(), String> {
        let endpoint = self.endpoint();
        match tokio::time::timeout(wait, tokio::net::TcpStream::connect(&endpoint)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(format!("connecting to {endpoint}: {e}")),
            Err(_) => Err(format!(
                "{endpoint} did not accept a connection within {wait:?}"
            )),
        }
    }
}

/// How long a broker's program may take to print its version.
const VERSION_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

/// The first non-empty line of what a program printed when asked its version, if it
/// printed within [`VERSION_WITHIN`].
pub async fn printed_version<F>(printing: F) -> Option<String>
where
    F: std::future::Future<Output = Option<Vec<u8>>>,
{
    let stdout = tokio::time::timeout(VERSION_WITHIN, printing)
        .await
        .ok()??;
    String::from_utf8_lossy(&stdout)
        .lines()
        .map(str::trim)
        .find(|line| !line.is_empty())
        .map(str::to_string)
}

/// The error of a fault on a broker the suite cannot fault.
pub fn cannot_fault(broker: &dyn Broker, what: &str) -> String {
    format!(
        "cannot {what} {}: the suite does not control it (use local-process or container provisioning)",
        broker.describe()
    )
}
