//! How the sidecar target gets a sidecar for each app it runs: `serve` in this
//! process, or any sidecar started from a command line with placeholders. One
//! sidecar serves one app, as in a deployment: its app id is the app's consumer
//! group, and two members of a group are two apps with two sidecars.

use crate::app::AppChannel;
use crate::grpc::app::GrpcAppChannel;
use crate::serve::{ServeOptions, ServedComponent, Sidecar};
use async_trait::async_trait;
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::time::Instant;

/// Starts sidecars for the suite's apps.
#[async_trait]
pub trait Launcher: Send + Sync {
    /// Starts a sidecar with app id `app_id` for the app listening on `app_port`,
    /// its API on a free port. Returns once its API answers; the caller waits for
    /// it to read the app's subscriptions.
    async fn launch(&self, app_id: &str, app_port: u16) -> anyhow::Result<Box<dyn Launched>> {
        self.launch_on(app_id, app_port, free_port()?).await
    }
    /// As [`Launcher::launch`], its API on `http_port` (for an app that must be
    /// told its sidecar's port before the sidecar starts, as `DAPR_HTTP_PORT`).
    async fn launch_on(
        &self,
        app_id: &str,
        app_port: u16,
        http_port: u16,
    ) -> anyhow::Result<Box<dyn Launched>>;
    /// Whether the sidecars deliver to their apps over gRPC (daprd's `--app-protocol
    /// grpc`), so the app must serve Dapr's app callbacks, and serve Dapr's gRPC API
    /// ([`Launched::grpc_base`]). Default: over HTTP.
    fn delivers_over_grpc(&self) -> bool {
        false
    }
    /// What the sidecars are, for reports (e.g. `serve (in process)`).
    fn describe(&self) -> String;
    /// Whether the sidecars run in this process (their spans reach its tracing
    /// subscriber). Default: they are processes of their own.
    fn in_process(&self) -> bool {
        false
    }
}

/// A sidecar the suite started.
#[async_trait]
pub trait Launched: Send + Sync {
    /// Its API's address, e.g. `http://127.0.0.1:3500`.
    fn base(&self) -> String;
    /// Its gRPC API's address, e.g. `http://127.0.0.1:50001`, where it serves one.
    fn grpc_base(&self) -> Option<String> {
        None
    }
    /// Stops it; messages it had not settled go back to the broker.
    async fn stop(self: Box<Self>);
}

/// `serve` in this process over the given components.
pub struct ServeLauncher {
    pub components: BTreeMap<String, ServedComponent>,
    /// How long the app may take to answer a delivery.
    pub app_timeout: Duration,
    /// The largest request body each sidecar takes (daprd's `--max-body-size`).
    pub max_body_bytes: usize,
    /// Whether each sidecar delivers to its app over gRPC.
    pub grpc_apps: bool,
}

impl ServeLauncher {
    fn options(&self, app_id: &str) -> ServeOptions {
        ServeOptions {
            app_id: app_id.to_string(),
            max_body_bytes: self.max_body_bytes,
            ..ServeOptions::default()
        }
    }
}

#[async_trait]
impl Launcher for ServeLauncher {
    async fn launch_on(
        &self,
        app_id: &str,
        app_port: u16,
        http_port: u16,
    ) -> anyhow::Result<Box<dyn Launched>> {
        let base = format!("http://127.0.0.1:{app_port}");
        let (app, grpc_app) = match self.grpc_apps {
            false => (Some(AppChannel::new(base, self.app_timeout)?), None),
            true => (None, Some(GrpcAppChannel::new(base, self.app_timeout)?)),
        };
        let sidecar = Sidecar::start(
            self.components.clone(),
            ServeOptions {
                listen: std::net::SocketAddr::from(([127, 0, 0, 1], http_port)),
                grpc_listen: self
                    .grpc_apps
                    .then(|| std::net::SocketAddr::from(([127, 0, 0, 1], 0))),
                app,
                grpc_app,
                ..self.options(app_id)
            },
        )
        .await?;
        Ok(Box::new(sidecar))
    }

    fn delivers_over_grpc(&self) -> bool {
        self.grpc_apps
    }

    fn describe(&self) -> String {
        match self.grpc_apps {
            false => "serve (in process)".to_string(),
            true => "serve (in process, apps over gRPC)".to_string(),
        }
    }

    fn in_process(&self) -> bool {
        true
    }
}

#[async_trait]
impl Launched for Sidecar {
    fn base(&self) -> String {
        format!("http://{}", self.address())
    }

    fn grpc_base(&self) -> Option<String> {
        self.grpc_address().map(|at| format!("http://{at}"))
    }

    async fn stop(self: Box<Self>) {
        Sidecar::stop(*self).await;
    }
}

/// A sidecar started from a command line run by `sh -c`, with `{app_port}`,
/// `{http_port}`, `{grpc_port}`, `{app_id}` and each `{free_port}` replaced (e.g.
/// `daprd --app-id {app_id} --app-port {app_port} --dapr-http-port {http_port}
/// --resources-path ./components`).
pub struct CommandLauncher {
    pub template: String,
    /// How long the sidecar may take until `GET /v1.0/healthz` answers 2xx (and, over
    /// gRPC, its gRPC port takes connections).
    pub ready_within: Duration,
    /// Where each sidecar's output goes (`sidecar-<http_port>.log`); `None`: nowhere.
    pub log_dir: Option<std::path::PathBuf>,
    /// Whether the sidecars are reached over Dapr's gRPC API on `{grpc_port}` and
    /// deliver to their apps over gRPC (the command line says `--app-protocol grpc`).
    pub grpc: bool,
}

/// Why `template` cannot start sidecars reached over gRPC (`grpc`) or HTTP, if it
/// cannot: a placeholder it needs is missing.
pub fn check_command_template(template: &str, grpc: bool) -> anyhow::Result<()> {
    let mut needed = vec!["{app_port}", "{http_port}"];
    if grpc {
        needed.push("{grpc_port}");
    }
    let missing: Vec<&str> = needed
        .into_iter()
        .filter(|placeholder| !template.contains(placeholder))
        .collect();
    if !missing.is_empty() {
        anyhow::bail!(
            "the sidecar command line has no {}: the suite must tell each sidecar its app's port ({{app_port}}), the port of its HTTP API, where the suite checks it is ready ({{http_port}}){}",
            missing.join(" nor "),
            if grpc {
                ", and the port of its gRPC API, which the suite publishes through ({grpc_port}, with --sidecar-protocol grpc)"
            } else {
                ""
            }
        );
    }
    Ok(())
}

impl CommandLauncher {
    /// The command line for one sidecar; each `{free_port}` becomes a port of its own
    /// (for the other ports a sidecar opens: metrics, profiling...).
    pub fn command_line(
        &self,
        app_id: &str,
        app_port: u16,
        http_port: u16,
        grpc_port: u16,
    ) -> anyhow::Result<String> {
        let mut line = self
            .template
            .replace("{app_port}", &app_port.to_string())
            .replace("{http_port}", &http_port.to_string())
            .replace("{grpc_port}", &grpc_port.to_string())
            .replace("{app_id}", app_id);
        while line.contains("{free_port}") {
            line = line.replacen("{free_port}", &free_port()?.to_string(), 1);
        }
        Ok(line)
    }
}

/// A sidecar process the suite started.
struct CommandSidecar {
    base: String,
    grpc_base: Option<String>,
    child: tokio::process::Child,
}

#[async_trait]
impl Launcher for CommandLauncher {
    async fn launch_on(
        &self,
        app_id: &str,
        app_port: u16,
        http_port: u16,
    ) -> anyhow::Result<Box<dyn Launched>> {
        check_command_template(&self.template, self.grpc)?;
        let grpc_port = free_port()?;
        let line = self.command_line(app_id, app_port, http_port, grpc_port)?;
        let log = self
            .log_dir
            .as_ref()
            .map(|dir| dir.join(format!("sidecar-{http_port}.log")));
        let output = || -> anyhow::Result<std::process::Stdio> {
            Ok(match &log {
                Some(path) => std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|e| anyhow::anyhow!("cannot open {}: {e}", path.display()))?
                    .into(),
                None => std::process::Stdio::null(),
            })
        };
        let mut child = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(format!("exec {line}"))
            .kill_on_drop(true)
            .stdin(std::process::Stdio::null())
            .stdout(output()?)
            .stderr(output()?)
            .spawn()
            .map_err(|e| anyhow::anyhow!("cannot start the sidecar `{line}`: {e}"))?;
        let said = || {
            log.as_ref()
                .and_then(|path| std::fs::read_to_string(path).ok())
                .map(|text| {
                    let tail: Vec<&str> = text.lines().rev().take(5).collect();
                    let tail: Vec<&str> = tail.into_iter().rev().collect();
                    format!("; it said: {}", tail.join(" | "))
                })
                .unwrap_or_default()
        };
        let base = format!("http://127.0.0.1:{http_port}");
        let health = format!("{base}/v1.0/healthz");
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()?;
        let deadline = Instant::now() + self.ready_within;
        loop {
            if let Some(status) = child.try_wait()? {
                anyhow::bail!(
                    "the sidecar `{line}` exited with {status} before it answered {health}"
                );
            }
            if let Ok(answer) = client.get(&health).send().await {
                // Over gRPC, the gRPC port must take connections too.
                if answer.status().is_success()
                    && (!self.grpc
                        || tokio::net::TcpStream::connect(("127.0.0.1", grpc_port))
                            .await
                            .is_ok())
                {
                    break;
                }
            }
            if Instant::now() >= deadline {
                let _ = child.kill().await;
                anyhow::bail!(
                    "the sidecar `{line}` did not answer {health}{} within {:?}{}",
                    if self.grpc {
                        format!(" and take connections on its gRPC port {grpc_port}")
                    } else {
                        String::new()
                    },
                    self.ready_within,
                    said()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(Box::new(CommandSidecar {
            base,
            grpc_base: self.grpc.then(|| format!("http://127.0.0.1:{grpc_port}")),
            child,
        }))
    }

    fn delivers_over_grpc(&self) -> bool {
        self.grpc
    }

    fn describe(&self) -> String {
        match self.grpc {
            false => format!("`{}`", self.template),
            true => format!("`{}` (over gRPC)", self.template),
        }
    }
}

#[async_trait]
impl Launched for CommandSidecar {
    fn base(&self) -> String {
        self.base.clone()
    }

    fn grpc_base(&self) -> Option<String> {
        self.grpc_base.clone()
    }

    /// SIGTERM, so that the sidecar leaves its groups; killed if it has not exited
    /// within 10 s.
    async fn stop(mut self: Box<Self>) {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .arg("-TERM")
                .arg(pid.to_string())
                .status();
        }
        if tokio::time::timeout(Duration::from_secs(10), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

/// A port free on loopback now.
pub fn free_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))
        .map_err(|e| anyhow::anyhow!("cannot find a free port for the sidecar: {e}"))?;
    Ok(listener.local_addr()?.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_replaced_and_each_free_port_is_its_own() {
        let launcher = CommandLauncher {
            template: "daprd --app-id {app_id} --app-port {app_port} --dapr-http-port {http_port} --dapr-grpc-port {free_port} --metrics-port {free_port}".into(),
            ready_within: Duration::from_secs(1),
            log_dir: None,
            grpc: false,
        };
        let line = launcher.command_line("g", 3000, 3500, 50001).unwrap();
        assert!(
            line.starts_with(
                "daprd --app-id g --app-port 3000 --dapr-http-port 3500 --dapr-grpc-port "
            ),
            "{line}"
        );
        let ports: Vec<&str> = line.split(' ').skip(8).step_by(2).collect();
        assert_eq!(ports.len(), 2, "{line}");
        assert_ne!(ports[0], ports[1], "{line}");
        assert!(!line.contains('{'), "{line}");
    }

    #[test]
    fn the_grpc_port_is_replaced_and_required_over_grpc() {
        let template = "daprd --app-id {app_id} --app-port {app_port} --app-protocol grpc --dapr-http-port {http_port} --dapr-grpc-port {grpc_port}";
        let launcher = CommandLauncher {
            template: template.into(),
            ready_within: Duration::from_secs(1),
            log_dir: None,
            grpc: true,
        };
        let line = launcher.command_line("g", 3000, 3500, 50001).unwrap();
        assert!(line.ends_with("--dapr-grpc-port 50001"), "{line}");
        assert!(check_command_template(template, true).is_ok());
        let without = "daprd --app-port {app_port} --dapr-http-port {http_port}";
        assert!(check_command_template(without, false).is_ok());
        let refused = check_command_template(without, true)
            .unwrap_err()
            .to_string();
        assert!(refused.contains("no {grpc_port}"), "{refused}");
        let refused = check_command_template("daprd", false)
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains("no {app_port} nor {http_port}"),
            "{refused}"
        );
    }
}
