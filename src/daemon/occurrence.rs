//! One occurrence on this node, from the timetable to its record: whether
//! this node decides it at all, the claim (retrying Redis errors with the
//! same token until its deadline), and a won claim's run, release and
//! record.
//!
//! - Drained node: it claims nothing and records no `paused`; the other
//!   nodes decide the occurrence. If every live node is drained, nobody
//!   claims it: past its claim deadline a drained node records it `missed`
//!   saying so ([`recording::record_if_fleet_drained`]); should that fail,
//!   the job's next decision after an `undrain` records it `missed` with
//!   the other occurrences nobody decided (the gap record of
//!   [`super::recording`]).
//! - Paused job: recorded `paused` instead of claimed ([`super::paused`]).
//! - Otherwise: the claim ([`claim_and_run`]), and for the winner the run
//!   under its lease ([`crate::run`]).
//!
//! Fail closed: a node that cannot reach Redis never runs the job; the
//! occurrence is given up at its deadline and recorded `missed` as soon as
//! Redis answers again. The deadline is the earlier of `starting_deadline`
//! and the job's next occurrence, so after an outage at most the newest
//! pending occurrence runs late and every older one is `missed`, never
//! `skipped` behind a late run of an old one (guarantee 3, docs/guarantees.md).

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;
use tracing::{debug, error, info, warn};

use super::notifiers::{self, Subject};
use super::preference::{self, Place};
use super::recording::{self, log_abandoned, spawn_record_missed, watch_lock};
use super::slots::Slot;
use super::sweep::Looked;
use super::{Shared, paused};
use super::{rename, retry};
use crate::config::Job;
use crate::control::overflow::{self, Overflowed};
use crate::exec::Report;
use crate::lock::{Claim, ClaimReply, Lease, Target, new_token};
use crate::metrics::{self, ClaimResult};
use crate::outcome::Outcome;
use crate::run;
use crate::schedule::Occurrence;
use crate::schedule::rfc3339;

/// The longest an occurrence waits at start for the first control snapshot.
const KNOWN_WAIT: Duration = Duration::from_secs(5);
/// What that wait leaves of the time to the occurrence's claim deadline.
const KNOWN_MARGIN: Duration = Duration::from_millis(250);
/// How long past its deadline (by this node's clock) an occurrence still
/// waits for the start-up check: Redis's clock decides the deadline, and a
/// claim it finds late is refused there.
const STARTED_GRACE: Duration = Duration::from_millis(200);
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

/// Decides the occurrence `at` of `job` on this node: nothing if drained,
/// `paused` if paused, else claims it; see the module doc.
pub async fn consider(shared: Arc<Shared>, job: Arc<Job>, at: DateTime<Utc>, catch_up: bool) {
    let deadline = claim_deadline(&job, at);
    // Nothing is claimed before the start-up check passed (a user missing
    // a command is stopped there). With Redis down at start the occurrence
    // waits here up to its deadline; past it, it is counted and logged as
    // missed, and recorded by the job's next decision (its gap), as an
    // occurrence nobody claimed: never run without the lock.
    let until_deadline = (deadline - shared.clock.now())
        .to_std()
        .unwrap_or(Duration::ZERO);
    if !shared.wait_started(until_deadline + STARTED_GRACE).await {
        if !shared.cancel.is_cancelled() && !catch_up && !shared.redis_health.missed() {
            error!(job = %job.name, occurrence = %rfc3339(at), node = %shared.locker.node(),
                "occurrence missed: redis did not answer this node's start-up check before its deadline (never run without the lock)");
        }
        return;
    }
    // Leave the claim time before its deadline (a claim is a round trip).
    let left = (deadline - shared.clock.now())
        .to_std()
        .unwrap_or(Duration::ZERO)
        .saturating_sub(KNOWN_MARGIN);
    shared.controls.wait_known(left.min(KNOWN_WAIT)).await;
    if shared.controls.draining() {
        debug!(job = %job.name, occurrence = %rfc3339(at), node = %shared.locker.node(),
            "occurrence not claimed here: this node is drained");
        recording::record_if_fleet_drained(&shared, &job, at, deadline).await;
        return;
    }
    let node = shared.locker.node();
    let run_on = job.extras.run_on.as_deref();
    let place = if catch_up {
        if !job.runs_on(&shared.tags) {
            return;
        }
        // A job with `run_on` is caught up by each node that may run it
        // (the backstop may not): the claim script takes one catch-up.
        if run_on.is_none() && !shared.preference.catches_up() {
            debug!(job = %job.name, occurrence = %rfc3339(at), node = %node,
                "no catch-up claim here: the backstop node catches up");
            return;
        }
        Place::Alone
    } else {
        let drifting = shared.is_drifting(&job.name);
        shared.preference.place(
            &job.name,
            at.timestamp_millis(),
            node,
            drifting,
            run_on.map(|run_on| (run_on, &shared.tags)),
        )
    };
    match &place {
        // Still one line per occurrence on every node (docs/operations.md,
        // "Logs"): who is in line for it, without asking Redis who won.
        Place::Beyond { first, second } => {
            info!(job = %job.name, occurrence = %rfc3339(at), node = %node, first = %first, second = %second,
                "occurrence left to the nodes in line");
            return;
        }
        Place::Ineligible { first, second } => {
            info!(job = %job.name, occurrence = %rfc3339(at), node = %node, first = %first, second = %second,
                run_on = %run_on.map(ToString::to_string).unwrap_or_default(),
                "occurrence left to the nodes that may run it (run_on)");
            return;
        }
        _ => {}
    }
    if let Some(why) = job.excluded_by(at) {
        paused::record_excluded(&shared, &job, at, &why).await;
        return;
    }
    match shared.controls.pause_for(&job.name, at.timestamp_millis()) {
        Some((mark, all)) => paused::record_paused(&shared, &job, at, &mark, all).await,
        None if place == Place::NoEligible => {
            info!(job = %job.name, occurrence = %rfc3339(at), node = %node,
                run_on = %run_on.map(ToString::to_string).unwrap_or_default(),
                "no alive node may run this occurrence (run_on): recorded missed at its deadline unless one comes");
            recording::record_if_no_eligible(shared, job, at, deadline).await;
        }
        None => claim_and_run(shared, job, at, catch_up, place, None).await,
    }
}

/// Claims occurrence `at` of `job` that a node at its `max_running`
/// declined and this node took from the overflow list, with `slot` taken.
pub async fn claim_offered(shared: Arc<Shared>, job: Arc<Job>, at: DateTime<Utc>, slot: Slot) {
    info!(job = %job.name, occurrence = %rfc3339(at), node = %shared.locker.node(),
        "claiming an occurrence a node at its max_running declined");
    claim_and_run(shared, job, at, false, Place::Alone, Some(slot)).await;
}

/// Claims and, if won, runs the occurrence of `job` at `at`, from `place`
/// in line: at once, or after a look whether a node before it took it;
/// with `slot` (of `[daemon] max_running`) already taken, or taking one.
pub async fn claim_and_run(
    shared: Arc<Shared>,
    job: Arc<Job>,
    at: DateTime<Utc>,
    catch_up: bool,
    place: Place,
    slot: Option<Slot>,
) {
    let occurrence = Occurrence::Scheduled(at);
    let node = shared.locker.node().to_string();
    let deadline_at = claim_deadline(&job, at);
    let target = Target::Scheduled {
        at,
        deadline_ms: deadline_at.timestamp_millis(),
    };
    // Redis refuses claims after the deadline (its clock); this node keeps
    // retrying a little longer (its clock), so a claim Redis still accepted
    // in time is answered to a node that is still waiting for it, never to
    // one that gave up (a lock nobody runs under).
    let give_up = Instant::now()
        + (deadline_at - shared.clock.now())
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
    if catch_up && !decided_before(&shared, &job, occurrence).await {
        return;
    }
    let look_after = match place {
        // With no order known every node fires at the same instant (by
        // Redis's clock); which one is ahead by a few hundred µs is a
        // fixed bias of its offset estimate. Up to a millisecond at
        // random makes the winner a fair draw instead.
        Place::Alone if !catch_up => {
            tokio::time::sleep(FAIR_SPREAD.mul_f64(rand::random::<f64>())).await;
            None
        }
        Place::Alone | Place::First => None,
        Place::Second => Some(preference::PEEK_DELAY),
        Place::Backstop => Some(preference::BACKSTOP_DELAY),
        Place::Beyond { .. } | Place::Ineligible { .. } | Place::NoEligible => return,
    };
    if let Some(delay) = look_after {
        let looked = if place == Place::Backstop {
            // Read with the other looks of the moment, in one round trip.
            match shared.sweep.look(&job.name, &target, delay).await {
                Looked::Decided(reply) => Peeked::Decided(reply),
                Looked::Undecided => Peeked::Undecided,
                Looked::Stopping => Peeked::Stopping,
            }
        } else {
            peek_after(&shared, &job, &target, occurrence, delay).await
        };
        match looked {
            Peeked::Decided(reply) => {
                shared.redis_health.decided_elsewhere();
                drop(_turn);
                let now = Instant::now();
                decided(&shared, &job, occurrence, &token, *reply, now, catch_up).await;
                return;
            }
            Peeked::Stopping => {
                info!(job = %job.name, occurrence = %occurrence, node = %node, "claim abandoned: shutting down");
                return;
            }
            Peeked::Undecided => {}
        }
    }
    // A slot of `[daemon] max_running`, held through the run and its
    // release: at the cap this node claims nothing, and offers the
    // occurrence to any node with room (`control::overflow`).
    let Some(_slot) = slot.or_else(|| shared.slots.take()) else {
        drop(_turn);
        info!(job = %job.name, occurrence = %occurrence, node = %node,
            running = shared.slots.taken(), max_running = shared.slots.cap().unwrap_or(0),
            "claim declined: this node is at its max_running; offered to the nodes with room");
        let offer = Overflowed {
            job: job.name.clone(),
            at_ms: at.timestamp_millis(),
            deadline_ms: deadline_at.timestamp_millis(),
            by: node.clone(),
        };
        let conn = shared.locker.connection();
        if let Err(err) = overflow::push(&conn, shared.locker.prefix(), &offer).await {
            debug!(job = %job.name, occurrence = %occurrence, node = %node, error = %err,
                "cannot offer the declined occurrence; the next node in line may still take it");
        }
        recording::record_if_throttled(shared, job, at, deadline_at).await;
        return;
    };
    loop {
        // Never closed, so always a permit; held until the reply is in.
        let permit = shared.claims_in_flight.acquire().await.ok();
        let sent = Instant::now();
        let claimed = if Instant::now() >= give_up {
            None
        } else {
            match rename::skipped_behind_old_name(&shared, &job, occurrence).await {
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
                    Claim::Won(_) | Claim::Busy { .. } => shared.redis_health.confirmed(),
                    Claim::Taken { .. } => shared.redis_health.decided_elsewhere(),
                    _ => shared.redis_health.answered(),
                }
                drop(_turn);
                decided(&shared, &job, occurrence, &token, reply, sent, catch_up).await;
                return;
            }
            None | Some(Err(_)) if Instant::now() >= give_up => {
                if let Some(Err(err)) = &claimed {
                    shared.redis_health.failed("claim", err, err.trouble());
                }
                if !shared.redis_health.missed() {
                    error!(job = %job.name, occurrence = %occurrence, node = %node,
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
                shared.redis_health.failed("claim", &err, err.trouble());
                debug!(job = %job.name, occurrence = %occurrence, node = %node, error = %err, retry_in = ?pause,
                    "claim failed, retrying until the deadline");
            }
        }
        tokio::select! {
            _ = shared.cancel.cancelled() => {
                info!(job = %job.name, occurrence = %occurrence, node = %node, "claim abandoned: shutting down");
                return;
            }
            _ = tokio::time::sleep(jittered(pause).min(give_up.saturating_duration_since(Instant::now()))) => {}
        }
        pause = (pause * 2).min(RETRY_MAX);
    }
}

/// What a node that is not first in line found ([`peek_after`]).
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
/// `delay` and reads whether a node before it decided it.
async fn peek_after(
    shared: &Shared,
    job: &Job,
    target: &Target,
    occurrence: Occurrence,
    delay: Duration,
) -> Peeked {
    tokio::select! {
        _ = shared.cancel.cancelled() => return Peeked::Stopping,
        _ = tokio::time::sleep(delay) => {}
    }
    let permit = shared.claims_in_flight.acquire().await.ok();
    let peeked = shared.locker.peek(&job.name, target).await;
    drop(permit);
    match peeked {
        Ok(Some(reply)) => Peeked::Decided(Box::new(reply)),
        Ok(None) => Peeked::Undecided,
        Err(err) => {
            debug!(job = %job.name, occurrence = %occurrence, node = %shared.locker.node(), error = %err,
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
async fn decided_before(shared: &Shared, job: &Job, occurrence: Occurrence) -> bool {
    let at = occurrence.at();
    if shared
        .gap_floor(&job.name)
        .is_some_and(|floor| at.timestamp_millis() <= floor)
    {
        info!(job = %job.name, occurrence = %occurrence, node = %shared.locker.node(),
            "no catch-up run: the reload added this job or changed its schedule after this occurrence; it first runs at its next occurrence");
        return false;
    }
    match shared.locker.ever_decided(&job.name).await {
        Ok(true) => true,
        Ok(false) => {
            info!(job = %job.name, occurrence = %occurrence, node = %shared.locker.node(),
                "no catch-up run: the job was never decided (a new or renamed job); it first runs at its next occurrence");
            false
        }
        Err(err) => {
            debug!(job = %job.name, occurrence = %occurrence, node = %shared.locker.node(), error = %err,
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

/// Acts on Redis's answer to the claim of `occurrence`: runs a won
/// occurrence, logs the decision, and records what else the answer says
/// is owed.
async fn decided(
    shared: &Arc<Shared>,
    job: &Arc<Job>,
    occurrence: Occurrence,
    token: &str,
    reply: ClaimReply,
    sent: Instant,
    catch_up: bool,
) {
    let (node, at) = (shared.locker.node(), occurrence.at());
    if let Some(abandoned) = &reply.abandoned {
        log_abandoned(shared, job, abandoned);
    }
    match reply.claim {
        Claim::Won(lease) => {
            metrics::claim(&job.name, ClaimResult::Won);
            info!(job = %job.name, occurrence = %occurrence, node = %node, fence = lease.fence,
                catch_up = catch_up.then_some(true), "claim won");
            let gap = recording::record_gap_before(shared, job, reply.previous_ms, at);
            // Room in its group is waited for until the claim's deadline.
            let until = shared.clock.instant_of(claim_deadline(job, at));
            let run = run_won(
                shared,
                job,
                &lease,
                occurrence,
                sent,
                1,
                How::scheduled(until),
            );
            let ((), (report, retry_at)) = tokio::join!(gap, run);
            if !report.outcome.ran_nothing() {
                let lag = (report.started_at - job.fires_at(at))
                    .to_std()
                    .unwrap_or(Duration::ZERO);
                metrics::fire_to_start(&job.name, lag);
            }
            // Without a retry to follow, `run_won` sent the notifier.
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
                info!(job = %job.name, occurrence = %occurrence, node = %node, decision = %decision, fence,
                    "occurrence already decided by this node {when}; not claimed again");
            } else if decision == "claimed" {
                info!(job = %job.name, occurrence = %occurrence, node = %node, winner = %by, fence, "claim lost");
            } else {
                info!(job = %job.name, occurrence = %occurrence, node = %node, decided_by = %by, decision = %decision,
                    "occurrence already decided by another node");
            }
            if decision == "claimed" {
                watch_lock(shared, job, fence, reply.lock_ttl_left);
                retry::watch(shared, job, at, None);
            }
        }
        Claim::Busy { holder, fence } => {
            metrics::claim(&job.name, ClaimResult::Busy);
            info!(job = %job.name, occurrence = %occurrence, node = %node, holder = %holder, fence, outcome = %Outcome::Skipped,
                "occurrence skipped: previous run still holds the lock (overlap = skip)");
            recording::record_gap_before(shared, job, reply.previous_ms, at).await;
            watch_lock(shared, job, fence, reply.lock_ttl_left);
        }
        Claim::Superseded { last_ms } => {
            let last = DateTime::from_timestamp_millis(last_ms)
                .map(rfc3339)
                .unwrap_or_default();
            warn!(job = %job.name, occurrence = %occurrence, node = %node, newer = %last,
                "occurrence not run here: a newer occurrence was decided before this claim reached redis (run elsewhere, or missed)");
        }
        Claim::TooEarly { redis_ms } => {
            let ahead_ms = at.timestamp_millis() - redis_ms;
            error!(job = %job.name, occurrence = %occurrence, node = %node, ahead_ms,
                "occurrence not claimed: it is still {} s in redis's future, more than the job's period; this node's clock is ahead of redis's (clock = \"local\" with a wrong clock: fix NTP, or use clock = \"redis\"); the nodes with the right time claim it",
                ahead_ms / 1000);
        }
        Claim::TooLate => {
            if !shared.redis_health.missed() {
                error!(job = %job.name, occurrence = %occurrence, node = %node,
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

/// How a won run goes: how long it may wait for room in its group
/// (`None`: it takes none, `--ignore-limits`) and who asked for it by hand.
pub(super) struct How {
    pub room_until: Option<Instant>,
    pub by: Option<String>,
    /// A make-up run of a past occurrence (`trigger --occurrence
    /// --fleet`): named as the occurrence, but no retry, no notifier and
    /// no occurrence count (the operator asked for it and watches it).
    pub make_up: bool,
}

impl How {
    /// A run of the schedule (or a retry), waiting for room until `until`.
    pub fn scheduled(until: Instant) -> How {
        How {
            room_until: Some(until),
            by: None,
            make_up: false,
        }
    }
}

/// Runs `occurrence` of `job`, won with `lease` (the claim sent at
/// `claim_sent`), to its end on this node as attempt `attempt`, then
/// releases the lease with the run's history entry, waiting for Redis as
/// long as it is away. Also answers when the next attempt may start, if
/// this one failed and the job, as the loaded config defines it when the
/// run ends, has a retry left (the release marked it pending).
pub(super) async fn run_won(
    shared: &Shared,
    job: &Arc<Job>,
    lease: &Lease,
    occurrence: Occurrence,
    claim_sent: Instant,
    attempt: u32,
    how: How,
) -> (Report, Option<DateTime<Utc>>) {
    let How {
        room_until,
        by,
        make_up,
    } = how;
    // What the schedule decided (a make-up run is the operator's).
    let scheduled = occurrence.scheduled().filter(|_| !make_up);
    let node = shared.locker.node();
    // Counted while the lease is held: a reload that renames the job
    // keeps the new name's lock until then (`rename.rs`).
    let _running = shared.renames.run_started(&job.name);
    let (abort, _registered) = shared.running.register(&job.name, lease.fence);
    let mut env = shared.run_env();
    env.abort = abort;
    let mut report = run::under_lease(
        &env, job, lease, occurrence, claim_sent, attempt, room_until,
    )
    .await;
    shared.clock.shift_report(&mut report);
    metrics::run_finished(
        &job.name,
        report.outcome,
        report.duration,
        report.finished_at.timestamp_millis() as f64 / 1000.0,
    );
    // Retries follow the loaded file, which a reload may have changed
    // during the run: a removed job or one without retries has none.
    let retry_at = scheduled.and_then(|at| {
        let current = shared.retry_job(&job.name)?;
        retry::next_attempt_at(&current, at, attempt, report.outcome, shared.clock.now())
    });
    run::log_finished(
        job,
        occurrence,
        node,
        lease.fence,
        attempt,
        retry_at,
        &report,
    );
    let mut entry = run::entry(occurrence, node, lease, attempt, retry_at, &report);
    entry.by = by;
    // The notifier goes before the record: a record waits for Redis as long
    // as it is away, and an `on_failure` waited with it (a hook failing in
    // an outage was told nobody until Redis answered, never if the node
    // stopped meanwhile).
    if scheduled.is_some() && retry_at.is_none() {
        // The occurrence's last attempt: its final outcome.
        metrics::occurrence_decided(
            &job.name,
            report.outcome,
            report.finished_at.timestamp_millis() as f64 / 1000.0,
        );
        if job.extras.on_failure.is_some() || job.extras.on_success.is_some() {
            let name = occurrence.to_string();
            let subject = Subject {
                occurrence: &name,
                fence: lease.fence,
                attempt,
            };
            notifiers::send(shared, job, subject, retry::notice_of(&report));
        }
    }
    recording::release(shared, lease, &entry).await;
    (report, retry_at)
}
