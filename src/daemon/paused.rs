//! A paused job's occurrence: recorded `paused` through the job's state
//! hash ([`crate::lock::Locker::record_paused`]) instead of claimed, by
//! whichever node decides it first, so it is recorded once and never also
//! run or missed. Then the occurrences nobody decided before it are
//! recorded `missed`, as after a won claim.
//!
//! Failure model: a `paused` record that Redis does not take is retried
//! (jittered backoff) while it can still decide the occurrence; it holds the
//! job's claim turn until the occurrence's deadline, then goes on in the
//! background for up to an hour. If a newer occurrence was decided
//! meanwhile, this one is in that decision's gap and recorded `missed`
//! there; the late `paused` record then finds it decided and writes nothing.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;
use tracing::{debug, error, info};

use super::Shared;
use super::occurrence::claim_deadline;
use super::recording;
use crate::config::Job;
use crate::control::Mark;
use crate::lock::{Paused, Unrun};
use crate::schedule::rfc3339;

/// First and longest pause between retries of a `paused` record.
const RETRY_FIRST: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_secs(1);
/// How long a `paused` record is retried while Redis is away.
const RECORD_FOR: Duration = Duration::from_secs(3600);

/// The history's error text of a paused occurrence.
pub(super) fn why(mark: &Mark, all: bool) -> String {
    let scope = if all { " (pause --all)" } else { "" };
    format!("job paused{scope} {}", mark.describe())
}

/// Records `at` of `job` as `paused`; see the module doc.
pub(super) async fn record_paused(
    shared: &Arc<Shared>,
    job: &Arc<Job>,
    at: DateTime<Utc>,
    mark: &Mark,
    all: bool,
) {
    record_unrun(shared, job, at, &why(mark, all), Unrun::Paused, &mark.by).await;
}

/// Records `at` of `job` as `excluded` by its calendars (`why`), the way
/// a paused occurrence is recorded: once, never run, missed or notified.
pub(super) async fn record_excluded(
    shared: &Arc<Shared>,
    job: &Arc<Job>,
    at: DateTime<Utc>,
    why: &str,
) {
    record_unrun(shared, job, at, why, Unrun::Excluded, "").await;
}

async fn record_unrun(
    shared: &Arc<Shared>,
    job: &Arc<Job>,
    at: DateTime<Utc>,
    why: &str,
    kind: Unrun,
    paused_by: &str,
) {
    let name = rfc3339(at);
    let node = shared.locker.node();
    let turn = shared.claim_turn(&job.name);
    let mut turn_held = Some(turn.lock().await);
    let turn_until = Instant::now()
        + (claim_deadline(job, at) - shared.clock.now())
            .to_std()
            .unwrap_or(Duration::ZERO);
    let give_up = Instant::now() + RECORD_FOR;
    let mut pause = RETRY_FIRST;
    loop {
        if Instant::now() >= turn_until {
            turn_held = None;
        }
        match shared.locker.record_unrun(&job.name, at, why, kind).await {
            Ok(Paused {
                recorded: true,
                previous_ms,
                ..
            }) => {
                shared.redis_health.answered();
                if kind == Unrun::Excluded {
                    crate::metrics::excluded(&job.name);
                }
                match kind {
                    Unrun::Excluded => info!(job = %job.name, occurrence = %name, node = %node,
                        outcome = crate::outcome::Outcome::Excluded.as_str(), reason = %why,
                        "occurrence excluded by a calendar: recorded `excluded`, not run"),
                    _ => {
                        info!(job = %job.name, occurrence = %name, node = %node, paused_by = %paused_by,
                        outcome = crate::outcome::Outcome::Paused.as_str(), "occurrence paused: recorded `paused`, not run (the job is paused fleet-wide)")
                    }
                }
                drop(turn_held);
                recording::record_gap_before(shared, job, previous_ms, at).await;
                return;
            }
            Ok(Paused { decided, .. }) => {
                shared.redis_health.answered();
                let (decision, by) = decided.unwrap_or_default();
                info!(job = %job.name, occurrence = %name, node = %node, decided_by = %by, decision = %decision,
                    "occurrence already decided by another node");
                return;
            }
            Err(err) if err.is_disagreement() => {
                debug!(job = %job.name, occurrence = %name, node = %node, error = %err,
                    "paused record not settled yet (redlock masters disagree), retrying");
                if Instant::now() + pause >= give_up {
                    return;
                }
            }
            Err(err) => {
                shared
                    .redis_health
                    .failed("record paused", &err, err.trouble());
                if Instant::now() + pause >= give_up {
                    error!(job = %job.name, occurrence = %name, node = %node, error = %err,
                        "paused occurrence not recorded: redis unreachable for an hour (the next decision records it missed)");
                    return;
                }
            }
        }
        tokio::select! {
            _ = shared.cancel.cancelled() => return,
            _ = tokio::time::sleep(pause + pause.mul_f64(rand::random::<f64>() / 2.0)) => {}
        }
        pause = (pause * 2).min(RETRY_MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_history_says_who_paused_it_and_why() {
        let mark = Mark {
            at_ms: 0,
            active: true,
            by: "alice@web-1".into(),
            since_ms: 0,
            until_ms: None,
            from_ms: None,
            reason: Some("db migration".into()),
        };
        assert_eq!(
            why(&mark, false),
            "job paused by alice@web-1 since 1970-01-01T00:00:00Z: db migration"
        );
        assert!(why(&mark, true).starts_with("job paused (pause --all) by alice@web-1"));
    }
}
