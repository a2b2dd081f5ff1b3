//! This node's view of Redis, for the two lines an outage gets
//! (docs/operations.md).
//!
//! Every Redis operation of the daemon reports here: [`RedisHealth::failed`]
//! with its error, [`RedisHealth::answered`] on success. The first failure
//! after a success logs `redis unreachable` once; the first success after
//! failures logs `redis reachable again after 37 s, 18 occurrences missed`.
//! In between, claims, renewals and records retry quietly (at debug), and a
//! line every [`STILL_DOWN_EVERY`] says the outage goes on. With a Redis
//! Cluster, one shard down while the others answer is one outage too: it
//! ends once nothing failed for a few seconds ([`RedisHealth::for_shards`]). Occurrences
//! missed meanwhile are counted here ([`RedisHealth::missed`]) instead of one
//! error line each.
//!
//! Redis refusing writes (out of memory, a read-only replica, a failed
//! save) is not an outage either: it answers reads, so only a confirmed
//! write ends that trouble, not every read ([`Trouble::Rejected`]).
//! Redis refusing our credentials (`WRONGPASS`, `NOAUTH`, `NOPERM`) is not
//! an outage that time cures: [`is_refusal`] tells it apart, so the start-up
//! check can fail fast and the outage line can say what to fix. Writes not
//! acknowledged by enough replicas (`wait_replicas`) are a trouble of their
//! own too: Redis answers, but nothing it grants may run. While any trouble
//! lasts, [`RedisHealth::warning`] says it in one line, which the node publishes
//! in the registry for `status`.
//!
//! Redis that comes back without the fleet's data (restarted without
//! persistence, flushed) is no outage: it answers, and every node goes on
//! claiming. [`DataWatch`] tells it from a restart that kept the data, by
//! the fleet's marker key ([`crate::coordinator::identity::markers`]), and
//! says it once per loss in an error line (the old and new `run_id`, when
//! the data was last seen) and in `solocron_redis_data_lost_total`.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;
use tracing::{debug, error, info};

use crate::coordinator::errors::{is_refusal, is_rejection};
use crate::coordinator::identity::{self, Marker};
use crate::lock::{Locker, new_token};

/// How often a lasting outage is logged again.
const STILL_DOWN_EVERY: Duration = Duration::from_secs(300);
/// With a Redis Cluster, how long no operation may have failed before a
/// success ends the outage ([`RedisHealth::for_shards`]).
const SHARDS_QUIET: Duration = Duration::from_secs(3);

/// What kind of failure an operation met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trouble {
    /// Redis did not answer (down, paused, cut off, timed out).
    Unreachable,
    /// Redis refused our password or a command (ACL).
    Refused,
    /// The write was not acknowledged by enough replicas, or a Redlock
    /// majority did not agree.
    Unconfirmed,
    /// Redis answers but refuses writes: out of memory (`maxmemory` with
    /// `noeviction`), a read-only replica, a failed save (`MISCONF`).
    Rejected,
}

/// Up or down, and since when.
pub struct RedisHealth {
    /// Woken when an outage ends (the clock is measured again then).
    pub recovered: tokio::sync::Notify,
    node: String,
    down: AtomicBool,
    outage: Mutex<Option<Outage>>,
    /// Answers come from several shards ([`RedisHealth::for_shards`]).
    shards: bool,
}

struct Outage {
    since: Instant,
    reported: Instant,
    /// The last failure (with shards, a success ends the outage only
    /// [`SHARDS_QUIET`] after it).
    failed: Instant,
    missed: u64,
    trouble: Trouble,
    last_error: String,
}

impl RedisHealth {
    /// Redis counts as up until something fails.
    pub fn new(node: &str) -> RedisHealth {
        RedisHealth {
            recovered: tokio::sync::Notify::new(),
            node: node.to_string(),
            down: AtomicBool::new(false),
            outage: Mutex::new(None),
            shards: false,
        }
    }

    /// For a Redis Cluster: one shard down fails the operations of its
    /// jobs while the others succeed, so a success ends the outage only
    /// once no operation failed for [`SHARDS_QUIET`]. Without it, every
    /// second of a shard's outage logged `redis unreachable` and `redis
    /// reachable again after 1 s`, two lines a second on every node.
    pub fn for_shards(mut self, shards: bool) -> RedisHealth {
        self.shards = shards;
        self
    }

    /// An operation without acknowledgement succeeded (a read, `TIME`, a
    /// history record): ends an outage (one line); a refusal, refused
    /// writes or unconfirmed writes only a confirmed write ends.
    pub fn answered(&self) {
        // Reads go on while writes are refused (a full Redis, an ACL user
        // without a write command) or not confirmed: they do not end
        // those (else every read would end the trouble and the next write
        // begin it again, two lines a second).
        self.end(|trouble| trouble == Trouble::Unreachable);
    }

    /// A claim, renewal or release was confirmed (acknowledged by enough
    /// replicas, or by a Redlock majority): ends any trouble (one line).
    pub fn confirmed(&self) {
        self.end(|_| true);
    }

    /// Another node's decision of a new occurrence was read: Redis took
    /// that node's writes, so it takes writes again (out of memory,
    /// read-only and a failed save concern the server, not one node). Ends
    /// a [`Trouble::Rejected`] for a node that loses every claim meanwhile.
    pub fn decided_elsewhere(&self) {
        self.end(|trouble| !matches!(trouble, Trouble::Unconfirmed));
    }

    fn end(&self, ends: impl Fn(Trouble) -> bool) {
        if !self.down.load(Ordering::Relaxed) {
            return;
        }
        let mut guard = self.lock();
        if guard.as_ref().is_some_and(|outage| {
            !ends(outage.trouble) || (self.shards && outage.failed.elapsed() < SHARDS_QUIET)
        }) {
            return;
        }
        self.down.store(false, Ordering::Relaxed);
        crate::metrics::redis_up(true);
        let Some(outage) = guard.take() else {
            return;
        };
        drop(guard);
        self.recovered.notify_one();
        let secs = outage.since.elapsed().as_secs_f64();
        info!(node = %self.node, down_for_ms = u64::try_from(outage.since.elapsed().as_millis()).unwrap_or(u64::MAX),
            missed = outage.missed,
            "redis reachable again after {secs:.0} s, {} occurrences missed", outage.missed);
    }

    /// `operation` failed with `err`: starts an outage (one line), or says
    /// it goes on every few minutes.
    pub fn failed(&self, operation: &str, err: &dyn std::fmt::Display, trouble: Trouble) {
        crate::metrics::redis_error(operation);
        crate::metrics::redis_up(false);
        let mut outage = self.lock();
        let now = Instant::now();
        match outage.as_mut() {
            None => {
                *outage = Some(Outage {
                    since: now,
                    reported: now,
                    failed: now,
                    missed: 0,
                    trouble,
                    last_error: err.to_string(),
                });
                self.down.store(true, Ordering::Relaxed);
                match trouble {
                    Trouble::Refused => error!(node = %self.node, operation, error = %err,
                        "redis refuses this node's credentials or commands: fix the password or the ACL user; nothing runs meanwhile"),
                    Trouble::Unconfirmed => error!(node = %self.node, operation, error = %err,
                        "redis does not confirm this node's writes (too few replicas acknowledge them, or no redlock majority): nothing runs until it does (fail closed); `solocron status` shows it"),
                    Trouble::Rejected => error!(node = %self.node, operation, error = %err,
                        "redis refuses this node's writes (out of memory: maxmemory is reached; or a read-only replica: point the url at the master, or use sentinel; or MISCONF: its last save failed): nothing runs until it takes writes again (fail closed)"),
                    Trouble::Unreachable => error!(node = %self.node, operation, error = %err,
                        "redis unreachable: no occurrence runs until it answers (fail closed); retrying"),
                }
            }
            Some(current) => {
                current.trouble = trouble;
                current.failed = now;
                current.last_error = err.to_string();
                if now.duration_since(current.reported) >= STILL_DOWN_EVERY {
                    current.reported = now;
                    let secs = current.since.elapsed().as_secs();
                    error!(node = %self.node, operation, error = %err, missed = current.missed,
                        "redis still unreachable after {secs} s, {} occurrences missed so far", current.missed);
                }
            }
        }
    }

    /// What is wrong with Redis right now, in one line, or `None`.
    pub fn warning(&self) -> Option<String> {
        self.lock().as_ref().map(|outage| {
            let what = match outage.trouble {
                Trouble::Unreachable => "unreachable",
                Trouble::Refused => "refuses this node",
                Trouble::Unconfirmed => "does not confirm writes",
                Trouble::Rejected => "refuses writes",
            };
            let secs = outage.since.elapsed().as_secs();
            format!("redis {what} for {secs} s: {}", outage.last_error)
        })
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

    /// When this node found Redis unreachable, by its wall clock, while it
    /// still is (`None`: it answers, or the trouble is another one); the
    /// status page's "since when".
    pub fn unreachable_since(&self) -> Option<DateTime<Utc>> {
        let outage = self.lock();
        let outage = outage
            .as_ref()
            .filter(|outage| outage.trouble == Trouble::Unreachable)?;
        let ago = chrono::TimeDelta::from_std(outage.since.elapsed()).ok()?;
        Some(Utc::now() - ago)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Outage>> {
        match self.outage.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

/// What this node last saw of each member's data: the marker's token, the
/// server's `run_id`, and when (the fleet's clock).
#[derive(Debug, Default)]
pub struct DataWatch {
    seen: Vec<Option<Seen>>,
}

#[derive(Debug, Clone)]
struct Seen {
    token: String,
    run_id: Option<String>,
    at: DateTime<Utc>,
}

/// How a member's data compares with what this node saw before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    /// This node's first look at the member.
    First,
    /// The same marker on the same server.
    Same,
    /// The same marker on a new server process (a restart with RDB/AOF,
    /// a Sentinel failover): the data is there.
    Restarted,
    /// The marker this node saw is gone: so is the data it marked.
    Lost,
}

fn compare(before: Option<&Seen>, now: &Marker) -> Change {
    match before {
        None => Change::First,
        Some(before) if before.token != now.token => Change::Lost,
        Some(Seen {
            run_id: Some(old), ..
        }) if now.run_id.as_ref().is_some_and(|new| new != old) => Change::Restarted,
        Some(_) => Change::Same,
    }
}

impl DataWatch {
    /// Reads (or writes) the fleet's marker on every member and says, once
    /// per loss, when one came back without the data this node saw there
    /// (one error line, `solocron_redis_data_lost_total`). A member that
    /// does not answer is looked at the next time. Cost: one `SET NX GET`
    /// and one `INFO server` per member.
    pub async fn check(&mut self, locker: &Locker, now: DateTime<Utc>) {
        let coordinator = locker.coordinator();
        let key = crate::keys::marker_key(locker.prefix());
        let answers = identity::markers(coordinator, &key, &new_token()).await;
        for (index, change, before, marker) in self.observe(answers, now) {
            let shown = coordinator
                .members()
                .get(index)
                .map_or("redis", |member| member.shown.as_str());
            let Some(before) = before else {
                info!(node = %locker.node(), redis = %shown, key = %key,
                    run_id = %marker.run_id.as_deref().unwrap_or("unknown"),
                    "watching redis for a loss of the fleet's data (marker key read)");
                continue;
            };
            let old_run_id = before.run_id.as_deref().unwrap_or("unknown");
            let new_run_id = marker.run_id.as_deref().unwrap_or("unknown");
            let last_seen = crate::schedule::rfc3339(before.at);
            if change == Change::Lost {
                crate::metrics::redis_data_lost();
                let how = if old_run_id == new_run_id && old_run_id != "unknown" {
                    "its keys were deleted while it ran (FLUSHALL, FLUSHDB, eviction)"
                } else {
                    "it restarted without its data (no RDB or AOF), or was flushed"
                };
                let gone = if coordinator.is_quorum() {
                    format!(
                        "this redlock master's copy of the history, the last decisions, and every pause and drain from before {last_seen} is gone (the other masters keep theirs)"
                    )
                } else {
                    format!(
                        "the history, the last decisions, and every pause and drain from before {last_seen} are gone (paused jobs and drained nodes run again)"
                    )
                };
                error!(node = %locker.node(), redis = %shown, key = %key,
                    %old_run_id, %new_run_id, last_seen = %last_seen,
                    "redis lost the fleet's data: {how}; {gone}; pause or drain again what should be, and give redis persistence (appendonly yes, or RDB saves)");
            } else {
                info!(node = %locker.node(), redis = %shown, %old_run_id, %new_run_id,
                    "redis restarted (or failed over) with the fleet's data kept");
            }
        }
    }

    /// Takes each member's answer (`None`: it did not answer, looked at
    /// the next time) as seen at `now`; returns the members seen for the
    /// first time and those whose data changed since the last answer
    /// ([`Change::Lost`] or [`Change::Restarted`]), with what was seen
    /// before and now: each change once.
    fn observe(
        &mut self,
        answers: Vec<Option<Marker>>,
        now: DateTime<Utc>,
    ) -> Vec<(usize, Change, Option<Seen>, Marker)> {
        self.seen.resize_with(answers.len(), || None);
        let mut changes = Vec::new();
        for (index, (answer, seen)) in answers.into_iter().zip(self.seen.iter_mut()).enumerate() {
            let Some(marker) = answer else {
                debug!(
                    member = index,
                    "the fleet's marker key was not read; looked at again at the next check"
                );
                continue;
            };
            let before = seen.replace(Seen {
                token: marker.token.clone(),
                run_id: marker.run_id.clone(),
                at: now,
            });
            let change = compare(before.as_ref(), &marker);
            if change != Change::Same {
                changes.push((index, change, before, marker));
            }
        }
        changes
    }
}

/// The kind of trouble a plain Redis error is.
pub fn trouble_of(err: &redis::RedisError) -> Trouble {
    if is_refusal(err) {
        Trouble::Refused
    } else if is_rejection(err) {
        Trouble::Rejected
    } else {
        Trouble::Unreachable
    }
}

#[cfg(test)]
mod tests {
    use super::{Change, DataWatch, Marker, Seen, compare};

    #[test]
    fn a_lost_marker_is_told_from_a_restart_that_kept_the_data() {
        let marker = |token: &str, run_id: Option<&str>| Marker {
            token: token.to_string(),
            run_id: run_id.map(str::to_string),
        };
        let seen = Seen {
            token: "t1".to_string(),
            run_id: Some("r1".to_string()),
            at: chrono::DateTime::UNIX_EPOCH,
        };
        assert_eq!(compare(None, &marker("t1", Some("r1"))), Change::First);
        assert_eq!(
            compare(Some(&seen), &marker("t1", Some("r1"))),
            Change::Same
        );
        assert_eq!(compare(Some(&seen), &marker("t1", None)), Change::Same);
        assert_eq!(
            compare(Some(&seen), &marker("t1", Some("r2"))),
            Change::Restarted
        );
        assert_eq!(
            compare(Some(&seen), &marker("t2", Some("r2"))),
            Change::Lost
        );
        assert_eq!(
            compare(Some(&seen), &marker("t2", Some("r1"))),
            Change::Lost
        );
    }

    /// Each loss is told once: the next check compares with the new data.
    /// A member that did not answer keeps what was seen of it.
    #[test]
    fn each_change_of_a_members_data_is_told_once() {
        let marker = |token: &str, run_id: &str| {
            Some(Marker {
                token: token.to_string(),
                run_id: Some(run_id.to_string()),
            })
        };
        let at = |secs| chrono::DateTime::from_timestamp(secs, 0).expect("a time");
        let mut watch = DataWatch::default();
        let kinds =
            |changes: Vec<(usize, Change, Option<Seen>, Marker)>| -> Vec<(usize, Change, i64)> {
                changes
                    .into_iter()
                    .map(|(index, change, before, _)| {
                        (
                            index,
                            change,
                            before.map_or(0, |before| before.at.timestamp()),
                        )
                    })
                    .collect()
            };
        assert_eq!(
            kinds(watch.observe(vec![marker("t1", "r1"), marker("u1", "s1")], at(10))),
            [(0, Change::First, 0), (1, Change::First, 0)]
        );
        assert_eq!(
            kinds(watch.observe(vec![marker("t1", "r1"), None], at(20))),
            []
        );
        assert_eq!(
            kinds(watch.observe(vec![marker("t2", "r2"), marker("u1", "s2")], at(30))),
            [(0, Change::Lost, 20), (1, Change::Restarted, 10)]
        );
        assert_eq!(
            kinds(watch.observe(vec![marker("t2", "r2"), marker("u1", "s2")], at(40))),
            []
        );
    }
}
