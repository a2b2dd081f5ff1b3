//! One occurrence on this node: claim it (retrying Redis errors with the same
//! token until `starting_deadline`), run it under the watchdog, release the
//! lock and record the outcome.
//!
//! Fail closed: a node that cannot reach Redis never runs the job; the
//! occurrence is logged as missed once its deadline passes.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;
use tracing::{error, info, warn};

use super::Shared;
use super::job_loop::rfc3339;
use crate::config::{Job, OnLockLost};
use crate::exec::{Report, RunContext, StopReason};
use crate::history::Entry;
use crate::lock::watchdog::{self, LeaseLost};
use crate::lock::{Claim, Lease, Target, new_token};

/// First and longest pause between claim retries while Redis fails.
const RETRY_FIRST: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_secs(1);

/// Claims and, if won, runs the occurrence of `job` at `at`.
pub async fn attempt(shared: Arc<Shared>, job: Arc<Job>, at: DateTime<Utc>, catch_up: bool) {
    let name = rfc3339(at);
    let target = Target::Scheduled {
        at_ms: at.timestamp_millis(),
        name: name.clone(),
    };
    let node = shared.locker.node().to_string();
    let give_up = Instant::now()
        + (at
            + chrono::TimeDelta::from_std(job.starting_deadline).unwrap_or(chrono::TimeDelta::MAX)
            - Utc::now())
        .to_std()
        .unwrap_or(Duration::ZERO);
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
                info!(job = %job.name, occurrence = %name, node = %node, fence = lease.fence, catch_up = catch_up.then_some(true), "claim won");
                run(&shared, &job, &lease, &name, sent).await;
                return;
            }
            Ok(Claim::Taken {
                by,
                fence,
                decision,
            }) if decision == "skipped" => {
                info!(job = %job.name, occurrence = %name, node = %node, decided_by = %by, holder_fence = fence,
                    "occurrence already skipped for overlap by another node");
                return;
            }
            Ok(Claim::Taken { by, fence, .. }) => {
                info!(job = %job.name, occurrence = %name, node = %node, winner = %by, fence, "claim lost");
                return;
            }
            Ok(Claim::Busy { holder, fence }) => {
                info!(job = %job.name, occurrence = %name, node = %node, holder = %holder, fence, outcome = %"skipped",
                    "occurrence skipped: previous run still holds the lock (overlap = skip)");
                return;
            }
            Err(err) => {
                if Instant::now() + pause > give_up {
                    error!(job = %job.name, occurrence = %name, node = %node, error = %err,
                        "occurrence missed: redis unreachable until starting_deadline (never run without the lock)");
                    return;
                }
                warn!(job = %job.name, occurrence = %name, node = %node, error = %err, retry_in = ?pause, "claim failed, retrying");
            }
        }
        tokio::select! {
            _ = shared.cancel.cancelled() => {
                info!(job = %job.name, occurrence = %name, node = %node, "claim abandoned: shutting down");
                return;
            }
            _ = tokio::time::sleep(pause) => {}
        }
        pause = (pause * 2).min(RETRY_MAX);
    }
}

/// Runs a won occurrence (or manual run) to its end and releases the lease.
pub async fn run(
    shared: &Shared,
    job: &Arc<Job>,
    lease: &Lease,
    name: &str,
    claim_sent: Instant,
) -> Report {
    let node = shared.locker.node().to_string();
    let ctx = RunContext {
        job: Arc::clone(job),
        occurrence: name.to_string(),
        fence: lease.fence,
        node: node.clone(),
    };
    let stop = stop_when(shared, job, lease, name, claim_sent);
    let report = shared.executor.execute(&ctx, stop).await;
    log_finished(job, name, &node, lease.fence, &report);
    release(
        shared,
        lease,
        &Entry::from_report(name, &node, lease.fence, &report),
    )
    .await;
    report
}

/// Completes when the run must stop: the lease is lost (with
/// `on_lock_lost = "kill"`) or the shutdown grace is over. Keeps the lease
/// alive while pending.
async fn stop_when(
    shared: &Shared,
    job: &Job,
    lease: &Lease,
    name: &str,
    claim_sent: Instant,
) -> StopReason {
    let node = shared.locker.node();
    tokio::select! {
        lost = watchdog::keep(&shared.locker, lease, claim_sent) => {
            log_lost(job, name, node, lease.fence, &lost);
            if job.on_lock_lost == OnLockLost::Kill {
                return StopReason::LockLost;
            }
        }
        _ = shared.interrupt.cancelled() => return StopReason::Interrupted,
    }
    shared.interrupt.cancelled().await;
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
        crate::exec::Outcome::Succeeded => {
            info!(job = %job.name, occurrence = %name, node = %node, fence,
            outcome = %outcome, exit, http_status = http, duration = %duration, "run finished")
        }
        _ => {
            warn!(job = %job.name, occurrence = %name, node = %node, fence, outcome = %outcome, exit, http_status = http,
            duration = %duration, error = report.error.as_deref(), "run finished")
        }
    }
}

/// Releases the lease and records the entry, retrying Redis errors for a
/// while; if Redis stays away the lock expires by itself and the entry is
/// only in this node's log.
async fn release(shared: &Shared, lease: &Lease, entry: &Entry) {
    let give_up = Instant::now() + lease.ttl.max(Duration::from_secs(5));
    let mut pause = RETRY_FIRST;
    loop {
        match shared.locker.release(lease, entry).await {
            Ok(true) => return,
            Ok(false) => {
                warn!(job = %lease.job, occurrence = %entry.occurrence, node = %entry.node, fence = lease.fence,
                    "lock was no longer ours at release; outcome recorded");
                return;
            }
            Err(err) if Instant::now() + pause < give_up => {
                warn!(job = %lease.job, occurrence = %entry.occurrence, node = %entry.node, error = %err, "release failed, retrying");
            }
            Err(err) => {
                error!(job = %lease.job, occurrence = %entry.occurrence, node = %entry.node, fence = lease.fence,
                    outcome = %entry.outcome, error = %err, "release failed: the lock will expire by itself, history not recorded");
                return;
            }
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(RETRY_MAX);
    }
}
