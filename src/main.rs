//! The `solocron` binary: parse arguments, start logging, run the command,
//! map errors to exit codes. Everything else is library code.

use std::process::ExitCode;

use clap::Parser as _;
use solocron::cli::{self, Cli};

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let logging = solocron::logging::init(cli.log_format(), cli.command.default_log_filter());
    let command = cli.command.clone();
    let code = match cli::run(cli).await {
        Ok(code) => code,
        Err(err) => {
            logging.fatal(&err);
            ExitCode::from(cli::exit_code_for(&command, &err))
        }
    };
    logging.finish();
    code
}
