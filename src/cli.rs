//! The command line: `serve`, `count`, `audit`, `verify`, `demo-model`, `demo` (and the
//! hidden test fixture `pd-sim`). Every `serve` flag is also
//! a `PREFILL_GUARD_*` variable and a key of the TOML file, all declared once
//! in `config/settings.rs`. Each other command lives in its own module
//! (`count_cmd`, `audit`, `verify`, `demo`, `sim`).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::{Config, RawConfig};
use crate::reload::{ConfigSource, Runtime};
use crate::server::Listeners;
use crate::signal::shutdown_signal;
use tokio::net::TcpListener;

#[derive(Debug, Parser)]
#[command(
    name = "prefill-guard",
    version,
    about = "Refuses prompts SGLang's prefill pool cannot hold, counted exactly as SGLang counts them"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// [`Parser::parse`], except that a bad value read from a `PREFILL_GUARD_*`
    /// variable is blamed on the variable: clap names the flag, which the
    /// operator never typed.
    pub fn parse_naming_variables() -> Self {
        use clap::CommandFactory;
        Self::try_parse().unwrap_or_else(|e| {
            let Some(clap::error::ContextValue::String(arg)) =
                e.get(clap::error::ContextKind::InvalidArg).cloned()
            else {
                e.exit()
            };
            let command = Self::command();
            let typed: Vec<String> = std::env::args().collect();
            let variable = command
                .get_subcommands()
                .flat_map(|c| c.get_arguments())
                .find(|a| {
                    a.get_long()
                        .is_some_and(|l| arg.split([' ', '=']).next() == Some(&format!("--{l}")))
                })
                .and_then(|a| Some((a.get_long()?, a.get_env()?.to_str()?.to_owned())))
                .filter(|(long, var)| {
                    std::env::var_os(var).is_some()
                        && !typed.iter().any(|t| t.starts_with(&format!("--{long}")))
                });
            match variable {
                Some((_, var)) => {
                    let text = e.to_string().replace(
                        &format!("'{arg}'"),
                        &format!("the variable {var} (flag '{arg}')"),
                    );
                    // The configuration is wrong, not the command line:
                    // sysexits' EX_USAGE, as for a bad file (README).
                    eprintln!(
                        "prefill-guard: {}",
                        text.trim_start_matches("error: ").trim_end()
                    );
                    std::process::exit(64)
                }
                None => e.exit(),
            }
        })
    }
}

/// `PREFILL_GUARD_*` variables that are not settings: the test harness's.
const HARNESS_VARIABLES: [&str; 3] = [
    "PREFILL_GUARD_SHARED",
    "PREFILL_GUARD_BIN",
    "PREFILL_GUARD_PYENV",
];

/// A `PREFILL_GUARD_*` variable `serve` does not read, with the nearest one
/// it does: a misspelt variable would otherwise be ignored silently (a TOML
/// typo is refused; `PREFILL_GUARD_SAFETY_MARGIN_TOKEN=5` must be too).
pub fn unknown_variable(names: impl IntoIterator<Item = String>) -> Option<String> {
    use clap::CommandFactory;
    let command = Cli::command();
    let known: Vec<String> = command
        .get_subcommands()
        .filter(|c| c.get_name() == "serve")
        .flat_map(|c| c.get_arguments())
        .filter_map(|a| a.get_env()?.to_str().map(str::to_owned))
        .chain(HARNESS_VARIABLES.iter().map(|v| v.to_string()))
        .collect();
    let unknown = names
        .into_iter()
        .filter(|n| n.starts_with("PREFILL_GUARD_") && !known.contains(n))
        .min()?;
    let nearest = known
        .iter()
        .min_by_key(|k| edit_distance(k, &unknown))
        .filter(|k| edit_distance(k, &unknown) <= 4);
    Some(match nearest {
        Some(k) => format!("{unknown} is not a prefill-guard variable; did you mean {k}?"),
        None => {
            format!("{unknown} is not a prefill-guard variable (README, Configuration, lists each)")
        }
    })
}

/// Levenshtein distance, for the nearest variable name.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (diagonal + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            diagonal = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the guard as a reverse proxy in front of SGLang or its router (exit 0 after a
    /// drain, 64 on an invalid configuration, 1 on a failure, 2 on a usage error).
    Serve(Box<ServeArgs>),
    /// Count request bodies offline, one JSON line per file, as SGLang --sglang-version
    /// (default 0.5.23) or the server --server-info names would.
    Count(Box<crate::count_cmd::CountArgs>),
    /// Check an SGLang deployment for the PD tenant leak (exit 0 not exposed, 1 exposed, 2 cannot tell).
    Audit(crate::audit::AuditArgs),
    /// Compare the guard's counts with the upstream's own /v1/tokenize (exit 1 if the guard ever counts fewer).
    Verify(Box<crate::verify::VerifyArgs>),
    /// Write a tiny self-contained model directory (for the quick start and tests).
    DemoModel {
        /// Directory to create.
        dir: PathBuf,
    },
    /// Reproduce the PD tenant leak on a simulated SGLang PD pair, then show the guard stops it
    /// (in-process, a few seconds; exit 0 only if both hold).
    Demo(crate::demo::DemoArgs),
    /// TEST AND DEMO FIXTURE, not for production: a simulated SGLang prefill/decode pair
    /// (vulnerable or fixed) on two ports; prints one JSON line with their URLs.
    #[command(hide = true)]
    PdSim(crate::sim::SimArgs),
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// TOML configuration file; flags and variables override it.
    #[arg(long, env = "PREFILL_GUARD_CONFIG")]
    pub config: Option<PathBuf>,
    /// Every setting of the file, as a flag and a variable (`config::settings`).
    #[command(flatten)]
    pub settings: RawConfig,
}

impl ServeArgs {
    /// The overlay of flags and variables on top of the file.
    pub fn overlay(&self) -> RawConfig {
        self.settings.clone()
    }

    pub fn load_config(&self) -> Result<Config, crate::config::ConfigError> {
        self.config_source().load()
    }

    /// The file and the overlay, kept so SIGHUP reads the configuration the same way.
    pub fn config_source(&self) -> ConfigSource {
        ConfigSource {
            path: self.config.clone(),
            overlay: self.overlay(),
        }
    }
}

/// `prefill-guard serve`: load every model, bind every listener, then serve
/// them ([`crate::server::serve`]) until SIGTERM or Ctrl-C and drain
/// in-flight requests. SIGHUP reloads the configuration from `source` (see
/// [`crate::reload`]).
pub async fn serve(config: Config, source: ConfigSource) -> anyhow::Result<()> {
    // Held to the end of `serve`: dropping it writes the queued log lines.
    let _log = crate::logging::init(config.log_format)?;
    let runtime = Runtime::start(config.clone(), source).await?;
    // Installed before the listeners announce themselves, so a SIGHUP or
    // SIGTERM that follows the "serving" line reloads or drains instead of
    // meeting the default action.
    #[cfg(unix)]
    let sighup = runtime.listen_for_sighup()?;
    let terminate = shutdown_signal();
    // Bound by tokio (SO_REUSEADDR, so a restart can rebind at once).
    let listeners = Listeners {
        proxy: bind("listen", config.listen).await?,
        admin: bind("admin-listen", config.admin_listen).await?,
        grpc: bind_some("grpc-listen", config.grpc_listen).await?,
        authz: bind_some("authz-listen", config.authz.listen).await?,
    };
    let served = crate::server::serve(listeners, runtime, terminate).await;
    #[cfg(unix)]
    sighup.abort();
    served
}

async fn bind(flag: &str, addr: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("{flag} {addr}: {e}"))
}

async fn bind_some(flag: &str, addr: Option<SocketAddr>) -> anyhow::Result<Option<TcpListener>> {
    match addr {
        Some(addr) => bind(flag, addr).await.map(Some),
        None => Ok(None),
    }
}
