//! `solocron abort JOB [--reason TEXT]`: stop the job's run in progress
//! wherever it runs, or cancel its pending retry.
//!
//! With the job's lock held, an abort mark naming the run's fence goes to
//! `{PREFIX}:aborts` ([`crate::control::aborts`]); the daemon running it
//! reads it within about a second and stops the run's process group like
//! a timeout (SIGTERM, SIGKILL 10 s later), recording `aborted` with who
//! and why. This command waits for that record (up to [`WAIT`]) and says
//! how the run ended: exit 0 when it was aborted, 3 when it ended by
//! itself first, 1 when it did not stop in time (its node does not read
//! the controls: a `solocron trigger` on a terminal) or Redis is
//! unreachable. With no run in progress a pending retry is cancelled and
//! recorded `aborted` at once (exit 0); with neither, exit 3.
//!
//! Failure model: as [`super`]; the mark is withdrawn when this command
//! is done with it, and one left behind (the command killed) names a
//! fence no later run has.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

use super::check_jobs;
use crate::control::aborts::{self, AbortMark};
use crate::control::audit::{self, Record};
use crate::control::who;
use crate::coordinator::Conn;
use crate::inspect::{Source, known_jobs, redis_failed};
use crate::keys::JobKeys;

/// How long `abort` waits for the run's record: the grace before SIGKILL
/// plus the controls' second and the release, with room.
pub const WAIT: Duration = Duration::from_secs(20);
/// Exit status when nothing was running.
pub const EXIT_NOTHING: u8 = 3;
/// History entries a release may have put above the run's own.
const LOOKED_AT: usize = 20;

/// Runs `solocron abort`; see the module doc for what it prints and exits.
pub async fn abort(source: &Source, job: &str, reason: Option<&str>) -> anyhow::Result<ExitCode> {
    let redis = &source.redis;
    let (coordinator, now_ms) = super::open_as_operator(source).await?;
    let known = known_jobs(&coordinator, source).await?;
    check_jobs(source, &[job.to_string()], &known)?;
    let prefix = &redis.key_prefix;
    let keys = JobKeys::new(prefix, job);
    let conn = coordinator.first();
    let failed = |what: &str, err: &redis::RedisError| redis_failed(what, redis, err);
    let (lock, fence): (Option<String>, Option<String>) = redis::pipe()
        .get(&keys.lock)
        .hget(&keys.state, "holder_fence")
        .query_async(&mut conn.clone())
        .await
        .map_err(|err| failed("cannot read the job's lock from", &err))?;
    let by = who();
    let mark = AbortMark {
        id: crate::control::requests::new_id(),
        fence: fence.and_then(|fence| fence.parse().ok()).unwrap_or(0),
        by: by.clone(),
        reason: reason.map(str::to_string),
        at_ms: now_ms,
    };
    let Some(lock) = lock else {
        return cancel_retry(&coordinator, source, job, &keys, &mark).await;
    };
    let node = lock
        .split_once(' ')
        .map_or("", |(_, node)| node)
        .to_string();
    let asked = Record::new(&by, "abort", job)
        .reason(reason)
        .result(&format!("requested: fence {} on {node}", mark.fence));
    let posted = futures_util::future::join_all(coordinator.members().iter().map(|member| {
        let (mark, asked) = (&mark, &asked);
        async move { aborts::post(&member.conn, prefix, job, mark, asked, member.wait).await }
    }))
    .await;
    let written = posted.iter().filter(|answer| answer.is_ok()).count();
    if written < coordinator.majority() {
        let err = posted.into_iter().find_map(Result::err);
        return match err {
            Some(err) => Err(failed("cannot write the abort to", &err)),
            None => anyhow::bail!("cannot write the abort to a majority of the masters"),
        };
    }
    if let Some(Ok(Some(acked))) = posted.first()
        && coordinator
            .members()
            .first()
            .is_some_and(|member| *acked < member.wait.replicas)
    {
        eprintln!(
            "warning: the abort was acknowledged by {acked} replica(s), fewer than wait_replicas: a failover now could lose it (this command then says the run was not stopped)"
        );
    }
    eprintln!(
        "aborting job `{job}`: its run (fence {}) on node `{node}` gets SIGTERM, SIGKILL 10 s later",
        mark.fence
    );
    let ended = wait_for_record(&conn, &keys, mark.fence).await;
    for member in coordinator.members() {
        aborts::withdraw(&member.conn, prefix, job, &mark.id)
            .await
            .ok();
    }
    let result = match &ended {
        Some((outcome, _)) if outcome == "aborted" => {
            format!("aborted on {node} (fence {})", mark.fence)
        }
        Some((outcome, _)) => format!(
            "nothing stopped: the run ended {outcome} first (fence {})",
            mark.fence
        ),
        None => format!(
            "not stopped within {}s (fence {} on {node})",
            WAIT.as_secs(),
            mark.fence
        ),
    };
    let done = Record::new(&by, "abort", job)
        .reason(reason)
        .result(&result);
    audit::append(&conn, prefix, &done).await.ok();
    match ended {
        Some((outcome, error)) if outcome == "aborted" => {
            eprintln!(
                "job `{job}` aborted on node `{node}` (fence {}): {}",
                mark.fence,
                error.unwrap_or_else(|| mark.describe())
            );
            Ok(ExitCode::SUCCESS)
        }
        Some((outcome, _)) => {
            eprintln!(
                "job `{job}`'s run (fence {}) on node `{node}` ended `{outcome}` before the abort reached it; nothing was stopped",
                mark.fence
            );
            Ok(ExitCode::from(EXIT_NOTHING))
        }
        None => anyhow::bail!(
            "job `{job}`'s run (fence {}) on node `{node}` did not stop within {}: that node may not be a daemon reading the controls (a `solocron trigger` on a terminal stops with Ctrl-C there), or cannot reach Redis; `solocron status` shows whether it still holds the lock",
            mark.fence,
            humantime::format_duration(WAIT)
        ),
    }
}

/// No run in progress: cancels a pending retry, on every member.
async fn cancel_retry(
    coordinator: &crate::coordinator::Coordinator,
    source: &Source,
    job: &str,
    keys: &JobKeys,
    mark: &AbortMark,
) -> anyhow::Result<ExitCode> {
    let why = format!("pending retry cancelled: {}", mark.describe());
    let history_max = source
        .config
        .as_ref()
        .map_or(10_000, |config| config.daemon.history_max);
    let answers = coordinator
        .on_members(|conn| {
            let why = why.as_str();
            async move { aborts::cancel_retry(&conn, keys, why, history_max, &mark.by).await }
        })
        .await
        .map_err(|err| redis_failed("cannot cancel the pending retry on", &source.redis, &err))?;
    let cancelled = answers.into_iter().flatten().next();
    let result = match &cancelled {
        Some((occurrence, attempt)) => {
            format!("pending retry cancelled: {occurrence}, attempt {attempt}")
        }
        None => "nothing running, no retry pending".to_string(),
    };
    let record = Record::new(&mark.by, "abort", job)
        .reason(mark.reason.as_deref())
        .result(&result);
    audit::append(&coordinator.first(), &source.redis.key_prefix, &record)
        .await
        .ok();
    match cancelled {
        Some((occurrence, attempt)) => {
            eprintln!(
                "job `{job}` had no run in progress; its pending retry (occurrence {occurrence}, attempt {attempt}) is cancelled and recorded aborted"
            );
            Ok(ExitCode::SUCCESS)
        }
        None => {
            eprintln!("job `{job}` has no run in progress and no pending retry: nothing to abort");
            Ok(ExitCode::from(EXIT_NOTHING))
        }
    }
}

/// Waits up to [`WAIT`] for the history entry of the run with `fence`:
/// its outcome and error.
async fn wait_for_record(
    conn: &Conn,
    keys: &JobKeys,
    fence: u64,
) -> Option<(String, Option<String>)> {
    let deadline = tokio::time::Instant::now() + WAIT;
    let wanted = fence.to_string();
    loop {
        let entries: redis::RedisResult<Vec<(String, BTreeMap<String, String>)>> =
            redis::cmd("XREVRANGE")
                .arg(&keys.history)
                .arg("+")
                .arg("-")
                .arg("COUNT")
                .arg(LOOKED_AT)
                .query_async(&mut conn.clone())
                .await;
        if let Ok(entries) = entries
            && let Some((_, fields)) = entries.iter().find(|(_, fields)| {
                // A skip of a later occurrence names the holder's fence
                // too; the run's own entry is the one that is not a skip.
                fields.get("fence") == Some(&wanted)
                    && fields.get("outcome").map(String::as_str) != Some("skipped")
            })
        {
            let outcome = fields.get("outcome").cloned().unwrap_or_default();
            return Some((outcome, fields.get("error").cloned()));
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
