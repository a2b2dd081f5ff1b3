//! Claims that let exactly one node run a given occurrence of a job.
//!
//! One Lua script ([`scripts::CLAIM`]) does the whole claim in a single round
//! trip: it refuses a scheduled occurrence that is not newer than the job's
//! last decided one (so a late or skewed node never runs it again, even after
//! the winner released the lock), refuses while the lock is held (and records
//! the overlap skip once), and otherwise records the occurrence, sets the lock
//! to `TOKEN NODE` with `PX lock_ttl` and hands out the next fence,
//! `max(previous + 1, Redis TIME in µs)`, so fences keep growing even after
//! Redis lost its data. A retry with the same token gets the same answer,
//! because the redis crate does not retry a command whose reply was lost.
//!
//! Manual runs take the same lock and a fresh fence but never touch the
//! occurrence record, so they neither consume nor suppress a scheduled run.
//!
//! Extend and release compare the full lock value first: a node never
//! touches a lock it no longer holds (no bare `DEL`).
//!
//! The history gets every occurrence once (SPEC §2.3): a run's outcome in
//! the release, a skip in the claim, a miss in [`Locker::record_missed`];
//! the occurrences nobody decided (all nodes down, Redis away) are named by
//! the next decision's [`ClaimReply::previous_ms`] and recorded by
//! [`Locker::record_gap`]; a run whose node died is found by the next claim
//! or by [`Locker::check_abandoned`] once its lock expired unreleased.

mod scripts;
pub mod watchdog;

use std::time::Duration;

use redis::Script;
use redis::aio::ConnectionManager;

use crate::history::Entry;

/// Redis failed (unreachable, timed out, or replied with something unexpected).
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    // The cause is part of the message, not a `#[source]`: these errors are
    // logged with `%err`, which would otherwise drop why Redis failed.
    #[error("redis {step} failed for job `{job}`: {cause}")]
    Redis {
        step: &'static str,
        job: String,
        cause: redis::RedisError,
    },
    #[error("unexpected reply to {step} for job `{job}`: {reply}")]
    Reply {
        step: &'static str,
        job: String,
        reply: String,
    },
}

/// The Redis keys of one job; all share the hash tag `{PREFIX:JOB}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobKeys {
    /// `{PREFIX:JOB}:lock`: `TOKEN NODE`, with a TTL.
    pub lock: String,
    /// `{PREFIX:JOB}:state`: hash with the fence and the last decision.
    pub state: String,
    /// `{PREFIX:JOB}:history`: stream of decisions.
    pub history: String,
}

impl JobKeys {
    /// The keys of `job` under `prefix`.
    pub fn new(prefix: &str, job: &str) -> JobKeys {
        let tag = format!("{{{prefix}:{job}}}");
        JobKeys {
            lock: format!("{tag}:lock"),
            state: format!("{tag}:state"),
            history: format!("{tag}:history"),
        }
    }
}

/// What is being claimed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A scheduled occurrence: UTC epoch ms, its RFC 3339 name, and the
    /// last instant (epoch ms, Redis time) it may still be claimed.
    Scheduled {
        at_ms: i64,
        name: String,
        deadline_ms: i64,
    },
    /// A manual run (`manual-…`): never recorded as an occurrence.
    Manual { name: String },
}

impl Target {
    /// The name runs and logs see (`SOLOCRON_OCCURRENCE`).
    pub fn name(&self) -> &str {
        match self {
            Target::Scheduled { name, .. } | Target::Manual { name } => name,
        }
    }
}

/// The answer to a claim. Losing is a normal answer, not an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The lock is ours with this fence.
    Won(Lease),
    /// The occurrence (or a newer one) was already decided by `by`.
    Taken {
        by: String,
        fence: u64,
        /// `claimed` or `skipped`.
        decision: String,
    },
    /// The lock is held by `holder` (a run overlaps); a scheduled
    /// occurrence was recorded as skipped.
    Busy { holder: String, fence: u64 },
    /// Redis received the claim after the occurrence's deadline: nothing was
    /// taken or recorded.
    TooLate,
    /// A newer occurrence (UTC epoch ms) was decided before this claim
    /// arrived: this one was run elsewhere or missed, it is too old to say.
    Superseded { last_ms: i64 },
}

/// A [`Claim`] with what the caller owes the history besides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimReply {
    pub claim: Claim,
    /// For a won or skipped scheduled occurrence: the job's occurrence
    /// decided before it (UTC epoch ms), if any. Occurrences of the schedule
    /// between the two were decided by nobody: record them with
    /// [`Locker::record_gap`].
    pub previous_ms: Option<i64>,
    /// What is left of the lock's TTL when someone else holds it.
    pub lock_ttl_left: Option<Duration>,
    /// A run this claim found abandoned and recorded so.
    pub abandoned: Option<Abandoned>,
}

/// A run recorded `abandoned`: its lock expired without a release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Abandoned {
    /// The node that ran it (and stopped renewing its lock).
    pub node: String,
    pub fence: u64,
    pub occurrence: String,
}

/// What [`Locker::check_abandoned`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AbandonCheck {
    /// The lock is held by `holder`; look again once `ttl_left` has passed.
    Held { ttl_left: Duration, holder: String },
    /// The last run's lock expired unreleased; recorded now.
    Abandoned(Abandoned),
    /// Nothing runs and nothing is owed.
    Idle,
}

/// The answer to a release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Released {
    /// The lock still held our token and is deleted now.
    pub lock_was_ours: bool,
    /// The run had been recorded `abandoned` (its node was cut off from
    /// Redis past the TTL); that entry was replaced by the run's outcome.
    pub replaced_abandoned: bool,
}

/// The answer to a miss record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Missed {
    /// Recorded now (not decided before by anyone).
    pub recorded: bool,
    /// As [`ClaimReply::previous_ms`].
    pub previous_ms: Option<i64>,
}

/// How long Redis remembers that a release (or a gap) was recorded, so that
/// a retry of it records nothing twice: beyond a node's retry pause once
/// Redis answers again, by a wide margin for a retry that sat in a socket.
const RECORD_REMEMBERED: Duration = Duration::from_secs(60);

/// A held lock: what extend and release need to prove ownership.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub job: String,
    pub keys: JobKeys,
    /// 128 random bits, hex.
    pub token: String,
    pub fence: u64,
    pub ttl: Duration,
}

impl Lease {
    fn value(&self, node: &str) -> String {
        format!("{} {}", self.token, node)
    }
}

/// A new random lock token: 128 bits as 32 hex digits.
pub fn new_token() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// Talks to Redis on behalf of one node.
#[derive(Clone)]
pub struct Locker {
    conn: ConnectionManager,
    prefix: String,
    node: String,
    history_max: u64,
    claim: Script,
    extend: Script,
    release: Script,
    missed: Script,
    gap: Script,
    abandon: Script,
}

impl Locker {
    /// A locker for `node`, keys under `prefix`, history streams capped near `history_max`.
    pub fn new(conn: ConnectionManager, prefix: &str, node: &str, history_max: u64) -> Locker {
        Locker {
            conn,
            prefix: prefix.to_string(),
            node: node.to_string(),
            history_max,
            claim: Script::new(&scripts::with_prelude(scripts::CLAIM)),
            extend: Script::new(scripts::EXTEND),
            release: Script::new(&scripts::with_prelude(scripts::RELEASE)),
            missed: Script::new(&scripts::with_prelude(scripts::MISSED)),
            gap: Script::new(&scripts::with_prelude(scripts::GAP)),
            abandon: Script::new(&scripts::with_prelude(scripts::ABANDON)),
        }
    }

    /// This node's id.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The keys of `job`.
    pub fn keys(&self, job: &str) -> JobKeys {
        JobKeys::new(&self.prefix, job)
    }

    /// The connection, for readers (history, status).
    pub fn connection(&self) -> ConnectionManager {
        self.conn.clone()
    }

    /// Claims `target` of `job` with `token` (reuse the token when retrying
    /// after an `Err`: the script then answers as it did the first time).
    pub async fn claim(
        &self,
        job: &str,
        target: &Target,
        token: &str,
        ttl: Duration,
    ) -> Result<Claim, LockError> {
        Ok(self.claim_detailed(job, target, token, ttl).await?.claim)
    }

    /// [`Locker::claim`] with what the claim found besides (see [`ClaimReply`]).
    pub async fn claim_detailed(
        &self,
        job: &str,
        target: &Target,
        token: &str,
        ttl: Duration,
    ) -> Result<ClaimReply, LockError> {
        let keys = self.keys(job);
        let (mode, at_ms, deadline_ms) = match target {
            Target::Scheduled {
                at_ms, deadline_ms, ..
            } => ("scheduled", *at_ms, *deadline_ms),
            Target::Manual { .. } => ("manual", 0, 0),
        };
        let reply: Vec<String> = self
            .claim
            .key(&keys.lock)
            .key(&keys.state)
            .key(&keys.history)
            .arg(mode)
            .arg(at_ms)
            .arg(token)
            .arg(&self.node)
            .arg(ttl_ms(ttl))
            .arg(target.name())
            .arg(self.history_max)
            .arg(deadline_ms)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|source| redis_error("claim", job, source))?;
        let bad = || LockError::Reply {
            step: "claim",
            job: job.to_string(),
            reply: format!("{reply:?}"),
        };
        let text = |i: usize| reply.get(i).map(String::as_str).unwrap_or_default();
        let number = |i: usize| text(i).parse::<i64>().ok();
        let fence_at = |i: usize| text(i).parse::<u64>().ok();
        let abandoned_at = |i: usize| {
            (!text(i).is_empty()).then(|| Abandoned {
                node: text(i).to_string(),
                fence: fence_at(i + 1).unwrap_or(0),
                occurrence: text(i + 2).to_string(),
            })
        };
        let ttl_left = |i: usize| {
            number(i)
                .and_then(|ms| u64::try_from(ms).ok())
                .map(Duration::from_millis)
        };
        let mut answer = ClaimReply {
            claim: Claim::TooLate,
            previous_ms: None,
            lock_ttl_left: None,
            abandoned: None,
        };
        answer.claim = match text(0) {
            "won" => {
                answer.previous_ms = number(2);
                answer.abandoned = abandoned_at(3);
                Claim::Won(Lease {
                    job: job.to_string(),
                    keys,
                    token: token.to_string(),
                    fence: fence_at(1).ok_or_else(bad)?,
                    ttl,
                })
            }
            "claimed" => {
                answer.lock_ttl_left = ttl_left(4);
                answer.abandoned = abandoned_at(5);
                Claim::Taken {
                    by: reply.get(1).cloned().ok_or_else(bad)?,
                    fence: fence_at(2).unwrap_or(0),
                    decision: text(3).to_string(),
                }
            }
            "late" => Claim::TooLate,
            "superseded" => Claim::Superseded {
                last_ms: number(1).ok_or_else(bad)?,
            },
            "busy" => {
                answer.previous_ms = number(3);
                answer.lock_ttl_left = ttl_left(4);
                Claim::Busy {
                    holder: reply.get(1).cloned().ok_or_else(bad)?,
                    fence: fence_at(2).unwrap_or(0),
                }
            }
            _ => return Err(bad()),
        };
        Ok(answer)
    }

    /// Extends the lease by its TTL. `Ok(false)`: the lock is no longer ours.
    pub async fn extend(&self, lease: &Lease) -> Result<bool, LockError> {
        let extended: i64 = self
            .extend
            .key(&lease.keys.lock)
            .arg(lease.value(&self.node))
            .arg(ttl_ms(lease.ttl))
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|source| redis_error("extend", &lease.job, source))?;
        Ok(extended == 1)
    }

    /// Releases the lease (only if still ours) and appends `entry` to the
    /// job's history, once per lease: a retry whose first attempt reached
    /// Redis records nothing. The entry is recorded also when the lock was
    /// not ours any more (`lock_was_ours: false`), and replaces an
    /// `abandoned` entry of the same run.
    pub async fn release(&self, lease: &Lease, entry: &Entry) -> Result<Released, LockError> {
        let mut invocation = self.release.prepare_invoke();
        invocation
            .key(&lease.keys.lock)
            .key(&lease.keys.state)
            .key(&lease.keys.history)
            .arg(lease.value(&self.node))
            .arg(&lease.token)
            .arg(self.history_max)
            .arg(ttl_ms(RECORD_REMEMBERED))
            .arg(lease.fence);
        for (field, value) in entry.to_fields() {
            invocation.arg(field).arg(value);
        }
        let reply: Vec<i64> = invocation
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|source| redis_error("release", &lease.job, source))?;
        Ok(Released {
            lock_was_ours: reply.first() == Some(&1),
            replaced_abandoned: reply.get(1) == Some(&1),
        })
    }

    /// Records the scheduled occurrence `at_ms` (named `name`) of `job` as
    /// missed, unless it or a newer one was already decided by someone else.
    /// `token` is the one this node's claims of it used (empty if it never
    /// sent one): if such a claim reached Redis after the node gave up and
    /// won, its lock is deleted and the decision becomes `missed`. Call it
    /// only once the starting deadline has passed: a recorded miss refuses
    /// every later claim of the occurrence.
    pub async fn record_missed(
        &self,
        job: &str,
        at_ms: i64,
        name: &str,
        reason: &str,
        token: &str,
    ) -> Result<Missed, LockError> {
        let keys = self.keys(job);
        let reply: Vec<String> = self
            .missed
            .key(&keys.state)
            .key(&keys.history)
            .key(&keys.lock)
            .arg(at_ms)
            .arg(name)
            .arg(&self.node)
            .arg(self.history_max)
            .arg(reason)
            .arg(token)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|source| redis_error("record missed", job, source))?;
        Ok(Missed {
            recorded: reply.first().map(String::as_str) == Some("1"),
            previous_ms: reply.get(1).and_then(|ms| ms.parse().ok()),
        })
    }

    /// Records `entries` (occurrence name, reason) of `job` as missed, once
    /// per `gap_id` (a retry records nothing twice). Only for occurrences a
    /// [`ClaimReply::previous_ms`] or [`Missed::previous_ms`] showed nobody
    /// decided. `Ok(false)`: already recorded.
    pub async fn record_gap(
        &self,
        job: &str,
        gap_id: &str,
        entries: &[(String, String)],
    ) -> Result<bool, LockError> {
        let keys = self.keys(job);
        let mut invocation = self.gap.prepare_invoke();
        invocation
            .key(&keys.state)
            .key(&keys.history)
            .arg(gap_id)
            .arg(self.history_max)
            .arg(ttl_ms(RECORD_REMEMBERED))
            .arg(&self.node);
        for (occurrence, reason) in entries {
            invocation.arg(occurrence).arg(reason);
        }
        let recorded: i64 = invocation
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|source| redis_error("record missed", job, source))?;
        Ok(recorded == 1)
    }

    /// Whether the last run of `job` was abandoned (its lock expired without
    /// a release); if so it is recorded now, once cluster-wide.
    pub async fn check_abandoned(&self, job: &str) -> Result<AbandonCheck, LockError> {
        let keys = self.keys(job);
        let reply: Vec<String> = self
            .abandon
            .key(&keys.lock)
            .key(&keys.state)
            .key(&keys.history)
            .arg(&self.node)
            .arg(self.history_max)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|source| redis_error("abandon check", job, source))?;
        let text = |i: usize| reply.get(i).cloned().unwrap_or_default();
        Ok(match text(0).as_str() {
            "held" => AbandonCheck::Held {
                ttl_left: Duration::from_millis(text(1).parse::<u64>().unwrap_or(0)),
                holder: text(2),
            },
            "abandoned" => AbandonCheck::Abandoned(Abandoned {
                node: text(1),
                fence: text(2).parse().unwrap_or(0),
                occurrence: text(3),
            }),
            "idle" => AbandonCheck::Idle,
            _ => {
                return Err(LockError::Reply {
                    step: "abandon check",
                    job: job.to_string(),
                    reply: format!("{reply:?}"),
                });
            }
        })
    }

    /// Loads every script into Redis now: at start, so that a user without
    /// the right to run them (ACL) is refused before the first occurrence.
    pub async fn load_scripts(&self) -> Result<(), redis::RedisError> {
        for script in [
            &self.claim,
            &self.extend,
            &self.release,
            &self.missed,
            &self.gap,
            &self.abandon,
        ] {
            script
                .prepare_invoke()
                .load_async(&mut self.conn.clone())
                .await?;
        }
        Ok(())
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Redis `TIME` as UTC epoch ms, with the round trip it took.
    pub async fn redis_time_ms(&self) -> Result<(i64, Duration), redis::RedisError> {
        let sent = std::time::Instant::now();
        let now_ms = redis_time_ms(&self.conn).await?;
        Ok((now_ms, sent.elapsed()))
    }
}

/// Redis `TIME` as UTC epoch ms.
pub async fn redis_time_ms(conn: &ConnectionManager) -> redis::RedisResult<i64> {
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query_async(&mut conn.clone()).await?;
    Ok(secs * 1000 + micros / 1000)
}

fn ttl_ms(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
}

fn redis_error(step: &'static str, job: &str, cause: redis::RedisError) -> LockError {
    LockError::Redis {
        step,
        job: job.to_string(),
        cause,
    }
}
