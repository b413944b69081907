//! A broker spawned from its installed binary: free loopback port, own data directory,
//! stopped on drop (also on panic), with kill and restart for fault cases.

use super::BrokerSpec;
use std::time::Duration;
use tokio::process::{Child, Command};

/// A running (or killed) broker process.
pub struct BrokerProcess {
    spec: BrokerSpec,
    port: u16,
    data_dir: tempfile::TempDir,
    child: Option<Child>,
}

fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

impl BrokerProcess {
    /// Spawns the broker and waits (up to `ready_within`) until it accepts connections.
    pub async fn spawn(spec: &BrokerSpec, ready_within: Duration) -> Result<Self, String> {
        let data_dir = tempfile::Builder::new()
            .prefix(&format!("pcs-{}-", spec.program))
            .tempdir()
            .map_err(|e| format!("cannot create a data directory: {e}"))?;
        let port = free_port().map_err(|e| format!("cannot find a free port: {e}"))?;
        let mut process = BrokerProcess {
            spec: spec.clone(),
            port,
            data_dir,
            child: None,
        };
        process.start(ready_within).await?;
        Ok(process)
    }

    /// The loopback port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    async fn start(&mut self, ready_within: Duration) -> Result<(), String> {
        let dir = self.data_dir.path().display().to_string();
        let args: Vec<String> = self
            .spec
            .args
            .iter()
            .map(|a| {
                a.replace("{port}", &self.port.to_string())
                    .replace("{dir}", &dir)
            })
            .collect();
        let mut child = Command::new(self.spec.program)
            .args(&args)
            .current_dir(self.data_dir.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.spec.program))?;
        let deadline = tokio::time::Instant::now() + ready_within;
        loop {
            if tokio::net::TcpStream::connect(("127.0.0.1", self.port))
                .await
                .is_ok()
            {
                self.child = Some(child);
                return Ok(());
            }
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!("{} exited at start ({status})", self.spec.program));
            }
            if tokio::time::Instant::now() >= deadline {
                let _ = child.kill().await;
                return Err(format!(
                    "{} did not accept connections on port {} within {ready_within:?}",
                    self.spec.program, self.port
                ));
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Kills the broker (as a crash would) and waits for it to exit.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }

    /// Starts the broker again on the same port and data directory.
    pub async fn restart(&mut self, ready_within: Duration) -> Result<(), String> {
        self.kill().await;
        self.start(ready_within).await
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.start_kill();
        }
    }
}
