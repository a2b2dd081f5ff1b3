//! `solocron trigger JOB --fleet`: ask the running daemons to run JOB now
//! and wait for the outcome (see [`crate::control::requests`] for the
//! protocol).
//!
//! The request is queued with a deadline [`TAKE_WITHIN`] ahead; one daemon
//! that runs the job and is not drained takes it and runs it as a manual
//! run, exactly as `trigger JOB` would on that node. This command then
//! prints which node took it, the run's name and fence, the output tail
//! and the outcome (a paused job runs all the same, after a note that its
//! scheduled occurrences stay paused). Exit codes: 0 succeeded, 1 failed (or Redis
//! unreachable, or the run's node stopped reporting), 3 the lock is held
//! by a run in progress, 4 no daemon took it within [`TAKE_WITHIN`] (the
//! request is withdrawn then: it never runs later).
//!
//! Failure model: the taking daemon renews the request while the run goes
//! on; if that stops (the node died or lost Redis), the request expires
//! within [`requests::LIVE_TTL`] and this command says so (exit 1) instead
//! of waiting; it never waits longer than the job's timeout plus a margin
//! either. Redis errors while waiting are retried until then.

use std::process::ExitCode;
use std::time::Duration;

use tokio::time::Instant;

use super::{check_jobs, known_jobs};
use crate::control::requests::{self, Report, Request, TAKE_WITHIN};
use crate::control::who;
use crate::inspect::Source;
use crate::keys::drains_key;
use crate::logging::{tell, to_stderr};
use crate::outcome::Outcome;
use tracing::Level;

/// Exit status when no daemon took the request in time.
pub const EXIT_NOT_TAKEN: u8 = 4;
/// How often the request's state is read.
const POLL: Duration = Duration::from_millis(100);
/// Beyond the job's timeout: its SIGKILL grace, the release and slack.
const MARGIN: Duration = Duration::from_secs(40);

/// Asks the fleet to run `job`; see the module doc for exit codes.
pub async fn run(
    source: &Source,
    job: &str,
    ignore_limits: bool,
    make_up: crate::trigger::MakeUp,
) -> anyhow::Result<ExitCode> {
    let redis = &source.redis;
    let (coordinator, now_ms) = super::open_as_operator(source).await?;
    let known = known_jobs(&coordinator, source).await?;
    check_jobs(source, &[job.to_string()], &known)?;
    let defined = source
        .config
        .as_ref()
        .and_then(|config| config.jobs.iter().find(|defined| defined.name == job));
    let lock_ttl = defined.map_or(Duration::from_secs(30), |job| job.lock_ttl);
    let timeout = defined.map_or(Some(Duration::from_secs(3600)), |job| job.timeout);
    let prefix = &redis.key_prefix;
    let paused = crate::control::current_pause(&coordinator, prefix, job)
        .await
        .map_err(|err| crate::inspect::redis_failed("cannot read the pauses from", redis, &err))?;
    if let Some((mark, all)) = paused {
        tell(
            Level::WARN,
            &crate::control::paused_trigger_note(job, &mark, all),
            &[("job", job.into()), ("paused", true.into())],
        );
    }
    let conn = coordinator.first();
    // A range: each not-succeeded occurrence in turn, as its own request,
    // stopping at the first that does not succeed.
    if let crate::trigger::MakeUp::Range { force, .. } = make_up {
        let Some(defined) = defined else {
            return Err(crate::inspect::UsageError(format!(
                "`trigger {job} --since --fleet` needs the config file (the job's schedule) to list the occurrences: pass --config"
            ))
            .into());
        };
        let plans = crate::trigger::make_up_plans(&conn, prefix, defined, &make_up).await?;
        if plans.is_empty() {
            to_stderr(&format!(
                "job `{job}`: every occurrence of the range succeeded already; nothing to make up\n"
            ));
            return Ok(ExitCode::SUCCESS);
        }
        for plan in plans {
            // Checked again one by one (one may have succeeded meanwhile).
            let one = crate::trigger::MakeUp::One {
                at: plan.occurrence.at(),
                force,
            };
            let code = Box::pin(run(source, job, ignore_limits, one)).await?;
            if code != ExitCode::SUCCESS {
                return Ok(code);
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    // A make-up run is checked here, against the config's schedule and
    // the history: the daemon that takes it runs what was checked.
    let made_up = match make_up {
        crate::trigger::MakeUp::No => None,
        asked => {
            let Some(defined) = defined else {
                return Err(crate::inspect::UsageError(format!(
                    "`trigger {job} --occurrence --fleet` needs the config file (the job's schedule) to check the occurrence: pass --config"
                ))
                .into());
            };
            crate::trigger::make_up_plans(&conn, prefix, defined, &asked)
                .await?
                .into_iter()
                .next()
        }
    };
    let request = Request {
        id: requests::new_id(),
        job: job.to_string(),
        by: who(),
        deadline_ms: now_ms + i64::try_from(TAKE_WITHIN.as_millis()).unwrap_or(i64::MAX),
        ignore_limits,
        occurrence_ms: made_up
            .as_ref()
            .map(|plan| plan.occurrence.at().timestamp_millis()),
        attempt: made_up.as_ref().map(|plan| plan.attempt),
    };
    let failed =
        |what: &str, err: &redis::RedisError| crate::inspect::redis_failed(what, redis, err);
    let flag = if ignore_limits {
        " --ignore-limits"
    } else {
        ""
    };
    let record =
        crate::control::audit::Record::new(&request.by, &format!("trigger --fleet{flag}"), job)
            .result(&format!("requested ({})", request.id));
    let raw = requests::submit(&conn, prefix, &request, &record)
        .await
        .map_err(|err| match coordinator.members().first() {
            Some(first) if coordinator.is_quorum() => anyhow::anyhow!(
                "cannot queue the request on `{}`, the first master of `[redis] redlock`, where \
                 the daemons take `trigger --fleet` requests (the others are not asked): {err}; \
                 bring it back, or run `solocron trigger {job}` on a node",
                first.shown
            ),
            _ => failed("cannot queue the request on", &err),
        })?;
    to_stderr(&format!(
        "asked the running daemons to run job `{job}` (request {}); waiting up to {}s for one to take it\n",
        request.id,
        TAKE_WITHIN.as_secs()
    ));
    let asked = Instant::now();
    // Until a daemon took it: then its hash exists.
    let mut report = loop {
        match requests::read(&conn, prefix, &request.id).await {
            Ok(report) if report.state().is_some() => break report,
            Ok(_) | Err(_) if asked.elapsed() < TAKE_WITHIN => {}
            Ok(_) | Err(_) => match withdraw(&conn, prefix, &raw, &request).await {
                Some(report) => break report,
                None => return not_taken(&coordinator, source, job).await,
            },
        }
        tokio::time::sleep(POLL).await;
    };
    let node = report.get("node").unwrap_or("?").to_string();
    to_stderr(&format!("taken by node `{node}`\n"));
    let cap = timeout.map(|timeout| Instant::now() + timeout + lock_ttl + MARGIN);
    let mut said_running = false;
    let mut errors_since: Option<Instant> = None;
    loop {
        if !said_running && let Some(occurrence) = report.get("occurrence") {
            said_running = true;
            to_stderr(&format!(
                "running job `{job}` as {occurrence} on {node} (fence {})\n",
                report.get("fence").unwrap_or("?")
            ));
        }
        if report.state() == Some("done") {
            let outcome = report.get("outcome").unwrap_or("unknown");
            let record = crate::control::audit::Record::new(&request.by, "trigger --fleet", job)
                .result(&format!("{outcome} on {node} ({})", request.id));
            crate::control::audit::append(&conn, prefix, &record)
                .await
                .ok();
            return Ok(finished(job, &report));
        }
        if cap.is_some_and(|cap| Instant::now() >= cap) {
            to_stderr(&format!(
                "no result from node `{node}` within the job's timeout and {}s more; \
                 its outcome, if any, is in `solocron history {job}`\n",
                (lock_ttl + MARGIN).as_secs()
            ));
            return Ok(ExitCode::from(1));
        }
        tokio::time::sleep(POLL).await;
        match requests::read(&conn, prefix, &request.id).await {
            Ok(next) if next.state().is_none() => {
                to_stderr(&format!(
                    "node `{node}` stopped reporting on the run for {}s (it died, or lost redis); \
                     its outcome, if it finished, is in `solocron history {job}`\n",
                    requests::LIVE_TTL.as_secs()
                ));
                return Ok(ExitCode::from(1));
            }
            Ok(next) => {
                errors_since = None;
                report = next;
            }
            Err(err) => {
                let since = *errors_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= requests::LIVE_TTL * 3 {
                    return Err(failed("lost", &err).context(format!(
                        "cannot read the outcome of job `{job}` on node `{node}`; \
                         see `solocron history {job}` once redis answers"
                    )));
                }
            }
        }
    }
}

/// Withdraws the waiting request at its deadline: `None` if it was still
/// waiting (nobody took it, nobody will), else the taker's report.
async fn withdraw(
    conn: &crate::coordinator::Conn,
    prefix: &str,
    raw: &str,
    request: &Request,
) -> Option<Report> {
    let give_up = Instant::now() + TAKE_WITHIN;
    loop {
        match requests::withdraw(conn, prefix, raw).await {
            Ok(true) => return None,
            Ok(false) => {
                // Taken at the last moment: its hash is there (or it was
                // dropped as stale, and nobody takes it).
                return requests::read(conn, prefix, &request.id)
                    .await
                    .ok()
                    .filter(|report| report.state().is_some());
            }
            // Past the deadline no daemon takes it, so giving up is safe.
            Err(_) if Instant::now() >= give_up => return None,
            Err(_) => tokio::time::sleep(POLL).await,
        }
    }
}

/// Exit 4, saying what the fleet looks like.
async fn not_taken(
    coordinator: &crate::coordinator::Coordinator,
    source: &Source,
    job: &str,
) -> anyhow::Result<ExitCode> {
    let prefix = &source.redis.key_prefix;
    let nodes = crate::inspect::live_nodes(coordinator, prefix)
        .await
        .unwrap_or_default();
    let drains = super::read_merged(coordinator, source, &drains_key(prefix))
        .await
        .unwrap_or_default();
    let drained = nodes
        .iter()
        .filter(|node| drains.get(&node.node).is_some_and(|mark| mark.active))
        .count();
    let with_job = nodes
        .iter()
        .filter(|node| node.jobs.contains_key(job))
        .count();
    let run_on = source
        .config
        .as_ref()
        .and_then(|config| config.jobs.iter().find(|defined| defined.name == job))
        .and_then(|defined| defined.extras.run_on.clone());
    let eligible = match &run_on {
        Some(run_on) => {
            let tags = crate::registry::alive::read_tags(&coordinator.first(), prefix)
                .await
                .unwrap_or_default();
            nodes
                .iter()
                .filter(|node| {
                    let published = tags.get(&node.node).map_or("", String::as_str);
                    run_on.matches(&crate::tags::Tags::from_published(published, &node.node))
                })
                .count()
        }
        None => nodes.len(),
    };
    let why = match (nodes.len(), drained, with_job) {
        (0, _, _) => format!("no daemon is live under key prefix `{prefix}`"),
        (live, drained, _) if drained == live => format!("all {live} live node(s) are drained"),
        (_, _, 0) => format!("no live node has job `{job}` in its config"),
        (live, _, _) if eligible == 0 => format!(
            "none of the {live} live node(s) may run it: its run_on = [{}] matches no node's tags (`solocron status` shows them)",
            run_on.map(|run_on| run_on.to_string()).unwrap_or_default()
        ),
        (live, drained, _) => {
            format!("{live} live node(s), {drained} drained: none answered in time")
        }
    };
    to_stderr(&format!(
        "no daemon took the request within {}s ({why}); it was withdrawn and will not run. \
         `solocron status` lists the live nodes\n",
        TAKE_WITHIN.as_secs()
    ));
    Ok(ExitCode::from(EXIT_NOT_TAKEN))
}

/// Prints the outcome and output tail; the exit code for it.
fn finished(job: &str, report: &Report) -> ExitCode {
    let node = report.get("node").unwrap_or("?");
    let outcome = report.get("outcome").unwrap_or("unknown");
    if let Some(tail) = report.get("output_tail") {
        let mut out = tail.to_string();
        if !out.ends_with('\n') {
            out.push('\n');
        }
        let _ = crate::inspect::print(&out);
    }
    let detail = match (report.get("exit_code"), report.get("http_status")) {
        (Some(code), _) => format!(" (exit {code})"),
        (None, Some(status)) => format!(" (HTTP {status})"),
        (None, None) => String::new(),
    };
    let duration = report
        .get("duration_ms")
        .and_then(|ms| ms.parse::<f64>().ok())
        .map(|ms| format!(" in {:.1}s", ms / 1000.0))
        .unwrap_or_default();
    let error = report
        .get("error")
        .map(|error| format!(": {error}"))
        .unwrap_or_default();
    match outcome {
        "busy" => {
            to_stderr(&format!(
                "{}; tried by node `{node}`\n",
                report.get("error").unwrap_or("the job's lock is held")
            ));
            ExitCode::from(crate::trigger::EXIT_BUSY)
        }
        _ => {
            to_stderr(&format!(
                "job `{job}` {outcome}{detail}{duration} on node `{node}` as {} (fence {}){error}\n",
                report.get("occurrence").unwrap_or("?"),
                report.get("fence").unwrap_or("?"),
            ));
            if Outcome::parse(outcome) == Some(Outcome::Succeeded) {
                ExitCode::SUCCESS
            } else if Outcome::parse(outcome) == Some(Outcome::Throttled) {
                // Like a busy lock: the job's group had no room.
                ExitCode::from(crate::trigger::EXIT_BUSY)
            } else {
                ExitCode::from(1)
            }
        }
    }
}
