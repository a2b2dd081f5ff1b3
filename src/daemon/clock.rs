//! Compares this node's wall clock with Redis `TIME`.
//!
//! Occurrences are named by the schedule, not by "now", so a skewed clock
//! cannot make an occurrence run twice; it only makes this node fire early
//! or late. Still, ops want to know: warn above 500 ms, at start and every
//! minute. The offset is corrected for half the round trip.

use std::time::Duration;

use chrono::Utc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::lock::Locker;

/// Offsets above this are logged as warnings.
pub const WARN_ABOVE_MS: i64 = 500;

/// This node's clock minus Redis's, in ms (positive: this node is ahead).
pub async fn offset_ms(locker: &Locker) -> Result<i64, redis::RedisError> {
    let local_before = Utc::now().timestamp_millis();
    let (redis_ms, rtt) = locker.redis_time_ms().await?;
    let half_rtt = i64::try_from(rtt.as_millis() / 2).unwrap_or(0);
    Ok(local_before + half_rtt - redis_ms)
}

/// Checks the offset now and every minute until `cancel`.
pub async fn check_loop(locker: Locker, cancel: CancellationToken) {
    let mut first = true;
    loop {
        match offset_ms(&locker).await {
            Ok(offset) if offset.abs() > WARN_ABOVE_MS => warn!(
                node = %locker.node(),
                offset_ms = offset,
                "clock differs from redis by more than {WARN_ABOVE_MS} ms; check NTP on this server"
            ),
            // The first good reading is worth a line; later ones only on request.
            Ok(offset) if first => {
                info!(node = %locker.node(), offset_ms = offset, "clock checked against redis")
            }
            Ok(offset) => {
                debug!(node = %locker.node(), offset_ms = offset, "clock checked against redis")
            }
            Err(err) => warn!(node = %locker.node(), error = %err, "cannot read redis TIME"),
        }
        first = false;
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(60)) => {}
        }
    }
}
