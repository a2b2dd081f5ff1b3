//! `solocron trigger JOB`: run a job now, on this node, under the same lock
//! as scheduled runs and with a new fence.
//!
//! A manual run is named `manual-<start instant>` and never touches the
//! job's occurrence record, so it consumes no scheduled occurrence; like
//! any run it holds the job's lock, so an occurrence due meanwhile is
//! `skipped` (`overlap = "skip"`). It runs no `on_failure` / `on_success`:
//! the outcome is on the terminal. A paused job runs all the same (the
//! operator asked for it), with a note that its occurrences stay paused.
//! The job gets the environment the daemon would give it: this process's,
//! plus the variables of `[daemon] env_file` (read with the file), the
//! job's `env` and the `SOLOCRON_*` ones. The job's output is shown on the
//! terminal as it runs; Ctrl-C stops it (recorded as `interrupted`);
//! Ctrl-Z does not suspend this process, which renews the lock
//! ([`crate::shutdown::refuse_suspend`]). With `--log-format json` every
//! line on stderr is JSON ([`crate::logging::tell`]). Exit codes: 0
//! succeeded, 1 failed (or Redis unreachable), 2 this node may not run
//! the job (its `run_on`), 3 the lock is held.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use chrono::Utc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::coordinator::connect;
use crate::exec::{Executor, Outcome};
use crate::lock::{Claim, Locker, Target, new_token};
use crate::logging::tell;
use crate::run::{self, RunEnv};
use crate::schedule::Occurrence;
use serde_json::json;
use tracing::Level;

/// Exit status when the job's lock is held by a run in progress.
pub const EXIT_BUSY: u8 = 3;
/// How long to wait for Redis before giving up.
const CLAIM_TIMEOUT: Duration = Duration::from_secs(5);

/// This node's tags: those its running daemon published, else
/// `SOLOCRON_TAGS` if set and valid, else only `node=<id>`.
async fn this_nodes_tags(locker: &Locker, prefix: &str, node: &str) -> crate::tags::Tags {
    let published =
        crate::registry::alive::published_tags(&locker.connection(), prefix, node).await;
    if let Ok(Some(text)) = published {
        return crate::tags::Tags::from_published(&text, node);
    }
    std::env::var("SOLOCRON_TAGS")
        .ok()
        .and_then(|text| crate::tags::Tags::parse(&text, node).ok())
        .unwrap_or_else(|| crate::tags::Tags::node_only(node))
}

/// Runs `job_name` of `config` as `node`; see the module doc for exit codes.
pub async fn run(
    config: Config,
    node: &str,
    job_name: &str,
    ignore_limits: bool,
) -> anyhow::Result<ExitCode> {
    let Some(job) = config
        .jobs
        .iter()
        .find(|job| job.name == job_name)
        .map(Arc::clone)
    else {
        let names: Vec<&str> = config.jobs.iter().map(|job| job.name.as_str()).collect();
        let hint = crate::inspect::job_hint(job_name, names.iter().copied(), || {
            if names.is_empty() {
                "it has no jobs".to_string()
            } else {
                format!("its jobs are: {}", names.join(", "))
            }
        });
        bail!(
            "unknown job `{job_name}`: not in `{}`; {hint}",
            config.path.display()
        );
    };
    // Before the claim: from then on a suspended process would let the
    // lock expire under the running job.
    let suspended_job = job.name.clone();
    crate::shutdown::refuse_suspend(move |signal| {
        tell(
            Level::WARN,
            &format!(
                "not suspended ({signal}): this process renews the lock of job \
                 `{suspended_job}` while it runs, and cannot be suspended; Ctrl-C interrupts the run\n"
            ),
            &[("job", json!(suspended_job)), ("signal", json!(signal))],
        )
    })
    .context("cannot install the SIGTSTP and SIGTTIN handlers")?;
    let ignored_job = job.name.clone();
    crate::shutdown::refuse_fatal(move |signal| {
        tell(
            Level::WARN,
            &format!(
                "signal ignored ({signal}): this process renews the lock of job \
                 `{ignored_job}` while it runs; Ctrl-C interrupts the run\n"
            ),
            &[("job", json!(ignored_job)), ("signal", json!(signal))],
        )
    })
    .context("cannot install the handlers of SIGUSR1, SIGUSR2, SIGQUIT and SIGALRM")?;
    let conn = connect(&config.redis)?;
    let locker = Locker::new(
        conn,
        &config.redis.key_prefix,
        node,
        config.daemon.history_max,
    );
    if let Some(run_on) = &job.extras.run_on {
        let tags = this_nodes_tags(&locker, &config.redis.key_prefix, node).await;
        if !run_on.matches(&tags) {
            return Err(crate::inspect::UsageError(format!(
                "job `{}` runs only on nodes with run_on = [{run_on}], and this node ({node}) has {tags}: run it on one of those nodes, or `solocron trigger {} --fleet` asks a running daemon that may",
                job.name, job.name
            ))
            .into());
        }
    }
    let executor = Executor::new()
        .context("cannot set up job execution")?
        .with_output_echo(true);
    let occurrence = Occurrence::Manual(Utc::now());
    let name = occurrence.to_string();
    let sent = Instant::now();
    let claim = tokio::time::timeout(
        CLAIM_TIMEOUT,
        locker.claim(
            &job.name,
            &Target::Manual {
                started: occurrence.at(),
            },
            &new_token(),
            job.lock_ttl,
        ),
    )
    .await
    .map_err(|_| anyhow::anyhow!("no answer within {CLAIM_TIMEOUT:?}"))
    .and_then(|claim| claim.map_err(anyhow::Error::from))
    .with_context(|| {
        format!(
            "cannot claim job `{job_name}` on redis `{}`",
            config.redis.redacted_url()
        )
    })?;
    let lease = match claim {
        Claim::Won(lease) => lease,
        Claim::Busy { holder, fence } => {
            tell(
                Level::WARN,
                &format!(
                    "job `{job_name}` is running on `{holder}` (fence {fence}); not started\n"
                ),
                &[
                    ("job", json!(job_name)),
                    ("holder", json!(holder)),
                    ("fence", json!(fence)),
                ],
            );
            let result = format!("not started: running on {holder} (fence {fence})");
            record(&locker, node, job_name, ignore_limits, &result).await;
            return Ok(ExitCode::from(EXIT_BUSY));
        }
        Claim::Taken { .. }
        | Claim::TooLate
        | Claim::TooEarly { .. }
        | Claim::Superseded { .. } => {
            bail!("unexpected answer to the claim of a manual run of `{job_name}`: {claim:?}")
        }
    };
    // Best effort: Redis answered the claim, but a failed read of the
    // pauses only costs the note.
    let prefix = &config.redis.key_prefix;
    if let Ok(Some((mark, all))) =
        crate::control::current_pause(locker.coordinator(), prefix, job_name).await
    {
        tell(
            Level::WARN,
            &crate::control::paused_trigger_note(job_name, &mark, all),
            &[("job", json!(job_name)), ("paused", json!(true))],
        );
    }
    tell(
        Level::INFO,
        &format!(
            "running job `{job_name}` as {name} on {node} (fence {})\n",
            lease.fence
        ),
        &[
            ("job", json!(job_name)),
            ("occurrence", json!(name)),
            ("node", json!(node)),
            ("fence", json!(lease.fence)),
            ("by", json!(crate::control::who())),
        ],
    );
    // Ctrl-C (or the terminal hanging up: SIGHUP) stops the run (SIGTERM
    // to its group, SIGKILL after the grace); a second one kills it at
    // once. The lock is released either way.
    let (interrupt, hurry) = (CancellationToken::new(), CancellationToken::new());
    let executor = executor.with_hurry(hurry.clone());
    let mut stops = crate::shutdown::stop_requests_and_hangups()
        .context("cannot install the SIGTERM, SIGINT and SIGHUP handlers")?;
    let on_signal = interrupt.clone();
    let signals = tokio::spawn(async move {
        if stops.recv().await.is_some() {
            on_signal.cancel();
        }
        if stops.recv().await.is_some() {
            hurry.cancel();
        }
    });
    let env_file = Arc::new(config.env.clone());
    let mask = Arc::new(crate::exec::OutputMask::of(&config));
    let env = RunEnv {
        locker: &locker,
        executor: &executor,
        interrupt: &interrupt,
        env_file,
        mask,
        abort: run::Abort::default(),
    };
    // Room in the job's group is waited for (`when_full = "wait"`) as
    // long as a scheduled occurrence would be.
    let room_until = (!ignore_limits).then(|| tokio::time::Instant::now() + job.starting_deadline);
    let report = run::under_lease(&env, &job, &lease, occurrence, sent, 1, room_until).await;
    run::log_finished(&job, occurrence, node, lease.fence, 1, None, &report);
    let mut entry = run::entry(occurrence, node, &lease, 1, None, &report);
    entry.by = Some(crate::control::who());
    // A terminal does not wait for Redis as a daemon does: the record is
    // retried for `run::STOP_WAIT` at most, then printed as lost.
    let stopped = CancellationToken::new();
    stopped.cancel();
    run::release(&locker, &lease, &entry, &stopped, |_| {}).await;
    let result = format!("{} on {node} (fence {})", report.outcome, lease.fence);
    record(&locker, node, job_name, ignore_limits, &result).await;
    signals.abort();
    let detail = match (report.exit_code, report.http_status) {
        (Some(code), _) => format!(" (exit {code})"),
        (None, Some(status)) => format!(" (HTTP {status})"),
        (None, None) => String::new(),
    };
    let error = report
        .error
        .as_deref()
        .map(|e| format!(": {e}"))
        .unwrap_or_default();
    let succeeded = report.outcome == Outcome::Succeeded;
    tell(
        if succeeded { Level::INFO } else { Level::WARN },
        &format!(
            "job `{job_name}` {}{detail} in {:.1}s{error}\n",
            report.outcome.as_str(),
            report.duration.as_secs_f64()
        ),
        &[
            ("job", json!(job_name)),
            ("occurrence", json!(name)),
            ("node", json!(node)),
            ("fence", json!(lease.fence)),
            ("outcome", json!(report.outcome.as_str())),
            ("exit_code", json!(report.exit_code)),
            ("http_status", json!(report.http_status)),
            (
                "duration_ms",
                json!(u64::try_from(report.duration.as_millis()).unwrap_or(u64::MAX)),
            ),
            ("error", json!(report.error)),
        ],
    );
    Ok(if succeeded {
        ExitCode::SUCCESS
    } else if report.outcome == Outcome::Throttled {
        // Like a busy lock: the job's group had no room.
        ExitCode::from(EXIT_BUSY)
    } else {
        ExitCode::from(1)
    })
}

/// Appends the manual run's audit record, once its result is known (the
/// run's keys are the job's, on another Cluster slot than the trail's).
async fn record(locker: &Locker, node: &str, job: &str, ignore_limits: bool, result: &str) {
    let who = format!("{} (node {node})", crate::control::who());
    let action = if ignore_limits {
        "trigger --ignore-limits"
    } else {
        "trigger"
    };
    let record = crate::control::audit::Record::new(&who, action, job).result(result);
    let conn = locker.connection();
    let append = crate::control::audit::append(&conn, locker.prefix(), &record);
    let _ = tokio::time::timeout(run::STOP_WAIT, append).await;
}
