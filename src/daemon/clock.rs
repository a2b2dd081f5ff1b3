//! Compares this node's wall clock with Redis `TIME`, and tells systemd the
//! daemon is ready after the first successful round trip.
//!
//! The first answer is also the start-up check: the claim scripts are
//! loaded then, so that Redis refusing this node (a wrong password, an ACL
//! user without the scripts' commands) stops the daemon at once with one
//! clear error (exit 78: a config problem that restarting will not fix),
//! while Redis merely being down is waited for.
//!
//! Occurrences are named by the schedule, not by "now", so a skewed clock
//! cannot make an occurrence run twice; it only makes this node fire early
//! or late. With `clock = "redis"` (the default) the timetable fires by
//! this node's clock minus the offset measured here ([`super::Shared::now`]),
//! so a node whose clock is off still starts each run at Redis's instant.
//! The offset is measured at start, every minute and after each outage:
//! of three round trips to `TIME`, the shortest, taken at its upper bound
//! (this node's clock when the answer came, minus Redis's), so that the
//! node fires at the instant or up to that round trip after it, never
//! before it.
//! Between measurements Redis's instant is carried forward by the
//! monotonic clock, not the wall clock, so a step of this node's clock
//! (`date -s`, a VM resumed, NTP stepping) never makes it fire early or
//! late; the wall clock is compared with it every second and a move of
//! more than 100 ms is logged and measured again at once.
//! Ops still want to know: warn above 500 ms, and when the offset jumps by
//! more than 100 ms between checks (a stepped clock). Until Redis first
//! answers, the check is retried every second and the node fires by its
//! own clock; if Redis becomes unreachable later, the last offset stays
//! in use (a node that cannot reach Redis runs nothing anyway).
//!
//! Failure model: Redis's clock is the reference. If it is wrong, every
//! node fires at the same wrong instant (still at most once per
//! occurrence); with Redlock the median of the masters' clocks is used.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use tracing::{debug, info, warn};

use super::Shared;
use super::health::{self, is_refusal};
use crate::lock::Locker;
use crate::{metrics, notify};

/// Offsets above this are logged as warnings.
pub const WARN_ABOVE_MS: i64 = 500;
/// Between checks once Redis has answered.
const PERIOD: Duration = Duration::from_secs(60);
/// Between attempts until Redis first answers.
const FIRST_RETRY: Duration = Duration::from_secs(1);

/// Round trips per measurement; the one with the shortest round trip is
/// kept (its bound is the tightest).
const SAMPLES: usize = 3;
/// A change of the offset between two checks larger than this is logged:
/// this node's clock (or Redis's) was stepped.
const STEP_ABOVE_MS: i64 = 100;
/// How often the wall clock is compared with Redis's instant carried by
/// the monotonic clock, to notice a step between two measurements.
const STEP_WATCH: Duration = Duration::from_secs(1);

/// This node's clock minus Redis's, in ms (positive: this node is ahead):
/// of [`SAMPLES`] round trips to `TIME`, the one that took the shortest,
/// at its upper bound (see [`offset_us`]).
pub async fn offset_ms(locker: &Locker) -> Result<i64, redis::RedisError> {
    Ok(offset_us(locker).await?.div_euclid(1000))
}

/// [`offset_ms`] in µs.
///
/// Redis read its clock somewhere within the round trip, so the true
/// offset is at most this node's clock at the answer minus Redis's. That
/// bound is used, not the midpoint: firing by it is never early, at most
/// a round trip late. The midpoint assumes the request and the answer
/// took as long; on a busy machine a request that waited longer for Redis
/// to be scheduled than the answer waited for this node made the offset
/// too small, and 924 of 1,000 splayed runs started ~4 ms before their
/// instant (docs/PERFORMANCE.md, scenario s).
pub async fn offset_us(locker: &Locker) -> Result<i64, redis::RedisError> {
    let mut best: Option<(std::time::Duration, i64)> = None;
    let mut last_error = None;
    for _ in 0..SAMPLES {
        match locker.redis_time_us().await {
            Ok((redis_us, rtt)) => {
                // After the answer: Redis read its clock before this.
                let offset_us = Utc::now().timestamp_micros() - redis_us;
                if best.is_none_or(|(shortest, _)| rtt < shortest) {
                    best = Some((rtt, offset_us));
                }
            }
            Err(err) => last_error = Some(err),
        }
    }
    match (best, last_error) {
        (Some((_, offset_us)), _) => Ok(offset_us),
        (None, Some(err)) => Err(err),
        (None, None) => Err(redis::RedisError::from((
            redis::ErrorKind::Io,
            "no TIME answer",
        ))),
    }
}

/// Returns, in ms, how far this node's wall clock moved against Redis's
/// since the last measurement, once that is more than [`STEP_ABOVE_MS`]
/// (looked at every [`STEP_WATCH`]; NTP slewing moves it 30 ms a minute at
/// most).
async fn local_clock_moved(shared: &Shared) -> i64 {
    loop {
        tokio::time::sleep(STEP_WATCH).await;
        if let Some(moved) = shared.clock_moved_us()
            && moved.abs() > STEP_ABOVE_MS * 1000
        {
            return moved.div_euclid(1000);
        }
    }
}

/// Checks the offset now, every minute, after an outage and after a step
/// of the local clock, until shutdown; READY=1 to systemd after the first
/// answer.
pub async fn check_loop(shared: Arc<Shared>) {
    let locker = &shared.locker;
    let mut answered = false;
    loop {
        let checked = match offset_us(locker).await {
            Ok(offset) if !answered => locker.load_scripts().await.map(|()| offset),
            other => other,
        };
        match checked {
            Ok(offset_us) => {
                let offset = offset_us.div_euclid(1000);
                shared.health.answered();
                metrics::redis_up(true);
                if let Some(before) = shared.clock_offset()
                    && (offset - before).abs() > STEP_ABOVE_MS
                {
                    warn!(node = %locker.node(), offset_ms = offset, before_ms = before,
                        "clock offset against redis changed: a clock was stepped; firing by the new offset");
                }
                shared.set_clock_offset_us(offset_us);
                metrics::clock_offset(offset);
                if offset.abs() > WARN_ABOVE_MS {
                    warn!(node = %locker.node(), offset_ms = offset,
                        "clock differs from redis by more than {WARN_ABOVE_MS} ms; check NTP on this server");
                } else if !answered {
                    info!(node = %locker.node(), offset_ms = offset, "clock checked against redis");
                } else {
                    debug!(node = %locker.node(), offset_ms = offset, "clock checked against redis");
                }
                if !answered {
                    if shared.clock_from_redis() {
                        info!(node = %locker.node(), offset_ms = offset,
                            "firing occurrences by redis's clock (clock = \"redis\")");
                    }
                    answered = true;
                    shared.clock_measured.notify_one();
                    notify::ready();
                }
            }
            Err(err) if !answered && is_refusal(&err) => {
                shared.stop_fatally(format!(
                    "redis at `{}` refused node `{}` at start: {err}; fix the password (`password_file`, or the url) or the ACL user (README, \"A Redis user for solocron\"), then start again",
                    shared.redis_shown,
                    locker.node()
                ));
                return;
            }
            Err(err) => shared.health.failed("time", &err, health::trouble_of(&err)),
        }
        let pause = if answered { PERIOD } else { FIRST_RETRY };
        tokio::select! {
            _ = shared.cancel.cancelled() => return,
            _ = tokio::time::sleep(pause) => {}
            // Measured again once Redis is back after an outage (it may be
            // another server now: a failover, a restart).
            () = shared.health.recovered.notified() => {}
            moved_ms = local_clock_moved(&shared), if answered => {
                warn!(node = %locker.node(), moved_ms,
                    "this node's wall clock moved against redis's since the last check (stepped?); measuring the offset again");
            }
        }
    }
}
