//! A run's room in its group (`[groups.NAME]`, guarantee 11 of
//! docs/guarantees.md): taken once the claim is won and before the action
//! starts, kept beside the lease, given back when the run is over.
//!
//! `when_full = "skip"` answers throttled at once; `"wait"` asks again
//! every [`POLL`] (or when the oldest start leaves the `max_starts`
//! window), queued oldest occurrence first, until the occurrence's
//! deadline, then answers throttled. A slot that cannot be renewed
//! (it expired: Redis was away longer than `lock_ttl`) is lost like the
//! lease: the run is stopped when `on_lock_lost = "kill"`.
//!
//! Failure model: a take Redis does not answer is asked again until the
//! deadline, then the occurrence is throttled with the reason; a give-back
//! that fails leaves a slot that expires after `lock_ttl`.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::config::{Group, Job, OnLockLost, WhenFull};
use crate::lock::group::{self, Ask, Refusal, Taken};
use crate::lock::{Lease, Locker};
use crate::metrics;

/// How often a waiting occurrence asks its group for room again.
pub const POLL: Duration = Duration::from_millis(250);

/// The room a run holds in its group.
pub struct Room {
    group: Arc<Group>,
    holder: String,
    /// The slot's member (`None`: the group has no `max_running`).
    member: Option<String>,
}

/// Why a run got no room.
pub enum NoRoom {
    /// Throttled, with the text of its history entry.
    Throttled(String),
    /// The daemon is stopping (or `trigger` was interrupted).
    Stopped,
    /// An operator aborted it while it waited (`solocron abort`).
    Aborted,
}

/// Takes room in `job`'s group for the run of `occurrence` under
/// `lease`, waiting (`when_full = "wait"`) until `until` at most. `Ok(None)`:
/// the job has no group.
pub async fn admit(
    locker: &Locker,
    job: &Job,
    lease: &Lease,
    occurrence: &str,
    until: Instant,
    stop: &CancellationToken,
    aborted: &CancellationToken,
) -> Result<Option<Room>, NoRoom> {
    let Some(group) = job.extras.group.clone() else {
        return Ok(None);
    };
    let holder = group::holder(&lease.token, &job.name, occurrence, locker.node());
    let ask = Ask {
        holder: holder.clone(),
        max_running: group.max_running,
        slot_ttl: lease.ttl,
        max_starts: group.max_starts.map(|rate| (rate.count, rate.window)),
        wait: group.when_full == WhenFull::Wait,
        occurrence_ms: occurrence_ms(occurrence),
    };
    let mut counted = false;
    let mut last_refusal: Option<Refusal> = None;
    let mut last_error: Option<String> = None;
    loop {
        match locker.group_take(&group.name, &ask, &job.name).await {
            Ok(Taken::Granted { slot, .. }) => {
                if counted {
                    info!(job = %job.name, occurrence = %occurrence, node = %locker.node(), group = %group.name,
                        "group has room now: starting");
                }
                let member = slot.map(|slot| group::slot_member(&slot, &holder));
                return Ok(Some(Room {
                    group,
                    holder,
                    member,
                }));
            }
            Ok(Taken::Full(refusal)) => {
                if !counted {
                    counted = true;
                    metrics::group_full(&group.name, &refusal.limit);
                    if group.when_full == WhenFull::Wait {
                        info!(job = %job.name, occurrence = %occurrence, node = %locker.node(), group = %group.name,
                            limit = %refusal.limit, held_by = %refusal.holders.join(", "),
                            "group full: waiting for room (when_full = wait)");
                    }
                }
                if group.when_full == WhenFull::Skip {
                    return Err(NoRoom::Throttled(throttled_text(&group, &refusal, false)));
                }
                last_refusal = Some(refusal);
            }
            Err(err) => last_error = Some(err.to_string()),
        }
        let now = Instant::now();
        if now >= until {
            // Out of the queue, best effort (a waiter expires by itself).
            locker
                .group_give_back(&group.name, &holder, &job.name)
                .await
                .ok();
            let text = match (&last_refusal, &last_error) {
                (Some(refusal), _) => throttled_text(&group, refusal, true),
                (None, Some(err)) => format!(
                    "no room in group `{}` before the starting deadline: redis did not answer ({err})",
                    group.name
                ),
                (None, None) => format!(
                    "no room in group `{}` before the starting deadline",
                    group.name
                ),
            };
            return Err(NoRoom::Throttled(text));
        }
        let pause = last_refusal
            .as_ref()
            .and_then(|refusal| refusal.retry_after)
            .map_or(POLL, |after| after.min(POLL))
            .min(until - now);
        tokio::select! {
            _ = stop.cancelled() => {
                locker.group_give_back(&group.name, &holder, &job.name).await.ok();
                return Err(NoRoom::Stopped);
            }
            _ = aborted.cancelled() => {
                locker.group_give_back(&group.name, &holder, &job.name).await.ok();
                return Err(NoRoom::Aborted);
            }
            _ = tokio::time::sleep(pause) => {}
        }
    }
}

/// The history text of an occurrence `refusal` throttled.
fn throttled_text(group: &Group, refusal: &Refusal, waited: bool) -> String {
    let when = if waited {
        "no room before the starting deadline"
    } else {
        "no room (when_full = skip)"
    };
    let held = if refusal.holders.is_empty() {
        String::new()
    } else {
        format!("; held by {}", refusal.holders.join(", "))
    };
    match refusal.limit.as_str() {
        "max_starts" => {
            let rate = group
                .max_starts
                .map(|rate| rate.to_string())
                .unwrap_or_default();
            format!(
                "group `{}` at max_starts = {rate}: {when}{held}",
                group.name
            )
        }
        _ => format!(
            "group `{}` at max_running = {}: {when}{held}",
            group.name,
            group.max_running.unwrap_or(0)
        ),
    }
}

/// An occurrence's instant in ms, for the queue's order (a manual run
/// queues by its start: `manual-<instant>`).
fn occurrence_ms(occurrence: &str) -> i64 {
    let instant = occurrence.strip_prefix("manual-").unwrap_or(occurrence);
    chrono::DateTime::parse_from_rfc3339(instant)
        .map(|at| at.timestamp_millis())
        .unwrap_or(i64::MAX)
}

/// Renews `room`'s slot beside the run, every `ttl / 3`; never completes.
/// A slot found gone is logged, and cancels `lost` (stopping the run) when
/// the job says `on_lock_lost = "kill"`.
pub async fn keep(
    locker: &Locker,
    job: &Job,
    room: &Room,
    ttl: Duration,
    lost: &CancellationToken,
) -> std::convert::Infallible {
    let Some(member) = &room.member else {
        return std::future::pending().await;
    };
    let every = (ttl / 3).max(Duration::from_millis(100));
    loop {
        tokio::time::sleep(every).await;
        match locker
            .group_renew(&room.group.name, member, ttl, &job.name)
            .await
        {
            Ok(true) | Err(_) => {}
            Ok(false) => {
                error!(job = %job.name, node = %locker.node(), group = %room.group.name,
                    "group slot lost: it expired before it could be renewed (redis was away longer than lock_ttl)");
                if job.on_lock_lost == OnLockLost::Kill {
                    lost.cancel();
                }
                return std::future::pending().await;
            }
        }
    }
}

/// Gives `room` back, trying a few times (a slot left behind expires after
/// `lock_ttl`).
pub async fn give_back(locker: &Locker, job: &Job, room: Room) {
    for pause in [50, 200, 800] {
        match locker
            .group_give_back(&room.group.name, &room.holder, &job.name)
            .await
        {
            Ok(()) => return,
            Err(err) => {
                tokio::time::sleep(Duration::from_millis(pause)).await;
                if pause == 800 {
                    warn!(job = %job.name, node = %locker.node(), group = %room.group.name, error = %err,
                        "cannot give the group slot back; it expires by itself after lock_ttl");
                }
            }
        }
    }
}
