//! One run of a job under its lease, for the daemon and for `trigger`:
//! the executor runs the job while the watchdog renews the lease beside
//! it, and the lease is released together with the run's history entry.
//!
//! The lease is renewed for as long as the run lasts, which is until the
//! last process of its group is gone (also while a timed-out or
//! interrupted job ignores SIGTERM), and released only then (guarantee 2,
//! docs/guarantees.md). The watchdog ([`keep`]) extends it every
//! `lock_ttl / 3` with the token-checked extend script; its deadline is
//! counted from when the last successful renewal (or the claim) was
//! *sent*, a lower bound of the key's real expiry, minus a safety margin,
//! so a lease that cannot be confirmed stops the run (`on_lock_lost =
//! "kill"`) before another node could take the lock.
//!
//! Failure model: the release is retried while Redis fails, without limit
//! until the caller stops, then for [`STOP_WAIT`]; every retry is safe
//! (the release script is token-checked and records the entry once). An
//! outcome Redis never took is logged whole, as its record.

use std::collections::BTreeMap;
use std::future::pending;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::{Instant, sleep_until, timeout_at};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::config::{Job, OnLockLost};
use crate::exec::{Executor, Outcome, OutputMask, Report, RunContext, StopReason};
use crate::history::Entry;
use crate::limits::{self, NoRoom};
use crate::lock::{Lease, LockError, Locker};
use crate::metrics;
use crate::schedule::{Occurrence, rfc3339};

/// How long a release still waits for Redis once its caller stops.
pub const STOP_WAIT: Duration = Duration::from_secs(10);
/// First and longest pause between releases while Redis fails.
const RETRY_FIRST: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_secs(1);

/// An operator's abort of one run: fired at most once, with why.
#[derive(Clone, Default)]
pub struct Abort {
    token: CancellationToken,
    why: Arc<std::sync::Mutex<Option<String>>>,
}

impl Abort {
    /// Stops the run, saying `why` (its history entry's error); `false`
    /// if it was fired already.
    pub fn fire(&self, why: String) -> bool {
        let mut slot = match self.why.lock() {
            Ok(slot) => slot,
            Err(poisoned) => poisoned.into_inner(),
        };
        if slot.is_some() {
            return false;
        }
        *slot = Some(why);
        self.token.cancel();
        true
    }

    /// Whether it was fired.
    pub fn fired(&self) -> bool {
        self.token.is_cancelled()
    }

    fn why(&self) -> Option<String> {
        match self.why.lock() {
            Ok(slot) => slot.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }
}

/// What a run needs from whoever started it (the daemon or `trigger`).
pub struct RunEnv<'a> {
    pub locker: &'a Locker,
    pub executor: &'a Executor,
    /// Stop the run (shutdown grace over, or Ctrl-C on `trigger`).
    pub interrupt: &'a CancellationToken,
    /// The variables of `[daemon] env_file` the job gets in its environment
    /// (the daemon's as of its last load; `trigger`'s as it read the file).
    pub env_file: Arc<BTreeMap<String, String>>,
    /// What the output of its runs must not show.
    pub mask: Arc<OutputMask>,
    /// `solocron abort` of this run (the daemon's; `trigger` on a terminal
    /// is stopped with Ctrl-C instead).
    pub abort: Abort,
}

/// Runs `occurrence` of `job` under `lease` until the last process of the
/// run is gone, renewing the lease beside it; `attempt` is 1, then 2… for
/// retries (`SOLOCRON_ATTEMPT`), and `claim_sent` when the winning claim
/// was sent. Before the action starts the run takes room in the job's
/// group ([`limits::admit`]), waiting until `room_until` at most (`None`:
/// the group's limits are ignored, `trigger --ignore-limits`); without
/// room it answers a `throttled` report. The lease is still held when
/// this answers: see [`release`].
pub async fn under_lease(
    env: &RunEnv<'_>,
    job: &Arc<Job>,
    lease: &Lease,
    occurrence: Occurrence,
    claim_sent: Instant,
    attempt: u32,
    room_until: Option<Instant>,
) -> Report {
    let ctx = RunContext {
        job: Arc::clone(job),
        occurrence: occurrence.to_string(),
        fence: lease.fence,
        node: env.locker.node().to_string(),
        env_file: Arc::clone(&env.env_file),
        mask: Arc::clone(&env.mask),
        lost_lease_grace: safety_margin(lease.ttl) / 2,
        lease_lost: CancellationToken::new(),
        attempt,
        notice: None,
    };
    // The watchdog runs beside the run, not inside it: it goes on renewing
    // while a stopped job takes its grace to die, and only the end of the
    // run (its whole group gone) ends it.
    let lost = ctx.lease_lost.clone();
    let keep = keep_lease(env.locker, job, lease, occurrence, claim_sent, &lost);
    let run = async {
        let name = occurrence.to_string();
        let room = match room_until {
            Some(until) => {
                let admitted = limits::admit(
                    env.locker,
                    job,
                    lease,
                    &name,
                    until,
                    env.interrupt,
                    &env.abort.token,
                );
                match admitted.await {
                    Ok(room) => room,
                    Err(NoRoom::Throttled(why)) => return not_run(Outcome::Throttled, why),
                    Err(NoRoom::Stopped) => {
                        let why = "stopped while waiting for room in its group".to_string();
                        return not_run(Outcome::Interrupted, why);
                    }
                    Err(NoRoom::Aborted) => {
                        let why = env.abort.why().unwrap_or_default();
                        return not_run(
                            Outcome::Aborted,
                            format!("{why} (while it waited for room in its group)"),
                        );
                    }
                }
            }
            None => None,
        };
        let stop = stop_when(&lost, env.interrupt, &env.abort.token);
        let mut report = match room {
            None => env.executor.execute(&ctx, stop).await,
            Some(room) => {
                let report = tokio::select! {
                    report = env.executor.execute(&ctx, stop) => report,
                    never = limits::keep(env.locker, job, &room, lease.ttl, &lost) => match never {},
                };
                limits::give_back(env.locker, job, room).await;
                report
            }
        };
        if report.outcome == Outcome::Aborted {
            report.error = env.abort.why();
        }
        report
    };
    tokio::select! {
        report = run => report,
        never = keep => match never {},
    }
}

/// The report of a run whose action never started (`why`: its error).
fn not_run(outcome: Outcome, why: String) -> Report {
    let now = Utc::now();
    Report {
        outcome,
        exit_code: None,
        http_status: None,
        error: Some(why),
        started_at: now,
        finished_at: now,
        duration: Duration::ZERO,
        output_tail: None,
    }
}

/// The history entry of a finished run.
pub fn entry(
    occurrence: Occurrence,
    node: &str,
    lease: &Lease,
    attempt: u32,
    retry_at: Option<DateTime<Utc>>,
    report: &Report,
) -> Entry {
    let mut entry = Entry::from_report(&occurrence.to_string(), node, lease.fence, report);
    entry.output_tail = report.output_tail.clone();
    entry.attempt = Some(attempt);
    entry.retry_at = retry_at;
    entry
}

/// Releases `lease` and records `entry` in one step, retrying while Redis
/// fails: without limit until `stopping` is cancelled, then for
/// [`STOP_WAIT`] more (a caller that is already stopping, like `trigger`,
/// waits [`STOP_WAIT`] at most). `failed` is told of each failure. Answers
/// whether Redis took the record.
pub async fn release(
    locker: &Locker,
    lease: &Lease,
    entry: &Entry,
    stopping: &CancellationToken,
    mut failed: impl FnMut(&LockError),
) -> bool {
    let mut give_up = stopping.is_cancelled().then(|| Instant::now() + STOP_WAIT);
    let mut pause = RETRY_FIRST;
    let mut waited = false;
    loop {
        match locker.release(lease, entry).await {
            Ok(released) => {
                if waited {
                    info!(job = %lease.job, occurrence = %entry.occurrence, node = %entry.node, fence = lease.fence,
                        outcome = %entry.outcome, "outcome recorded now that redis answers");
                }
                if released.replaced_abandoned {
                    warn!(job = %lease.job, occurrence = %entry.occurrence, node = %entry.node, fence = lease.fence,
                        outcome = %entry.outcome,
                        "this run had been recorded abandoned while this node could not reach redis; its own outcome replaces that entry");
                } else if !released.lock_was_ours {
                    warn!(job = %lease.job, occurrence = %entry.occurrence, node = %entry.node, fence = lease.fence,
                        "lock was no longer ours at release; outcome recorded");
                }
                return true;
            }
            Err(err) => {
                failed(&err);
                if give_up.is_none() && stopping.is_cancelled() {
                    give_up = Some(Instant::now() + STOP_WAIT);
                }
                if give_up.is_some_and(|at| Instant::now() + pause >= at) {
                    error!(job = %lease.job, occurrence = %entry.occurrence, node = %entry.node, fence = lease.fence,
                        outcome = %entry.outcome, exit_code = entry.exit_code, duration_ms = entry.duration_ms,
                        error = %err,
                        "outcome not recorded: redis unreachable while stopping (this line is the record; the lock expires by itself)");
                    return false;
                }
                if !waited {
                    waited = true;
                    debug!(job = %lease.job, occurrence = %entry.occurrence, node = %entry.node, error = %err,
                        "release failed; the outcome waits in memory until redis answers");
                }
            }
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(RETRY_MAX);
    }
}

/// Completes when the run must stop: `lost` (the lease is gone and
/// `on_lock_lost = "kill"`), `interrupt` or `aborted` (`solocron abort`).
async fn stop_when(
    lost: &CancellationToken,
    interrupt: &CancellationToken,
    aborted: &CancellationToken,
) -> StopReason {
    tokio::select! {
        _ = lost.cancelled() => StopReason::LockLost,
        _ = interrupt.cancelled() => StopReason::Interrupted,
        _ = aborted.cancelled() => StopReason::Aborted,
    }
}

/// Renews the lease until it is lost, then says so (and cancels `lost`
/// when the job must be stopped); never completes.
async fn keep_lease(
    locker: &Locker,
    job: &Job,
    lease: &Lease,
    occurrence: Occurrence,
    claim_sent: Instant,
    lost: &CancellationToken,
) -> std::convert::Infallible {
    let why = keep(locker, lease, claim_sent).await;
    metrics::lock_lost(&job.name);
    log_lost(job, occurrence, locker.node(), lease.fence, &why);
    if job.on_lock_lost == OnLockLost::Kill {
        lost.cancel();
    }
    pending().await
}

fn log_lost(job: &Job, occurrence: Occurrence, node: &str, fence: u64, lost: &LeaseLost) {
    match job.on_lock_lost {
        OnLockLost::Kill => {
            error!(job = %job.name, occurrence = %occurrence, node = %node, fence, reason = lost.as_str(),
            "lock lost: stopping the run (on_lock_lost = kill)")
        }
        OnLockLost::Continue => {
            error!(job = %job.name, occurrence = %occurrence, node = %node, fence, reason = lost.as_str(),
            "lock lost: the run continues without the lock (on_lock_lost = continue)")
        }
    }
}

/// The `run finished` line; `retry_at` when the next attempt may start.
pub fn log_finished(
    job: &Job,
    occurrence: Occurrence,
    node: &str,
    fence: u64,
    attempt: u32,
    retry_at: Option<DateTime<Utc>>,
    report: &Report,
) {
    let duration_ms = u64::try_from(report.duration.as_millis()).unwrap_or(u64::MAX);
    let outcome = report.outcome.as_str();
    let (exit_code, http) = (report.exit_code, report.http_status);
    // Shown only where retries exist: attempt 1 of a job without them says nothing.
    let attempt = (job.retries > 0).then_some(attempt);
    let retry_at = retry_at.map(rfc3339);
    match report.outcome {
        Outcome::Succeeded => info!(job = %job.name, occurrence = %occurrence, node = %node, fence,
            outcome = %outcome, exit_code, http_status = http, duration_ms, attempt, "run finished"),
        _ => {
            warn!(job = %job.name, occurrence = %occurrence, node = %node, fence, outcome = %outcome, exit_code,
            http_status = http, duration_ms, attempt, retry_at = retry_at.as_deref().map(tracing::field::display),
            error = report.error.as_deref().map(tracing::field::display),
            "run finished")
        }
    }
}

/// Why the lease is gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseLost {
    /// The lock holds another value (expired and taken, or deleted).
    Taken,
    /// No renewal was confirmed before the deadline (Redis unreachable or paused).
    Unconfirmed,
}

impl LeaseLost {
    /// For logs: `taken` or `unconfirmed`.
    pub fn as_str(&self) -> &'static str {
        match self {
            LeaseLost::Taken => "taken",
            LeaseLost::Unconfirmed => "unconfirmed",
        }
    }
}

/// How much earlier than the lower bound of the key's expiry the run is
/// treated as lost: a fifth of the TTL, at most 2 s.
pub fn safety_margin(ttl: Duration) -> Duration {
    (ttl / 5).min(Duration::from_secs(2))
}

/// Renews `lease` until it is lost; completes only then (drop it to stop
/// renewing). `claim_sent` is when the claim that won the lease was sent.
pub async fn keep(locker: &Locker, lease: &Lease, claim_sent: Instant) -> LeaseLost {
    let ttl = lease.ttl;
    let margin = safety_margin(ttl);
    let period = ttl / 3;
    let mut deadline = claim_sent + ttl - margin;
    let mut next = claim_sent + period;
    loop {
        sleep_until(next.min(deadline)).await;
        if Instant::now() >= deadline {
            return LeaseLost::Unconfirmed;
        }
        let sent = Instant::now();
        match timeout_at(deadline, locker.extend(lease)).await {
            Ok(Ok(true)) => {
                deadline = sent + ttl - margin;
                next = sent + period;
                crate::metrics::lock_renewed(&lease.job);
                debug!(job = %lease.job, fence = lease.fence, "lease extended");
            }
            Ok(Ok(false)) => return LeaseLost::Taken,
            Ok(Err(err)) => {
                debug!(job = %lease.job, fence = lease.fence, error = %err, "lease extension failed, retrying");
                // Retry soon, but never spin: a tenth of the TTL, at least 20 ms.
                next = Instant::now() + (ttl / 10).max(Duration::from_millis(20));
            }
            Err(_) => return LeaseLost::Unconfirmed,
        }
    }
}
