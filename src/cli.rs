//! Command-line types, log set-up and the subcommands.
//!
//! Each subcommand has its own options (`check --help` lists only what
//! applies to `check`); the shared ones are small flattened groups with the
//! same names and env fallbacks everywhere. Every subcommand (but the
//! hidden `generate-docs` of [`manual`] and `import-crontab`, which reads a
//! crontab instead) loads `jobs.toml` first,
//! so a bad file is reported the same way everywhere (file:line:col, key,
//! what to do); `status`, `history`, `pause`, `resume`, `drain`, `undrain`
//! and `trigger --fleet` read it without its `${VAR}` values and may go
//! without it when given `--redis` ([`crate::inspect::Source`]). `run` maps a bad
//! file to exit 78 (EX_CONFIG) so the unit can say
//! `RestartPreventExitStatus=78`.

pub mod manual;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use chrono::Utc;
use clap::{Args, Parser, Subcommand};

use crate::config::{self, Action, Config};
use crate::inspect::TimeBound;

/// Runs cron jobs on a fleet of servers so that each occurrence runs on exactly one.
#[derive(Debug, Parser)]
#[command(name = "solocron", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// The `--log-format` of the chosen subcommand (`None`: not given, the
    /// journal when stderr is the journal, else text); text for those
    /// without one (they print for people and log nothing worth a format).
    pub fn log_format(&self) -> Option<LogFormat> {
        self.command.log_format()
    }
}

pub use crate::logging::LogFormat;

/// Parses the command line, or exits on a usage error as clap words it
/// (exit 2; `--help` and `--version` print and exit 0). Where JSON logs
/// were asked for (`--log-format json`, or `SOLOCRON_LOG_FORMAT=json` for
/// `run` and `trigger`, the commands that have the option), the error is
/// one JSON `ERROR` object in the log's shape instead, so a program that
/// reads stderr as JSON gets JSON from the first line.
pub fn parse_or_exit() -> Cli {
    use clap::error::ErrorKind;
    let err = match Cli::try_parse() {
        Ok(cli) => return cli,
        Err(err) => err,
    };
    let shown = matches!(
        err.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    );
    let args: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|arg| arg.to_string_lossy().into_owned())
        .collect();
    let env = std::env::var("SOLOCRON_LOG_FORMAT").ok();
    if shown || !json_requested(&args, env.as_deref()) {
        err.exit()
    }
    let text = err.render().to_string();
    let line = crate::logging::json_line(
        tracing::Level::ERROR,
        "usage error",
        &[("error", text.trim_end().into())],
    );
    // A closed stderr loses the line, nothing else.
    let _ = std::io::stderr().write_all(line.as_bytes());
    std::process::exit(err.exit_code())
}

/// Whether `args` (without the program name) ask for JSON logs: the last
/// `--log-format` given, else `env` (`SOLOCRON_LOG_FORMAT`) when the
/// subcommand is one that has the option.
fn json_requested(args: &[String], env: Option<&str>) -> bool {
    let mut given = None;
    let mut words = args.iter();
    while let Some(arg) = words.next() {
        if arg == "--" {
            break;
        }
        if let Some(value) = arg.strip_prefix("--log-format=") {
            given = Some(value.to_string());
        } else if arg == "--log-format" {
            given = words.next().cloned();
        }
    }
    if let Some(value) = given {
        return value == "json";
    }
    let subcommand = args.iter().find(|arg| !arg.starts_with('-'));
    env == Some("json") && matches!(subcommand.map(String::as_str), Some("run" | "trigger"))
}

/// The subcommands; each has only the options that apply to it.
#[derive(Debug, Clone, Subcommand)]
pub enum Command {
    /// Run the daemon: schedule, claim, run, log, until SIGTERM/SIGINT.
    Run(RunArgs),
    /// Validate the config and print every job with its next 3 occurrences.
    Check(CheckArgs),
    /// Per job: lock holder, last decided occurrence, next occurrence; live nodes and config drift.
    Status(StatusArgs),
    /// Recent decisions (ran, failed, skipped, ...), newest occurrence first.
    History(HistoryArgs),
    /// Run JOB now on this node (or with --fleet on a running daemon), under its lock with a new fence; exit 0 ok, 1 failed, 3 lock busy, 4 no daemon took it.
    Trigger(TriggerArgs),
    /// Write the man pages and shell completions into DIR (for packaging).
    #[command(hide = true)]
    GenerateDocs(GenerateDocsArgs),
    /// Stop every node from starting JOB's occurrences (stored in Redis); each is recorded `paused`.
    Pause(PauseArgs),
    /// End a pause: every node runs JOB's occurrences again from the next one.
    Resume(ResumeArgs),
    /// Stop a node claiming new occurrences (the others take them); its running jobs finish. A node that is not live and was never drained is refused (exit 2) unless --force.
    Drain(DrainArgs),
    /// End a drain: the node claims occurrences again. A node that is not live and was never drained is refused (exit 2).
    Undrain(UndrainArgs),
    /// Stop JOB's run in progress wherever it runs (SIGTERM to its process group, SIGKILL 10 s later), recorded `aborted` with who and why, not retried; with no run in progress, cancel its pending retry. Exit 0 stopped, 3 nothing running, 1 Redis unreachable or not stopped in time.
    Abort(AbortArgs),
    /// Who did what, newest first: pauses, resumes, drains, undrains, triggers, aborts (who is user@host), and each daemon's start, stop, reload and config drift.
    Audit(AuditArgs),
    /// Print a jobs.toml fragment for a crontab or /etc/cron.d file (FILE, or `-` or nothing: standard input); each line it cannot carry over (`@reboot`, ...) becomes a comment saying why. Exit 0; 1 if nothing could be read.
    ///
    /// Each entry becomes a `[jobs.NAME]` table, named after the program it runs (`-2`, `-3` when taken), with a `# line N:` comment holding the original line; its fields are read as cron reads them and checked as `check` does.
    ///
    /// Variables apply to the entries below them: `CRON_TZ` becomes `timezone`; `SHELL` other than /bin/sh makes the job `argv = [SHELL, "-c", COMMAND]`; `PATH`, `HOME`, `TZ` and the others go into `env`; `MAILTO`, `MAILFROM` (solocron sends no mail: see `on_failure`) and `RANDOM_DELAY` (see `splay`) stay comments. Entries without `CRON_TZ` are read in this machine's zone (cron's local time) unless --timezone says another.
    ///
    /// `%` as cron reads it: the first unescaped `%` ends the command, the text after it goes to its standard input with each further `%` a newline (written into the command as `printf '%s\n' 'line 1' ... | { COMMAND }`), `\%` is a literal `%`. `${` in a command or value is written `$${` so that the shell, not the loader, expands it.
    ///
    /// A system crontab's user field becomes a comment: every job runs as the unit's service user, which cannot switch users (NoNewPrivileges). The fragment passes `solocron check` once a `[redis]` section is added; stderr says how the file was read and how many jobs and comments came out.
    ImportCrontab(ImportCrontabArgs),
}

/// `--config` of the commands that need the file.
#[derive(Debug, Clone, Args)]
pub struct ConfigArg {
    /// The jobs file.
    #[arg(
        long,
        env = "SOLOCRON_CONFIG",
        default_value = "/etc/solocron/jobs.toml"
    )]
    pub config: PathBuf,
}

/// `--node-id`.
#[derive(Debug, Clone, Args)]
pub struct NodeArg {
    /// This node's id in locks, logs and history (default: the host name).
    #[arg(long, env = "SOLOCRON_NODE_ID")]
    pub node_id: Option<String>,
}

/// `--redis` of the commands that use the file's `[redis]`.
#[derive(Debug, Clone, Args)]
pub struct RedisArg {
    /// One Redis server; replaces the `[redis]` server of the file (any mode).
    #[arg(long, env = "SOLOCRON_REDIS_URL", hide_env_values = true)]
    pub redis: Option<String>,
}

/// `--log-format`.
#[derive(Debug, Clone, Args)]
pub struct LogArg {
    /// Log format [default: journal when stderr is the journal (under systemd), else text]
    /// (the filter is taken from `SOLOCRON_LOG`, e.g. `info` or `debug`; the journal socket
    /// from `SOLOCRON_JOURNAL_SOCKET`, default /run/systemd/journal/socket).
    #[arg(long, env = "SOLOCRON_LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
}

/// Where `status` and `history` read: the file is optional for them.
#[derive(Debug, Clone, Args)]
pub struct InspectArgs {
    /// The jobs file; not needed with `--redis` (without one, the jobs are those the live nodes run).
    #[arg(
        long,
        env = "SOLOCRON_CONFIG",
        default_value = "/etc/solocron/jobs.toml"
    )]
    pub config: PathBuf,
    /// One Redis server; replaces the `[redis]` server of the file, or stands in for the file.
    #[arg(long, env = "SOLOCRON_REDIS_URL", hide_env_values = true)]
    pub redis: Option<String>,
    /// Key prefix; overrides `[redis] key_prefix` in the file (without a file: `solocron`).
    #[arg(long, value_name = "PREFIX")]
    pub key_prefix: Option<String>,
}

/// `solocron run`.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub file: ConfigArg,
    #[command(flatten)]
    pub node: NodeArg,
    /// This node's tags, `key=value` pairs separated by commas (`role=db,zone=eu-west`): a job with `run_on` runs only on the nodes whose tags match. Every node also has `node=<its id>`.
    #[arg(long, value_name = "TAGS", env = "SOLOCRON_TAGS", default_value = "")]
    pub tags: String,
    #[command(flatten)]
    pub redis: RedisArg,
    #[command(flatten)]
    pub log: LogArg,
}

/// `solocron check`.
#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub file: ConfigArg,
    /// Only the summary line (and warnings, errors): for `ExecReload=`.
    #[arg(long, short)]
    pub quiet: bool,
    /// The user the daemon runs as: run as root, `check` warns about each file the config names that this user cannot read (nothing if there is no such user).
    #[arg(
        long,
        value_name = "USER",
        env = "SOLOCRON_SERVICE_USER",
        default_value = "solocron"
    )]
    pub service_user: String,
}

/// `solocron status`.
#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    /// One JSON object (`jobs`, `nodes`, `divergences`, `drains`) instead of tables.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub source: InspectArgs,
}

/// `solocron history`.
#[derive(Debug, Clone, Args)]
pub struct HistoryArgs {
    /// Only this job (default: every job in the config or run by a live node; name a removed or renamed job to see its history).
    pub job: Option<String>,
    /// Show at most this many entries (at least 1).
    #[arg(long, default_value_t = 20, value_parser = parse_limit)]
    pub limit: usize,
    /// Only occurrences at or after WHEN: an RFC 3339 instant, or a duration back from now (`90s`, `2h`, `1d`).
    #[arg(long, value_name = "WHEN", value_parser = TimeBound::parse)]
    pub since: Option<TimeBound>,
    /// Only occurrences at or before WHEN: an RFC 3339 instant, or a duration back from now.
    #[arg(long, value_name = "WHEN", value_parser = TimeBound::parse)]
    pub until: Option<TimeBound>,
    /// Only entries of this node (repeat, or separate with commas, for several).
    #[arg(long = "node", value_name = "ID", value_delimiter = ',')]
    pub nodes: Vec<String>,
    /// Only entries with this outcome (repeat, or separate with commas, for several): succeeded, failed, timed_out, lock_lost, interrupted, skipped, paused, missed, abandoned, throttled, aborted, excluded, or `bad` for every outcome but succeeded, skipped and paused.
    #[arg(
        long = "outcome",
        value_name = "OUTCOME",
        value_delimiter = ',',
        value_parser = crate::inspect::parse_outcome
    )]
    pub outcomes: Vec<String>,
    /// One JSON array instead of a table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub source: InspectArgs,
}

/// `solocron trigger`.
#[derive(Debug, Clone, Args)]
pub struct TriggerArgs {
    /// The job's name in the config.
    pub job: String,
    /// Ask the running daemons instead: one that runs JOB and is not drained takes it and runs it (under the unit's sandbox); prints its node, outcome and output tail; exit 4 if none took it within 10 s.
    #[arg(long)]
    pub fleet: bool,
    /// Take no room in the job's group (`max_running`, `max_starts`): for an operator who means to run it beside the group's other runs.
    #[arg(long)]
    pub ignore_limits: bool,
    /// Make up a past occurrence (after `missed`, `failed`, …): run it as that occurrence (`SOLOCRON_OCCURRENCE`, the same Idempotency-Key, the next attempt), recorded as an attempt of it. WHEN: an RFC 3339 instant, or a duration back from now. Refused (exit 2) for an instant that is not one of the job's occurrences, the future, or an occurrence that succeeded (without --force).
    #[arg(long, value_name = "WHEN", value_parser = TimeBound::parse, conflicts_with_all = ["since", "until"])]
    pub occurrence: Option<TimeBound>,
    /// Make up each occurrence at or after WHEN that did not succeed, oldest first, one at a time (with --until; default until now).
    #[arg(long, value_name = "WHEN", value_parser = TimeBound::parse)]
    pub since: Option<TimeBound>,
    /// The end of --since's range (default now).
    #[arg(long, value_name = "WHEN", value_parser = TimeBound::parse, requires = "since")]
    pub until: Option<TimeBound>,
    /// Make up an occurrence even if it succeeded.
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub file: ConfigArg,
    #[command(flatten)]
    pub node: NodeArg,
    #[command(flatten)]
    pub redis: RedisArg,
    #[command(flatten)]
    pub log: LogArg,
}

/// `solocron generate-docs` (hidden: `scripts/package` runs it).
#[derive(Debug, Clone, Args)]
pub struct GenerateDocsArgs {
    /// Where to write `man/` and `completions/` (created if missing).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
}

/// `solocron pause`.
#[derive(Debug, Clone, Args)]
pub struct PauseArgs {
    /// The jobs to pause (names in the config, or run by a live node).
    #[arg(
        value_name = "JOB",
        required_unless_present = "all",
        conflicts_with = "all"
    )]
    pub jobs: Vec<String>,
    /// Pause every job, also jobs added later (`resume --all` ends it).
    #[arg(long)]
    pub all: bool,
    /// End the pause by itself after DURATION (`90s`, `30m`, `2h`); default: until `resume`.
    #[arg(long = "for", value_name = "DURATION", value_parser = parse_positive_duration, conflicts_with_all = ["from", "until"])]
    pub duration: Option<std::time::Duration>,
    /// Book the pause ahead (a change freeze): nothing changes before WHEN (an RFC 3339 instant); needs --until.
    #[arg(long, value_name = "WHEN", value_parser = TimeBound::parse, requires = "until")]
    pub from: Option<TimeBound>,
    /// End the pause at WHEN (an RFC 3339 instant): occurrences from then on run.
    #[arg(long, value_name = "WHEN", value_parser = TimeBound::parse)]
    pub until: Option<TimeBound>,
    /// Why, shown by `status` and in each `paused` history entry.
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    #[command(flatten)]
    pub source: InspectArgs,
}

/// `solocron audit`.
#[derive(Debug, Clone, Args)]
pub struct AuditArgs {
    /// Show at most this many records (at least 1).
    #[arg(long, default_value_t = 50, value_parser = parse_limit)]
    pub limit: usize,
    /// Only records at or after WHEN: an RFC 3339 instant, or a duration back from now (`90s`, `2h`, `7d`).
    #[arg(long, value_name = "WHEN", value_parser = TimeBound::parse)]
    pub since: Option<TimeBound>,
    /// One JSON array instead of a table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub source: InspectArgs,
}

/// `solocron abort`.
#[derive(Debug, Clone, Args)]
pub struct AbortArgs {
    /// The job whose run to stop.
    pub job: String,
    /// Why, recorded in the run's history entry.
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    #[command(flatten)]
    pub source: InspectArgs,
}

/// `solocron import-crontab`.
#[derive(Debug, Clone, Args)]
pub struct ImportCrontabArgs {
    /// The crontab to read; `-` or none: standard input (none only when it is not a terminal).
    #[arg(value_name = "FILE|-")]
    pub file: Option<PathBuf>,
    /// Read it as a system crontab (/etc/crontab, /etc/cron.d): a user name after the time fields. Without --system or --user: a system crontab if it is /etc/crontab or in /etc/cron.d, or if every entry names `root` or a user of this machine there; else a user crontab.
    #[arg(long, conflicts_with = "user")]
    pub system: bool,
    /// Read it as a user crontab (`crontab -l`): the command right after the time fields.
    #[arg(long)]
    pub user: bool,
    /// The time zone of the entries without CRON_TZ (cron read them in its machine's local time). Default: this machine's (TZ, else /etc/localtime, else /etc/timezone).
    #[arg(long, value_name = "ZONE", value_parser = parse_zone)]
    pub timezone: Option<chrono_tz::Tz>,
}

/// `solocron resume`.
#[derive(Debug, Clone, Args)]
pub struct ResumeArgs {
    /// The jobs to resume.
    #[arg(
        value_name = "JOB",
        required_unless_present = "all",
        conflicts_with = "all"
    )]
    pub jobs: Vec<String>,
    /// End `pause --all` and every job's own pause.
    #[arg(long)]
    pub all: bool,
    #[command(flatten)]
    pub source: InspectArgs,
}

/// `solocron drain`.
#[derive(Debug, Clone, Args)]
pub struct DrainArgs {
    /// The node to drain (default: this host's node id, `SOLOCRON_NODE_ID` or the host name).
    #[arg(long = "node", value_name = "ID", env = "SOLOCRON_NODE_ID")]
    pub node: Option<String>,
    /// Why, shown by `status`.
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    /// Drain a node that is not live and was never drained (one about to start); without it such a node is refused (exit 2).
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub source: InspectArgs,
}

/// `solocron undrain`.
#[derive(Debug, Clone, Args)]
pub struct UndrainArgs {
    /// The node to undrain (default: this host's node id, `SOLOCRON_NODE_ID` or the host name).
    #[arg(long = "node", value_name = "ID", env = "SOLOCRON_NODE_ID")]
    pub node: Option<String>,
    #[command(flatten)]
    pub source: InspectArgs,
}

/// `history --limit`: a count of at least 1 (0 would show nothing, and
/// say there is no history when there is).
fn parse_limit(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(0) => Err("`--limit 0` would show no entry; give at least 1 (default 20)".to_string()),
        Ok(limit) => Ok(limit),
        Err(_) => Err(format!(
            "`{text}` is not a count; give a whole number of entries, at least 1"
        )),
    }
}

/// `--timezone`: an IANA zone, or the loader's message with the closest one.
fn parse_zone(text: &str) -> Result<chrono_tz::Tz, String> {
    config::time_zone(text.trim())
}

/// A duration above zero (`--for`), in the config's notation.
fn parse_positive_duration(text: &str) -> Result<std::time::Duration, String> {
    match humantime::parse_duration(text.trim()) {
        Ok(duration) if !duration.is_zero() => Ok(duration),
        Ok(_) => Err("the duration must be above zero, e.g. `30m`".to_string()),
        Err(_) => Err(format!(
            "`{text}` is not a duration; write it like `90s`, `30m`, `2h` or `1h30m`"
        )),
    }
}

impl Command {
    /// The log filter when `SOLOCRON_LOG` is unset: `info` for the daemon;
    /// only warnings for the commands a person runs, which say what they
    /// did themselves (`trigger` shows the job's output; with Sentinel,
    /// `status` and `history` printed the daemon's "redis master found
    /// through sentinel" line above their table every time).
    pub fn default_log_filter(&self) -> &'static str {
        match self {
            Command::Run(_) => "info",
            _ => "warn",
        }
    }

    /// `--log-format` where the command has it (`run`, `trigger`; `None`
    /// when not given), else text.
    pub fn log_format(&self) -> Option<LogFormat> {
        match self {
            Command::Run(args) => args.log.log_format,
            Command::Trigger(args) => args.log.log_format,
            Command::Check(_)
            | Command::Status(_)
            | Command::History(_)
            | Command::GenerateDocs(_)
            | Command::Pause(_)
            | Command::Resume(_)
            | Command::Drain(_)
            | Command::Undrain(_)
            | Command::Abort(_)
            | Command::Audit(_)
            | Command::ImportCrontab(_) => Some(LogFormat::Text),
        }
    }
}

/// What `trigger`'s `--occurrence`, `--since`, `--until` and `--force`
/// ask (durations count back from now).
fn make_up_of(args: &TriggerArgs) -> crate::trigger::MakeUp {
    let now_ms = Utc::now().timestamp_millis();
    let instant = |bound: TimeBound| {
        chrono::DateTime::from_timestamp_millis(bound.resolve(now_ms)).unwrap_or_default()
    };
    match (args.occurrence, args.since) {
        (Some(at), _) => crate::trigger::MakeUp::One {
            at: instant(at),
            force: args.force,
        },
        (None, Some(since)) => crate::trigger::MakeUp::Range {
            since: instant(since),
            until: args.until.map_or_else(Utc::now, instant),
            force: args.force,
        },
        (None, None) => crate::trigger::MakeUp::No,
    }
}

/// A command refused by Redis's ACL, said as the role it needs (never a
/// raw `NOPERM`); any other error as it was.
fn needs_role(command: &str, role: &str, err: anyhow::Error) -> anyhow::Error {
    let text = format!("{err:#}").to_lowercase();
    if text.contains("noperm") || text.contains("no permissions") {
        anyhow::anyhow!(
            "`solocron {command}` needs the {role} role: this Redis user may not run every command it sends; give it the {role}'s ACL line of docs/operations.md (\"A Redis user for solocron\"). Nothing was changed"
        )
    } else {
        err
    }
}

/// Exit status of `run` when the config is bad at start (EX_CONFIG).
pub const EXIT_BAD_CONFIG: u8 = 78;

/// Runs the chosen subcommand. `Err` is a fatal error for `main` to print;
/// its exit code comes from [`exit_code_for`].
pub async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match &cli.command {
        Command::Check(args) => check(args),
        Command::Run(args) => {
            // Before anything slow: a signal must never find the default action.
            let reloads =
                crate::shutdown::reloads().context("cannot install the SIGHUP handler")?;
            let stops = crate::shutdown::stop_requests()
                .context("cannot install the SIGTERM and SIGINT handlers")?;
            crate::shutdown::refuse_suspend(|signal| {
                tracing::warn!(
                    signal,
                    "not suspended: this daemon renews the locks of the jobs it runs, and a \
                     suspended daemon would let them run on without their locks; SIGTERM \
                     (Ctrl-C) stops it"
                )
            })
            .context("cannot install the SIGTSTP and SIGTTIN handlers")?;
            crate::shutdown::refuse_fatal(|signal| {
                tracing::warn!(
                    signal,
                    "signal ignored: this daemon has no use for it (its log is not a file to \
                     reopen); SIGHUP reloads jobs.toml, SIGTERM (Ctrl-C) stops it"
                )
            })
            .context("cannot install the handlers of SIGUSR1, SIGUSR2, SIGQUIT and SIGALRM")?;
            let config = load(&args.file.config, args.redis.redis.as_deref())?;
            crate::memory::release_freed();
            let node = node_id(args.node.node_id.as_deref())?;
            let tags = crate::tags::Tags::parse(&args.tags, &node).map_err(|message| {
                config::StartRefused(format!(
                    "bad node tags in --tags / SOLOCRON_TAGS: {message}"
                ))
            })?;
            let options = crate::daemon::Options {
                node,
                tags,
                redis_override: args.redis.redis.clone(),
            };
            crate::daemon::run(config, options, stops, reloads).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Status(args) => {
            crate::inspect::status(&source(&args.source)?, args.json)
                .await
                .map_err(|err| needs_role("status", "viewer", err))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::History(args) => {
            let query = crate::inspect::HistoryQuery {
                job: args.job.clone(),
                limit: args.limit,
                since: args.since,
                until: args.until,
                nodes: args.nodes.clone(),
                outcomes: args.outcomes.clone(),
                json: args.json,
            };
            crate::inspect::history(&source(&args.source)?, &query)
                .await
                .map_err(|err| needs_role("history", "viewer", err))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Trigger(args) if args.fleet => {
            let source = crate::inspect::Source::resolve(
                &args.file.config,
                args.redis.redis.as_deref(),
                None,
            )?;
            let make_up = make_up_of(args);
            crate::ops::fleet_trigger::run(&source, &args.job, args.ignore_limits, make_up)
                .await
                .map_err(|err| needs_role("trigger --fleet", "operator", err))
        }
        Command::Trigger(args) => {
            let config = load(&args.file.config, args.redis.redis.as_deref())?;
            let node = node_id(args.node.node_id.as_deref())?;
            let make_up = make_up_of(args);
            crate::trigger::run(config, &node, &args.job, args.ignore_limits, make_up).await
        }
        Command::GenerateDocs(args) => {
            let mut out = std::io::stdout().lock();
            for path in manual::generate(&args.dir)? {
                writeln!(out, "{}", path.display())?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Pause(args) => {
            let request = crate::ops::pause::PauseRequest {
                jobs: args.jobs.clone(),
                all: args.all,
                duration: args.duration,
                window: args.until.map(|until| {
                    let now_ms = Utc::now().timestamp_millis();
                    (
                        args.from.map(|from| from.resolve(now_ms)),
                        until.resolve(now_ms),
                    )
                }),
                reason: args.reason.clone(),
            };
            crate::ops::pause::pause(&source(&args.source)?, &request)
                .await
                .map_err(|err| needs_role("pause", "operator", err))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Audit(args) => {
            crate::inspect::audit(&source(&args.source)?, args.since, args.limit, args.json)
                .await
                .map_err(|err| needs_role("audit", "viewer", err))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Abort(args) => {
            crate::ops::abort::abort(&source(&args.source)?, &args.job, args.reason.as_deref())
                .await
                .map_err(|err| needs_role("abort", "operator", err))
        }
        Command::Resume(args) => {
            let request = crate::ops::pause::ResumeRequest {
                jobs: args.jobs.clone(),
                all: args.all,
            };
            crate::ops::pause::resume(&source(&args.source)?, &request)
                .await
                .map_err(|err| needs_role("resume", "operator", err))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Drain(args) => {
            let target = drain_target(args.node.as_deref(), args.force)?;
            let reason = args.reason.as_deref();
            crate::ops::drain::drain(&source(&args.source)?, &target, true, reason)
                .await
                .map_err(|err| needs_role("drain", "operator", err))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::ImportCrontab(args) => import_crontab(args),
        Command::Undrain(args) => {
            let target = drain_target(args.node.as_deref(), false)?;
            crate::ops::drain::drain(&source(&args.source)?, &target, false, None)
                .await
                .map_err(|err| needs_role("undrain", "operator", err))?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `import-crontab`: refuses to wait on a terminal for a crontab nobody
/// named (exit 2), then [`crate::crontab::run`].
fn import_crontab(args: &ImportCrontabArgs) -> anyhow::Result<ExitCode> {
    use std::io::IsTerminal as _;
    if args.file.is_none() && std::io::stdin().is_terminal() {
        return Err(crate::inspect::UsageError(
            "no crontab given: name a file (`solocron import-crontab /etc/cron.d/app`), `-` to \
             type one, or pipe one in (`crontab -l | solocron import-crontab`)"
                .to_string(),
        )
        .into());
    }
    let format = match (args.system, args.user) {
        (true, _) => Some(crate::crontab::Format::System),
        (_, true) => Some(crate::crontab::Format::User),
        _ => None,
    };
    crate::crontab::run(&crate::crontab::Request {
        file: args.file.clone(),
        format,
        timezone: args.timezone,
    })
}

/// The node `drain` / `undrain` is about: `--node` (or `SOLOCRON_NODE_ID`),
/// else this host's name.
fn drain_target(node: Option<&str>, force: bool) -> anyhow::Result<crate::ops::drain::Target> {
    Ok(crate::ops::drain::Target {
        node: node_id(node)?,
        defaulted: node.is_none(),
        force,
    })
}

/// Exit status for a usage error (as the argument parser's).
pub const EXIT_USAGE: u8 = 2;

/// The exit code for a fatal error of `command`: 78 for a bad config at the
/// start of `run`, 2 for a usage error found after parsing
/// ([`crate::inspect::UsageError`]), 1 otherwise.
pub fn exit_code_for(command: &Command, err: &anyhow::Error) -> u8 {
    let bad_config = err
        .chain()
        .any(|cause| cause.is::<config::ConfigError>() || cause.is::<config::StartRefused>());
    let usage = err
        .chain()
        .any(|cause| cause.is::<crate::inspect::UsageError>());
    match command {
        Command::Run(_) if bad_config => EXIT_BAD_CONFIG,
        _ if usage => EXIT_USAGE,
        _ => 1,
    }
}

/// Loads the config at `path`, with `redis` (`--redis`) replacing its URL.
pub fn load(path: &Path, redis: Option<&str>) -> anyhow::Result<Config> {
    let mut config = config::load(path)?;
    if let Some(url) = redis {
        config.redis.use_url(url);
    }
    Ok(config)
}

/// What `status` and `history` read ([`crate::inspect::Source::resolve`]).
fn source(args: &InspectArgs) -> anyhow::Result<crate::inspect::Source> {
    crate::inspect::Source::resolve(
        &args.config,
        args.redis.as_deref(),
        args.key_prefix.as_deref(),
    )
}

/// `--node-id` (`node_id`), or the host name.
pub fn node_id(node_id: Option<&str>) -> anyhow::Result<String> {
    match node_id {
        Some(id) if !id.trim().is_empty() => Ok(id.trim().to_string()),
        Some(_) => anyhow::bail!(
            "`--node-id` is empty; give a name such as `web-1`, or leave it out to use the host name"
        ),
        None => hostname::get()
            .context("cannot read the host name; pass `--node-id`")
            .map(|name| name.to_string_lossy().into_owned()),
    }
}

fn check(args: &CheckArgs) -> anyhow::Result<ExitCode> {
    // Listing three occurrences a job needs the parsed patterns the loader
    // would let go: keep them, rather than parse each again.
    let _forms = (!args.quiet).then(crate::schedule::Hold::start);
    let config = load(&args.file.config, None)?;
    // Root reads every file; the daemon, as the service user, may not.
    let mut warnings = config.warnings.clone();
    if nix::unistd::geteuid().is_root()
        && let Some(user) = config::access::ServiceUser::lookup(&args.service_user)
    {
        warnings.extend(config::access::unreadable(&config, &user));
    }
    // Warnings never fail the check: they go to stderr, before the jobs.
    let mut err = std::io::BufWriter::new(std::io::stderr().lock());
    for warning in &warnings {
        writeln!(err, "warning: {warning}")?;
    }
    err.flush()?;
    drop(err);
    // One write per buffer, not per line (10,000 jobs are 50,000 lines); a
    // closed pipe (`check | head`) is an error to report, not a panic.
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let warned = match warnings.len() {
        0 => String::new(),
        n => format!(", {n} warning(s)"),
    };
    writeln!(
        out,
        "{}: valid, {} job(s){warned}",
        config.path.display(),
        config.jobs.len()
    )?;
    // Which coordinator, its servers (passwords masked) and how a claim
    // is acknowledged; `--quiet` keeps to the one summary line.
    if !args.quiet {
        let redis = &config.redis;
        let servers = match redis.mode {
            config::RedisMode::Single => format!("url {}", redis.redacted_url()),
            _ => redis.redacted_url(),
        };
        let acknowledged = match &redis.mode {
            config::RedisMode::Redlock { urls } => {
                format!("majority {} of {}", urls.len() / 2 + 1, urls.len())
            }
            _ if redis.wait_replicas == 0 => "wait_replicas 0".to_string(),
            _ => format!(
                "wait_replicas {}, wait_timeout {}",
                redis.wait_replicas,
                humantime::format_duration(redis.wait_timeout)
            ),
        };
        writeln!(
            out,
            "redis: {servers} ({acknowledged}), key_prefix {}",
            redis.key_prefix
        )?;
    }
    let now = Utc::now();
    let listed = if args.quiet {
        &[][..]
    } else {
        &config.jobs[..]
    };
    // Finding three occurrences a job is most of `check` with many jobs:
    // the listing is made on every core, a part each, then written in order.
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    let chunk = listed.len().div_ceil(threads).max(256);
    let parts: Vec<String> = std::thread::scope(|scope| {
        let workers: Vec<_> = listed
            .chunks(chunk)
            .map(|jobs| scope.spawn(move || occurrence_listing(jobs, now)))
            .collect();
        workers
            .into_iter()
            .map(|worker| match worker.join() {
                Ok(part) => part,
                // A bug, not the user's input: fail the way it would have.
                Err(panic) => std::panic::resume_unwind(panic),
            })
            .collect()
    });
    for part in parts {
        out.write_all(part.as_bytes())?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// What `check` prints for `jobs`: each job's line and the next three
/// occurrences that fire after `now`, in local time and UTC. A splayed
/// job's line says how long after each occurrence it starts, and its list
/// begins with the first occurrence still to start, which can be one
/// whose instant has passed.
fn occurrence_listing(jobs: &[std::sync::Arc<config::Job>], now: chrono::DateTime<Utc>) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for job in jobs {
        let zone = job.schedule.timezone();
        let splay = if job.splay_offset.is_zero() {
            String::new()
        } else {
            format!(
                "  splay {}: starts {} after each occurrence",
                humantime::format_duration(job.extras.splay),
                humantime::format_duration(job.splay_offset)
            )
        };
        let run_on = job
            .extras
            .run_on
            .as_ref()
            .map(|run_on| format!("  runs on nodes with {run_on}"))
            .unwrap_or_default();
        let group = job
            .extras
            .group
            .as_ref()
            .map(|group| format!("  in group {}", group_limits(group)))
            .unwrap_or_default();
        let names = |calendars: &[std::sync::Arc<config::Calendar>]| {
            calendars
                .iter()
                .map(|calendar| calendar.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut group = group;
        if !job.extras.skip_during.is_empty() {
            group.push_str(&format!(
                "  skip_during [{}]",
                names(&job.extras.skip_during)
            ));
        }
        if !job.extras.only_during.is_empty() {
            group.push_str(&format!(
                "  only_during [{}]",
                names(&job.extras.only_during)
            ));
        }
        // Writing to a String cannot fail.
        let _ = writeln!(
            out,
            "\n{}  `{}` in {}  ({}){splay}{run_on}{group}",
            job.name,
            job.schedule.expression(),
            zone,
            action_kind(&job.action)
        );
        // The next three its calendars let run (a bounded search: a job
        // excluded for years shows fewer).
        let mut occurrences = Vec::new();
        let mut after = job.unsplayed(now);
        for _ in 0..100_000 {
            let Some(next) = job.schedule.next_after(after) else {
                break;
            };
            if job.excluded_by(next).is_none() {
                occurrences.push(next);
                if occurrences.len() == 3 {
                    break;
                }
            }
            after = next;
        }
        for at in &occurrences {
            let local = at.with_timezone(&zone);
            let _ = writeln!(
                out,
                "  {}  =  {}",
                local.format("%Y-%m-%d %H:%M:%S %Z (%:z)"),
                at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            );
        }
        if occurrences.len() < 3 {
            out.push_str("  (no further occurrences)\n");
        }
    }
    out
}

/// `NAME (max_running 2, max_starts 30/1m, when_full wait)`.
fn group_limits(group: &config::Group) -> String {
    let mut limits = Vec::new();
    if let Some(max) = group.max_running {
        limits.push(format!("max_running {max}"));
    }
    if let Some(rate) = group.max_starts {
        limits.push(format!("max_starts {rate}"));
    }
    limits.push(format!("when_full {}", group.when_full.as_str()));
    format!("{} ({})", group.name, limits.join(", "))
}

fn action_kind(action: &Action) -> &'static str {
    match action {
        Action::Command(_) => "command",
        Action::Argv(_) => "argv",
        Action::Http(_) => "http",
    }
}
