//! The schedule of every loaded job in one timer: a heap of next
//! occurrences, woken by the daemon's main loop at the earliest one. Each due
//! occurrence is handed to [`super::occurrence`] (a drained node decides nothing,
//! a paused job's occurrence is recorded `paused`) and from there to
//! [`super::occurrence`], in its own task, so an overlapping occurrence is
//! still claimed (and recorded as skipped) while a run goes on, and 10,000
//! idle jobs cost one sleeping timer, not 10,000.
//!
//! "Now" is [`super::fleet_clock::FleetClock::now`]: Redis's clock with `clock = "redis"` (this
//! node's clock corrected by its measured offset), so every node fires at
//! the same instant, or this node's own with `clock = "local"`.
//! Until Redis first answers "now" is the wall clock; if the first
//! measurement finds it off by more than `clock::REBASE_ABOVE_MS`, the
//! start's schedule is computed again by Redis's instant
//! ([`Timetable::rebase`]), so a node booted with its clock a day ahead
//! does not wait for tomorrow's occurrences.
//! The timer sleeps on the monotonic clock but re-reads the wall clock at
//! least every minute, so a stepped clock (NTP) moves the wake-up with it and
//! no occurrence is lost to a long sleep computed from a stale "now".
//! A job that starts being scheduled (node start, or added or changed by a
//! reload) first claims the latest occurrence within its `starting_deadline`
//! (catch-up): the claim script refuses it if any node already had it.
//! Both count from when an occurrence fires (its instant plus the job's
//! splay offset): the catch-up takes the latest one fired by now, and the
//! schedule goes on from the first one that has not, even if its instant
//! has passed (a splay longer than the period), so no occurrence falls
//! between the two.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;
use tracing::{info, warn};

use super::{Shared, occurrence, recording};
use crate::config::Job;
use crate::schedule::rfc3339;

/// Longest single sleep before the wall clock is read again.
const MAX_SLEEP: Duration = Duration::from_secs(60);
/// How much earlier than an occurrence the tokio timer wakes the timetable,
/// which then sleeps the rest on the precise OS timer: tokio's timer (and
/// the epoll timeout under it) has 1 ms granularity and wakes up to ~1 ms
/// late, which would be most of a short job's start lag.
const EARLY_WAKE: Duration = Duration::from_micros(1500);

/// What [`Timetable::apply`] changed, by job name.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Diff {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub changed: Vec<String>,
    pub unchanged: usize,
}

/// The scheduled jobs and their next occurrences.
///
/// Kept small for fleets of 10,000 jobs: one map entry per job keyed by the
/// job itself (its name is not copied), the definition's fingerprint as a
/// number, and one heap entry per job that holds the job and its next
/// occurrence, so that firing needs no second map.
#[derive(Default)]
pub struct Timetable {
    /// Job name -> its current slot and definition fingerprint.
    by_name: HashMap<ByName, Scheduled>,
    /// Next occurrences, earliest first; an entry whose slot is no longer
    /// its job's (removed or changed) is skipped when it comes up.
    heap: BinaryHeap<Reverse<Due>>,
    next_slot: u64,
    /// The "now" the first [`Timetable::apply`] (the start) scheduled by,
    /// until a [`Timetable::rebase`] takes it.
    started_at: Option<DateTime<Utc>>,
}

/// A scheduled job definition: which slot its heap entry carries, and
/// what its definition was ([`fingerprint_key`]).
struct Scheduled {
    slot: u64,
    fingerprint: u64,
}

/// A map key that is a job, looked up by its name.
struct ByName(Arc<Job>);

impl std::borrow::Borrow<str> for ByName {
    fn borrow(&self) -> &str {
        &self.0.name
    }
}

impl std::hash::Hash for ByName {
    // As `str` hashes: `Borrow<str>` requires it.
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.name.as_str().hash(state);
    }
}

impl PartialEq for ByName {
    fn eq(&self, other: &ByName) -> bool {
        self.0.name == other.0.name
    }
}

impl Eq for ByName {}

/// One job's next occurrence in the heap, ordered by when it fires (then
/// by slot, so the order is total).
struct Due {
    /// `job.fires_at(next)` in UTC ms.
    fires_ms: i64,
    slot: u64,
    next: DateTime<Utc>,
    job: Arc<Job>,
}

impl Due {
    fn key(&self) -> (i64, u64) {
        (self.fires_ms, self.slot)
    }
}

impl Ord for Due {
    fn cmp(&self, other: &Due) -> std::cmp::Ordering {
        self.key().cmp(&other.key())
    }
}

impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Due) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Due {
    fn eq(&self, other: &Due) -> bool {
        self.key() == other.key()
    }
}

impl Eq for Due {}

/// A job definition's fingerprint (12 hex digits) as a number: equal
/// definitions give equal numbers, and a map entry holds no string.
fn fingerprint_key(job: &Job) -> u64 {
    use std::hash::{Hash as _, Hasher as _};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    job.fingerprint().hash(&mut hasher);
    hasher.finish()
}

// `ByName` hashes and compares the job's name only, which never changes;
// the job's remembered fingerprint (a `OnceLock`) is not part of the key.
#[allow(clippy::mutable_key_type)]
impl Timetable {
    /// Makes the schedule match `jobs`: added and changed jobs start (with
    /// catch-up), removed ones stop being scheduled (a run in progress
    /// finishes), unchanged ones keep their next occurrence. The per-job
    /// gauges follow ([`super::job_gauges`]).
    pub fn apply(&mut self, shared: &Arc<Shared>, jobs: &[Arc<Job>]) -> Diff {
        let mut diff = Diff::default();
        let wanted: HashSet<&str> = jobs.iter().map(|job| job.name.as_str()).collect();
        let mut gone: Vec<String> = self
            .by_name
            .keys()
            .filter(|job| !wanted.contains(job.0.name.as_str()))
            .map(|job| job.0.name.clone())
            .collect();
        gone.sort();
        for name in gone {
            self.by_name.remove(name.as_str());
            shared.job_gauges.removed(&name);
            diff.removed.push(name);
        }
        let now = shared.clock.now();
        if self.by_name.is_empty() && self.started_at.is_none() {
            self.started_at = Some(now);
        }
        for job in jobs {
            let fingerprint = fingerprint_key(job);
            match self.by_name.remove(job.name.as_str()) {
                Some(old) if old.fingerprint == fingerprint => {
                    // The old definition is the same: keep its slot (its
                    // heap entry) under the new key.
                    let key = ByName(Arc::clone(job));
                    self.by_name.insert(key, old);
                    diff.unchanged += 1;
                    continue;
                }
                Some(_) => diff.changed.push(job.name.clone()),
                None => diff.added.push(job.name.clone()),
            }
            if let Some(latest) = catch_up(job, now) {
                spawn_occurrence(shared, job, latest, true);
            }
            let slot = self.next_slot;
            self.next_slot += 1;
            let scheduled = Scheduled { slot, fingerprint };
            self.by_name.insert(ByName(Arc::clone(job)), scheduled);
            self.schedule(slot, Arc::clone(job), job.next_to_fire(now));
            shared.job_gauges.scheduled(job);
        }
        super::job_gauges::read_last_successes(shared, diff.added.clone());
        if self.heap.len() > 2 * self.by_name.len() + 64 {
            let by_name = &self.by_name;
            self.heap.retain(|Reverse(due)| is_current(by_name, due));
        }
        self.by_name.shrink_to_fit();
        self.heap.shrink_to_fit();
        diff
    }

    /// Computes every job's next occurrence again by [`super::fleet_clock::FleetClock::now`], once,
    /// after the start: the start scheduled by this node's wall clock
    /// because Redis had not answered yet, and the first measurement found
    /// that clock off (`clock = "redis"`, see `clock::REBASE_ABOVE_MS`).
    /// A job's catch-up is claimed again if the right clock gives another
    /// occurrence than the start's (the start's own was in the future, or
    /// long past, and refused). Returns how many jobs were scheduled again
    /// (0 after the first call).
    pub fn rebase(&mut self, shared: &Arc<Shared>) -> usize {
        let Some(started_at) = self.started_at.take() else {
            return 0;
        };
        let now = shared.clock.now();
        let jobs: Vec<Arc<Job>> = self.by_name.keys().map(|job| Arc::clone(&job.0)).collect();
        for job in &jobs {
            let slot = self.next_slot;
            self.next_slot += 1;
            if let Some(scheduled) = self.by_name.get_mut(job.name.as_str()) {
                scheduled.slot = slot;
            }
            if let Some(latest) = catch_up(job, now)
                && catch_up(job, started_at) != Some(latest)
            {
                spawn_occurrence(shared, job, latest, true);
            }
            self.schedule(slot, Arc::clone(job), job.next_to_fire(now));
        }
        let by_name = &self.by_name;
        self.heap.retain(|Reverse(due)| is_current(by_name, due));
        jobs.len()
    }

    /// When the earliest occurrence is due by the wall clock, but at most
    /// [`MAX_SLEEP`] from now (then [`Timetable::fire_due`] finds nothing
    /// due and the wall clock is read again).
    pub fn next_wake(&mut self, shared: &Shared) -> Instant {
        while let Some(Reverse(due)) = self.heap.peek() {
            if is_current(&self.by_name, due) {
                break;
            }
            self.heap.pop();
        }
        let left = self
            .heap
            .peek()
            .map(|Reverse(due)| {
                (due.job.fires_at(due.next) - shared.clock.now())
                    .to_std()
                    .unwrap_or(Duration::ZERO)
            })
            .unwrap_or(MAX_SLEEP);
        Instant::now() + left.saturating_sub(EARLY_WAKE).min(MAX_SLEEP)
    }

    /// Starts an attempt for every occurrence due by now and schedules each
    /// job's next one.
    pub fn fire_due(&mut self, shared: &Arc<Shared>) {
        self.sleep_to_the_earliest(shared);
        let now = shared.clock.now();
        while let Some(Reverse(due)) = self.heap.peek() {
            if due.fires_ms > now.timestamp_millis() {
                break;
            }
            let Some(Reverse(due)) = self.heap.pop() else {
                break;
            };
            if !is_current(&self.by_name, &due) {
                continue;
            }
            let Due {
                slot, next, job, ..
            } = due;
            if job.fires_at(next) > now {
                // Sub-millisecond early: keep it for the next wake-up.
                self.schedule(slot, job, Some(next));
                break;
            }
            let due = handle_due(shared, &job, next, now);
            let after = job.schedule.next_after(due);
            self.schedule(slot, job, after);
        }
    }

    /// Woken up to [`EARLY_WAKE`] before the earliest occurrence: sleep the
    /// rest on this thread (the daemon's main loop, not a runtime worker),
    /// with the OS timer's ~50 µs precision.
    fn sleep_to_the_earliest(&self, shared: &Shared) {
        let Some(Reverse(due)) = self.heap.peek() else {
            return;
        };
        if !is_current(&self.by_name, due) {
            return;
        }
        if let Ok(left) = (due.job.fires_at(due.next) - shared.clock.now()).to_std()
            && left <= EARLY_WAKE
        {
            std::thread::sleep(left);
        }
    }

    fn schedule(&mut self, slot: u64, job: Arc<Job>, next: Option<DateTime<Utc>>) {
        match next {
            Some(next) => {
                let fires_ms = job.fires_at(next).timestamp_millis();
                self.heap.push(Reverse(Due {
                    fires_ms,
                    slot,
                    next,
                    job,
                }));
            }
            None => info!(job = %job.name, "schedule has no further occurrences"),
        }
    }
}

/// Whether `due` is its job's current heap entry (not one left behind by
/// a removed or changed definition).
#[allow(clippy::mutable_key_type)] // see `impl Timetable`
fn is_current(by_name: &HashMap<ByName, Scheduled>, due: &Due) -> bool {
    by_name
        .get(due.job.name.as_str())
        .is_some_and(|scheduled| scheduled.slot == due.slot)
}

/// `job`'s occurrence `at` has come (`now`): attempt the latest one due,
/// warn about any passed over, or record it missed if this node woke after
/// its `starting_deadline`. Returns the occurrence that was handled.
fn handle_due(
    shared: &Arc<Shared>,
    job: &Arc<Job>,
    at: DateTime<Utc>,
    now: DateTime<Utc>,
) -> DateTime<Utc> {
    let (due, passed) = latest_due(job, at, now);
    if passed > 0 {
        warn!(job = %job.name, node = %shared.locker.node(), count = passed, until = %rfc3339(due),
            "occurrences missed: this node woke too late to claim them");
    }
    if now > occurrence::claim_deadline(job, due) {
        if shared.controls.draining() {
            // A drained node decides nothing, not even a miss (`occurrence.rs`).
            return due;
        }
        warn!(job = %job.name, occurrence = %rfc3339(due), node = %shared.locker.node(),
            "occurrence missed: past its claim deadline when this node woke");
        recording::spawn_record_missed(shared, job, due, "node woke after the claim deadline", "");
    } else {
        spawn_occurrence(shared, job, due, false);
    }
    due
}

/// Hands the occurrence to [`occurrence::consider`]: drained node, paused
/// job, or claim.
fn spawn_occurrence(shared: &Arc<Shared>, job: &Arc<Job>, at: DateTime<Utc>, catch_up: bool) {
    shared.tracker.spawn(occurrence::consider(
        Arc::clone(shared),
        Arc::clone(job),
        at,
        catch_up,
    ));
}

/// Claims the latest occurrence within `starting_deadline` of each of
/// `jobs`, as a start does: the backstop's catch-up when it takes over.
pub(super) fn catch_up_all(shared: &Arc<Shared>, jobs: &[Arc<Job>]) {
    let now = shared.clock.now();
    for job in jobs {
        if let Some(latest) = catch_up(job, now) {
            spawn_occurrence(shared, job, latest, true);
        }
    }
}

/// The latest occurrence within `starting_deadline` before `now`, if any
/// (both counted from when it fires: its instant plus the job's splay).
fn catch_up(job: &Job, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let now = job.unsplayed(now);
    // Checked: a deadline reaching before year 1 just means "all of the past".
    let after = now
        .checked_sub_signed(chrono_duration(job.starting_deadline))
        .unwrap_or(DateTime::<Utc>::MIN_UTC);
    let mut latest = None;
    let mut cursor = job.schedule.next_after(after);
    while let Some(at) = cursor.filter(|at| *at <= now) {
        latest = Some(at);
        cursor = job.schedule.next_after(at);
    }
    latest
}

/// From a due occurrence `at`, the latest one due by `now`, and how many
/// were passed over to get there.
fn latest_due(job: &Job, at: DateTime<Utc>, now: DateTime<Utc>) -> (DateTime<Utc>, u64) {
    let now = job.unsplayed(now);
    let mut due = at;
    let mut passed = 0;
    while let Some(later) = job.schedule.next_after(due).filter(|later| *later <= now) {
        due = later;
        passed += 1;
    }
    (due, passed)
}

fn chrono_duration(duration: Duration) -> chrono::TimeDelta {
    chrono::TimeDelta::from_std(duration).unwrap_or(chrono::TimeDelta::MAX)
}
