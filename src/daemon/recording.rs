//! What this node owes the history besides its claims: a finished run's
//! outcome, the occurrences it gave up on, the occurrences nobody decided,
//! and runs whose node died (guarantee 3, docs/guarantees.md: every occurrence
//! ends up in the history exactly once).
//!
//! Failure model: Redis may be away for a long time, and this node may stop
//! at any moment. A finished run's outcome is held in memory and retried
//! until Redis takes it ([`release`]); at most [`PENDING_MAX`] records wait
//! at once (beyond that an outcome is logged whole and dropped, and says
//! so), and at shutdown they get [`crate::run::STOP_WAIT`]. Every script here is
//! idempotent per run (token) or per gap, so a retry whose first attempt
//! did reach Redis writes nothing twice. A record lost with its node (kill
//! -9 while Redis is away) is the documented limit: the run's log line
//! stays, and a run that was still going is found `abandoned` by another
//! node.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;
use tracing::{debug, error, info, warn};

use super::Shared;
use super::notifiers::{self, Subject};
use crate::config::Job;
use crate::coordinator::errors;
use crate::history::Entry;
use crate::lock::{AbandonCheck, Abandoned, GapEntry, Lease, LockError, Missed};
use crate::outcome::Outcome;
use crate::schedule::rfc3339;

/// First and longest pause between retries while Redis fails.
const RETRY_FIRST: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_secs(1);
/// Records waiting for Redis at once, at most.
pub const PENDING_MAX: usize = 10_000;
/// How long a missed occurrence is kept for recording while Redis is away.
const RECORD_MISSED_FOR: Duration = Duration::from_secs(3600);
/// The longest the start-up check of abandoned runs waits for the first
/// fleet view (it then knows whether this node is the backstop).
const STARTUP_KNOWN_WAIT: Duration = Duration::from_secs(5);
/// Occurrences of one gap recorded one by one; the rest get one entry.
pub const GAP_LISTED: usize = 100;
/// How far a gap is counted for its summary entry.
const GAP_COUNTED: usize = 10_000;
/// Look for an abandoned run only when the next claim of the job (which
/// would find it) is further away than the lock's expiry plus this.
const WATCH_IF_NEXT_BEYOND: Duration = Duration::from_secs(5);
/// After the lock's TTL has run out, wait this long before looking.
const WATCH_SLACK: Duration = Duration::from_millis(500);

/// Counts the records waiting for Redis.
#[derive(Default)]
pub struct Pending(AtomicUsize);

impl Pending {
    /// How many records wait now.
    pub fn count(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }

    /// Takes a slot; `None` when [`PENDING_MAX`] records already wait.
    fn enter(&self) -> Option<PendingSlot<'_>> {
        let before = self.0.fetch_add(1, Ordering::Relaxed);
        if before >= PENDING_MAX {
            self.0.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        Some(PendingSlot(self))
    }
}

struct PendingSlot<'a>(&'a Pending);

impl Drop for PendingSlot<'_> {
    fn drop(&mut self) {
        self.0.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Releases `lease` and records `entry` ([`crate::run::release`]): the
/// outcome waits in memory until Redis takes it, or the daemon stops and
/// [`crate::run::STOP_WAIT`] has passed; at most [`PENDING_MAX`] wait.
pub async fn release(shared: &Shared, lease: &Lease, entry: &Entry) {
    let Some(_slot) = shared.pending.enter() else {
        error!(job = %lease.job, occurrence = %entry.occurrence, node = %entry.node, fence = lease.fence,
            outcome = %entry.outcome, pending = PENDING_MAX,
            "outcome not recorded: too many records already wait for redis (this line is the record)");
        return;
    };
    let failed = |err: &LockError| shared.redis_health.failed("release", err, err.trouble());
    if crate::run::release(&shared.locker, lease, entry, &shared.cancel, failed).await {
        shared.redis_health.confirmed();
    }
}

/// Records `at` of `job` as missed: once now, and if Redis does not take it,
/// in the background as [`spawn_record_missed`] does.
pub async fn record_missed(
    shared: &Arc<Shared>,
    job: &Arc<Job>,
    at: DateTime<Utc>,
    reason: &'static str,
    token: &str,
) {
    let name = rfc3339(at);
    match shared
        .locker
        .record_missed(&job.name, at, reason, token)
        .await
    {
        Ok(Missed {
            recorded,
            previous_ms,
        }) => {
            crate::metrics::missed(&job.name);
            shared.redis_health.answered();
            debug!(job = %job.name, occurrence = %name, recorded, "missed occurrence recorded");
            if recorded {
                notify_missed(shared, job, at, reason);
                record_gap_before(shared, job, previous_ms, at).await;
            }
        }
        Err(err) => {
            shared
                .redis_health
                .failed("record missed", &err, err.trouble());
            spawn_record_missed(shared, job, at, reason, token);
        }
    }
}

/// Records `at` of `job` as missed in the background, retrying while Redis
/// is unreachable (up to an hour, or until shutdown), then any older
/// occurrences nobody decided. `token` is the one this node's claims of
/// `at` used, empty if it sent none.
pub fn spawn_record_missed(
    shared: &Arc<Shared>,
    job: &Arc<Job>,
    at: DateTime<Utc>,
    reason: &'static str,
    token: &str,
) {
    crate::metrics::missed(&job.name);
    let shared = Arc::clone(shared);
    let job = Arc::clone(job);
    let token = token.to_string();
    shared.tracker.clone().spawn(async move {
        let name = rfc3339(at);
        let give_up = Instant::now() + RECORD_MISSED_FOR;
        let mut pause = RETRY_FIRST;
        loop {
            match shared
                .locker
                .record_missed(&job.name, at, reason, &token)
                .await
            {
                Ok(Missed {
                    recorded,
                    previous_ms,
                }) => {
                    shared.redis_health.answered();
                    debug!(job = %job.name, occurrence = %name, recorded, "missed occurrence recorded");
                    if recorded {
                        notify_missed(&shared, &job, at, reason);
                        record_gap_before(&shared, &job, previous_ms, at).await;
                    }
                    return;
                }
                Err(err) => {
                    shared.redis_health.failed("record missed", &err, err.trouble());
                    if Instant::now() + pause >= give_up {
                        return;
                    }
                }
            }
            tokio::select! {
                _ = shared.cancel.cancelled() => return,
                _ = tokio::time::sleep(pause) => {}
            }
            pause = (pause * 2).min(RETRY_MAX);
        }
    });
}

/// Why an occurrence of a gap was not run, for its history entry.
const NOBODY_CLAIMED: &str =
    "no node claimed it: redis was unreachable or every node was down or drained";

/// Why an occurrence was not run while every live node was drained.
const FLEET_DRAINED: &str = "no node claimed it: every live node is drained (`solocron undrain --node NODE` \
     lets a node claim again)";

/// How long after an occurrence's claim deadline a drained node looks
/// whether anyone decided it (a claim sent in time is answered by then).
const DRAINED_LOOK_AFTER: Duration = Duration::from_secs(1);

/// For a drained node, the occurrence `at` of `job` (claim deadline
/// `deadline`): once the deadline has passed, if this node is still
/// drained and so is every live node of the registry, nobody claims it,
/// so this node records it `missed` saying why (one line, by the node
/// whose record took; the history entry; `on_failure`), instead of
/// leaving it to the next claim's gap record, which cannot tell a drained
/// fleet from a Redis outage. The record refuses any later claim, and
/// any failure leaves the occurrence to that gap record.
pub async fn record_if_fleet_drained(
    shared: &Arc<Shared>,
    job: &Arc<Job>,
    at: DateTime<Utc>,
    deadline: DateTime<Utc>,
) {
    if !past_deadline(shared, deadline).await {
        return;
    }
    if !shared.controls.draining() {
        return;
    }
    let node = shared.locker.node();
    let name = rfc3339(at);
    // With a fleet view, one drained node records it (no read per node);
    // without one (Redlock), each reads the registry and the drains.
    let mine = shared
        .preference
        .records_fleet_drained(&job.name, at.timestamp_millis(), node);
    let drained = match mine {
        Some(mine) => Ok(mine),
        None => every_live_node_drained(shared).await,
    };
    match drained {
        Ok(true) => {}
        Ok(false) => return,
        Err(err) => {
            debug!(job = %job.name, occurrence = %name, node = %node, error = %err,
                "cannot read whether every live node is drained; the next decision records the occurrence");
            return;
        }
    }
    let recorded = shared
        .locker
        .record_missed(&job.name, at, FLEET_DRAINED, "")
        .await;
    match recorded {
        Ok(Missed {
            recorded: true,
            previous_ms,
        }) => {
            crate::metrics::missed(&job.name);
            warn!(job = %job.name, occurrence = %name, node = %node,
                "occurrence missed: every live node is drained, so none claimed it (`solocron undrain --node NODE` lets a node claim again)");
            notify_missed(shared, job, at, FLEET_DRAINED);
            record_gap_before(shared, job, previous_ms, at).await;
        }
        Ok(_) => {}
        Err(err) => {
            debug!(job = %job.name, occurrence = %name, node = %node, error = %err,
                "cannot record the occurrence of a drained fleet; the next decision records it");
        }
    }
}

/// Waits until [`DRAINED_LOOK_AFTER`] past `deadline` (by the fleet
/// clock); `false` if the daemon stops first.
async fn past_deadline(shared: &Shared, deadline: DateTime<Utc>) -> bool {
    let wait = (deadline - shared.clock.now())
        .to_std()
        .unwrap_or(Duration::ZERO)
        + DRAINED_LOOK_AFTER;
    tokio::select! {
        _ = shared.cancel.cancelled() => false,
        _ = tokio::time::sleep(wait) => true,
    }
}

/// Records occurrence `at` of `job` `missed` at its deadline if still no
/// alive, undrained node may run it (`run_on`, guarantee 13) and this node
/// is still the backstop ([`super::preference::Place::NoEligible`]): one
/// record, by one node, with the reason, notified like any miss.
pub async fn record_if_no_eligible(
    shared: Arc<Shared>,
    job: Arc<Job>,
    at: DateTime<Utc>,
    deadline: DateTime<Utc>,
) {
    if !past_deadline(&shared, deadline).await {
        return;
    }
    let Some(run_on) = job.extras.run_on.as_deref() else {
        return;
    };
    let node = shared.locker.node();
    let still = shared.preference.place(
        &job.name,
        at.timestamp_millis(),
        node,
        false,
        Some((run_on, &shared.tags)),
    );
    if still != super::preference::Place::NoEligible {
        return;
    }
    let name = rfc3339(at);
    let reason = format!(
        "no node claimed it: no alive, undrained node has the tags of run_on = [{run_on}] (start one with `--tags`, or `solocron undrain` one)"
    );
    match shared
        .locker
        .record_missed(&job.name, at, &reason, "")
        .await
    {
        Ok(Missed {
            recorded: true,
            previous_ms,
        }) => {
            crate::metrics::missed(&job.name);
            crate::metrics::no_eligible_node(&job.name);
            warn!(job = %job.name, occurrence = %name, node = %node, run_on = %run_on,
                "occurrence missed: no alive node may run it (run_on); start a node with these tags");
            notify_missed(&shared, &job, at, &reason);
            record_gap_before(&shared, &job, previous_ms, at).await;
        }
        Ok(_) => {}
        Err(err) => {
            debug!(job = %job.name, occurrence = %name, node = %node, error = %err,
                "cannot record the occurrence no eligible node claimed; the next decision records it");
        }
    }
}

/// Whether the registry lists a live node and every one is drained now,
/// read from every member (Redlock: the union of live nodes, the newest
/// mark of each).
async fn every_live_node_drained(shared: &Shared) -> redis::RedisResult<bool> {
    let coordinator = shared.locker.coordinator();
    let prefix = shared.locker.prefix();
    let lives = coordinator
        .on_members(|conn| async move { crate::registry::live_nodes(&conn, prefix).await })
        .await?;
    let key = crate::keys::drains_key(prefix);
    let key = key.as_str();
    let drains = crate::control::merge(
        coordinator
            .on_members(|conn| async move { crate::control::read_marks(&conn, key).await })
            .await?,
    );
    let mut lives = lives.into_iter().flatten().peekable();
    Ok(lives.peek().is_some()
        && lives.all(|live| drains.get(&live.node).is_some_and(|mark| mark.active)))
}

/// The occurrences of one outcome beyond the listed ones of a gap.
struct Unlisted {
    outcome: Outcome,
    first: DateTime<Utc>,
    last: DateTime<Utc>,
    count: usize,
    /// The reason of the first of them.
    error: String,
}

/// The occurrences of `job` after `previous_ms` and before `at`, as history
/// entries: `paused` where `paused_by` names the pause in effect that
/// covers it (the error text), else `missed`; the first [`GAP_LISTED`] one
/// by one, the rest summed up in one entry per outcome. Empty when there is
/// no gap (one schedule step, the usual case).
pub fn gap_entries(
    job: &Job,
    previous_ms: i64,
    at: DateTime<Utc>,
    paused_by: impl Fn(i64) -> Option<String>,
) -> Vec<GapEntry> {
    let Some(previous) = DateTime::from_timestamp_millis(previous_ms) else {
        return Vec::new();
    };
    let mut entries = Vec::new();
    let mut unlisted: Vec<Unlisted> = Vec::new();
    let mut counted = 0usize;
    let mut cursor = job.schedule.next_after(previous);
    while let Some(occurrence) = cursor.filter(|occurrence| *occurrence < at) {
        let (outcome, error) = match paused_by(occurrence.timestamp_millis()) {
            Some(why) => (Outcome::Paused, why),
            None => (Outcome::Missed, NOBODY_CLAIMED.to_string()),
        };
        if entries.len() < GAP_LISTED {
            entries.push(GapEntry {
                occurrence: rfc3339(occurrence),
                outcome,
                error,
            });
        } else {
            match unlisted.iter_mut().find(|kind| kind.outcome == outcome) {
                Some(kind) => {
                    kind.last = occurrence;
                    kind.count += 1;
                }
                None => unlisted.push(Unlisted {
                    outcome,
                    first: occurrence,
                    last: occurrence,
                    count: 1,
                    error,
                }),
            }
            counted += 1;
            if counted >= GAP_COUNTED {
                break;
            }
        }
        cursor = job.schedule.next_after(occurrence);
    }
    for Unlisted {
        outcome,
        first,
        last,
        count,
        error,
    } in unlisted
    {
        let more = if counted >= GAP_COUNTED {
            format!("at least {count}")
        } else {
            count.to_string()
        };
        entries.push(GapEntry {
            occurrence: rfc3339(first),
            outcome,
            error: format!(
                "{more} occurrences from {} to {} were {outcome} too ({error}); \
                 not listed one by one: at most {GAP_LISTED} per gap",
                rfc3339(first),
                rfc3339(last)
            ),
        });
    }
    entries
}

/// Records the occurrences of `job` nobody decided between `previous_ms`
/// (decided before `at`) and `at`, retrying while Redis is away: `paused`
/// those that a pause still in effect covers (it began at or before them:
/// the fleet was stopped or drained while the job was paused), `missed`
/// the others, which are notified ([`notifications`]).
pub async fn record_gap_before(
    shared: &Shared,
    job: &Arc<Job>,
    previous_ms: Option<i64>,
    at: DateTime<Utc>,
) {
    let Some(previous_ms) = previous_ms else {
        return;
    };
    // Not before a reload that added the job or changed its schedule here:
    // those occurrences were not due under the config then in force.
    let from_ms = match shared.gap_floor(&job.name) {
        Some(floor) if floor > previous_ms => floor,
        _ => previous_ms,
    };
    let entries = gap_entries(job, from_ms, at, |occurrence_ms| {
        shared
            .controls
            .pause_for(&job.name, occurrence_ms)
            .filter(|(mark, _)| mark.since_ms <= occurrence_ms)
            .map(|(mark, all)| super::paused::why(&mark, all))
    });
    if entries.is_empty() {
        return;
    }
    let gap_id = format!("gap:{previous_ms}-{}", at.timestamp_millis());
    let give_up = Instant::now() + RECORD_MISSED_FOR;
    let mut pause = RETRY_FIRST;
    loop {
        match shared.locker.record_gap(&job.name, &gap_id, &entries).await {
            Ok(recorded) => {
                shared.redis_health.answered();
                if recorded {
                    let missed: Vec<&GapEntry> = entries
                        .iter()
                        .filter(|entry| entry.outcome == Outcome::Missed)
                        .collect();
                    if let Some(first) = missed.first() {
                        crate::metrics::missed_by(&job.name, missed.len() as u64);
                        crate::metrics::occurrences_decided(
                            &job.name,
                            Outcome::Missed,
                            missed.len() as u64,
                            unix_secs(shared.clock.now()),
                        );
                        warn!(job = %job.name, node = %shared.locker.node(), count = missed.len(),
                            from = %first.occurrence, until = %rfc3339(at),
                            "occurrences nobody claimed (redis away or every node down) recorded as missed");
                    }
                    let paused = entries.len() - missed.len();
                    if paused > 0 {
                        info!(job = %job.name, node = %shared.locker.node(), count = paused, until = %rfc3339(at),
                            "occurrences nobody decided while the job was paused recorded as paused");
                    }
                    let notices = missed
                        .into_iter()
                        .map(|entry| {
                            (
                                entry.occurrence.clone(),
                                notifiers::decided(Outcome::Missed, entry.error.clone()),
                            )
                        })
                        .collect();
                    notifiers::send_each(shared, job, notices);
                }
                return;
            }
            Err(err) => {
                shared
                    .redis_health
                    .failed("record missed", &err, err.trouble());
                if Instant::now() + pause >= give_up || shared.cancel.is_cancelled() {
                    return;
                }
            }
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(RETRY_MAX);
    }
}

/// The jobs this node watches for an abandoned run, with the fence watched.
#[derive(Default)]
pub struct Watches(Mutex<HashMap<String, u64>>);

impl Watches {
    /// Starts watching `fence` of `job`; `false` if it is watched already.
    fn start(&self, job: &str, fence: u64) -> bool {
        let mut watches = match self.0.lock() {
            Ok(watches) => watches,
            Err(poisoned) => poisoned.into_inner(),
        };
        watches.insert(job.to_string(), fence) != Some(fence)
    }

    fn stop(&self, job: &str, fence: u64) {
        let mut watches = match self.0.lock() {
            Ok(watches) => watches,
            Err(poisoned) => poisoned.into_inner(),
        };
        if watches.get(job) == Some(&fence) {
            watches.remove(job);
        }
    }
}

/// Another node holds `job`'s lock (`fence`, `ttl_left` to run): if the
/// job's next claim is too far away to notice an abandoned run in time,
/// look at the lock once its TTL has run out, and again while it is held,
/// so that a run whose node died is recorded `abandoned` within `lock_ttl`
/// plus a few seconds (guarantee 3, docs/guarantees.md). One watch per job and
/// fence per node.
pub fn watch_lock(shared: &Arc<Shared>, job: &Arc<Job>, fence: u64, ttl_left: Option<Duration>) {
    let Some(ttl_left) = ttl_left else {
        return;
    };
    let now = shared.clock.now();
    let next_claim = job
        .next_to_fire(now)
        .and_then(|next| (job.fires_at(next) - now).to_std().ok())
        .unwrap_or(Duration::MAX);
    if next_claim <= ttl_left + WATCH_IF_NEXT_BEYOND || !shared.watches.start(&job.name, fence) {
        return;
    }
    let shared = Arc::clone(shared);
    let job = Arc::clone(job);
    shared.tracker.clone().spawn(async move {
        let mut wait = ttl_left + WATCH_SLACK;
        loop {
            tokio::select! {
                _ = shared.cancel.cancelled() => break,
                _ = tokio::time::sleep(wait) => {}
            }
            match shared.locker.check_abandoned(&job.name).await {
                // This node's own run: its watchdog knows better.
                Ok(AbandonCheck::Held { holder, .. }) if holder == shared.locker.node() => {
                    shared.redis_health.answered();
                    break;
                }
                Ok(AbandonCheck::Held { ttl_left, .. }) => {
                    shared.redis_health.answered();
                    wait = ttl_left + WATCH_SLACK;
                }
                Ok(AbandonCheck::Abandoned(abandoned)) => {
                    shared.redis_health.answered();
                    log_abandoned(&shared, &job, &abandoned);
                    break;
                }
                Ok(AbandonCheck::Idle) => {
                    shared.redis_health.answered();
                    break;
                }
                Err(err) => {
                    shared
                        .redis_health
                        .failed("abandon check", &err, err.trouble());
                    wait = job.lock_ttl.max(Duration::from_secs(1));
                }
            }
        }
        shared.watches.stop(&job.name, fence);
    });
}

/// At start (once the start-up check passed) on the backstop, and when a
/// node takes the backstop over: every job whose last run's lock expired
/// unreleased while no node looked (the whole fleet was down) is recorded
/// `abandoned` now, and a lock held by another node is watched. Only the
/// backstop does it (or every node without a fleet view, as with Redlock):
/// a start costs the other nodes no read per job.
pub fn spawn_startup_check(shared: &Arc<Shared>, jobs: &[Arc<Job>]) {
    let shared = Arc::clone(shared);
    let jobs: Vec<Arc<Job>> = jobs.to_vec();
    shared.tracker.clone().spawn(async move {
        // After the start-up check: a refused password is its one error,
        // not also this check's.
        if !shared.until_started().await {
            return;
        }
        shared.controls.wait_known(STARTUP_KNOWN_WAIT).await;
        if !shared.preference.catches_up() {
            return;
        }
        for job in &jobs {
            if shared.cancel.is_cancelled() {
                return;
            }
            match shared.locker.check_abandoned(&job.name).await {
                Ok(AbandonCheck::Abandoned(abandoned)) => {
                    shared.redis_health.answered();
                    log_abandoned(&shared, job, &abandoned);
                }
                Ok(AbandonCheck::Held { ttl_left, holder }) => {
                    shared.redis_health.answered();
                    // Held by a run this node knows nothing of: fence 0.
                    if holder != shared.locker.node() {
                        watch_lock(&shared, job, 0, Some(ttl_left));
                    }
                }
                Ok(AbandonCheck::Idle) => shared.redis_health.answered(),
                // Redis is away: the claims will find such runs later.
                Err(err) => {
                    shared
                        .redis_health
                        .failed("abandon check", &err, err.trouble());
                    return;
                }
            }
        }
    });
}

/// The decision line for a run found abandoned.
pub fn log_abandoned(shared: &Shared, job: &Arc<Job>, abandoned: &Abandoned) {
    crate::metrics::abandoned(&job.name);
    crate::metrics::occurrence_decided(
        &job.name,
        Outcome::Abandoned,
        unix_secs(shared.clock.now()),
    );
    // Shown only where retries exist, as on `run finished`.
    let attempt = (job.retries > 0).then_some(abandoned.attempt);
    warn!(job = %job.name, occurrence = %abandoned.occurrence, node = %shared.locker.node(),
        runner = %abandoned.node, fence = abandoned.fence, attempt, outcome = %Outcome::Abandoned,
        "run abandoned: its lock expired without a release (the runner died or lost redis); recorded");
    let subject = Subject {
        occurrence: &abandoned.occurrence,
        fence: abandoned.fence,
        attempt: abandoned.attempt,
    };
    let error = format!(
        "the lock expired without a release: node {} stopped renewing it (it died, or lost redis)",
        abandoned.node
    );
    notifiers::send(
        shared,
        job,
        subject,
        notifiers::decided(Outcome::Abandoned, error),
    );
}

/// Counts `at` of `job`, which this node just recorded `missed`, as its
/// final outcome, and sends `on_failure`.
fn notify_missed(shared: &Shared, job: &Arc<Job>, at: DateTime<Utc>, reason: &str) {
    notify_unclaimed(shared, job, at, Outcome::Missed, reason);
}

/// Counts and notifies occurrence `at` of `job`, recorded `outcome`
/// (`missed`, `throttled`) with `reason` by this node.
fn notify_unclaimed(
    shared: &Shared,
    job: &Arc<Job>,
    at: DateTime<Utc>,
    outcome: Outcome,
    reason: &str,
) {
    crate::metrics::occurrence_decided(&job.name, outcome, unix_secs(shared.clock.now()));
    let name = rfc3339(at);
    let subject = Subject {
        occurrence: &name,
        fence: 0,
        attempt: 1,
    };
    notifiers::send(
        shared,
        job,
        subject,
        notifiers::decided(outcome, reason.to_string()),
    );
}

/// Records occurrence `at` of `job` `throttled` at its deadline if nobody
/// decided it by then: this node declined it at its `max_running`
/// ([`super::slots`]) and offered it, and no node with room took it. Each
/// node that declined tries; the script records it once.
pub async fn record_if_throttled(
    shared: Arc<Shared>,
    job: Arc<Job>,
    at: DateTime<Utc>,
    deadline: DateTime<Utc>,
) {
    if !past_deadline(&shared, deadline).await {
        return;
    }
    let node = shared.locker.node();
    let name = rfc3339(at);
    let reason = format!(
        "no node took it before its starting_deadline: the nodes in line for it were at their \
         [daemon] max_running ({node} at {})",
        shared.slots.cap().unwrap_or(0)
    );
    match shared.locker.record_throttled(&job.name, at, &reason).await {
        Ok(Missed {
            recorded: true,
            previous_ms,
        }) => {
            warn!(job = %job.name, occurrence = %name, node = %node,
                "occurrence throttled: every node in line was at its max_running until the deadline");
            notify_unclaimed(&shared, &job, at, Outcome::Throttled, &reason);
            record_gap_before(&shared, &job, previous_ms, at).await;
        }
        Ok(_) => {}
        Err(err) => {
            debug!(job = %job.name, occurrence = %name, node = %node, error = %err,
                "cannot record the throttled occurrence; the next decision records it missed");
        }
    }
}

/// `at` as Unix seconds, for the metrics' timestamps.
pub fn unix_secs(at: DateTime<Utc>) -> f64 {
    at.timestamp_millis() as f64 / 1000.0
}

impl LockError {
    /// What kind of trouble this is, for the outage lines.
    pub fn trouble(&self) -> super::redis_health::Trouble {
        use super::redis_health::Trouble;
        match self {
            _ if self.is_refusal() => Trouble::Refused,
            LockError::Redis { cause, .. } if errors::is_rejection(cause) => Trouble::Rejected,
            // Most masters did not answer at all: an outage, not a vote.
            LockError::NoQuorum {
                answered, needed, ..
            } if answered < needed => Trouble::Unreachable,
            LockError::Unacknowledged { .. }
            | LockError::NoQuorum { .. }
            | LockError::ReplicaLost { .. } => Trouble::Unconfirmed,
            _ => Trouble::Unreachable,
        }
    }

    /// Whether Redis refused us (credentials, ACL) rather than being away.
    pub fn is_refusal(&self) -> bool {
        match self {
            LockError::Redis { cause, .. } => errors::is_refusal(cause),
            LockError::NoQuorum { first_error, .. } => errors::is_refusal_text(first_error),
            LockError::Reply { .. }
            | LockError::Unacknowledged { .. }
            | LockError::ReplicaLost { .. }
            | LockError::Timeout { .. } => false,
        }
    }
}
