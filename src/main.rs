use std::process::ExitCode;

use prefill_guard::cli::{self, Cli, Command};

// Counting does not depend on the allocator; throughput does (Cargo.toml).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// sysexits' EX_USAGE: the configuration is wrong, retrying will not help.
const EX_USAGE: u8 = 64;

fn main() -> ExitCode {
    let cli = Cli::parse_naming_variables();
    match cli.command {
        // `serve` runs on one event loop and starts more for the proxy port
        // itself (`io_threads`, `server::ProxyLoops`).
        Command::Serve(_)
            if let Some(why) = cli::unknown_variable(
                std::env::vars_os().filter_map(|(k, _)| k.into_string().ok()),
            ) =>
        {
            eprintln!("prefill-guard: {why}");
            ExitCode::from(EX_USAGE)
        }
        Command::Serve(args) => match args.load_config() {
            Ok(config) => {
                let source = args.config_source();
                on_runtime(1, async move {
                    exit(cli::serve(config, source).await.map(|()| true))
                })
            }
            Err(e) => {
                eprintln!("prefill-guard: {e}");
                ExitCode::from(EX_USAGE)
            }
        },
        other => on_runtime(
            std::thread::available_parallelism().map_or(2, |n| n.get()),
            run(other),
        ),
    }
}

fn on_runtime(threads: usize, work: impl std::future::Future<Output = ExitCode>) -> ExitCode {
    match runtime(threads) {
        Ok(rt) => rt.block_on(work),
        Err(e) => {
            eprintln!("prefill-guard: cannot start the async runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

/// One thread: a current-thread runtime, every task on the thread that
/// calls `block_on`, so no request wakes another thread; more: a
/// work-stealing runtime over that many threads.
fn runtime(threads: usize) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = if threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(threads);
        b
    };
    builder.enable_all().build()
}

/// Every command but `serve`.
async fn run(command: Command) -> ExitCode {
    let result = match command {
        Command::Serve(_) => unreachable!("main runs `serve` itself"),
        Command::Count(args) => {
            prefill_guard::count_cmd::run(&args, &mut std::io::stdout().lock()).await
        }
        // These two have exit statuses of their own (0/1/2), documented in their --help.
        Command::Audit(args) => {
            return ExitCode::from(prefill_guard::audit::run(&args, &mut std::io::stdout()).await)
        }
        Command::Verify(args) => {
            return ExitCode::from(prefill_guard::verify::run(&args, &mut std::io::stdout()).await)
        }
        Command::DemoModel { dir } => prefill_guard::demo::write_demo_model(&dir)
            .map(|()| true)
            .map_err(Into::into),
        Command::Demo(args) => prefill_guard::demo::run(&args, &mut std::io::stdout()).await,
        Command::PdSim(args) => prefill_guard::sim::run(&args).await.map(|()| true),
    };
    exit(result)
}

fn exit(result: anyhow::Result<bool>) -> ExitCode {
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("prefill-guard: {e:#}");
            if e.downcast_ref::<prefill_guard::count_cmd::UsageError>()
                .is_some()
            {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
