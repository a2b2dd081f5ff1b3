//! Compares this node's wall clock with Redis `TIME`, and tells systemd the
//! daemon is ready after the first successful round trip.
//!
//! The first answer is also the start-up check: the claim scripts are
//! loaded then, so that Redis refusing this node (a wrong password, an ACL
//! user without the scripts' commands) stops the daemon at once with one
//! clear error (exit 78: a config problem that restarting will not fix),
//! while Redis merely being down is waited for. Before the scripts it asks
//! each plain server what it is ([`identity`]): a `url` (or Redlock master)
//! that is a Cluster node, or two Redlock URLs that reach one server, stop
//! the daemon the same way, before any claim; a master that did not answer
//! then is compared when it first does. A `cluster` seed that is a plain
//! server comes back from the scripts as an error of its own
//! ([`crate::coordinator::cluster::is_not_a_cluster`]), fatal too.
//!
//! Occurrences are named by the schedule, not by "now", so a skewed clock
//! cannot make an occurrence run twice; it only makes this node fire early
//! or late. With `clock = "redis"` (the default) the timetable fires by
//! this node's clock minus the offset measured here ([`super::fleet_clock::FleetClock::now`]),
//! so a node whose clock is off still starts each run at Redis's instant.
//! Redis's instant is measured at start, then 1, 2, 4 and 8 s apart, then
//! every [`PERIOD`], and after each outage: [`SAMPLES`] round trips to
//! `TIME` each time, and the node fires by the tightest never-early bound
//! of the last 30 s of round trips ([`super::redis_instant`]): at the
//! instant or up to the quickest round trip after it, never before it.
//! Between measurements Redis's instant is carried forward by the
//! monotonic clock, not the wall clock, so a step of this node's clock
//! (`date -s`, a VM resumed, NTP stepping) never makes it fire early or
//! late; the wall clock is compared with it every second and a move of
//! more than 100 ms is logged and measured again at once.
//! Ops still want to know: warn above 500 ms (when it starts, then every
//! [`WARN_REPEAT`] while it lasts, and once when it ends: not at every
//! measurement), and when the offset jumps by more than 100 ms between
//! checks (a stepped clock). Until Redis first
//! answers, the check is retried every second and the node fires by its
//! own clock; if Redis becomes unreachable later, the last offset stays
//! in use (a node that cannot reach Redis runs nothing anyway).
//!
//! Each check also looks at the fleet's marker key, to tell Redis that
//! came back without its data from a restart that kept it
//! ([`redis_health::DataWatch`]).
//!
//! Failure model: Redis's clock is the reference. If it is wrong, every
//! node fires at the same wrong instant (still at most once per
//! occurrence); with Redlock the median of the masters' clocks is used.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, info, warn};

use super::Shared;
use super::redis_health;
use super::redis_instant::{Added, RedisInstant, RoundTrip};
use crate::coordinator::{errors, identity};
use crate::{metrics, systemd};

/// Offsets above this are logged as warnings.
pub const WARN_ABOVE_MS: i64 = 500;
/// A first measured offset above this (with `clock = "redis"`) makes the
/// daemon compute its schedule again by Redis's instant: it was computed
/// by this node's wall clock at start, before Redis first answered, and a
/// node whose clock is far ahead would otherwise wait for occurrences that
/// are not due yet. Below it the claim script's
/// window and the start's catch-up absorb the difference.
pub const REBASE_ABOVE_MS: i64 = 1000;
/// How often a lasting offset above [`WARN_ABOVE_MS`] is warned about
/// again (it is measured every [`PERIOD`]; warning at each measurement
/// would flood the log of a node with a broken NTP).
const WARN_REPEAT: Duration = Duration::from_secs(300);
/// Between checks once Redis has answered and the first few quick ones
/// (1, 2, 4 and 8 s apart: the start-up round trips are the slowest) are
/// done. Three `TIME` per node every 10 s.
const PERIOD: Duration = Duration::from_secs(10);
/// Between attempts until Redis first answers.
const FIRST_RETRY: Duration = Duration::from_secs(1);

/// Round trips per measurement.
const SAMPLES: usize = 3;
/// A change of the offset between two checks larger than this is logged:
/// this node's clock (or Redis's) was stepped.
const STEP_ABOVE_MS: i64 = 100;
/// How often the wall clock is compared with Redis's instant carried by
/// the monotonic clock, to notice a step between two measurements.
const STEP_WATCH: Duration = Duration::from_secs(1);

/// [`SAMPLES`] round trips to `TIME`, each with this node's monotonic
/// clock when it was sent and answered; an error if none was answered.
///
/// The bound of each is used, not its midpoint: firing by it is never
/// early, at most a round trip late. The midpoint assumes the request and
/// the answer took as long, which does not hold on a busy machine and
/// would let runs start before their instant.
async fn round_trips(shared: &Shared) -> Result<Vec<RoundTrip>, redis::RedisError> {
    let mut trips = Vec::with_capacity(SAMPLES);
    let mut last_error = None;
    for _ in 0..SAMPLES {
        let sent_us = shared.clock.micros_since_base();
        match shared.locker.redis_time_us().await {
            Ok(redis_us) => trips.push(RoundTrip {
                redis_us,
                sent_us,
                answered_us: shared.clock.micros_since_base(),
            }),
            Err(err) => last_error = Some(err),
        }
    }
    match (trips.is_empty(), last_error) {
        (false, _) => Ok(trips),
        (true, Some(err)) => Err(err),
        (true, None) => Err(redis::RedisError::from((
            redis::ErrorKind::Io,
            "no TIME answer",
        ))),
    }
}

/// Returns once this node's wall clock moved against Redis's by more than
/// [`STEP_ABOVE_MS`] since the last measurement (looked at every
/// [`STEP_WATCH`]; NTP slewing moves it 5 ms in a [`PERIOD`] at most).
async fn local_clock_moved(shared: &Shared) {
    loop {
        tokio::time::sleep(STEP_WATCH).await;
        if shared
            .clock
            .moved_us()
            .is_some_and(|moved| moved.abs() > STEP_ABOVE_MS * 1000)
        {
            return;
        }
    }
}

/// Why the daemon stops when `found` shows `[redis]` of `config_path`
/// naming servers of the wrong kind: a Cluster node as a plain server, or
/// one server as two Redlock masters; `None` when it does not.
fn misconfigured(found: &identity::Identities, config_path: &Path, node: &str) -> Option<String> {
    let file = config_path.display();
    if let Some((shown, mode)) = &found.wrong_kind {
        let (what, instead) = if mode == "cluster" {
            (
                "a node of a Redis Cluster: the jobs whose keys live on its other nodes could \
                 never be claimed there (`MOVED`)",
                format!("`cluster = [\"{shown}\"]`, with the cluster's nodes"),
            )
        } else {
            (
                "not a data node",
                format!("`sentinel = {{ master = \"NAME\", urls = [\"{shown}\"] }}`"),
            )
        };
        return Some(format!(
            "`{shown}` in `[redis]` of `{file}` is {what} (server mode {mode}); write {instead} \
             instead, then start node `{node}` again"
        ));
    }
    let (first, second, run_id) = found.same.as_ref()?;
    Some(format!(
        "`{second}` and `{first}` in `[redis] redlock` of `{file}` are the same redis server \
         (run_id {run_id}), which would count twice towards the majority: the masters are fewer \
         than listed, and the loss or restart of that one server could decide for a majority; \
         list each master once, by one address (not a host name and its IP, nor `localhost` and \
         `127.0.0.1`), then start node `{node}` again"
    ))
}

/// Measures Redis's instant now, then 1, 2, 4 and 8 s apart, then every
/// [`PERIOD`], after an outage and after a step of the local clock, until
/// shutdown; READY=1 to systemd after the first answer.
pub async fn check_loop(shared: Arc<Shared>, config_path: PathBuf) {
    let locker = &shared.locker;
    let mut answered = false;
    // Every Redlock master compared with the others ([`identity`]).
    let mut identified = false;
    let mut estimate = RedisInstant::default();
    let mut off = OffWatch::default();
    // Redis that came back without the fleet's data ([`redis_health::DataWatch`]).
    let mut data = redis_health::DataWatch::default();
    // Before the first answer, then the quick checks after it.
    let mut pause = FIRST_RETRY;
    loop {
        let checked = match round_trips(&shared).await {
            Ok(trips) => {
                // Before the scripts: a Cluster node's `MOVED` would fail
                // them as an outage.
                if !identified {
                    let found = identity::identities(locker.coordinator()).await;
                    if let Some(reason) = misconfigured(&found, &config_path, locker.node()) {
                        shared.stop_fatally(reason);
                        return;
                    }
                    identified = found.complete;
                }
                if answered {
                    Ok(trips)
                } else {
                    locker.load_scripts().await.map(|()| trips)
                }
            }
            Err(err) => Err(err),
        };
        match checked {
            Ok(trips) => {
                let mut restarted = false;
                for trip in trips {
                    restarted |= estimate.add(trip) == Added::Restarted;
                }
                if restarted && answered {
                    debug!(node = %locker.node(), "redis's clock disagrees with the last 30 s of measurements (stepped, or another server): measuring from these");
                }
                let before = shared.clock.offset_ms();
                // Never `None` here: at least one round trip was just added.
                let offset = match estimate.base_us() {
                    Some(base_us) => shared.clock.set_redis_base_us(base_us).div_euclid(1000),
                    None => before.unwrap_or(0),
                };
                shared.redis_health.answered();
                metrics::redis_up(true);
                if let Some(before) = before
                    && (offset - before).abs() > STEP_ABOVE_MS
                {
                    warn!(node = %locker.node(), offset_ms = offset, before_ms = before,
                        "clock offset against redis changed: a clock was stepped; firing by the new offset");
                }
                metrics::clock_offset(offset);
                let now = tokio::time::Instant::now();
                if offset.abs() > WARN_ABOVE_MS && off.should_warn(now) {
                    warn!(node = %locker.node(), offset_ms = offset,
                        "clock differs from redis by more than {WARN_ABOVE_MS} ms; check NTP on this server \
                         (said again every {} while it lasts)", humantime::format_duration(WARN_REPEAT));
                } else if offset.abs() <= WARN_ABOVE_MS && off.ended() {
                    info!(node = %locker.node(), offset_ms = offset,
                        "clock agrees with redis again (within {WARN_ABOVE_MS} ms)");
                } else if !answered {
                    info!(node = %locker.node(), offset_ms = offset, "clock checked against redis");
                } else {
                    debug!(node = %locker.node(), offset_ms = offset, "clock checked against redis");
                }
                if !answered {
                    if shared.clock.fires_by_redis() {
                        info!(node = %locker.node(), offset_ms = offset,
                            "firing occurrences by redis's clock (clock = \"redis\")");
                    }
                    answered = true;
                    shared.mark_started();
                    shared.clock.measured.notify_one();
                    if shared.clock.fires_by_redis() && offset.abs() > REBASE_ABOVE_MS {
                        shared.clock.rebase.notify_one();
                    }
                    systemd::ready();
                }
                data.check(locker, shared.clock.now()).await;
            }
            Err(err) if !answered && errors::is_untrusted_certificate(&err) => {
                shared.stop_fatally(untrusted_at_start(
                    &err,
                    &shared.redis_shown,
                    locker.node(),
                    &config_path,
                ));
                return;
            }
            Err(err) if !answered && errors::is_fatal_at_start(&err) => {
                let fix = if errors::is_refusal(&err) {
                    "fix the password (`password_file`, or the url) or the ACL user (docs/operations.md, \"A Redis user for solocron\")".to_string()
                } else if crate::coordinator::cluster::is_not_a_cluster(&err)
                    || crate::coordinator::sentinel::is_misconfigured(&err)
                {
                    format!("fix `[redis]` in `{}`", config_path.display())
                } else {
                    "fix the database number in the url (`redis://host:6379/N`: N below the server's `databases`)".to_string()
                };
                shared.stop_fatally(format!(
                    "redis at `{}` refused node `{}` at start: {err}; {fix}, then start again",
                    shared.redis_shown,
                    locker.node()
                ));
                return;
            }
            Err(err) => shared
                .redis_health
                .failed("time", &err, redis_health::trouble_of(&err)),
        }
        let wait = if answered { pause } else { FIRST_RETRY };
        if answered {
            pause = (pause * 2).min(PERIOD);
        }
        tokio::select! {
            _ = shared.cancel.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
            // Measured again once Redis is back after an outage (it may be
            // another server now, with another clock: a failover, a restart).
            () = shared.redis_health.recovered.notified() => estimate.restart(),
            () = local_clock_moved(&shared), if answered => {}
        }
        // Said here, whatever woke the loop: a step found by a scheduled
        // measurement before the watch saw it is said too.
        if let Some(moved) = shared.clock.moved_us()
            && moved.abs() > STEP_ABOVE_MS * 1000
        {
            warn!(node = %locker.node(), moved_ms = moved.div_euclid(1000),
                "this node's wall clock moved against redis's since the last check (stepped?); measuring the offset again");
        }
    }
}

/// The start-up error for a server certificate node `node` does not
/// trust (`err`) on redis at `shown` (a redacted URL) of the config at
/// `config_path`: what to give it, by the cause.
fn untrusted_at_start(
    err: &redis::RedisError,
    shown: &str,
    node: &str,
    config_path: &Path,
) -> String {
    let fix = if err.to_string().contains("not valid for name") {
        "write the host in the url as the certificate names it (its subjectAltName), or have \
         the server's certificate made for the host in the url"
    } else {
        "give the CA that signed the server's certificate in `tls_ca_file` of `[redis]`, or add \
         it to this host's trusted roots (`update-ca-certificates`) when `tls_ca_file` is not set"
    };
    format!(
        "node `{node}` does not trust the TLS certificate of redis at `{shown}` at start: {err}; \
         {fix} (`{}`), then start again",
        config_path.display()
    )
}

/// Whether this node's clock is off by more than [`WARN_ABOVE_MS`], and
/// when that was last warned about: once when it starts, again every
/// [`WARN_REPEAT`] while it lasts, and its end once.
#[derive(Debug, Default)]
struct OffWatch {
    warned_at: Option<tokio::time::Instant>,
}

impl OffWatch {
    /// The offset is too large at `now`: whether to warn now.
    fn should_warn(&mut self, now: tokio::time::Instant) -> bool {
        let due = self
            .warned_at
            .is_none_or(|at| now.duration_since(at) >= WARN_REPEAT);
        if due {
            self.warned_at = Some(now);
        }
        due
    }

    /// The offset is fine again: whether it was not before (say so once).
    fn ended(&mut self) -> bool {
        self.warned_at.take().is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lasting_offset_is_warned_once_then_every_repeat_and_its_end_once() {
        let start = tokio::time::Instant::now();
        let mut off = OffWatch::default();
        assert!(!off.ended(), "nothing to end before a warning");
        assert!(off.should_warn(start));
        assert!(!off.should_warn(start + PERIOD));
        assert!(!off.should_warn(start + WARN_REPEAT - PERIOD));
        assert!(off.should_warn(start + WARN_REPEAT));
        assert!(off.ended());
        assert!(!off.ended(), "its end is said once");
        assert!(off.should_warn(start + WARN_REPEAT + PERIOD), "a new one");
    }
}
