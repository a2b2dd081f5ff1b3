//! Command-line types, log set-up and the subcommands.
//!
//! Every subcommand loads `jobs.toml` first, so a bad file is reported the
//! same way everywhere (file:line:col, key, what to do). `run` maps it to
//! exit 78 (EX_CONFIG) so the unit can say `RestartPreventExitStatus=78`.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use chrono::Utc;
use clap::{Parser, Subcommand};

use crate::config::{self, Action, Config};

/// Runs cron jobs on a fleet of servers so that each occurrence runs on exactly one.
#[derive(Debug, Parser)]
#[command(name = "solocron", version, about)]
pub struct Cli {
    /// The jobs file.
    #[arg(
        long,
        global = true,
        env = "SOLOCRON_CONFIG",
        default_value = "/etc/solocron/jobs.toml"
    )]
    pub config: PathBuf,
    /// This node's id in locks, logs and history (default: the host name).
    #[arg(long, global = true, env = "SOLOCRON_NODE_ID")]
    pub node_id: Option<String>,
    /// Redis URL; overrides `[redis] url` in the file.
    #[arg(
        long,
        global = true,
        env = "SOLOCRON_REDIS_URL",
        hide_env_values = true
    )]
    pub redis: Option<String>,
    /// Log format (the filter is taken from `SOLOCRON_LOG`, e.g. `info` or `debug`).
    #[arg(long, global = true, env = "SOLOCRON_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

pub use crate::logging::LogFormat;

/// The subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum Command {
    /// Run the daemon: schedule, claim, run, log, until SIGTERM/SIGINT.
    Run,
    /// Validate the config and print every job with its next 3 occurrences.
    Check,
    /// Per job: lock holder, last decided occurrence, next occurrence; live nodes and config drift.
    Status {
        /// One JSON object (`jobs`, `nodes`, `divergences`) instead of tables.
        #[arg(long)]
        json: bool,
    },
    /// Recent decisions (ran, failed, skipped, ...), newest first.
    History {
        /// Only this job (default: every job in the config).
        job: Option<String>,
        /// Show at most this many entries.
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// Only entries that finished within this long, e.g. `90s`, `2h`, `1d`.
        #[arg(long, value_parser = humantime::parse_duration)]
        since: Option<std::time::Duration>,
        /// One JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Run JOB now on this node, under its lock with a new fence; exit 0 ok, 1 failed, 3 lock busy.
    Trigger {
        /// The job's name in the config.
        job: String,
    },
}

impl Command {
    /// The log filter when `SOLOCRON_LOG` is unset: `trigger` shows the
    /// job's output itself, so only warnings go to the log there.
    pub fn default_log_filter(&self) -> &'static str {
        match self {
            Command::Trigger { .. } => "warn",
            _ => "info",
        }
    }
}

/// Exit status of `run` when the config is bad at start (EX_CONFIG).
pub const EXIT_BAD_CONFIG: u8 = 78;

/// Runs the chosen subcommand. `Err` is a fatal error for `main` to print;
/// its exit code comes from [`exit_code_for`].
pub async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match &cli.command {
        Command::Check => check(&cli),
        Command::Run => {
            // Before anything slow: a signal must never find the default action.
            let reloads =
                crate::shutdown::reloads().context("cannot install the SIGHUP handler")?;
            let stops = crate::shutdown::stop_requests()
                .context("cannot install the SIGTERM and SIGINT handlers")?;
            let config = load(&cli)?;
            crate::memory::release_freed();
            let options = crate::daemon::Options {
                node: node_id(&cli)?,
                redis_override: cli.redis.clone(),
            };
            crate::daemon::run(config, options, stops, reloads).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Status { json } => {
            crate::inspect::status(&load(&cli)?, *json).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::History {
            job,
            limit,
            since,
            json,
        } => {
            let args = crate::inspect::HistoryArgs {
                job: job.clone(),
                limit: *limit,
                since: *since,
                json: *json,
            };
            crate::inspect::history(&load(&cli)?, &args).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Trigger { job } => crate::trigger::run(load(&cli)?, &node_id(&cli)?, job).await,
    }
}

/// The exit code for a fatal error of `command`: 78 for a bad config at the
/// start of `run`, 1 otherwise.
pub fn exit_code_for(command: &Command, err: &anyhow::Error) -> u8 {
    let bad_config = err.chain().any(|cause| {
        cause.is::<config::ConfigError>() || cause.is::<crate::daemon::StartRefused>()
    });
    match command {
        Command::Run if bad_config => EXIT_BAD_CONFIG,
        _ => 1,
    }
}

/// Loads `--config`, with `--redis` applied.
pub fn load(cli: &Cli) -> anyhow::Result<Config> {
    let mut config = config::load(&cli.config)?;
    if let Some(url) = &cli.redis {
        config.redis.url = url.clone();
    }
    Ok(config)
}

/// `--node-id`, or the host name.
pub fn node_id(cli: &Cli) -> anyhow::Result<String> {
    match &cli.node_id {
        Some(id) if !id.trim().is_empty() => Ok(id.trim().to_string()),
        Some(_) => anyhow::bail!(
            "`--node-id` is empty; give a name such as `web-1`, or leave it out to use the host name"
        ),
        None => hostname::get()
            .context("cannot read the host name; pass `--node-id`")
            .map(|name| name.to_string_lossy().into_owned()),
    }
}

fn check(cli: &Cli) -> anyhow::Result<ExitCode> {
    let config = load(cli)?;
    // Warnings never fail the check: they go to stderr, before the jobs.
    let mut err = std::io::BufWriter::new(std::io::stderr().lock());
    for warning in &config.warnings {
        writeln!(err, "warning: {warning}")?;
    }
    err.flush()?;
    drop(err);
    // One write per buffer, not per line (10,000 jobs are 50,000 lines); a
    // closed pipe (`check | head`) is an error to report, not a panic.
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let warned = match config.warnings.len() {
        0 => String::new(),
        n => format!(", {n} warning(s)"),
    };
    writeln!(
        out,
        "{}: valid, {} job(s){warned}",
        config.path.display(),
        config.jobs.len()
    )?;
    let now = Utc::now();
    for job in &config.jobs {
        let zone = job.schedule.timezone();
        writeln!(out)?;
        writeln!(
            out,
            "{}  `{}` in {}  ({})",
            job.name,
            job.schedule.expression(),
            zone,
            action_kind(&job.action)
        )?;
        let mut after = now;
        for _ in 0..3 {
            let Some(at) = job.schedule.next_after(after) else {
                writeln!(out, "  (no further occurrences)")?;
                break;
            };
            let local = at.with_timezone(&zone);
            writeln!(
                out,
                "  {}  =  {}",
                local.format("%Y-%m-%d %H:%M:%S %Z (%:z)"),
                at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            )?;
            after = at;
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

fn action_kind(action: &Action) -> &'static str {
    match action {
        Action::Command(_) => "command",
        Action::Argv(_) => "argv",
        Action::Http(_) => "http",
    }
}
