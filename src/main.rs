use std::process::ExitCode;

use clap::Parser;
use prefill_guard::cli::{self, Cli, Command};

/// sysexits' EX_USAGE: the configuration is wrong, retrying will not help.
const EX_USAGE: u8 = 64;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => match args.load_config() {
            Ok(config) => cli::serve(config, args.config_source())
                .await
                .map(|()| true),
            Err(e) => {
                eprintln!("prefill-guard: {e}");
                return ExitCode::from(EX_USAGE);
            }
        },
        Command::Count(args) => cli::count(&args, &mut std::io::stdout().lock()).await,
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
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("prefill-guard: {e:#}");
            ExitCode::FAILURE
        }
    }
}
