//! A broker spawned from its installed binary: free loopback ports, own data directory
//! (with its config files and a one-time init), stopped on drop (also on panic), with
//! kill and restart for fault cases. The broker runs in its own process group, so
//! wrapper scripts and the processes they start go together.

use super::BrokerSpec;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::process::{Child, Command};

/// A running (or killed) broker process.
pub struct BrokerProcess {
    spec: BrokerSpec,
    port: u16,
    /// A second port for brokers that need one (e.g. Erlang distribution).
    aux_port: u16,
    data_dir: tempfile::TempDir,
    child: Option<Child>,
}

fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Finds an installed program: a name on PATH, an absolute path, or an absolute path
/// with one `*` for a versioned directory (the newest installed version wins).
pub fn resolve_program(program: &str) -> Option<PathBuf> {
    match program.split_once('*') {
        Some((dir, rest)) => {
            let mut versions: Vec<PathBuf> = std::fs::read_dir(dir)
                .ok()?
                .filter_map(|entry| entry.ok())
                .map(|entry| PathBuf::from(format!("{}{rest}", entry.path().display())))
                .filter(|path| path.is_file())
                .collect();
            versions.sort();
            versions.pop()
        }
        None if program.contains('/') => Some(PathBuf::from(program)).filter(|p| p.is_file()),
        None => std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join(program))
                .find(|path| path.is_file())
        }),
    }
}

/// The uid and gid of a local user, from /etc/passwd.
fn user_ids(user: &str) -> Result<(u32, u32), String> {
    let passwd = std::fs::read_to_string("/etc/passwd")
        .map_err(|e| format!("cannot read /etc/passwd: {e}"))?;
    passwd
        .lines()
        .map(|line| line.split(':').collect::<Vec<_>>())
        .find(|fields| fields.first() == Some(&user))
        .and_then(|fields| Some((fields.get(2)?.parse().ok()?, fields.get(3)?.parse().ok()?)))
        .ok_or_else(|| format!("user {user} does not exist (install the broker's package)"))
}

fn running_as_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

impl BrokerProcess {
    /// Prepares the data directory, spawns the broker and waits (up to the spec's
    /// readiness bound) until it accepts connections.
    pub async fn spawn(spec: &BrokerSpec) -> Result<Self, String> {
        let data_dir = tempfile::Builder::new()
            .prefix(&format!("pcs-{}-", spec.name))
            .tempdir()
            .map_err(|e| format!("cannot create a data directory: {e}"))?;
        let port = free_port().map_err(|e| format!("cannot find a free port: {e}"))?;
        let aux_port = free_port().map_err(|e| format!("cannot find a free port: {e}"))?;
        let mut process = BrokerProcess {
            spec: spec.clone(),
            port,
            aux_port,
            data_dir,
            child: None,
        };
        process.prepare().await?;
        process.start().await?;
        for step in spec.after_start {
            process.run_step(step).await?;
        }
        Ok(process)
    }

    /// The loopback port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    fn fill(&self, template: &str) -> String {
        template
            .replace("{port}", &self.port.to_string())
            .replace("{aux_port}", &self.aux_port.to_string())
            .replace("{dir}", &self.data_dir.path().display().to_string())
    }

    /// The command for `argv` (program first), run as the spec's user when root.
    fn command(&self, argv: &[&str]) -> Result<Command, String> {
        let (program, args) = argv.split_first().ok_or("empty command")?;
        let path = resolve_program(program).ok_or_else(|| format!("{program} is not installed"))?;
        let args: Vec<String> = args.iter().map(|a| self.fill(a)).collect();
        let mut command = Command::new(&path);
        command.args(&args);
        if let Some(user) = self.spec.run_as.filter(|_| running_as_root()) {
            // Run as the user directly (no wrapper), so the broker stays our child.
            let (uid, gid) = user_ids(user)?;
            command.uid(uid).gid(gid);
        }
        command
            .current_dir(self.data_dir.path())
            .envs(self.spec.env.iter().map(|(k, v)| (*k, self.fill(v))));
        Ok(command)
    }

    async fn run_step(&self, argv: &[&str]) -> Result<(), String> {
        let output = self
            .command(argv)?
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output();
        let output = tokio::time::timeout(self.spec.ready_within, output)
            .await
            .map_err(|_| {
                format!(
                    "{} did not finish within {:?}",
                    argv[0], self.spec.ready_within
                )
            })?
            .map_err(|e| format!("cannot run {}: {e}", argv[0]))?;
        if !output.status.success() {
            return Err(format!(
                "{} failed ({}): {}",
                argv[0],
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        Ok(())
    }

    /// Writes the config files, hands the directory to the broker's user and runs the
    /// one-time init.
    async fn prepare(&self) -> Result<(), String> {
        for (name, template) in self.spec.files {
            let path = self.data_dir.path().join(name);
            std::fs::write(&path, self.fill(template))
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        }
        if let Some(user) = self.spec.run_as.filter(|_| running_as_root()) {
            let owned = Command::new("chown")
                .args(["-R", user])
                .arg(self.data_dir.path())
                .status()
                .await
                .map_err(|e| format!("cannot run chown: {e}"))?;
            if !owned.success() {
                return Err(format!("cannot hand the data directory to user {user}"));
            }
        }
        for step in self.spec.init {
            self.run_step(step).await?;
        }
        Ok(())
    }

    async fn start(&mut self) -> Result<(), String> {
        let log = std::fs::File::create(self.data_dir.path().join("broker.log"))
            .map_err(|e| format!("cannot create the broker log: {e}"))?;
        let mut argv = vec![self.spec.program];
        argv.extend_from_slice(self.spec.args);
        let mut child = self
            .command(&argv)?
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.spec.program))?;
        let ready_within = self.spec.ready_within;
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
                return Err(format!(
                    "{} exited at start ({status}): {}",
                    self.spec.program,
                    self.log_tail()
                ));
            }
            if tokio::time::Instant::now() >= deadline {
                kill_group(&child);
                let _ = child.kill().await;
                return Err(format!(
                    "{} did not accept connections on port {} within {ready_within:?}: {}",
                    self.spec.program,
                    self.port,
                    self.log_tail()
                ));
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    fn log_tail(&self) -> String {
        let log =
            std::fs::read_to_string(self.data_dir.path().join("broker.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().rev().take(3).collect();
        lines.into_iter().rev().collect::<Vec<_>>().join(" | ")
    }

    /// The data directory (logs, config, data).
    pub fn data_dir(&self) -> &Path {
        self.data_dir.path()
    }

    /// Kills the broker and everything it started (as a crash would) and waits for
    /// it to exit.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            kill_group(&child);
            let _ = child.kill().await;
            // The port is free once the group is gone.
            let deadline = tokio::time::Instant::now() + self.spec.ready_within;
            while tokio::time::Instant::now() < deadline
                && tokio::net::TcpStream::connect(("127.0.0.1", self.port))
                    .await
                    .is_ok()
            {
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        }
    }

    /// Starts the broker again on the same port and data directory.
    pub async fn restart(&mut self) -> Result<(), String> {
        self.kill().await;
        self.start().await
    }
}

/// Sends SIGKILL to the child's process group (the child leads it).
fn kill_group(child: &Child) {
    if let Some(pid) = child.id() {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", "--", &format!("-{pid}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            kill_group(child);
            let _ = child.start_kill();
        }
    }
}
