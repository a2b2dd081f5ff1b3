//! One occurrence on this node: claim it (retrying Redis errors with the same
//! token until `starting_deadline`), run it under the watchdog, release the
//! lock and record the outcome.
//!
//! Fail closed: a node that cannot reach Redis never runs the job; the
//! occurrence is logged as missed once its deadline passes, and recorded as
//! missed in the history as soon as Redis answers again (unless a newer
//! occurrence was decided meanwhile).

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::Shared;
use super::timetable::rfc3339;
use crate::config::{Job, OnLockLost};
use crate::exec::{Executor, Outcome, Report, RunContext, StopReason};
use crate::history::Entry;
use crate::lock::watchdog::{self, LeaseLost};
use crate::lock::{Claim, Lease, Locker, Target, new_token};
use crate::metrics::{self, ClaimResult};

/// First and longest pause between retries while Redis fails.
const RETRY_FIRST: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_secs(1);
/// How long after the deadline (this node's clock) claims are still retried:
/// above the redis response timeout plus the clock offset we warn about.
const GIVE_UP_MARGIN: Duration = Duration::from_millis(1500);
/// How long a missed occurrence is kept for recording while Redis is away.
const RECORD_MISSED_FOR: Duration = Duration::from_secs(3600);

/// Claims and, if won, runs the occurrence of `job` at `at`.
pub async fn attempt(shared: Arc<Shared>, job: Arc<Job>, at: DateTime<Utc>, catch_up: bool) {
    let name = rfc3339(at);
    let node = shared.locker.node().to_string();
    let deadline =
        chrono::TimeDelta::from_std(job.starting_deadline).unwrap_or(chrono::TimeDelta::MAX);
    let deadline_at = at
        .checked_add_signed(deadline)
        .unwrap_or(DateTime::<Utc>::MAX_UTC);
    let target = Target::Scheduled {
        at_ms: at.timestamp_millis(),
        name: name.clone(),
        deadline_ms: deadline_at.timestamp_millis(),
    };
    // Redis refuses claims after the deadline (its clock); this node keeps
    // retrying a little longer (its clock), so a claim Redis still accepted
    // in time is answered to a node that is still waiting for it, never to
    // one that gave up (a lock nobody runs under).
    let give_up = Instant::now()
        + (deadline_at - Utc::now())
            .to_std()
            .unwrap_or(Duration::ZERO)
        + GIVE_UP_MARGIN;
    let token = new_token();
    let mut pause = RETRY_FIRST;
    loop {
        let sent = Instant::now();
        match shared
            .locker
            .claim(&job.name, &target, &token, job.lock_ttl)
            .await
        {
            Ok(Claim::Won(lease)) => {
                metrics::claim(&job.name, ClaimResult::Won);
                info!(job = %job.name, occurrence = %name, node = %node, fence = lease.fence,
                    catch_up = catch_up.then_some(true), "claim won");
                let report = run_lease(
                    &shared.locker,
                    &shared.executor,
                    &shared.interrupt,
                    &job,
                    &lease,
                    &name,
                    sent,
                )
                .await;
                let lag = (report.started_at - at).to_std().unwrap_or(Duration::ZERO);
                metrics::fire_to_start(&job.name, lag);
                return;
            }
            Ok(Claim::Taken {
                by,
                fence,
                decision,
            }) => {
                metrics::claim(&job.name, ClaimResult::Lost);
                if decision == "claimed" {
                    info!(job = %job.name, occurrence = %name, node = %node, winner = %by, fence, "claim lost");
                } else {
                    info!(job = %job.name, occurrence = %name, node = %node, decided_by = %by, decision = %decision,
                        "occurrence already decided by another node");
                }
                return;
            }
            Ok(Claim::Busy { holder, fence }) => {
                metrics::claim(&job.name, ClaimResult::Busy);
                info!(job = %job.name, occurrence = %name, node = %node, holder = %holder, fence, outcome = %"skipped",
                    "occurrence skipped: previous run still holds the lock (overlap = skip)");
                return;
            }
            Ok(Claim::Superseded { last_ms }) => {
                let last = DateTime::from_timestamp_millis(last_ms)
                    .map(rfc3339)
                    .unwrap_or_default();
                warn!(job = %job.name, occurrence = %name, node = %node, newer = %last,
                    "occurrence not run here: a newer occurrence was decided before this claim reached redis (run elsewhere, or missed)");
                return;
            }
            Ok(Claim::TooLate) => {
                error!(job = %job.name, occurrence = %name, node = %node,
                    "occurrence missed: redis received the claim after starting_deadline");
                spawn_record_missed(
                    &shared,
                    &job,
                    at,
                    "claim reached redis after starting_deadline",
                    &token,
                );
                return;
            }
            Err(err) => {
                metrics::redis_error("claim");
                if Instant::now() >= give_up {
                    error!(job = %job.name, occurrence = %name, node = %node, error = %err,
                        "occurrence missed: redis unreachable until starting_deadline (never run without the lock)");
                    // Claims sent meanwhile may still reach Redis (a paused
                    // server runs its queue on resume): the token lets the
                    // record undo such a late win.
                    spawn_record_missed(
                        &shared,
                        &job,
                        at,
                        "redis unreachable until starting_deadline",
                        &token,
                    );
                    return;
                }
                // The first failure is news; the retries until the deadline are not.
                if pause == RETRY_FIRST {
                    warn!(job = %job.name, occurrence = %name, node = %node, error = %err, "claim failed, retrying until starting_deadline");
                } else {
                    debug!(job = %job.name, occurrence = %name, node = %node, error = %err, retry_in = ?pause, "claim failed, retrying");
                }
            }
        }
        tokio::select! {
            _ = shared.cancel.cancelled() => {
                info!(job = %job.name, occurrence = %name, node = %node, "claim abandoned: shutting down");
                return;
            }
            _ = tokio::time::sleep(pause.min(give_up.saturating_duration_since(Instant::now()))) => {}
        }
        pause = (pause * 2).min(RETRY_MAX);
    }
}

/// Records `at` of `job` as missed in the background, retrying while Redis
/// is unreachable (up to an hour, or until shutdown). `token` is the one this
/// node's claims of `at` used, empty if it sent none.
pub fn spawn_record_missed(
    shared: &Arc<Shared>,
    job: &Job,
    at: DateTime<Utc>,
    reason: &'static str,
    token: &str,
) {
    metrics::missed(&job.name);
    let shared = Arc::clone(shared);
    let job = job.name.clone();
    let token = token.to_string();
    shared.tracker.clone().spawn(async move {
        let name = rfc3339(at);
        let give_up = Instant::now() + RECORD_MISSED_FOR;
        let mut pause = RETRY_FIRST;
        loop {
            match shared
                .locker
                .record_missed(&job, at.timestamp_millis(), &name, reason, &token)
                .await
            {
                Ok(recorded) => {
                    debug!(job = %job, occurrence = %name, recorded, "missed occurrence recorded");
                    return;
                }
                Err(err) if Instant::now() + pause < give_up => {
                    debug!(job = %job, occurrence = %name, error = %err, "cannot record the missed occurrence yet");
                }
                Err(_) => return,
            }
            tokio::select! {
                _ = shared.cancel.cancelled() => return,
                _ = tokio::time::sleep(pause) => {}
            }
            pause = (pause * 2).min(Duration::from_secs(30));
        }
    });
}

/// Runs a won occurrence or manual run (`name`) of `job` under `lease` to its
/// end, keeping the lease alive, then releases it and records the outcome.
/// `claim_sent` is when the winning claim was sent; `interrupt` stops the run
/// (shutdown grace over, or Ctrl-C on `trigger`).
pub async fn run_lease(
    locker: &Locker,
    executor: &Executor,
    interrupt: &CancellationToken,
    job: &Arc<Job>,
    lease: &Lease,
    name: &str,
    claim_sent: Instant,
) -> Report {
    let node = locker.node().to_string();
    let ctx = RunContext {
        job: Arc::clone(job),
        occurrence: name.to_string(),
        fence: lease.fence,
        node: node.clone(),
    };
    let stop = stop_when(locker, interrupt, job, lease, name, claim_sent);
    let report = executor.execute(&ctx, stop).await;
    metrics::run_finished(&job.name, report.outcome.as_str(), report.duration);
    log_finished(job, name, &node, lease.fence, &report);
    release(
        locker,
        lease,
        &Entry::from_report(name, &node, lease.fence, &report),
    )
    .await;
    report
}

/// Completes when the run must stop: the lease is lost (with
/// `on_lock_lost = "kill"`) or `interrupt` fires. Keeps the lease alive
/// while pending.
async fn stop_when(
    locker: &Locker,
    interrupt: &CancellationToken,
    job: &Job,
    lease: &Lease,
    name: &str,
    claim_sent: Instant,
) -> StopReason {
    tokio::select! {
        lost = watchdog::keep(locker, lease, claim_sent) => {
            metrics::lock_lost(&job.name);
            log_lost(job, name, locker.node(), lease.fence, &lost);
            if job.on_lock_lost == OnLockLost::Kill {
                return StopReason::LockLost;
            }
        }
        _ = interrupt.cancelled() => return StopReason::Interrupted,
    }
    interrupt.cancelled().await;
    StopReason::Interrupted
}

fn log_lost(job: &Job, name: &str, node: &str, fence: u64, lost: &LeaseLost) {
    match job.on_lock_lost {
        OnLockLost::Kill => {
            error!(job = %job.name, occurrence = %name, node = %node, fence, reason = lost.as_str(),
            "lock lost: stopping the run (on_lock_lost = kill)")
        }
        OnLockLost::Continue => {
            error!(job = %job.name, occurrence = %name, node = %node, fence, reason = lost.as_str(),
            "lock lost: the run continues without the lock (on_lock_lost = continue)")
        }
    }
}

fn log_finished(job: &Job, name: &str, node: &str, fence: u64, report: &Report) {
    let duration = format!("{:.1}s", report.duration.as_secs_f64());
    let outcome = report.outcome.as_str();
    let (exit, http) = (report.exit_code, report.http_status);
    match report.outcome {
        Outcome::Succeeded => info!(job = %job.name, occurrence = %name, node = %node, fence,
            outcome = %outcome, exit, http_status = http, duration = %duration, "run finished"),
        _ => {
            warn!(job = %job.name, occurrence = %name, node = %node, fence, outcome = %outcome, exit, http_status = http,
            duration = %duration, error = report.error.as_deref().map(tracing::field::display), "run finished")
        }
    }
}

/// Releases the lease and records the entry, retrying Redis errors for a
/// while; if Redis stays away the lock expires by itself and the entry is
/// only in this node's log.
async fn release(locker: &Locker, lease: &Lease, entry: &Entry) {
    let give_up = Instant::now() + crate::lock::release_retry_window(lease.ttl);
    let mut pause = RETRY_FIRST;
    loop {
        match locker.release(lease, entry).await {
            Ok(true) => return,
            Ok(false) => {
                warn!(job = %lease.job, occurrence = %entry.occurrence, node = %entry.node, fence = lease.fence,
                    "lock was no longer ours at release; outcome recorded");
                return;
            }
            Err(err) if Instant::now() + pause < give_up => {
                metrics::redis_error("release");
                warn!(job = %lease.job, occurrence = %entry.occurrence, node = %entry.node, error = %err, "release failed, retrying");
            }
            Err(err) => {
                metrics::redis_error("release");
                error!(job = %lease.job, occurrence = %entry.occurrence, node = %entry.node, fence = lease.fence,
                    outcome = %entry.outcome, error = %err, "release failed: the lock will expire by itself, history not recorded");
                return;
            }
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(RETRY_MAX);
    }
}
