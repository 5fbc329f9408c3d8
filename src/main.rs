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
            Ok(config) => cli::serve(config).await.map(|()| true),
            Err(e) => {
                eprintln!("prefill-guard: {e}");
                return ExitCode::from(EX_USAGE);
            }
        },
        Command::Count(args) => cli::count(&args, &mut std::io::stdout().lock()).await,
        Command::DemoModel { dir } => prefill_guard::demo::write_demo_model(&dir)
            .map(|()| true)
            .map_err(Into::into),
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
