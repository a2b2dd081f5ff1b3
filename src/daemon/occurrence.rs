//! One occurrence on this node: claim it (retrying Redis errors with the same
//! token until its deadline), run it under the watchdog, release the lock
//! and record the outcome.
//!
//! Fail closed: a node that cannot reach Redis never runs the job; the
//! occurrence is given up at its deadline and recorded `missed` as soon as
//! Redis answers again. The deadline is the earlier of `starting_deadline`
//! and the job's next occurrence, so after an outage at most the newest
//! pending occurrence runs late and every older one is `missed`, never
//! `skipped` behind a late run of an old one (guarantee 3, docs/guarantees.md).
//!
//! The lease is renewed for as long as the run lasts, which is until the
//! last process of its group is gone (also while a timed-out or interrupted
//! job ignores SIGTERM), and released only then (guarantee 2,
//! docs/guarantees.md).

use std::collections::BTreeMap;
use std::future::pending;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::Shared;
use super::notifications::{self, Subject};
use super::preference::{self, Place};
use super::recording::{self, log_abandoned, spawn_record_missed, watch_lock};
use super::timetable::rfc3339;
use super::{rename, retry};
use crate::config::{Job, OnLockLost};
use crate::exec::{Executor, Outcome, OutputMask, Report, RunContext, StopReason};
use crate::history::Entry;
use crate::lock::watchdog::{self, LeaseLost};
use crate::lock::{Claim, ClaimReply, Lease, Locker, Target, new_token};
use crate::metrics::{self, ClaimResult};

/// First and longest pause between retries while Redis fails.
const RETRY_FIRST: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_secs(1);
/// The most a scheduled claim waits, at random, before it is sent when no
/// order of the nodes is known (`preference::Place::Alone`).
const FAIR_SPREAD: Duration = Duration::from_millis(1);
/// The most scheduled claims of this node waiting for Redis's reply at
/// once; the others wait their turn here. Every command has a 500 ms reply
/// timeout counted from when it is queued on the connection, so a burst
/// queued all at once would time out and be sent again while the first
/// copies still run in Redis. The cap keeps the connection pipelined while
/// each queued claim is answered well within that timeout.
pub(super) const CLAIMS_IN_FLIGHT: usize = 64;
/// How long after the deadline (this node's clock) claims are still retried:
/// above the redis response timeout plus the clock offset we warn about.
const GIVE_UP_MARGIN: Duration = Duration::from_millis(1500);

/// The last instant `at` of `job` may still be claimed: `starting_deadline`
/// after it fires, but never once the job's next occurrence fires (an
/// occurrence fires at its instant plus the job's splay offset).
pub fn claim_deadline(job: &Job, at: DateTime<Utc>) -> DateTime<Utc> {
    let late = chrono::TimeDelta::from_std(job.starting_deadline).unwrap_or(chrono::TimeDelta::MAX);
    let by_deadline = at
        .checked_add_signed(late)
        .unwrap_or(DateTime::<Utc>::MAX_UTC);
    let deadline = match job.schedule.next_after(at) {
        Some(next) => by_deadline.min(next),
        None => by_deadline,
    };
    job.fires_at(deadline)
}

/// Claims and, if won, runs the occurrence of `job` at `at`.
pub async fn attempt(shared: Arc<Shared>, job: Arc<Job>, at: DateTime<Utc>, catch_up: bool) {
    let name = rfc3339(at);
    let node = shared.locker.node().to_string();
    let deadline_at = claim_deadline(&job, at);
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
        + (deadline_at - shared.now())
            .to_std()
            .unwrap_or(Duration::ZERO)
        + GIVE_UP_MARGIN;
    let token = new_token();
    let mut pause = RETRY_FIRST;
    // One occurrence of a job at a time claims on this node: the claim of
    // a newer one would make the miss record of an older one look late,
    // and an unconfirmed claim undone meanwhile would leave the older one
    // in no record at all. An older one gives up at the newer one's time.
    let turn = shared.claim_turn(&job.name);
    let _turn = turn.lock().await;
    if catch_up && !decided_before(&shared, &job, &name, at).await {
        return;
    }
    if !catch_up {
        match shared
            .preference
            .place(&job.name, at.timestamp_millis(), &node)
        {
            // With no order known every node fires at the same instant (by
            // Redis's clock); which one is ahead by a few hundred µs is a
            // fixed bias of its offset estimate. Up to a millisecond at
            // random makes the winner a fair draw instead.
            Place::Alone => {
                tokio::time::sleep(FAIR_SPREAD.mul_f64(rand::random::<f64>())).await;
            }
            Place::First => {}
            Place::Behind => match peek_after_first(&shared, &job, &target, &name).await {
                Peeked::Decided(reply) => {
                    shared.health.decided_elsewhere();
                    drop(_turn);
                    let now = Instant::now();
                    decided(&shared, &job, at, &name, &token, *reply, now, catch_up).await;
                    return;
                }
                Peeked::Stopping => {
                    info!(job = %job.name, occurrence = %name, node = %node, "claim abandoned: shutting down");
                    return;
                }
                Peeked::Undecided => {}
            },
        }
    }
    loop {
        // Never closed, so always a permit; held until the reply is in.
        let permit = shared.claims_in_flight.acquire().await.ok();
        let sent = Instant::now();
        let claimed = if Instant::now() >= give_up {
            None
        } else {
            match rename::skipped_behind_old_name(&shared, &job, at, &name).await {
                Ok(true) => return,
                Ok(false) => Some(
                    shared
                        .locker
                        .claim_detailed(&job.name, &target, &token, job.lock_ttl)
                        .await,
                ),
                Err(err) => Some(Err(err)),
            }
        };
        drop(permit);
        match claimed {
            Some(Ok(reply)) => {
                // Only a claim that wrote (won, or recorded a skip) shows
                // that Redis takes this node's writes; a losing or late
                // one wrote nothing (it answers also while Redis refuses
                // writes: out of memory, a read-only replica).
                match reply.claim {
                    Claim::Won(_) | Claim::Busy { .. } => shared.health.confirmed(),
                    Claim::Taken { .. } => shared.health.decided_elsewhere(),
                    _ => shared.health.answered(),
                }
                drop(_turn);
                decided(&shared, &job, at, &name, &token, reply, sent, catch_up).await;
                return;
            }
            None | Some(Err(_)) if Instant::now() >= give_up => {
                if let Some(Err(err)) = &claimed {
                    shared.health.failed("claim", err, err.trouble());
                }
                if !shared.health.missed() {
                    error!(job = %job.name, occurrence = %name, node = %node,
                        "occurrence missed: redis did not take its claim before its deadline (never run without the lock)");
                }
                // Claims sent meanwhile may still reach Redis (a paused
                // server runs its queue on resume): the token lets the
                // record undo such a late win. Recorded before the next
                // occurrence's turn when Redis answers now.
                recording::record_missed(
                    &shared,
                    &job,
                    at,
                    "redis did not take the claim before its deadline",
                    &token,
                )
                .await;
                return;
            }
            None => return,
            Some(Err(err)) => {
                shared.health.failed("claim", &err, err.trouble());
                debug!(job = %job.name, occurrence = %name, node = %node, error = %err, retry_in = ?pause,
                    "claim failed, retrying until the deadline");
            }
        }
        tokio::select! {
            _ = shared.cancel.cancelled() => {
                info!(job = %job.name, occurrence = %name, node = %node, "claim abandoned: shutting down");
                return;
            }
            _ = tokio::time::sleep(jittered(pause).min(give_up.saturating_duration_since(Instant::now()))) => {}
        }
        pause = (pause * 2).min(RETRY_MAX);
    }
}

/// What a node that is not first in line found ([`peek_after_first`]).
enum Peeked {
    /// The answer a losing claim would have given: log it, nothing else.
    Decided(Box<ClaimReply>),
    /// Claim it (undecided, or the read failed: the claim loop retries
    /// Redis errors until the deadline).
    Undecided,
    /// The daemon is stopping: claim nothing.
    Stopping,
}

/// For a node that is not first in line for `target` (`preference`): waits
/// [`preference::PEEK_DELAY`] and reads whether the first node decided it.
async fn peek_after_first(shared: &Shared, job: &Job, target: &Target, name: &str) -> Peeked {
    tokio::select! {
        _ = shared.cancel.cancelled() => return Peeked::Stopping,
        _ = tokio::time::sleep(preference::PEEK_DELAY) => {}
    }
    let permit = shared.claims_in_flight.acquire().await.ok();
    let peeked = shared.locker.peek(&job.name, target).await;
    drop(permit);
    match peeked {
        Ok(Some(reply)) => Peeked::Decided(Box::new(reply)),
        Ok(None) => Peeked::Undecided,
        Err(err) => {
            debug!(job = %job.name, occurrence = %name, node = %shared.locker.node(), error = %err,
                "reading whether the occurrence is decided failed; claiming it");
            Peeked::Undecided
        }
    }
}

/// Whether a catch-up occurrence of `job` may be claimed: not if a reload
/// added the job or changed its schedule after it (it was not due under
/// the config then in force), and only if the job was ever decided before. A job nobody ever decided is new to the fleet,
/// or renamed (a new name has no state): its occurrence before this start
/// or reload was not due for it, and a renamed job whose old name ran that
/// occurrence (maybe still running) would run it twice, overlapping. Its
/// first run is its next occurrence, as for a job added between two of
/// its occurrences. If Redis cannot say, the claim decides (as before).
async fn decided_before(shared: &Shared, job: &Job, name: &str, at: DateTime<Utc>) -> bool {
    if shared
        .gap_floor(&job.name)
        .is_some_and(|floor| at.timestamp_millis() <= floor)
    {
        info!(job = %job.name, occurrence = %name, node = %shared.locker.node(),
            "no catch-up run: the reload added this job or changed its schedule after this occurrence; it first runs at its next occurrence");
        return false;
    }
    match shared.locker.ever_decided(&job.name).await {
        Ok(true) => true,
        Ok(false) => {
            info!(job = %job.name, occurrence = %name, node = %shared.locker.node(),
                "no catch-up run: the job was never decided (a new or renamed job); it first runs at its next occurrence");
            false
        }
        Err(err) => {
            debug!(job = %job.name, occurrence = %name, node = %shared.locker.node(), error = %err,
                "reading whether the job was ever decided failed; claiming the catch-up occurrence");
            true
        }
    }
}

/// `pause` plus up to half of it at random: nodes whose claims collided
/// (Redlock splits the masters between them) do not retry in lockstep.
fn jittered(pause: Duration) -> Duration {
    pause + pause.mul_f64(rand::random::<f64>() / 2.0)
}

/// Acts on Redis's answer to the claim of `at`: runs a won occurrence,
/// logs the decision, and records what else the answer says is owed.
#[allow(clippy::too_many_arguments)]
async fn decided(
    shared: &Arc<Shared>,
    job: &Arc<Job>,
    at: DateTime<Utc>,
    name: &str,
    token: &str,
    reply: ClaimReply,
    sent: Instant,
    catch_up: bool,
) {
    let node = shared.locker.node();
    if let Some(abandoned) = &reply.abandoned {
        log_abandoned(shared, job, abandoned);
    }
    match reply.claim {
        Claim::Won(lease) => {
            metrics::claim(&job.name, ClaimResult::Won);
            info!(job = %job.name, occurrence = %name, node = %node, fence = lease.fence,
                catch_up = catch_up.then_some(true), "claim won");
            let runner = shared.runner();
            let gap = recording::record_gap_before(shared, job, reply.previous_ms, at);
            let attempt = Attempt {
                number: 1,
                occurrence: Some(at),
            };
            let run = run_lease(&runner, job, &lease, name, sent, attempt);
            let ((), (report, retry_at)) = tokio::join!(gap, run);
            let lag = (report.started_at - job.fires_at(at))
                .to_std()
                .unwrap_or(Duration::ZERO);
            metrics::fire_to_start(&job.name, lag);
            // Without a retry to follow, `run_lease` sent the notifier.
            if retry_at.is_some() {
                let ran = retry::Ran::new(1, lease.fence, &report);
                retry::watch(shared, job, at, Some(ran));
            }
        }
        Claim::Taken {
            by,
            fence,
            decision,
        } => {
            metrics::claim(&job.name, ClaimResult::Lost);
            if by == node {
                // Not lost to another node: this node's own decision, by
                // its run before a restart, or by an earlier claim of this
                // run (a reload's catch-up).
                let when = if at < shared.began {
                    "before its restart"
                } else {
                    "earlier"
                };
                info!(job = %job.name, occurrence = %name, node = %node, decision = %decision, fence,
                    "occurrence already decided by this node {when}; not claimed again");
            } else if decision == "claimed" {
                info!(job = %job.name, occurrence = %name, node = %node, winner = %by, fence, "claim lost");
            } else {
                info!(job = %job.name, occurrence = %name, node = %node, decided_by = %by, decision = %decision,
                    "occurrence already decided by another node");
            }
            if decision == "claimed" {
                watch_lock(shared, job, fence, reply.lock_ttl_left);
                retry::watch(shared, job, at, None);
            }
        }
        Claim::Busy { holder, fence } => {
            metrics::claim(&job.name, ClaimResult::Busy);
            info!(job = %job.name, occurrence = %name, node = %node, holder = %holder, fence, outcome = %Outcome::Skipped,
                "occurrence skipped: previous run still holds the lock (overlap = skip)");
            recording::record_gap_before(shared, job, reply.previous_ms, at).await;
            watch_lock(shared, job, fence, reply.lock_ttl_left);
        }
        Claim::Superseded { last_ms } => {
            let last = DateTime::from_timestamp_millis(last_ms)
                .map(rfc3339)
                .unwrap_or_default();
            warn!(job = %job.name, occurrence = %name, node = %node, newer = %last,
                "occurrence not run here: a newer occurrence was decided before this claim reached redis (run elsewhere, or missed)");
        }
        Claim::TooEarly { redis_ms } => {
            let ahead_ms = at.timestamp_millis() - redis_ms;
            error!(job = %job.name, occurrence = %name, node = %node, ahead_ms,
                "occurrence not claimed: it is still {} s in redis's future, more than the job's period; this node's clock is ahead of redis's (clock = \"local\" with a wrong clock: fix NTP, or use clock = \"redis\"); the nodes with the right time claim it",
                ahead_ms / 1000);
        }
        Claim::TooLate => {
            if !shared.health.missed() {
                error!(job = %job.name, occurrence = %name, node = %node,
                    "occurrence missed: redis received the claim after its deadline");
            }
            spawn_record_missed(
                shared,
                job,
                at,
                "the claim reached redis after its deadline",
                token,
            );
        }
    }
}

/// What a run needs from its daemon (or from `trigger`).
pub struct Runner<'a> {
    pub locker: &'a Locker,
    pub executor: &'a Executor,
    /// Stop the run (shutdown grace over, or Ctrl-C on `trigger`).
    pub interrupt: &'a CancellationToken,
    /// The daemon's shared state, to hold the outcome while Redis is away;
    /// `None` for `trigger`.
    pub(crate) shared: Option<&'a Shared>,
    /// The variables of `[daemon] env_file` the job gets in its environment
    /// (the daemon's as of its last load; `trigger`'s as it read the file).
    pub env_file: Arc<BTreeMap<String, String>>,
    /// What the output of its runs must not show.
    pub mask: Arc<OutputMask>,
}

impl<'a> Runner<'a> {
    /// A runner outside the daemon (`trigger`), whose jobs get `env_file`'s
    /// variables as the daemon's do: a release that Redis does not take is
    /// retried for a few seconds, then reported.
    pub fn standalone(
        locker: &'a Locker,
        executor: &'a Executor,
        interrupt: &'a CancellationToken,
        env_file: Arc<BTreeMap<String, String>>,
        mask: Arc<OutputMask>,
    ) -> Runner<'a> {
        Runner {
            locker,
            executor,
            interrupt,
            shared: None,
            env_file,
            mask,
        }
    }
}

/// Which attempt of what a run is.
#[derive(Debug, Clone, Copy)]
pub struct Attempt {
    /// 1, then 2… for retries (`SOLOCRON_ATTEMPT`).
    pub number: u32,
    /// The scheduled occurrence; `None` for a manual run, never retried.
    pub occurrence: Option<DateTime<Utc>>,
}

impl Attempt {
    /// A manual run (`trigger`).
    pub const MANUAL: Attempt = Attempt {
        number: 1,
        occurrence: None,
    };
}

/// Runs a won occurrence or manual run (`name`) of `job` under `lease` to its
/// end, keeping the lease alive until the last process of the run is gone,
/// then releases it and records the outcome. `claim_sent` is when the
/// winning claim was sent. Also answers when the next attempt may start,
/// if this one failed and the job, as the daemon's loaded config defines
/// it when the run ends, has a retry left (the release marked it pending).
pub async fn run_lease(
    runner: &Runner<'_>,
    job: &Arc<Job>,
    lease: &Lease,
    name: &str,
    claim_sent: Instant,
    attempt: Attempt,
) -> (Report, Option<DateTime<Utc>>) {
    let locker = runner.locker;
    let node = locker.node().to_string();
    let ctx = RunContext {
        job: Arc::clone(job),
        occurrence: name.to_string(),
        fence: lease.fence,
        node: node.clone(),
        env_file: Arc::clone(&runner.env_file),
        mask: Arc::clone(&runner.mask),
        lost_lease_grace: watchdog::safety_margin(lease.ttl) / 2,
        lease_lost: CancellationToken::new(),
        attempt: attempt.number,
        notice: None,
    };
    // The watchdog runs beside the run, not inside it: it goes on renewing
    // while a stopped job takes its grace to die, and only the end of the
    // run (its whole group gone) ends it.
    let lost = ctx.lease_lost.clone();
    // Counted while the lease is held: a reload that renames the job
    // keeps the new name's lock until then (`rename.rs`).
    let _running = runner
        .shared
        .map(|shared| shared.renames.run_started(&job.name));
    let stop = stop_when(&lost, runner.interrupt);
    let keep = keep_lease(runner, job, lease, name, claim_sent, &lost);
    let mut report = tokio::select! {
        report = runner.executor.execute(&ctx, stop) => report,
        never = keep => match never {},
    };
    if let Some(shared) = runner.shared {
        shared.to_fleet_clock(&mut report);
    }
    metrics::run_finished(
        &job.name,
        report.outcome.as_str(),
        report.duration,
        report.finished_at.timestamp_millis() as f64 / 1000.0,
    );
    let retry_at = attempt.occurrence.and_then(|at| {
        let now = runner.shared.map_or_else(Utc::now, Shared::now);
        // Retries follow the loaded file, which a reload may have changed
        // during the run: a removed job or one without retries has none.
        let current = match runner.shared {
            Some(shared) => shared.retry_job(&job.name)?,
            None => Arc::clone(job),
        };
        retry::next_attempt_at(&current, at, attempt.number, report.outcome, now)
    });
    log_finished(
        job,
        name,
        &node,
        lease.fence,
        attempt.number,
        retry_at,
        &report,
    );
    let mut entry = Entry::from_report(name, &node, lease.fence, &report);
    entry.output_tail = report.output_tail.clone();
    entry.attempt = Some(attempt.number);
    entry.retry_at = retry_at;
    // The notifier goes before the record: a record waits for Redis as long
    // as it is away, and an `on_failure` waited with it (a hook failing in
    // an outage was told nobody until Redis answered, never if the node
    // stopped meanwhile).
    if let (Some(shared), Some(_), None) = (runner.shared, attempt.occurrence, retry_at) {
        // The occurrence's last attempt: its final outcome.
        metrics::occurrence_decided(
            &job.name,
            report.outcome.as_str(),
            report.finished_at.timestamp_millis() as f64 / 1000.0,
        );
        let subject = Subject {
            occurrence: name,
            fence: lease.fence,
            attempt: attempt.number,
        };
        let ran = retry::Ran::new(attempt.number, lease.fence, &report);
        notifications::send(shared, job, subject, ran.notice);
    }
    recording::release(locker, runner.shared, lease, &entry).await;
    (report, retry_at)
}

/// Completes when the run must stop: `lost` (the lease is gone and
/// `on_lock_lost = "kill"`) or `interrupt`.
async fn stop_when(lost: &CancellationToken, interrupt: &CancellationToken) -> StopReason {
    tokio::select! {
        _ = lost.cancelled() => StopReason::LockLost,
        _ = interrupt.cancelled() => StopReason::Interrupted,
    }
}

/// Renews the lease until it is lost, then says so (and cancels `lost`
/// when the job must be stopped); never completes.
async fn keep_lease(
    runner: &Runner<'_>,
    job: &Job,
    lease: &Lease,
    name: &str,
    claim_sent: Instant,
    lost: &CancellationToken,
) -> std::convert::Infallible {
    let why = watchdog::keep(runner.locker, lease, claim_sent).await;
    metrics::lock_lost(&job.name);
    log_lost(job, name, runner.locker.node(), lease.fence, &why);
    if job.on_lock_lost == OnLockLost::Kill {
        lost.cancel();
    }
    pending().await
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

fn log_finished(
    job: &Job,
    name: &str,
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
        Outcome::Succeeded => info!(job = %job.name, occurrence = %name, node = %node, fence,
            outcome = %outcome, exit_code, http_status = http, duration_ms, attempt, "run finished"),
        _ => {
            warn!(job = %job.name, occurrence = %name, node = %node, fence, outcome = %outcome, exit_code,
            http_status = http, duration_ms, attempt, retry_at = retry_at.as_deref().map(tracing::field::display),
            error = report.error.as_deref().map(tracing::field::display),
            "run finished")
        }
    }
}
