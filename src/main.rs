//! The `solocron` binary: parse arguments, start logging, run the command,
//! map errors to exit codes. Everything else is library code.
//!
//! The arguments are parsed and the runtime is built by hand rather than
//! by `#[tokio::main]` so that the allocator's arena limit
//! ([`solocron::memory::limit_arenas`], one for the daemon, two for a
//! command that exits soon) is set before the runtime starts its threads.

use std::process::ExitCode;

use solocron::cli::{self, Cli, Command};

/// `EX_OSERR`: the process could not get what it needs from the system.
const EXIT_NO_RUNTIME: u8 = 71;

fn main() -> ExitCode {
    let cli = cli::parse_or_exit();
    solocron::open_files::raise();
    solocron::memory::limit_arenas(match cli.command {
        Command::Run(_) => solocron::memory::DAEMON_ARENAS,
        _ => solocron::memory::COMMAND_ARENAS,
    });
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!(
                "solocron: cannot start the async runtime (threads, epoll, timers): {err}; \
                 check the process's limits (ulimit -u, -n)"
            );
            return ExitCode::from(EXIT_NO_RUNTIME);
        }
    };
    runtime.block_on(run(cli))
}

async fn run(cli: Cli) -> ExitCode {
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
