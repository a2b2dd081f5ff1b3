//! This node's view of Redis, for the two lines an outage gets (SPEC §6).
//!
//! Every Redis operation of the daemon reports here: [`Health::failed`]
//! with its error, [`Health::answered`] on success. The first failure
//! after a success logs `redis unreachable` once; the first success after
//! failures logs `redis reachable again after 37 s, 18 occurrences missed`.
//! In between, claims, renewals and records retry quietly (at debug), and a
//! line every [`STILL_DOWN_EVERY`] says the outage goes on. Occurrences
//! missed meanwhile are counted here ([`Health::missed`]) instead of one
//! error line each.
//!
//! Redis refusing our credentials (`WRONGPASS`, `NOAUTH`, `NOPERM`) is not
//! an outage that time cures: [`is_refusal`] tells it apart, so the start-up
//! check can fail fast and the outage line can say what to fix.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use tracing::{error, info};

/// How often a lasting outage is logged again.
const STILL_DOWN_EVERY: Duration = Duration::from_secs(300);

/// Up or down, and since when.
pub struct Health {
    node: String,
    down: AtomicBool,
    outage: Mutex<Option<Outage>>,
}

struct Outage {
    since: Instant,
    reported: Instant,
    missed: u64,
}

impl Health {
    /// Redis counts as up until something fails.
    pub fn new(node: &str) -> Health {
        Health {
            node: node.to_string(),
            down: AtomicBool::new(false),
            outage: Mutex::new(None),
        }
    }

    /// An operation succeeded: ends an outage (one line).
    pub fn answered(&self) {
        if !self.down.swap(false, Ordering::Relaxed) {
            return;
        }
        crate::metrics::redis_up(true);
        let Some(outage) = self.lock().take() else {
            return;
        };
        let secs = outage.since.elapsed().as_secs_f64();
        info!(node = %self.node, down_for_ms = u64::try_from(outage.since.elapsed().as_millis()).unwrap_or(u64::MAX),
            missed = outage.missed,
            "redis reachable again after {secs:.0} s, {} occurrences missed", outage.missed);
    }

    /// `operation` failed with `err`: starts an outage (one line), or says
    /// it goes on every few minutes.
    pub fn failed(&self, operation: &str, err: &dyn std::fmt::Display, refusal: bool) {
        crate::metrics::redis_error(operation);
        crate::metrics::redis_up(false);
        let mut outage = self.lock();
        let now = Instant::now();
        match outage.as_mut() {
            None => {
                *outage = Some(Outage {
                    since: now,
                    reported: now,
                    missed: 0,
                });
                self.down.store(true, Ordering::Relaxed);
                if refusal {
                    error!(node = %self.node, operation, error = %err,
                        "redis refuses this node's credentials or commands: fix the password or the ACL user; nothing runs meanwhile");
                } else {
                    error!(node = %self.node, operation, error = %err,
                        "redis unreachable: no occurrence runs until it answers (fail closed); retrying");
                }
            }
            Some(current) if now.duration_since(current.reported) >= STILL_DOWN_EVERY => {
                current.reported = now;
                let secs = current.since.elapsed().as_secs();
                error!(node = %self.node, operation, error = %err, missed = current.missed,
                    "redis still unreachable after {secs} s, {} occurrences missed so far", current.missed);
            }
            Some(_) => {}
        }
    }

    /// Counts an occurrence missed while Redis is away; `false` if there is
    /// no outage (then the caller logs the miss itself).
    pub fn missed(&self) -> bool {
        match self.lock().as_mut() {
            Some(outage) => {
                outage.missed += 1;
                true
            }
            None => false,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Outage>> {
        match self.outage.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

/// Whether Redis refused us (wrong password, no such user, a command the
/// ACL user may not run) rather than being away.
pub fn is_refusal(err: &redis::RedisError) -> bool {
    err.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(err.code(), Some("WRONGPASS" | "NOAUTH" | "NOPERM"))
        || err.to_string().contains("NOPERM")
}
