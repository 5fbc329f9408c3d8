//! The guard as `serve` runs it, from a TOML file: the `reload::Runtime`
//! (discovery, reloads) under `server::serve`, on `127.0.0.1:0`, in front of
//! the recording mock SGLang. Unlike `common::start`, the test keeps the
//! runtime, to reload it and read its current state.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::oneshot;

use prefill_guard::config::RawConfig;
use prefill_guard::demo::write_demo_model;
use prefill_guard::reload::{ConfigSource, Runtime};
use prefill_guard::server;

use super::{start_mock, Guarded, MODEL};

pub struct Live {
    /// The usual harness: `post`, `metrics`, `mock`, `shutdown`. Its `profiles`
    /// are those of the state the guard started with (a reload replaces them).
    pub g: Guarded,
    pub runtime: Arc<Runtime>,
    pub config_path: PathBuf,
    base: String,
}

/// Starts the guard from a configuration file made of a base (upstream = the
/// mock, the demo model as `demo`, loopback listeners) and `extra` TOML lines.
pub async fn start_live(extra: &str) -> Live {
    start_live_with_upstream(None, extra).await
}

/// [`start_live`] forwarding to `upstream` instead of the recording mock
/// (which still starts, unused).
pub async fn start_live_with_upstream(upstream: Option<String>, extra: &str) -> Live {
    let mock = start_mock().await;
    let upstream = upstream.unwrap_or_else(|| format!("http://{}", mock.addr));
    let dir = tempfile::tempdir().unwrap();
    let model_dir = dir.path().join("model");
    write_demo_model(&model_dir).unwrap();
    let base = format!(
        "upstream = \"{upstream}\"\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n\
         count_workers = 2\ncount_queue = 256\nshutdown_grace_secs = 10\n\
         name = \"{MODEL}\"\ntokenizer = {:?}\n",
        model_dir.display().to_string()
    );
    let config_path = dir.path().join("prefill-guard.toml");
    std::fs::write(&config_path, format!("{base}{extra}")).unwrap();
    let source = ConfigSource {
        path: Some(config_path.clone()),
        overlay: RawConfig::default(),
    };
    let config = source.load().unwrap();
    let runtime = Runtime::start(config, source).await.unwrap();
    let listeners = server::Listeners {
        proxy: TcpListener::bind("127.0.0.1:0").await.unwrap(),
        admin: TcpListener::bind("127.0.0.1:0").await.unwrap(),
        grpc: None,
        authz: None,
    };
    let (proxy, admin) = (
        listeners.proxy.local_addr().unwrap(),
        listeners.admin.local_addr().unwrap(),
    );
    let (tx, rx) = oneshot::channel::<()>();
    let server = tokio::spawn(server::serve(listeners, runtime.clone(), async {
        let _ = rx.await;
    }));
    let g = Guarded {
        proxy,
        admin,
        mock,
        http: reqwest::Client::new(),
        shutdown: Some(tx),
        server: Some(server),
        profiles: runtime.current().gate.guard.profiles().clone(),
        grpc: None,
        _model_dir: dir,
    };
    Live {
        g,
        runtime,
        config_path,
        base,
    }
}

impl Live {
    /// Rewrites the configuration file (for a reload) with new `extra` lines.
    pub fn write_config(&self, extra: &str) {
        std::fs::write(&self.config_path, format!("{}{extra}", self.base)).unwrap();
    }

    /// The demo model's limit in the state new requests get.
    pub fn limit(&self) -> Option<usize> {
        self.runtime.current().gate.guard.profiles().limit(MODEL)
    }

    pub async fn readyz(&self) -> u16 {
        self.g
            .http
            .get(format!("http://{}/readyz", self.g.admin))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    }
}
