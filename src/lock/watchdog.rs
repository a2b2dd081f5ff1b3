//! Keeps a lease alive while its run lasts, and says when it cannot.
//!
//! The lease is extended every `lock_ttl / 3` by the token-checked extend
//! script. Its deadline is counted from the moment the last *successful*
//! renewal (or the claim) was *sent*, not answered: Redis started the new TTL
//! no earlier than that, so `sent + ttl` is a lower bound of the key's real
//! expiry. The deadline is that bound minus a safety margin, so a run whose
//! lease could not be confirmed is stopped before another node could legally
//! claim the lock.

use std::time::Duration;

use tokio::time::{Instant, sleep_until, timeout_at};
use tracing::debug;

use super::{Lease, Locker};

/// Why the lease is gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseLost {
    /// The lock holds another value (expired and taken, or deleted).
    Taken,
    /// No renewal was confirmed before the deadline (Redis unreachable or paused).
    Unconfirmed,
}

impl LeaseLost {
    /// For logs: `taken` or `unconfirmed`.
    pub fn as_str(&self) -> &'static str {
        match self {
            LeaseLost::Taken => "taken",
            LeaseLost::Unconfirmed => "unconfirmed",
        }
    }
}

/// How much earlier than the lower bound of the key's expiry the run is
/// treated as lost: a fifth of the TTL, at most 2 s.
pub fn safety_margin(ttl: Duration) -> Duration {
    (ttl / 5).min(Duration::from_secs(2))
}

/// Renews `lease` until it is lost; completes only then (drop it to stop
/// renewing). `claim_sent` is when the claim that won the lease was sent.
pub async fn keep(locker: &Locker, lease: &Lease, claim_sent: Instant) -> LeaseLost {
    let ttl = lease.ttl;
    let margin = safety_margin(ttl);
    let period = ttl / 3;
    let mut deadline = claim_sent + ttl - margin;
    let mut next = claim_sent + period;
    loop {
        sleep_until(next.min(deadline)).await;
        if Instant::now() >= deadline {
            return LeaseLost::Unconfirmed;
        }
        let sent = Instant::now();
        match timeout_at(deadline, locker.extend(lease)).await {
            Ok(Ok(true)) => {
                deadline = sent + ttl - margin;
                next = sent + period;
                crate::metrics::lock_renewed(&lease.job);
                debug!(job = %lease.job, fence = lease.fence, "lease extended");
            }
            Ok(Ok(false)) => return LeaseLost::Taken,
            Ok(Err(err)) => {
                debug!(job = %lease.job, fence = lease.fence, error = %err, "lease extension failed, retrying");
                // Retry soon, but never spin: a tenth of the TTL, at least 20 ms.
                next = Instant::now() + (ttl / 10).max(Duration::from_millis(20));
            }
            Err(_) => return LeaseLost::Unconfirmed,
        }
    }
}
