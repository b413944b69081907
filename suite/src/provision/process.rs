//! A broker spawned from its installed binary: free loopback ports, own data directory
//! (with its config files and a one-time init), stopped on drop (also on panic), with
//! kill and restart for fault cases. The broker runs in its own process group, so
//! wrapper scripts and the processes they start go together.

use super::broker::Broker;
use super::health::{Health, HealthSender, HealthWatch, Start};
use super::BrokerSpec;
use async_trait::async_trait;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::process::Command;

/// A running (or killed) broker process.
pub struct BrokerProcess {
    spec: BrokerSpec,
    port: u16,
    /// A second port for brokers that need one (e.g. Erlang distribution).
    aux_port: u16,
    data_dir: tempfile::TempDir,
    health: HealthSender,
    /// The running incarnation, if any.
    running: std::sync::Mutex<Option<Incarnation>>,
    /// Serialises kill, restart, pause and resume.
    control: tokio::sync::Mutex<()>,
    /// Every process id it ran as (for the leftover check).
    started: std::sync::Mutex<Vec<u32>>,
    /// What the program says its version is (see [`BrokerSpec::version_args`]).
    software: Option<String>,
}

/// One start of the broker: its process group and a watch of its exit.
struct Incarnation {
    pid: u32,
    /// Set (with the description of its exit status) once the process has exited.
    exited: tokio::sync::watch::Receiver<Option<String>>,
    /// True once the suite asked it to go (kill, shutdown).
    expected: std::sync::Arc<std::sync::atomic::AtomicBool>,
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

/// What the program prints when asked its version (see [`BrokerSpec::version_args`]).
async fn program_version(spec: &BrokerSpec) -> Option<String> {
    if spec.version_args.is_empty() {
        return None;
    }
    let program = resolve_program(spec.program)?;
    super::broker::printed_version(async {
        let mut command = tokio::process::Command::new(program);
        command.args(spec.version_args).kill_on_drop(true);
        command.output().await.ok().map(|output| output.stdout)
    })
    .await
}

impl BrokerProcess {
    /// Prepares the data directory, spawns the broker and waits (up to the spec's
    /// readiness bound) until it accepts connections.
    pub async fn spawn(spec: &BrokerSpec) -> Result<Self, String> {
        let data_dir = tempfile::Builder::new()
            .prefix(&format!("pcs-{}-", spec.name))
            .tempdir()
            .map_err(|e| format!("cannot create a data directory: {e}"))?;
        let port =
            super::ports::free_port().map_err(|e| format!("cannot find a free port: {e}"))?;
        let aux_port =
            super::ports::free_port().map_err(|e| format!("cannot find a free port: {e}"))?;
        let process = BrokerProcess {
            spec: spec.clone(),
            port,
            aux_port,
            data_dir,
            health: HealthSender::new(),
            running: std::sync::Mutex::new(None),
            control: tokio::sync::Mutex::new(()),
            started: std::sync::Mutex::new(Vec::new()),
            software: program_version(spec).await,
        };
        process.prepare().await?;
        process.start().await?;
        for step in spec.after_start {
            process.run_after_start(step).await?;
        }
        Ok(process)
    }

    /// The loopback port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The process id of the running broker (the leader of its process group).
    pub fn pid(&self) -> Option<u32> {
        self.running.lock().unwrap().as_ref().map(|i| i.pid)
    }

    /// Every process id this broker ran as, in order.
    fn started_pids(&self) -> Vec<u32> {
        self.started.lock().unwrap().clone()
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

    /// Runs a step that talks to the started broker, again while it fails within the
    /// spec's readiness bound: a broker that accepts connections may still refuse
    /// requests while it starts up (PostgreSQL's "the database system is starting up").
    async fn run_after_start(&self, argv: &[&str]) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + self.spec.ready_within;
        loop {
            match self.run_step(argv).await {
                Ok(()) => return Ok(()),
                Err(e) if tokio::time::Instant::now() >= deadline => return Err(e),
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
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
        // A broker that is not installed says so, before a step fails for that reason
        // (on a machine without PostgreSQL there is no user postgres to hand the
        // directory to).
        resolve_program(self.spec.program)
            .ok_or_else(|| format!("{} is not installed", self.spec.program))?;
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

    /// Starts the broker, watches its exit, and waits until it accepts connections.
    async fn start(&self) -> Result<(), String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.data_dir.path().join("broker.log"))
            .map_err(|e| format!("cannot open the broker log: {e}"))?;
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
        let pid = child.id().ok_or("the broker exited at once")?;
        self.started.lock().unwrap().push(pid);
        let (exit_sender, exited) = tokio::sync::watch::channel(None);
        let expected = Arc::new(AtomicBool::new(false));
        let monitor = {
            let health = self.health.clone();
            let expected = expected.clone();
            let name = self.spec.name;
            let log_path = self.data_dir.path().join("broker.log");
            async move {
                let status = child.wait().await;
                let description = match status {
                    Ok(status) => describe_exit(status),
                    Err(e) => format!("could not be waited for ({e})"),
                };
                if !expected.load(Ordering::SeqCst) {
                    health.down(
                        format!("{name} (pid {pid}) exited with {description}"),
                        format!("its log tail: {}", tail_of(&log_path)),
                    );
                }
                let _ = exit_sender.send(Some(description));
            }
        };
        tokio::spawn(monitor);
        *self.running.lock().unwrap() = Some(Incarnation {
            pid,
            exited: exited.clone(),
            expected,
        });
        let ready_within = self.spec.ready_within;
        let every = Duration::from_millis(25);
        let gone = || exited.borrow().clone();
        match self
            .health
            .wait_up(self.port, ready_within, every, gone)
            .await
        {
            Start::Up => Ok(()),
            Start::Gone(status) => {
                self.running.lock().unwrap().take();
                Err(format!(
                    "{} exited at start ({status}): {}",
                    self.spec.program,
                    self.log_tail()
                ))
            }
            Start::TooSlow => {
                self.stop_incarnation().await;
                Err(format!(
                    "{} did not accept connections on port {} within {ready_within:?}: {}",
                    self.spec.program,
                    self.port,
                    self.log_tail()
                ))
            }
        }
    }

    /// The last lines of the broker's own log.
    pub fn log_tail(&self) -> String {
        tail_of(&self.data_dir.path().join("broker.log"))
    }

    /// The data directory (logs, config, data).
    pub fn data_dir(&self) -> &Path {
        self.data_dir.path()
    }

    /// Kills the running incarnation's process group, as expected by the suite, and
    /// waits for it to exit and for its port to close.
    async fn stop_incarnation(&self) {
        let incarnation = self.running.lock().unwrap().take();
        let Some(incarnation) = incarnation else {
            return;
        };
        incarnation.expected.store(true, Ordering::SeqCst);
        // Some brokers put their children in sessions of their own (PostgreSQL's
        // backends call setsid), out of reach of the group signal: they are killed
        // one by one, and the restart waits until they are gone (a backend still
        // attached to the old shared memory makes a new postmaster refuse to start).
        let family = descendants(incarnation.pid);
        kill_group(incarnation.pid, "-KILL");
        for pid in &family {
            kill_process(*pid, "-KILL");
        }
        let mut exited = incarnation.exited;
        let _ = tokio::time::timeout(
            self.spec.ready_within,
            exited.wait_for(|status| status.is_some()),
        )
        .await;
        let deadline = tokio::time::Instant::now() + self.spec.ready_within;
        while tokio::time::Instant::now() < deadline && family.iter().any(|pid| alive(*pid)) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // The port is free once the group is gone.
        while tokio::time::Instant::now() < deadline
            && tokio::net::TcpStream::connect(("127.0.0.1", self.port))
                .await
                .is_ok()
        {
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Kills the broker and everything it started (as a crash would) and waits for
    /// it to exit.
    pub async fn kill(&self) {
        let _control = self.control.lock().await;
        self.health.set(Health::Faulted(format!(
            "{} killed by the suite",
            self.spec.name
        )));
        self.stop_incarnation().await;
    }

    /// Starts the broker again on the same port and data directory.
    pub async fn restart(&self) -> Result<(), String> {
        let _control = self.control.lock().await;
        self.health.set(Health::Faulted(format!(
            "{} restarted by the suite",
            self.spec.name
        )));
        self.stop_incarnation().await;
        self.start().await
    }

    /// Sends `signal` to the running broker's process group.
    fn signal(&self, signal: &str) -> Result<(), String> {
        let pid = self
            .pid()
            .ok_or_else(|| format!("{} is not running", self.spec.name))?;
        // The group and every descendant (children in sessions of their own, such as
        // PostgreSQL's backends, would go on serving while the broker is "paused").
        let family = descendants(pid);
        if kill_group(pid, signal) {
            for child in family {
                kill_process(child, signal);
            }
            Ok(())
        } else {
            Err(format!(
                "cannot send {signal} to {} (pid {pid})",
                self.spec.name
            ))
        }
    }
}

/// How a process ended, e.g. `signal 9 (SIGKILL)` or `exit code 1`.
pub fn describe_exit(status: std::process::ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("signal {signal} ({})", signal_name(signal)),
        _ => status.to_string(),
    }
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        6 => "SIGABRT",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        15 => "SIGTERM",
        _ => "signal",
    }
}

fn tail_of(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text
        .lines()
        .rev()
        .filter(|l| !l.trim().is_empty())
        .take(3)
        .collect();
    if lines.is_empty() {
        return "(empty)".into();
    }
    lines.into_iter().rev().collect::<Vec<_>>().join(" | ")
}

/// Every process below `root` in the process tree (children, their children...).
fn descendants(root: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // Fields after the command name (which may hold spaces) in parentheses.
            let after = &stat[stat.rfind(')')? + 2..];
            let ppid = after.split(' ').nth(1)?.parse().ok()?;
            Some((pid, ppid))
        })
        .collect();
    let mut found = Vec::new();
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        for (pid, _) in parents.iter().filter(|(_, ppid)| *ppid == parent) {
            found.push(*pid);
            frontier.push(*pid);
        }
    }
    found
}

/// Whether a process exists and is not a zombie.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rfind(')')
            .is_some_and(|i| !stat[i..].starts_with(") Z"))
    })
}

/// Sends `signal` (e.g. `-KILL`) to one process; true when it was delivered.
fn kill_process(pid: u32, signal: &str) -> bool {
    std::process::Command::new("kill")
        .args([signal, &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Sends `signal` (e.g. `-KILL`) to a process group; true when it was delivered.
fn kill_group(pid: u32, signal: &str) -> bool {
    std::process::Command::new("kill")
        .args([signal, "--", &format!("-{pid}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[async_trait]
impl Broker for BrokerProcess {
    fn software(&self) -> Option<String> {
        self.software.clone()
    }

    fn proxy_wire(&self) -> crate::fault_proxy::Wire {
        self.spec.proxy_wire
    }

    fn describe(&self) -> String {
        match self.pid() {
            Some(pid) => format!(
                "{} (local process, pid {pid}) at 127.0.0.1:{}",
                self.spec.name, self.port
            ),
            None => format!(
                "{} (local process, not running) at 127.0.0.1:{}",
                self.spec.name, self.port
            ),
        }
    }

    fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn health(&self) -> HealthWatch {
        self.health.watch()
    }

    fn log_tail(&self) -> String {
        BrokerProcess::log_tail(self)
    }

    fn can_fault(&self) -> bool {
        true
    }

    async fn kill(&self) -> Result<(), String> {
        BrokerProcess::kill(self).await;
        Ok(())
    }

    async fn restart(&self) -> Result<(), String> {
        BrokerProcess::restart(self).await
    }

    async fn pause(&self) -> Result<(), String> {
        let _control = self.control.lock().await;
        self.health.set(Health::Faulted(format!(
            "{} paused by the suite",
            self.spec.name
        )));
        self.signal("-STOP")
    }

    async fn resume(&self) -> Result<(), String> {
        let _control = self.control.lock().await;
        self.signal("-CONT")?;
        self.health.set(Health::Up);
        Ok(())
    }

    async fn leftover(&self) -> Option<String> {
        let alive: Vec<String> = self
            .started_pids()
            .into_iter()
            .filter(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|stat| !stat.contains(") Z "))
            })
            .map(|pid| format!("{} process {pid}", self.spec.name))
            .collect();
        (!alive.is_empty()).then(|| alive.join(", "))
    }

    async fn shutdown(&self) {
        let _control = self.control.lock().await;
        self.health
            .set(Health::Faulted(format!("{} shut down", self.spec.name)));
        if let Some(pid) = self.pid() {
            kill_group(pid, "-CONT");
        }
        self.stop_incarnation().await;
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        if let Some(incarnation) = self.running.lock().unwrap().take() {
            incarnation.expected.store(true, Ordering::SeqCst);
            kill_group(incarnation.pid, "-CONT");
            kill_group(incarnation.pid, "-KILL");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child that left its parent's process group (as PostgreSQL's backends do) is
    /// still found below the parent, and signalled.
    #[tokio::test]
    async fn descendants_in_sessions_of_their_own_are_found() {
        let mut parent = tokio::process::Command::new("sh")
            .args(["-c", "setsid sleep 30 & wait"])
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .expect("sh runs");
        let pid = parent.id().expect("running");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let mut family = Vec::new();
        while family.is_empty() && tokio::time::Instant::now() < deadline {
            family = descendants(pid);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(family.len(), 1, "the setsid child is found: {family:?}");
        let child = family[0];
        assert!(alive(child));
        kill_group(pid, "-KILL");
        assert!(
            alive(child),
            "a group signal does not reach another session"
        );
        assert!(kill_process(child, "-KILL"));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while alive(child) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(!alive(child), "killed one by one");
        let _ = parent.wait().await;
    }
}
