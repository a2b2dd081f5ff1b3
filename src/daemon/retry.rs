//! Retries (`retries`, `retry_backoff`): a failed or timed-out run of a
//! scheduled occurrence is tried again, same occurrence, attempt 2, 3…,
//! after `retry_backoff` doubled at each attempt (capped), never once the
//! job's next occurrence is due.
//!
//! The release of the failed attempt marks the next one pending in the
//! job's state, atomically with its history entry. Every node that took
//! part in the occurrence (the runner and the nodes that lost its claim)
//! then watches the state, and at the retry instant claims the attempt
//! like an occurrence: once, under the job's lock, with a new fence. The
//! node whose attempt failed claims a moment later than the others, so a
//! node that is broken for this job hands the retry to a healthy one
//! instead of failing it again itself.
//!
//! Cost: only jobs with `retries > 0` are watched, with one read of the
//! state every half backoff (at least 250 ms, at most 30 s) per node,
//! while an attempt runs or a retry is pending.
//!
//! Reloads: the retries follow the loaded config, not the definition the
//! occurrence started with. A run that ends marks a retry only if the job
//! still has one left; a pending attempt is claimed under the job's
//! definition of that moment (a fixed `command` applies to it), and is
//! dropped by a node whose reload removed the job or lowered its
//! `retries` below it: the occurrence then ends with its last attempt,
//! whose node sends `on_failure` at once. The attempt stays marked pending
//! in Redis until the next occurrence: a node that still has the old
//! definition (a rollout in progress) claims and runs it, and tells the
//! outcome of that run too.
//!
//! A pause of the job drops its pending attempts the same way (the
//! operator stops a failing job hammering a service). A drained node
//! claims none, but keeps following a retry its own failure asked for, so
//! that with every node drained it still tells `on_failure` at the next
//! occurrence.
//!
//! Failure model: if no node claims a pending attempt before the next
//! occurrence (every node died, Redis away), the occurrence ends with its
//! last recorded attempt; the node that ran that attempt, if alive, sends
//! its `on_failure` then.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::Shared;
use super::notifiers::{self, Subject};
use super::occurrence::{How, run_won};
use super::recording::unix_secs;
use crate::config::{Job, retry_backoff};
use crate::exec::{Notice, Outcome, Report};
use crate::lock::{Claim, RetryState, Target, new_token};
use crate::schedule::Occurrence;

/// Bounds of the pause between two reads of the state.
const POLL_MIN: Duration = Duration::from_millis(250);
const POLL_MAX: Duration = Duration::from_secs(30);
/// How much later than the others the node whose attempt failed claims.
const DEFER_MAX: Duration = Duration::from_secs(1);
/// Pause before claiming again while the lock is held or Redis fails.
const CLAIM_AGAIN: Duration = Duration::from_millis(250);

/// When attempt `attempt + 1` of `job`'s occurrence `at` may start, if
/// attempt `attempt` ended with `outcome` at `now`: `None` when the job
/// has no retries left, the outcome is not a failure, or the next
/// occurrence would be due first.
pub fn next_attempt_at(
    job: &Job,
    at: DateTime<Utc>,
    attempt: u32,
    outcome: Outcome,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    if !matches!(outcome, Outcome::Failed | Outcome::TimedOut) || attempt > job.retries {
        return None;
    }
    let backoff = retry_backoff(job.extras.retry_backoff, attempt);
    let when = now.checked_add_signed(TimeDelta::from_std(backoff).ok()?)?;
    (when < deadline(job, at)).then_some(when)
}

/// Retries of `at` must start before this: the job's next occurrence.
pub fn deadline(job: &Job, at: DateTime<Utc>) -> DateTime<Utc> {
    job.fires_at(
        job.schedule
            .next_after(at)
            .unwrap_or_else(|| at + TimeDelta::days(1)),
    )
}

/// The attempt this node ran last, which failed.
pub struct Ran {
    pub attempt: u32,
    pub fence: u64,
    pub notice: Notice,
}

impl Ran {
    pub fn new(attempt: u32, fence: u64, report: &Report) -> Ran {
        Ran {
            attempt,
            fence,
            notice: notice_of(report),
        }
    }
}

/// What a notifier is told about `report`.
pub fn notice_of(report: &Report) -> Notice {
    Notice {
        outcome: report.outcome,
        exit_code: report.exit_code,
        http_status: report.http_status,
        error: report.error.clone(),
        output_tail: report.output_tail.clone(),
    }
}

/// Watches `job`'s occurrence `at` for pending retries and claims them, in
/// the background; `ran` is this node's own failed attempt, if any (then
/// this node tells `on_failure` if no further attempt is made).
pub fn watch(shared: &Arc<Shared>, job: &Arc<Job>, at: DateTime<Utc>, ran: Option<Ran>) {
    if ran.is_none() && shared.retry_job(&job.name).is_none() {
        return;
    }
    let shared = Arc::clone(shared);
    let job = Arc::clone(job);
    shared
        .tracker
        .clone()
        .spawn(async move { follow(&shared, job, at, ran).await });
}

/// Why pending attempt `attempt` is not made under `current`, the job's
/// definition in the loaded config (`None`: removed, or without retries).
fn dropped(current: Option<&Job>, attempt: u32) -> Option<&'static str> {
    match current {
        None => Some("the loaded config has no retries for the job (removed, or `retries = 0`)"),
        Some(job) if attempt > job.retries.saturating_add(1) => {
            Some("the loaded config gives the job fewer retries")
        }
        Some(_) => None,
    }
}

/// `job` is the definition this node last knew the job by: the one its
/// attempt ran under, then the loaded config's at each step.
async fn follow(shared: &Arc<Shared>, mut job: Arc<Job>, at: DateTime<Utc>, mut ran: Option<Ran>) {
    let occurrence = Occurrence::Scheduled(at);
    loop {
        if shared.cancel.is_cancelled() {
            return;
        }
        let current = shared.retry_job(&job.name);
        if let Some(current) = &current {
            job = Arc::clone(current);
        }
        let until = deadline(&job, at);
        let poll = (job.extras.retry_backoff / 2).clamp(POLL_MIN, POLL_MAX);
        if shared.clock.now() >= until {
            // Nobody claimed the retry this node's failure asked for.
            if let Some(ran) = ran.take() {
                warn!(job = %job.name, occurrence = %occurrence, node = %shared.locker.node(), attempt = ran.attempt,
                    "retry not run: no node claimed it before the next occurrence; the occurrence ends with this attempt");
                notify(shared, &job, occurrence, ran);
            }
            return;
        }
        let state = shared
            .locker
            .retry_state(&job.name, at.timestamp_millis())
            .await;
        let pending = match state {
            Ok(RetryState::Pending { attempt, at_ms }) => (attempt, at_ms),
            // Without a failed run of our own in the balance (none, or
            // another node took its retry), a finished occurrence is
            // someone else's to report. Ours may still be on its way to
            // Redis (held while Redis was away): keep looking.
            Ok(RetryState::Finished { attempt })
                if ran.as_ref().is_none_or(|ran| attempt > ran.attempt) =>
            {
                return;
            }
            Ok(_) => {
                pause(shared, poll).await;
                continue;
            }
            Err(err) => {
                debug!(job = %job.name, occurrence = %occurrence, error = %err, "retry state not read; trying again");
                pause(shared, poll).await;
                continue;
            }
        };
        let (attempt, at_ms) = pending;
        let mine = ran.as_ref().is_some_and(|ran| ran.attempt + 1 == attempt);
        if let Some(why) = dropped(current.as_deref(), attempt) {
            drop_retry(
                shared,
                &job,
                occurrence,
                attempt,
                why,
                ran.take().filter(|_| mine),
            );
            return;
        }
        let defer = if mine {
            (job.extras.retry_backoff / 4).min(DEFER_MAX)
        } else {
            Duration::ZERO
        };
        let start = DateTime::from_timestamp_millis(at_ms).unwrap_or_else(Utc::now);
        let wait = (start - shared.clock.now())
            .to_std()
            .unwrap_or(Duration::ZERO)
            + defer;
        pause(shared, wait).await;
        match claim_and_run(shared, &job, occurrence, attempt).await {
            Step::Ran(next) => match next {
                Some(failed) => ran = Some(failed),
                None => return,
            },
            Step::Taken => ran = None,
            Step::Stopping => return,
            Step::Drained => {
                pause(shared, poll).await;
                continue;
            }
            Step::Over => {
                if let Some(ran) = ran.take().filter(|_| mine) {
                    notify(shared, &job, occurrence, ran);
                }
                return;
            }
            Step::Dropped(why, last) => {
                drop_retry(
                    shared,
                    &last,
                    occurrence,
                    attempt,
                    why,
                    ran.take().filter(|_| mine),
                );
                return;
            }
        }
    }
}

/// Pending attempt `attempt` of `job`'s `occurrence` is not made on
/// this node (`why`): the occurrence ends with the attempt before, and the
/// node that ran that one (`ran`) tells `on_failure` now. A node that still
/// has the old definition may claim the attempt all the same (a rollout).
fn drop_retry(
    shared: &Shared,
    job: &Arc<Job>,
    occurrence: Occurrence,
    attempt: u32,
    why: &str,
    ran: Option<Ran>,
) {
    info!(job = %job.name, occurrence = %occurrence, node = %shared.locker.node(), attempt, reason = why,
        last_attempt = attempt.saturating_sub(1), "retry dropped: the occurrence ends with its last attempt");
    if let Some(ran) = ran {
        notify(shared, job, occurrence, ran);
    }
}

/// What a retry claim came to.
enum Step {
    /// This node ran the attempt; `Some` when it failed and another one is
    /// pending now.
    Ran(Option<Ran>),
    /// Another node took the attempt.
    Taken,
    /// Nothing to claim any more (the next occurrence is due, or the retry
    /// was not pending).
    Over,
    /// A reload took the attempt away (why), before this node claimed it;
    /// with the job's definition as this node last knew it.
    Dropped(&'static str, Arc<Job>),
    /// The daemon is stopping: another node will claim the retry.
    Stopping,
    /// This node is drained, or at its `max_running`: another node may
    /// claim the retry; this one watches (and claims it once it is neither)
    /// until it is taken or the next occurrence is due.
    Drained,
}

/// Claims attempt `attempt` of `job`'s `occurrence` and runs it if won,
/// under the job's definition in the loaded config at the moment of each
/// claim (a reload may change it, or drop the attempt, meanwhile).
async fn claim_and_run(
    shared: &Arc<Shared>,
    job: &Arc<Job>,
    occurrence: Occurrence,
    attempt: u32,
) -> Step {
    let at = occurrence.at();
    let node = shared.locker.node().to_string();
    let token = new_token();
    loop {
        if shared.cancel.is_cancelled() {
            return Step::Stopping;
        }
        // A drained node claims nothing, retries included: the others do.
        // It keeps following the retry, so that if nobody claims it (every
        // node drained) the node whose attempt failed still tells
        // `on_failure` once the next occurrence is due.
        if shared.controls.draining() {
            return Step::Drained;
        }
        let current = shared.retry_job(&job.name);
        if let Some(why) = dropped(current.as_deref(), attempt) {
            return Step::Dropped(why, current.unwrap_or_else(|| Arc::clone(job)));
        }
        // A pause stops the retries of an occurrence due before it too:
        // pausing a failing job is how an operator stops it hammering a
        // service. The occurrence ends with its last attempt.
        if shared
            .controls
            .pause_for(&job.name, shared.clock.now().timestamp_millis())
            .is_some()
        {
            return Step::Dropped(
                "the job is paused (`solocron pause`)",
                current.unwrap_or_else(|| Arc::clone(job)),
            );
        }
        let job = current.unwrap_or_else(|| Arc::clone(job));
        let until = deadline(&job, at);
        if shared.clock.now() >= until {
            return Step::Over;
        }
        let target = Target::Retry {
            at,
            attempt,
            deadline_ms: until.timestamp_millis(),
        };
        // A slot of `[daemon] max_running` through the attempt's run: at
        // the cap this node leaves the attempt to the others watching.
        let Some(_slot) = shared.slots.take() else {
            return Step::Drained;
        };
        let sent = Instant::now();
        match shared
            .locker
            .claim(&job.name, &target, &token, job.lock_ttl)
            .await
        {
            Ok(Claim::Won(lease)) => {
                shared.redis_health.confirmed();
                crate::metrics::retried(&job.name);
                info!(job = %job.name, occurrence = %occurrence, node = %node, fence = lease.fence, attempt,
                    "retry claim won");
                // Room in its group is waited for as long as a scheduled
                // occurrence would be, never past the next occurrence.
                let until = shared
                    .clock
                    .instant_of(until)
                    .min(Instant::now() + job.starting_deadline);
                let (report, retry_at) = run_won(
                    shared,
                    &job,
                    &lease,
                    occurrence,
                    sent,
                    attempt,
                    How::scheduled(until),
                )
                .await;
                if retry_at.is_some() {
                    return Step::Ran(Some(Ran::new(attempt, lease.fence, &report)));
                }
                // Without a retry to follow, `run_won` sent the notifier.
                return Step::Ran(None);
            }
            Ok(Claim::Taken { by, fence, .. }) => {
                info!(job = %job.name, occurrence = %occurrence, node = %node, winner = %by, fence, attempt,
                    "retry claim lost");
                return Step::Taken;
            }
            Ok(Claim::Busy { .. }) => {}
            Ok(Claim::TooLate | Claim::TooEarly { .. } | Claim::Superseded { .. }) => {
                return Step::Over;
            }
            Err(err) => {
                shared
                    .redis_health
                    .failed("retry claim", &err, err.trouble());
            }
        }
        pause(shared, CLAIM_AGAIN).await;
    }
}

/// The `occurrence` of `job` ends with `ran`, this node's failed
/// attempt: its final outcome is counted and its notifier sent.
fn notify(shared: &Shared, job: &Arc<Job>, occurrence: Occurrence, ran: Ran) {
    let name = occurrence.to_string();
    crate::metrics::occurrence_decided(
        &job.name,
        ran.notice.outcome,
        unix_secs(shared.clock.now()),
    );
    let subject = Subject {
        occurrence: &name,
        fence: ran.fence,
        attempt: ran.attempt,
    };
    notifiers::send(shared, job, subject, ran.notice);
}

/// Sleeps `wait`, or less if the daemon stops meanwhile.
async fn pause(shared: &Shared, wait: Duration) {
    tokio::select! {
        _ = shared.cancel.cancelled() => {}
        _ = tokio::time::sleep(wait) => {}
    }
}
