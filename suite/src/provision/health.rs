//! What the harness knows of a provisioned broker's life: up, taken down on purpose by
//! a fault case, or gone on its own (exited, stopped, no longer answering). The
//! runner watches it so that a dying broker gives ERROR cells naming the cause at
//! once, instead of FAIL cells blamed on the component after their bounds.

use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// The state of a broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// Running and expected to answer.
    Up,
    /// Taken down by the suite on purpose (a fault case); not an environment failure.
    Faulted(String),
    /// Gone without the suite asking: the reason, with when and how.
    Down(String),
}

/// How waiting for a starting broker to accept connections ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Start {
    /// It accepts them, and its health says it is up.
    Up,
    /// It never will: why (e.g. how it exited).
    Gone(String),
    /// Not within the time it was given.
    TooSlow,
}

/// Publishes a broker's health; the provisioner keeps it.
#[derive(Debug, Clone)]
pub struct HealthSender {
    sender: watch::Sender<Health>,
    since: Instant,
}

impl HealthSender {
    /// A broker that is up, provisioned now.
    pub fn new() -> Self {
        HealthSender {
            sender: watch::Sender::new(Health::Up),
            since: Instant::now(),
        }
    }

    /// Waits until the broker accepts connections on loopback `port` (its health is
    /// then up), trying every `every` for at most `within`; `gone` says why it never
    /// will (it exited) and ends the wait.
    pub(super) async fn wait_up(
        &self,
        port: u16,
        within: Duration,
        every: Duration,
        gone: impl Fn() -> Option<String>,
    ) -> Start {
        let deadline = Instant::now() + within;
        loop {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                self.set(Health::Up);
                return Start::Up;
            }
            if let Some(reason) = gone() {
                return Start::Gone(reason);
            }
            if Instant::now() >= deadline {
                return Start::TooSlow;
            }
            tokio::time::sleep(every).await;
        }
    }

    /// Time since the broker was provisioned, for messages ("at 10.2 s").
    pub fn elapsed(&self) -> Duration {
        self.since.elapsed()
    }

    /// Sets the state (unchanged states wake nobody).
    pub fn set(&self, health: Health) {
        self.sender.send_if_modified(|current| {
            let changed = *current != health;
            *current = health;
            changed
        });
    }

    /// Marks the broker gone: `what` happened (stamped with the time since
    /// provisioning), then `detail` (e.g. its log tail). A broker the suite faulted on
    /// purpose stays faulted.
    pub fn down(&self, what: impl std::fmt::Display, detail: impl std::fmt::Display) {
        let mut reason = format!("{what} at {:.1} s", self.elapsed().as_secs_f64());
        let detail = detail.to_string();
        if !detail.is_empty() {
            reason.push_str("; ");
            reason.push_str(&detail);
        }
        self.sender.send_if_modified(|current| match current {
            Health::Up => {
                *current = Health::Down(reason);
                true
            }
            _ => false,
        });
    }

    /// The current state.
    pub fn current(&self) -> Health {
        self.sender.borrow().clone()
    }

    /// A watch for the runner.
    pub fn watch(&self) -> HealthWatch {
        HealthWatch {
            receiver: self.sender.subscribe(),
        }
    }
}

impl Default for HealthSender {
    fn default() -> Self {
        HealthSender::new()
    }
}

/// Watches a broker's health.
#[derive(Debug, Clone)]
pub struct HealthWatch {
    receiver: watch::Receiver<Health>,
}

impl HealthWatch {
    /// A watch of a broker that never dies (in-process components).
    pub fn always_up() -> Self {
        HealthSender::new().watch()
    }

    /// The reason the broker is gone, when it went on its own.
    pub fn down_reason(&self) -> Option<String> {
        match &*self.receiver.borrow() {
            Health::Down(reason) => Some(reason.clone()),
            _ => None,
        }
    }

    /// The current state.
    pub fn current(&self) -> Health {
        self.receiver.borrow().clone()
    }

    /// Resolves with the reason once the broker is gone on its own; pends forever
    /// while it lives (and when nobody can report on it any more).
    pub async fn gone(&mut self) -> String {
        loop {
            if let Some(reason) = self.down_reason() {
                return reason;
            }
            if self.receiver.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }

    /// Waits up to `wait` for the broker to be reported gone.
    pub async fn gone_within(&mut self, wait: Duration) -> Option<String> {
        tokio::time::timeout(wait, self.gone()).await.ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_broker_gone_on_its_own_wakes_the_watch_with_the_reason() {
        let sender = HealthSender::new();
        let mut watch = sender.watch();
        assert_eq!(watch.gone_within(Duration::from_millis(20)).await, None);
        sender.down("redis-server exited with signal 9 (SIGKILL)", "");
        let reason = watch.gone_within(Duration::from_secs(1)).await.unwrap();
        assert!(reason.starts_with("redis-server exited with signal 9 (SIGKILL) at "));
    }

    #[tokio::test]
    async fn a_fault_the_suite_injected_is_not_an_environment_failure() {
        let sender = HealthSender::new();
        let watch = sender.watch();
        sender.set(Health::Faulted("killed by the case".into()));
        sender.down("exited with signal 9", "");
        assert_eq!(watch.down_reason(), None);
        assert!(matches!(watch.current(), Health::Faulted(_)));
        sender.set(Health::Up);
        sender.down("exited with signal 9", "");
        assert!(watch.down_reason().is_some());
    }
}
