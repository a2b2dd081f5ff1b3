//! `solocron trigger JOB`: run a job now, on this node, under the same lock
//! as scheduled runs and with a new fence; with `--occurrence` (or
//! `--since/--until`) a make-up run of a past occurrence, named and
//! numbered as that occurrence's next attempt ([`MakeUp`]).
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
    make_up: MakeUp,
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
    let plans = match make_up {
        MakeUp::No => vec![Plan {
            occurrence: Occurrence::Manual(Utc::now()),
            attempt: 1,
        }],
        asked => make_up_plans(&locker.connection(), locker.prefix(), &job, &asked).await?,
    };
    if plans.is_empty() {
        tell(
            Level::INFO,
            &format!(
                "job `{job_name}`: every occurrence of the range succeeded already; nothing to make up\n"
            ),
            &[("job", json!(job_name))],
        );
        return Ok(ExitCode::SUCCESS);
    }
    let mut worst = ExitCode::SUCCESS;
    for plan in plans {
        let code =
            run_planned(&config, &job, &locker, &executor, node, ignore_limits, plan).await?;
        if code != ExitCode::SUCCESS {
            worst = code;
            // A busy lock or a failure stops a range: the operator decides.
            break;
        }
    }
    Ok(worst)
}

/// One run `trigger` makes: a manual run, or a make-up run of a past
/// occurrence as its attempt `attempt`.
pub(crate) struct Plan {
    pub(crate) occurrence: Occurrence,
    pub(crate) attempt: u32,
}

/// Claims and runs `plan` of `job`; its exit status.
#[allow(clippy::too_many_arguments)]
async fn run_planned(
    config: &Config,
    job: &Arc<crate::config::Job>,
    locker: &Locker,
    executor: &Executor,
    node: &str,
    ignore_limits: bool,
    plan: Plan,
) -> anyhow::Result<ExitCode> {
    let job_name = job.name.as_str();
    let (occurrence, attempt) = (plan.occurrence, plan.attempt);
    let target = match occurrence {
        Occurrence::Manual(started) => Target::Manual { started },
        Occurrence::Scheduled(at) => Target::MakeUp { at },
    };
    let name = occurrence.to_string();
    let sent = Instant::now();
    let claim = tokio::time::timeout(
        CLAIM_TIMEOUT,
        locker.claim(&job.name, &target, &new_token(), job.lock_ttl),
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
            record(locker, node, job_name, ignore_limits, &result).await;
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
    let executor = executor.clone().with_hurry(hurry.clone());
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
    let mask = Arc::new(crate::exec::OutputMask::of(config));
    let env = RunEnv {
        locker,
        executor: &executor,
        interrupt: &interrupt,
        env_file,
        mask,
        abort: run::Abort::default(),
    };
    // Room in the job's group is waited for (`when_full = "wait"`) as
    // long as a scheduled occurrence would be.
    let room_until = (!ignore_limits).then(|| tokio::time::Instant::now() + job.starting_deadline);
    let report = run::under_lease(&env, job, &lease, occurrence, sent, attempt, room_until).await;
    run::log_finished(job, occurrence, node, lease.fence, attempt, None, &report);
    let mut entry = run::entry(occurrence, node, &lease, attempt, None, &report);
    entry.by = Some(crate::control::who());
    // A terminal does not wait for Redis as a daemon does: the record is
    // retried for `run::STOP_WAIT` at most, then printed as lost.
    let stopped = CancellationToken::new();
    stopped.cancel();
    run::release(locker, &lease, &entry, &stopped, |_| {}).await;
    let result = format!("{} on {node} (fence {})", report.outcome, lease.fence);
    let what = match occurrence {
        Occurrence::Manual(_) => job_name.to_string(),
        Occurrence::Scheduled(_) => format!("{job_name}@{name} (attempt {attempt})"),
    };
    record(locker, node, &what, ignore_limits, &result).await;
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

/// What `trigger` was asked beyond a manual run: a make-up run of a past
/// occurrence, or of each not-succeeded occurrence of a range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MakeUp {
    /// A manual run (`manual-<now>`).
    No,
    /// `--occurrence T [--force]`.
    One {
        at: chrono::DateTime<Utc>,
        force: bool,
    },
    /// `--since T1 --until T2 [--force]`: oldest first.
    Range {
        since: chrono::DateTime<Utc>,
        until: chrono::DateTime<Utc>,
        force: bool,
    },
}

/// The most occurrences one `--since/--until` makes up.
const RANGE_MAX: usize = 1000;

/// The make-up runs `asked` names, each checked: an instant that is one
/// of `job`'s occurrences, not in the future, and not already succeeded
/// (unless forced); each with the attempt after the occurrence's last.
/// `Err` (exit 2) with the reason otherwise.
pub(crate) async fn make_up_plans(
    conn: &crate::coordinator::Conn,
    prefix: &str,
    job: &crate::config::Job,
    asked: &MakeUp,
) -> anyhow::Result<Vec<Plan>> {
    let now = Utc::now();
    let refuse = |why: String| -> anyhow::Error { crate::inspect::UsageError(why).into() };
    let name = |at: chrono::DateTime<Utc>| Occurrence::Scheduled(at).to_string();
    match *asked {
        MakeUp::No => Ok(Vec::new()),
        MakeUp::One { at, force } => {
            let is_occurrence = at
                .checked_sub_signed(chrono::TimeDelta::milliseconds(1))
                .and_then(|before| job.schedule.next_after(before))
                == Some(at);
            if !is_occurrence {
                let around = job
                    .schedule
                    .next_after(at)
                    .map(|next| format!("; the next one after it is {}", name(next)))
                    .unwrap_or_default();
                return Err(refuse(format!(
                    "{} is not an occurrence of job `{}` (`{}` in {}){around}",
                    name(at),
                    job.name,
                    job.schedule.expression().trim(),
                    job.schedule.timezone()
                )));
            }
            if at > now {
                return Err(refuse(format!(
                    "{} is in the future: job `{}` runs it when it is due; `solocron trigger {}` runs it now as a manual run",
                    name(at),
                    job.name,
                    job.name
                )));
            }
            let (last_attempt, succeeded) = attempts_of(conn, prefix, &job.name, at).await?;
            if succeeded && !force {
                return Err(refuse(format!(
                    "{} of job `{}` already succeeded; add --force to run it again",
                    name(at),
                    job.name
                )));
            }
            Ok(vec![Plan {
                occurrence: Occurrence::Scheduled(at),
                attempt: last_attempt + 1,
            }])
        }
        MakeUp::Range {
            since,
            until,
            force,
        } => {
            if since > until {
                return Err(refuse(format!(
                    "--since {} is after --until {}",
                    name(since),
                    name(until)
                )));
            }
            let until = until.min(now);
            let mut plans = Vec::new();
            let mut at = since.checked_sub_signed(chrono::TimeDelta::milliseconds(1));
            while let Some(next) = at.and_then(|before| job.schedule.next_after(before)) {
                if next > until {
                    break;
                }
                if plans.len() >= RANGE_MAX {
                    return Err(refuse(format!(
                        "the range holds more than {RANGE_MAX} occurrences of job `{}`: make it shorter",
                        job.name
                    )));
                }
                let (last_attempt, succeeded) = attempts_of(conn, prefix, &job.name, next).await?;
                if force || !succeeded {
                    plans.push(Plan {
                        occurrence: Occurrence::Scheduled(next),
                        attempt: last_attempt + 1,
                    });
                }
                at = Some(next);
            }
            Ok(plans)
        }
    }
}

/// The highest attempt the history records for occurrence `at` of `job`
/// (0 if none) and whether one of them succeeded. Entries of `at` are
/// appended at or after it, so the read starts there.
async fn attempts_of(
    conn: &crate::coordinator::Conn,
    prefix: &str,
    job: &str,
    at: chrono::DateTime<Utc>,
) -> anyhow::Result<(u32, bool)> {
    let name = Occurrence::Scheduled(at).to_string();
    let entries: Vec<(String, std::collections::HashMap<String, String>)> = redis::cmd("XRANGE")
        .arg(crate::keys::JobKeys::new(prefix, job).history)
        .arg(at.timestamp_millis().max(0))
        .arg("+")
        .arg("COUNT")
        .arg(100_000)
        .query_async(&mut conn.clone())
        .await
        .with_context(|| format!("cannot read the history of job `{job}`"))?;
    let mine = entries
        .iter()
        .filter(|(_, fields)| fields.get("occurrence") == Some(&name));
    let (mut last, mut succeeded) = (0, false);
    for (_, fields) in mine {
        let outcome = fields.get("outcome").and_then(|word| Outcome::parse(word));
        succeeded |= outcome == Some(Outcome::Succeeded);
        // Only runs count as attempts (a `missed` or `skipped` decision
        // ran nothing); an entry without a number was attempt 1.
        if outcome.is_some_and(|outcome| outcome.is_run() || outcome == Outcome::Abandoned) {
            let attempt = fields
                .get("attempt")
                .and_then(|attempt| attempt.parse::<u32>().ok())
                .unwrap_or(1);
            last = last.max(attempt);
        }
    }
    Ok((last, succeeded))
}
