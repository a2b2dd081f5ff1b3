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
//! or late. Still, ops want to know: warn above 500 ms, at start and every
//! minute. The offset is corrected for half the round trip. Until Redis
//! first answers, the check is retried every second.

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

/// This node's clock minus Redis's, in ms (positive: this node is ahead).
pub async fn offset_ms(locker: &Locker) -> Result<i64, redis::RedisError> {
    let local_before = Utc::now().timestamp_millis();
    let (redis_ms, rtt) = locker.redis_time_ms().await?;
    let half_rtt = i64::try_from(rtt.as_millis() / 2).unwrap_or(0);
    Ok(local_before + half_rtt - redis_ms)
}

/// Checks the offset now and every minute until shutdown; READY=1 to
/// systemd after the first answer.
pub async fn check_loop(shared: Arc<Shared>) {
    let locker = &shared.locker;
    let mut answered = false;
    loop {
        let checked = match offset_ms(locker).await {
            Ok(offset) if !answered => locker.load_scripts().await.map(|()| offset),
            other => other,
        };
        match checked {
            Ok(offset) => {
                shared.health.answered();
                metrics::redis_up(true);
                shared.set_clock_offset(offset);
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
        }
    }
}
