//! A broker in a container, through testcontainers. Containers run with the host's
//! network and listen on a free loopback port (no bridge, no proxy in between), keep
//! their data inside the container across a restart, are watched for stopping, and
//! are removed on shutdown and on drop.

use super::broker::Broker;
use super::health::{Health, HealthSender, HealthWatch, Start};
use super::spec::{BrokerSpec, ContainerImage, ContainerSpec};
use async_trait::async_trait;
use std::time::Duration;
use testcontainers::core::ExecCommand;
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt};
use tokio::io::AsyncReadExt;

/// The label every container of this suite carries (value: the process id that
/// started it), so leftovers can be found.
pub const LABEL: &str = "org.pcs.suite";

/// A broker running in a container.
pub struct BrokerContainer {
    name: &'static str,
    image: String,
    port: u16,
    ready_within: Duration,
    container: tokio::sync::Mutex<Option<ContainerAsync<GenericImage>>>,
    id: String,
    health: HealthSender,
    watcher: tokio::task::JoinHandle<()>,
    /// What the program in the image says its version is (see
    /// [`BrokerSpec::version_args`]).
    software: Option<String>,
    /// How a fault proxy in front of it relays its protocol.
    proxy_wire: crate::fault_proxy::Wire,
}

/// What the broker's program prints in the container when asked its version (see
/// [`BrokerSpec::version_args`]).
async fn program_version(
    container: &ContainerAsync<GenericImage>,
    spec: &BrokerSpec,
) -> Option<String> {
    if spec.version_args.is_empty() {
        return None;
    }
    let command = std::iter::once(spec.program).chain(spec.version_args.iter().copied());
    super::broker::printed_version(async {
        let mut result = container.exec(ExecCommand::new(command)).await.ok()?;
        result.stdout_to_vec().await.ok()
    })
    .await
}

/// Whether a Docker engine answers, within 5 s: the reason when not.
pub async fn engine_problem(docker_host: Option<&str>) -> Option<String> {
    let mut command = tokio::process::Command::new("docker");
    if let Some(host) = docker_host {
        command.env("DOCKER_HOST", host);
    }
    let probe = command
        .args(["info", "--format", "{{.ServerVersion}}"])
        .kill_on_drop(true)
        .output();
    match tokio::time::timeout(Duration::from_secs(5), probe).await {
        Err(_) => Some("the Docker engine did not answer within 5 s".into()),
        Ok(Err(e)) => Some(format!("cannot run docker: {e}")),
        Ok(Ok(out)) if !out.status.success() => Some(format!(
            "no Docker engine is reachable: {}",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .next()
                .unwrap_or("docker info failed")
                .trim()
        )),
        Ok(Ok(_)) => None,
    }
}

/// True when the engine has `image` (name:tag) locally.
pub async fn image_present(image: &str) -> bool {
    let probe = tokio::process::Command::new("docker")
        .args(["image", "inspect", "--format", "{{.Id}}", image])
        .kill_on_drop(true)
        .output();
    matches!(
        tokio::time::timeout(Duration::from_secs(10), probe).await,
        Ok(Ok(out)) if out.status.success()
    )
}

/// The environment variable that names the image for a broker, e.g. `PUBSUB_REDIS_IMAGE`.
pub fn image_variable(broker: &str) -> String {
    format!("PUBSUB_{}_IMAGE", broker.to_uppercase())
}

/// Chooses the image: an override (the definition's `containerImage`, else the
/// broker's environment variable), else the upstream image when the engine has it,
/// else the one `scripts/images.sh` builds locally. The error says how to get one.
pub async fn choose_image(
    spec: &ContainerSpec,
    broker: &str,
    definition_override: Option<&str>,
) -> Result<ContainerImage, String> {
    let variable = image_variable(broker);
    let named = definition_override
        .map(str::to_string)
        .or_else(|| std::env::var(&variable).ok());
    if let Some(named) = named {
        let image = if named == spec.local.reference() {
            spec.local.clone()
        } else if named == spec.upstream.reference() {
            spec.upstream.clone()
        } else {
            // A user's image: run as the local image would be (same entrypoint contract).
            ContainerImage::parse(&named, &spec.local)
        };
        if image_present(&image.reference()).await {
            return Ok(image);
        }
        return Err(format!(
            "the image {} named by {} is not on this engine",
            image.reference(),
            if definition_override.is_some() {
                "the definition's containerImage".to_string()
            } else {
                variable
            }
        ));
    }
    for candidate in [&spec.upstream, &spec.local] {
        if image_present(&candidate.reference()).await {
            return Ok(candidate.clone());
        }
    }
    Err(format!(
        "neither {} (no registry is reachable to pull it) nor {} is on this engine",
        spec.upstream.reference(),
        spec.local.reference()
    ))
}

impl BrokerContainer {
    /// Starts `image` (of `spec`'s broker) with the host's network on a free loopback
    /// port and waits until the broker accepts connections.
    pub async fn start(spec: &BrokerSpec, image: &ContainerImage) -> Result<Self, String> {
        let (name, ready_within) = (spec.name, spec.ready_within);
        let port =
            super::ports::free_port().map_err(|e| format!("cannot find a free port: {e}"))?;
        let aux_port =
            super::ports::free_port().map_err(|e| format!("cannot find a free port: {e}"))?;
        let fill = |text: &str| {
            text.replace("{port}", &port.to_string())
                .replace("{aux_port}", &aux_port.to_string())
        };
        let mut request = GenericImage::new(image.name.clone(), image.tag.clone())
            .with_network("host")
            .with_label(LABEL, std::process::id().to_string())
            .with_env_var("PCS_PORT", port.to_string())
            .with_env_var("PCS_AUX_PORT", aux_port.to_string())
            .with_startup_timeout(ready_within);
        for (key, value) in image.env {
            request = request.with_env_var(*key, fill(value));
        }
        if !image.cmd.is_empty() {
            request = request.with_cmd(image.cmd.iter().map(|a| fill(a)));
        }
        let container = tokio::time::timeout(ready_within, request.start())
            .await
            .map_err(|_| {
                format!(
                    "{} did not start within {ready_within:?}",
                    image.reference()
                )
            })?
            .map_err(|e| format!("cannot start {}: {e}", image.reference()))?;
        let id = container.id().to_string();
        let software = program_version(&container, spec).await;
        let health = HealthSender::new();
        let watcher = tokio::spawn(watch_container(name, id.clone(), health.clone()));
        let broker = BrokerContainer {
            name,
            image: image.reference(),
            port,
            ready_within,
            container: tokio::sync::Mutex::new(Some(container)),
            id,
            health,
            watcher,
            software,
            proxy_wire: spec.proxy_wire,
        };
        broker.wait_ready().await?;
        Ok(broker)
    }

    /// The container id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The loopback port the broker listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    async fn wait_ready(&self) -> Result<(), String> {
        let gone = || self.health.watch().down_reason();
        let every = Duration::from_millis(50);
        match self
            .health
            .wait_up(self.port, self.ready_within, every, gone)
            .await
        {
            Start::Up => Ok(()),
            Start::Gone(reason) => Err(reason),
            Start::TooSlow => Err(format!(
                "{} in container {} did not accept connections on port {} within {:?}: {}",
                self.name,
                short(&self.id),
                self.port,
                self.ready_within,
                self.log_tail()
            )),
        }
    }

    async fn docker(&self, args: &[&str]) -> Result<(), String> {
        let out = tokio::process::Command::new("docker")
            .args(args)
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(self.ready_within, out)
            .await
            .map_err(|_| format!("docker {} did not finish", args.join(" ")))?
            .map_err(|e| format!("cannot run docker: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "docker {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }
}

fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
}

/// Waits for the container to stop (`docker wait`, an event, not a poll) and reports
/// it down when the suite did not ask for it; after a stop, waits for the container to
/// run again (a restart by the suite) before watching anew.
async fn watch_container(name: &'static str, id: String, health: HealthSender) {
    loop {
        let watched = inspect_run(&id).await.map(|(_, started)| started);
        let waited = tokio::process::Command::new("docker")
            .args(["wait", &id])
            .kill_on_drop(true)
            .output()
            .await;
        let run = inspect_run(&id).await;
        let started = run.as_ref().map(|(_, started)| started.clone());
        let state = run.map(|(state, _)| state);
        // Running again with a new start time: the stop was followed by a restart
        // before this look (the suite's kill and restart, on a busy machine); the
        // suite restarts only what it stopped itself, so there is nothing to report.
        let restarted =
            matches!(&state, Some((status, _, _)) if status == "running") && started != watched;
        if restarted {
            continue;
        }
        if health.current() == Health::Up {
            let how = match (&waited, &state) {
                (_, Some((status, code, oom))) if status != "running" => {
                    let signal = if *code > 128 {
                        format!(" (signal {})", code - 128)
                    } else {
                        String::new()
                    };
                    let oom = if *oom { ", OOM-killed" } else { "" };
                    format!("{status} with code {code}{signal}{oom}")
                }
                (Ok(out), _) if out.status.success() => format!(
                    "exited with code {}",
                    String::from_utf8_lossy(&out.stdout).trim()
                ),
                _ => "is gone".to_string(),
            };
            health.down(
                format!("{name} container {} {how}", short(&id)),
                format!("its log tail: {}", container_log_tail(&id).await),
            );
        }
        if state.is_none() {
            return; // removed
        }
        // Stopped: watch again once the suite has started it again, though it may
        // have stopped once more between two looks (a new start time tells).
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            match inspect_run(&id).await {
                None => return,
                Some(((status, _, _), _)) if status == "running" => break,
                Some((_, again)) if Some(&again) != started.as_ref() => break,
                Some(_) => {}
            }
        }
    }
}

/// The container's state: (status, exit code, OOM-killed), or `None` when it is gone.
async fn inspect(id: &str) -> Option<(String, i64, bool)> {
    inspect_run(id).await.map(|(state, _)| state)
}

/// [`inspect`], and when the container last started.
async fn inspect_run(id: &str) -> Option<((String, i64, bool), String)> {
    let out = tokio::process::Command::new("docker")
        .args([
            "inspect",
            "--format",
            "{{.State.Status}} {{.State.ExitCode}} {{.State.OOMKilled}} {{.State.StartedAt}}",
            id,
        ])
        .kill_on_drop(true)
        .output()
        .await
        .ok()
        .filter(|out| out.status.success())?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let mut fields = text.split_whitespace();
    let state = (
        fields.next()?.to_string(),
        fields.next()?.parse().unwrap_or(-1),
        fields.next() == Some("true"),
    );
    Some((state, fields.next().unwrap_or_default().to_string()))
}

async fn container_log_tail(id: &str) -> String {
    let out = tokio::process::Command::new("docker")
        .args(["logs", "--tail", "3", id])
        .kill_on_drop(true)
        .output();
    match tokio::time::timeout(Duration::from_secs(5), out).await {
        Ok(Ok(out)) => {
            let mut text = String::from_utf8_lossy(&out.stdout).to_string();
            text.push_str(&String::from_utf8_lossy(&out.stderr));
            let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
            if lines.is_empty() {
                "(empty)".into()
            } else {
                lines.join(" | ")
            }
        }
        _ => "(unavailable)".into(),
    }
}

#[async_trait]
impl Broker for BrokerContainer {
    fn software(&self) -> Option<String> {
        self.software.clone()
    }

    fn proxy_wire(&self) -> crate::fault_proxy::Wire {
        self.proxy_wire
    }

    fn describe(&self) -> String {
        format!(
            "{} (container {} of {}) at 127.0.0.1:{}",
            self.name,
            short(&self.id),
            self.image,
            self.port
        )
    }

    fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn health(&self) -> HealthWatch {
        self.health.watch()
    }

    fn log_tail(&self) -> String {
        let id = self.id.clone();
        std::thread::spawn(move || {
            std::process::Command::new("docker")
                .args(["logs", "--tail", "3", &id])
                .output()
                .map(|out| {
                    let mut text = String::from_utf8_lossy(&out.stdout).to_string();
                    text.push_str(&String::from_utf8_lossy(&out.stderr));
                    text.lines()
                        .filter(|l| !l.trim().is_empty())
                        .collect::<Vec<_>>()
                        .join(" | ")
                })
                .unwrap_or_default()
        })
        .join()
        .unwrap_or_default()
    }

    fn can_fault(&self) -> bool {
        true
    }

    async fn kill(&self) -> Result<(), String> {
        self.health.set(Health::Faulted(format!(
            "{} killed by the suite",
            self.name
        )));
        self.docker(&["kill", "--signal", "KILL", &self.id]).await?;
        let _ = self.docker(&["wait", &self.id]).await;
        Ok(())
    }

    async fn restart(&self) -> Result<(), String> {
        self.health.set(Health::Faulted(format!(
            "{} restarted by the suite",
            self.name
        )));
        let _ = self.docker(&["kill", "--signal", "KILL", &self.id]).await;
        let _ = self.docker(&["wait", &self.id]).await;
        self.docker(&["start", &self.id]).await?;
        // The entrypoint starts over with the data the container kept.
        self.health
            .set(Health::Faulted(format!("{} restarting", self.name)));
        self.wait_ready()
            .await
            .map_err(|e| format!("after a restart: {e}"))
    }

    async fn pause(&self) -> Result<(), String> {
        self.health.set(Health::Faulted(format!(
            "{} paused by the suite",
            self.name
        )));
        // The cgroup freezer gives up when a task does not stop in time (one in
        // uninterruptible IO on a busy disk: "unable to freeze"); the container is
        // left running, so asking again is safe.
        let mut tries = 0;
        loop {
            match self.docker(&["pause", &self.id]).await {
                Err(e) if e.contains("unable to freeze") && tries < 3 => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                done => return done,
            }
        }
    }

    async fn resume(&self) -> Result<(), String> {
        self.docker(&["unpause", &self.id]).await?;
        self.health.set(Health::Up);
        Ok(())
    }

    async fn leftover(&self) -> Option<String> {
        inspect(&self.id)
            .await
            .map(|(status, _, _)| format!("{} container {} ({status})", self.name, short(&self.id)))
    }

    async fn shutdown(&self) {
        self.health
            .set(Health::Faulted(format!("{} shut down", self.name)));
        self.watcher.abort();
        if let Some(container) = self.container.lock().await.take() {
            // testcontainers removes it (and its anonymous volumes).
            if !matches!(
                tokio::time::timeout(self.ready_within, container.rm()).await,
                Ok(Ok(()))
            ) {
                let _ = self.docker(&["rm", "--force", "--volumes", &self.id]).await;
            }
        }
    }
}

impl Drop for BrokerContainer {
    fn drop(&mut self) {
        self.watcher.abort();
        if self.container.get_mut().is_some() {
            self.health
                .set(Health::Faulted(format!("{} dropped", self.name)));
        }
        // Dropping the testcontainers handle removes the container.
    }
}

/// Containers this suite started that still exist: `(id, image)` pairs, all of them
/// or only those of process `pid`.
pub async fn leftovers(pid: Option<u32>) -> Result<Vec<(String, String)>, String> {
    let filter = match pid {
        Some(pid) => format!("label={LABEL}={pid}"),
        None => format!("label={LABEL}"),
    };
    let mut out = String::new();
    let mut child = tokio::process::Command::new("docker")
        .args([
            "ps",
            "--all",
            "--filter",
            &filter,
            "--format",
            "{{.ID}} {{.Image}}",
        ])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot run docker: {e}"))?;
    if let Some(mut stdout) = child.stdout.take() {
        stdout
            .read_to_string(&mut out)
            .await
            .map_err(|e| e.to_string())?;
    }
    let _ = child.wait().await;
    Ok(out
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(id, image)| (id.to_string(), image.to_string()))
        .collect())
}
