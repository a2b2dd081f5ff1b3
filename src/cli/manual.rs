//! Man pages and shell completions, generated from the clap definitions in
//! [`crate::cli::Cli`], so they can never describe options the binary does
//! not have.
//!
//! The hidden `solocron generate-docs DIR` writes them; `scripts/package`
//! runs it with the binary it is about to package, and nothing
//! generated is committed. Layout under `DIR`:
//! `man/solocron.1` (with the sections clap has no notion of: EXIT
//! STATUS, ENVIRONMENT from the options' `env` and the variables below,
//! CONFIGURATION listing every key of [`crate::config::keys`] with a line
//! each from [`KEY_HELP`], FILES and SEE ALSO) and one
//! `man/solocron-SUBCOMMAND.1` per visible subcommand;
//! `completions/solocron.bash`, `completions/_solocron` (zsh) and
//! `completions/solocron.fish`.
//!
//! Failure model: the first file that cannot be created or written stops
//! the run with an error naming that path; files written before it stay
//! (the caller removes `DIR` first for a clean set).

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::CommandFactory as _;
use clap_complete::Shell;

use crate::cli::Cli;

/// The shells that get a completion file, and the file name each one's
/// vendor directory expects.
pub const SHELLS: [(Shell, &str); 3] = [
    (Shell::Bash, "solocron.bash"),
    (Shell::Zsh, "_solocron"),
    (Shell::Fish, "solocron.fish"),
];

/// Writes the man pages to `dir/man` and the completions to
/// `dir/completions`; returns every file written, man pages first.
pub fn generate(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    let man = dir.join("man");
    create_dir(&man)?;
    // The top page and one per visible subcommand (`solocron-run.1`, ...;
    // the hidden `generate-docs` gets none), named and cross-referenced by
    // clap_mangen itself.
    clap_mangen::generate_to(Cli::command(), &man)
        .with_context(|| format!("cannot write the man pages into {}", man.display()))?;
    append_files_section(&man.join("solocron.1"))?;
    let mut pages = std::fs::read_dir(&man)
        .and_then(|entries| {
            entries
                .map(|entry| entry.map(|e| e.path()))
                .collect::<Result<Vec<_>, _>>()
        })
        .with_context(|| format!("cannot list the man pages written to {}", man.display()))?;
    pages.sort();
    written.extend(pages);

    let completions = dir.join("completions");
    create_dir(&completions)?;
    for (shell, file) in SHELLS {
        let path = completions.join(file);
        let mut script = Vec::new();
        clap_complete::generate(shell, &mut visible_only(), "solocron", &mut script);
        write(&path, &script)?;
        written.push(path);
    }
    Ok(written)
}

/// [`Cli`] without its hidden subcommands: clap_complete offers hidden
/// subcommands too (clap_mangen skips them), and clap cannot remove one,
/// so this is a new command with the same name, version, about and the
/// visible subcommands (the top level has no arguments of its own).
fn visible_only() -> clap::Command {
    let cli = Cli::command();
    let about = cli.get_about().cloned().unwrap_or_default();
    clap::Command::new("solocron")
        .version(env!("CARGO_PKG_VERSION"))
        .about(about)
        .subcommand_required(true)
        .subcommands(
            cli.get_subcommands()
                .filter(|sub| !sub.is_hide_set())
                .cloned(),
        )
}

/// The files `solocron` reads, for the top page's FILES section.
const FILES: [(&str, &str); 5] = [
    (
        "/etc/solocron/jobs.toml",
        "The jobs and the fleet's Redis (--config, SOLOCRON_CONFIG); the same file on every server. \
         As installed it is refused until [redis] and a job are added.",
    ),
    (
        "/etc/solocron/daemon.env",
        "Optional SOLOCRON_* settings of the daemon (e.g. SOLOCRON_NODE_ID), read by the unit at start.",
    ),
    (
        "/etc/solocron/env",
        "NAME=value lines for ${VAR} in jobs.toml, when [daemon] env_file names it; read at start and at every reload.",
    ),
    (
        "/etc/solocron/redis.pass",
        "The Redis password, when [redis] password_file names it. Every secret file (this one, env, \
         a TLS key) is owned by root, group solocron, mode 0640: \
         install -m 0640 -o root -g solocron /dev/null /etc/solocron/redis.pass. \
         solocron check run as root warns about one the user solocron cannot read (--service-user).",
    ),
    (
        "/usr/lib/systemd/system/solocron.service",
        "The unit of the Debian package (installed by hand: /etc/systemd/system/solocron.service). \
         systemctl enable --now solocron starts the daemon; systemctl reload solocron checks and re-reads jobs.toml.",
    ),
];

/// The exit statuses of every subcommand.
fn exit_statuses() -> Vec<(String, String)> {
    use crate::cli::{EXIT_BAD_CONFIG, EXIT_USAGE};
    use crate::ops::fleet_trigger::EXIT_NOT_TAKEN;
    use crate::trigger::EXIT_BUSY;
    vec![
        (
            "0".into(),
            "Success: run stopped cleanly, check found the file valid (warnings included), a \
             command did what it was asked, trigger's run succeeded, import-crontab printed at \
             least one job."
                .into(),
        ),
        (
            "1".into(),
            "An error: the file is invalid (check), Redis is unreachable or refuses, an unknown \
             job, trigger's run did not succeed, a fatal error of run after its start, \
             import-crontab could read nothing it could carry over."
                .into(),
        ),
        (
            EXIT_USAGE.to_string(),
            "A usage error: an unknown option or a bad value (--outcome, --since, --limit, \
             --timezone); import-crontab without FILE on a terminal."
                .into(),
        ),
        (
            EXIT_BUSY.to_string(),
            "trigger JOB: the job's lock is held by a run in progress (the message names the \
             node)."
                .into(),
        ),
        (
            EXIT_NOT_TAKEN.to_string(),
            "trigger JOB --fleet: no daemon took the request in time.".into(),
        ),
        (
            "71".into(),
            "The process could not start its runtime (threads, file descriptors).".into(),
        ),
        (
            EXIT_BAD_CONFIG.to_string(),
            "run: the configuration is bad at start (a broken jobs.toml, a file it names that \
             cannot be read, a Redis password or ACL user refused); the unit does not restart \
             it (RestartPreventExitStatus=78)."
                .into(),
        ),
    ]
}

/// The variables solocron reads that are not an option's (those come from
/// clap), and the ones each run sees.
const ENVIRONMENT: [(&str, &str); 7] = [
    (
        "SOLOCRON_LOG",
        "Log filter, e.g. debug (a bare level is solocron's own lines), or tracing directives.",
    ),
    (
        "SOLOCRON_JOURNAL_SOCKET",
        "The journal's socket for --log-format journal (default /run/systemd/journal/socket).",
    ),
    (
        "SOLOCRON_JOB, SOLOCRON_OCCURRENCE, SOLOCRON_FENCE, SOLOCRON_NODE, SOLOCRON_ATTEMPT",
        "Set by solocron for each run: the job, its occurrence (RFC 3339, or manual-INSTANT), \
         the fencing token, this node and the attempt (1, then 2... for retries).",
    ),
    (
        "SOLOCRON_OUTCOME, SOLOCRON_EXIT_CODE, SOLOCRON_ERROR, SOLOCRON_OUTPUT_TAIL",
        "Set for on_failure and on_success notifiers: how the run ended.",
    ),
    (
        "${NAME} in jobs.toml",
        "Filled at load from [daemon] env_file, then the environment; a missing one is an error.",
    ),
    (
        "NOTIFY_SOCKET, WATCHDOG_USEC",
        "Set by systemd (Type=notify, WatchdogSec=): readiness, reload and watchdog messages; \
         never passed to jobs (nor is SOLOCRON_REDIS_URL).",
    ),
    (
        "JOURNAL_STREAM",
        "Set by systemd when stderr is the journal: logs go to the journal natively.",
    ),
];

/// A line for every key of `jobs.toml`, per table: the CONFIGURATION
/// section lists the keys of [`crate::config::keys`] in their order with
/// these lines (a test checks that every key has one and no line names a
/// key the loader does not know).
#[rustfmt::skip]
pub const KEY_HELP: &[(&str, &str, &str)] = &[
    ("redis", "url", "One Redis server: redis://[USER:PASSWORD@]HOST:PORT[/DB], rediss:// for TLS."),
    ("redis", "sentinel", "{ master = NAME, urls = [...], password_file = PATH }: a Sentinel-managed master."),
    ("redis", "cluster", "A Redis Cluster: a list of seed node URLs."),
    ("redis", "redlock", "Independent masters (3 or more, odd): a claim needs a majority."),
    ("redis", "wait_replicas", "Replicas that acknowledge a claim before its run starts (default 1 with sentinel or cluster, 0 with url)."),
    ("redis", "wait_timeout", "How long a claim waits for them (default 250ms, 10ms to 10s)."),
    ("redis", "username", "Sentinel mode: the data nodes' user."),
    ("redis", "password_file", "A file holding the Redis password on one line (owner root, group solocron, mode 0640); it overrides one in the URLs."),
    ("redis", "key_prefix", "Namespace of every key (default solocron); the same on every node of a fleet."),
    ("redis", "tls_ca_file", "rediss://: trust this CA (PEM) instead of the system's roots."),
    ("redis", "tls_cert_file", "rediss:// with client certificates: the certificate (PEM), with tls_key_file."),
    ("redis", "tls_key_file", "Its private key (PEM; owner root, group solocron, mode 0640)."),
    ("sentinel", "master", "The master's name in the sentinels."),
    ("sentinel", "urls", "The sentinels' URLs."),
    ("sentinel", "password_file", "The sentinels' password, if they have one."),
    ("daemon", "shutdown_grace", "How long running jobs may finish after SIGTERM (default 30s)."),
    ("daemon", "history_max", "Entries kept in each job's history stream (default 10000)."),
    ("daemon", "metrics_listen", "ADDRESS:PORT of the Prometheus /metrics endpoint (off by default)."),
    ("daemon", "status_listen", "ADDRESS:PORT of the read-only status page of the whole fleet (off by default; no authentication: keep it on loopback or behind a proxy)."),
    ("daemon", "env_file", "NAME=value lines for ${NAME}, read at start and at every reload (owner root, group solocron, mode 0640)."),
    ("daemon", "clock", "redis (default: occurrences fire by Redis TIME) or local."),
    ("daemon", "max_running", "At most this many runs at once on this node; at the cap it claims nothing and the next node in line takes the occurrence (default: no cap)."),
    ("jobs", "schedule", "Required: 5 fields, 6 (seconds first), or @hourly @daily @weekly @monthly @yearly."),
    ("jobs", "timezone", "IANA zone of the schedule (default UTC)."),
    ("jobs", "command", "Run by /bin/sh -c; exactly one of command, argv, http."),
    ("jobs", "argv", "A program and its arguments, run without a shell."),
    ("jobs", "http", "{ url, method, timeout, headers, body }: a request; 2xx is success."),
    ("jobs", "env", "Extra environment of command or argv."),
    ("jobs", "working_dir", "Where the job runs (default the daemon's: /var/lib/solocron under the unit)."),
    ("jobs", "lock_ttl", "The lock's lease, renewed every third of it (default 30s)."),
    ("jobs", "timeout", "SIGTERM to the run's process group after this, SIGKILL 10 s later (default 1h)."),
    ("jobs", "starting_deadline", "How late an occurrence may still be claimed (default 1m)."),
    ("jobs", "on_lock_lost", "kill (default) or continue a run whose lease cannot be confirmed."),
    ("jobs", "overlap", "skip: an occurrence due while a run holds the lock is recorded skipped."),
    ("jobs", "output_log_max", "Bytes of a run's output logged (default 64KiB)."),
    ("jobs", "splay", "Fire each occurrence a fixed per-job offset in [0, splay) later (default 0s)."),
    ("jobs", "retries", "How often a failed or timed-out run is tried again, 0 to 10 (default 0)."),
    ("jobs", "retry_backoff", "Pause before the first retry, doubled each time (default 30s)."),
    ("jobs", "on_failure", "A notifier run when a run fails: { command }, { argv } or { http }, and timeout."),
    ("jobs", "on_success", "A notifier run when a run succeeds."),
    ("jobs", "max_silence", "Alert when no run succeeded for this long (a metric)."),
    ("jobs", "run_on", "Tags a node needs to run the job, all of them: [\"role=db\", \"node=web-*\"] (default: every node)."),
    ("jobs", "group", "The [groups.NAME] whose fleet-wide limits the job shares (one per job)."),
    ("jobs", "skip_during", "Calendars whose occurrences are not run but recorded `excluded`: [\"holidays\"]."),
    ("jobs", "only_during", "If set, occurrences outside all of these calendars are recorded `excluded`."),
    ("calendars", "dates", "Whole local days: [\"2026-12-25\"]."),
    ("calendars", "ranges", "Local minutes, both ends included: [\"2026-11-27T00:00/2026-11-30T23:59\"]."),
    ("calendars", "weekly", "Weekly windows: [\"Sat-Sun 00:00-24:00\", \"Mon,Wed 22:00-06:00\"]."),
    ("calendars", "file", "A file of dates, ranges and weekly windows, one a line; read at start and every reload."),
    ("groups", "max_running", "At most this many runs of the group's jobs at once, fleet-wide."),
    ("groups", "max_starts", "At most N starts in any window of DURATION, fleet-wide: \"30/1m\"."),
    ("groups", "when_full", "\"skip\" (record throttled at once, the default) or \"wait\" (oldest first, until starting_deadline)."),
    ("notifier", "command", "Run by /bin/sh -c."),
    ("notifier", "argv", "A program and its arguments, without a shell."),
    ("notifier", "http", "A request, as a job's http."),
    ("notifier", "timeout", "How long it may take (default 30s)."),
    ("http", "url", "The URL; ${NAME} allowed."),
    ("http", "method", "Default POST."),
    ("http", "timeout", "How long the request may take (optional)."),
    ("http", "headers", "{ NAME = value, ... }."),
    ("http", "body", "The request body (a notifier without one sends a JSON summary)."),
];

/// The tables of `jobs.toml` as the CONFIGURATION section shows them: a
/// heading, the [`KEY_HELP`] table name and the keys the loader knows.
fn key_tables() -> [(&'static str, &'static str, &'static [&'static str]); 8] {
    use crate::config::keys;
    [
        ("[redis]", "redis", keys::REDIS),
        ("[redis] sentinel = { ... }", "sentinel", keys::SENTINEL),
        ("[daemon]", "daemon", keys::DAEMON),
        ("[jobs.NAME] and [defaults]", "jobs", keys::JOB),
        ("[groups.NAME]", "groups", keys::GROUP),
        ("[calendars.NAME]", "calendars", keys::CALENDAR),
        (
            "on_failure / on_success = { ... }",
            "notifier",
            keys::NOTIFIER,
        ),
        ("http = { ... }", "http", keys::HTTP),
    ]
}

/// The [`KEY_HELP`] line of `key` in `table`.
fn key_help(table: &str, key: &str) -> Option<&'static str> {
    KEY_HELP
        .iter()
        .find(|(t, k, _)| *t == table && *k == key)
        .map(|(_, _, help)| *help)
}

/// The variables of the options (`--config` is `SOLOCRON_CONFIG`, ...),
/// once each, with the option's help.
fn option_variables() -> Vec<(String, String)> {
    let mut found: Vec<(String, String)> = Vec::new();
    for sub in Cli::command().get_subcommands() {
        for arg in sub.get_arguments() {
            let Some(env) = arg.get_env() else { continue };
            let name = env.to_string_lossy().into_owned();
            if found.iter().any(|(known, _)| *known == name) {
                continue;
            }
            let long = arg.get_long().unwrap_or_default();
            let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
            found.push((name, format!("--{long}: {help}")));
        }
    }
    found
}

/// Adds EXIT STATUS, ENVIRONMENT, CONFIGURATION, FILES and SEE ALSO to the
/// top page (clap knows none of them).
fn append_files_section(page: &Path) -> anyhow::Result<()> {
    use clap_mangen::roff::{Roff, bold, roman};
    let mut roff = Roff::new();
    let item = |roff: &mut Roff, term: &str, text: &str| {
        roff.control("TP", []);
        roff.text([bold(term)]);
        roff.text([roman(text)]);
    };
    roff.control("SH", ["EXIT STATUS"]);
    for (code, what) in exit_statuses() {
        item(&mut roff, &code, &what);
    }
    roff.control("SH", ["ENVIRONMENT"]);
    for (name, what) in option_variables() {
        item(&mut roff, &name, &what);
    }
    for (name, what) in ENVIRONMENT {
        item(&mut roff, name, what);
    }
    roff.control("SH", ["CONFIGURATION"]);
    roff.text([roman(
        "jobs.toml is TOML; every key below, in its table. Durations are written like 30s, 15m, \
         1h, 2d. Any job key may be set in [defaults]. docs/configuration.md says more \
         of each.",
    )]);
    for (heading, table, keys) in key_tables() {
        roff.control("SS", [heading]);
        for key in keys {
            item(&mut roff, key, key_help(table, key).unwrap_or_default());
        }
    }
    roff.control("SH", ["FILES"]);
    for (path, what) in FILES {
        item(&mut roff, path, what);
    }
    roff.control("SH", ["SEE ALSO"]);
    let mut see_also: Vec<String> = Cli::command()
        .get_subcommands()
        .filter(|sub| !sub.is_hide_set())
        .map(|sub| format!("solocron-{}(1)", sub.get_name()))
        .collect();
    see_also.push("systemctl(1); /usr/share/doc/solocron/README.md and docs/ there.".into());
    roff.text([roman(see_also.join(", "))]);
    let mut text = std::fs::read(page)
        .with_context(|| format!("cannot read the man page {} just written", page.display()))?;
    roff.to_writer(&mut text)
        .with_context(|| format!("cannot render the sections of {}", page.display()))?;
    write(page, &text)
}

fn create_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| {
        format!(
            "cannot create the directory {}; give a directory you may write to",
            dir.display()
        )
    })
}

fn write(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    std::fs::write(path, bytes).with_context(|| {
        format!(
            "cannot write {}; check that its directory is writable and the disk is not full",
            path.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every key the loader knows has its line, and every line is of a
    /// key it knows: the reference cannot leave a key out or keep one
    /// that is gone.
    #[test]
    fn every_key_has_a_line_and_every_line_a_key() {
        for (_, table, keys) in key_tables() {
            for key in keys {
                assert!(
                    key_help(table, key).is_some(),
                    "no KEY_HELP line for {table}.{key}"
                );
            }
        }
        for (table, key, _) in KEY_HELP {
            let known = key_tables()
                .iter()
                .any(|(_, name, keys)| name == table && keys.contains(key));
            assert!(
                known,
                "KEY_HELP names {table}.{key}, which the loader does not know"
            );
        }
    }
}
