//! One job's schedule loop: sleep until the next occurrence, then hand it to
//! [`super::occurrence`] in its own task, so an overlapping occurrence is
//! still claimed (and recorded as skipped) while a run goes on.
//!
//! The loop sleeps on the monotonic clock but re-reads the wall clock at
//! least every minute, so a stepped clock (NTP) moves the wake-up with it
//! and no occurrence is lost to a long sleep computed from a stale "now".
//! At start, the latest occurrence within `starting_deadline` is claimed
//! too (catch-up): the claim script refuses it if any node already had it.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{Shared, occurrence};
use crate::config::Job;

/// Longest single sleep before the wall clock is read again.
const MAX_SLEEP: Duration = Duration::from_secs(60);

/// Runs `job`'s schedule until `cancel` (shutdown, or the job was removed or
/// changed by a reload). Runs already started are not affected.
pub async fn run(shared: Arc<Shared>, job: Arc<Job>, cancel: CancellationToken) {
    let deadline = chrono_duration(job.starting_deadline);
    let now = Utc::now();
    let mut next = job.schedule.next_after(now);
    // Checked: a deadline reaching before year 1 just means "all of the past".
    let window_start = now
        .checked_sub_signed(deadline)
        .unwrap_or(DateTime::<Utc>::MIN_UTC);
    if let Some(latest) = latest_in(&job, window_start, now) {
        spawn_attempt(&shared, &job, latest, true);
    }
    while let Some(at) = next {
        if !sleep_until_wall(&cancel, at).await {
            return;
        }
        let now = Utc::now();
        let (due, passed) = latest_due(&job, at, now);
        if passed > 0 {
            warn!(job = %job.name, node = %shared.locker.node(), count = passed, until = %rfc3339(due),
                "occurrences missed: this node woke too late to claim them");
        }
        if now - due > deadline {
            warn!(job = %job.name, occurrence = %rfc3339(due), node = %shared.locker.node(),
                "occurrence missed: past starting_deadline when this node woke");
            occurrence::spawn_record_missed(
                &shared,
                &job,
                due,
                "node woke after starting_deadline",
                "",
            );
        } else {
            spawn_attempt(&shared, &job, due, false);
        }
        next = job.schedule.next_after(due);
    }
    info!(job = %job.name, "schedule has no further occurrences");
}

fn spawn_attempt(shared: &Arc<Shared>, job: &Arc<Job>, at: DateTime<Utc>, catch_up: bool) {
    shared.tracker.spawn(occurrence::attempt(
        Arc::clone(shared),
        Arc::clone(job),
        at,
        catch_up,
    ));
}

/// The latest occurrence in `(after, until]`, if any.
fn latest_in(job: &Job, after: DateTime<Utc>, until: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let mut latest = None;
    let mut cursor = job.schedule.next_after(after);
    while let Some(at) = cursor.filter(|at| *at <= until) {
        latest = Some(at);
        cursor = job.schedule.next_after(at);
    }
    latest
}

/// From a due occurrence `at`, the latest one due by `now`, and how many
/// were passed over to get there.
fn latest_due(job: &Job, at: DateTime<Utc>, now: DateTime<Utc>) -> (DateTime<Utc>, u64) {
    let mut due = at;
    let mut passed = 0;
    while let Some(later) = job.schedule.next_after(due).filter(|later| *later <= now) {
        due = later;
        passed += 1;
    }
    (due, passed)
}

/// Sleeps until the wall clock reaches `at`; `false` if cancelled first.
async fn sleep_until_wall(cancel: &CancellationToken, at: DateTime<Utc>) -> bool {
    loop {
        let left = at - Utc::now();
        let Ok(left) = left.to_std() else {
            return !cancel.is_cancelled();
        };
        if left.is_zero() {
            return !cancel.is_cancelled();
        }
        tokio::select! {
            _ = cancel.cancelled() => return false,
            _ = tokio::time::sleep(left.min(MAX_SLEEP)) => {}
        }
    }
}

/// RFC 3339 UTC with whole seconds and `Z`: the name of an occurrence.
pub fn rfc3339(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn chrono_duration(duration: Duration) -> chrono::TimeDelta {
    chrono::TimeDelta::from_std(duration).unwrap_or(chrono::TimeDelta::MAX)
}
