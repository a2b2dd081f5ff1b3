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
//! The history gets every occurrence once (guarantee 3, docs/guarantees.md): a
//! run's outcome in the release, a skip in the claim, a miss in
//! [`Locker::record_missed`]; the occurrences nobody decided (all nodes down,
//! Redis away) are named by the next decision's [`ClaimReply::previous_ms`] and
//! recorded by [`Locker::record_gap`]; an occurrence due while its job is
//! paused is recorded by [`Locker::record_paused`]; a run whose node died is
//! found by the next claim or by [`Locker::check_abandoned`] once its lock
//! expired unreleased.

//!
//! The lock runs on a [`Coordinator`]: each script on its one member (a
//! server, a Sentinel master, a Cluster; with `WAIT` when `wait_replicas`
//! asks for it, see `server.rs`), or on the N masters of Redlock combined
//! by majority (`quorum.rs`). The rest of the daemon only sees [`Locker`].

pub mod access;
pub mod group;
mod quorum;
mod scripts;
mod server;

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::future::join_all;

use crate::coordinator::errors::timed_out;
use crate::coordinator::{ANSWER_TIMEOUT, Conn, Coordinator, coordinator_time_us};
use crate::history::Entry;
use crate::keys::JobKeys;
use crate::outcome::Outcome;
use crate::schedule::{Occurrence, rfc3339};

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
    /// `WAIT` found fewer replicas than `wait_replicas` acknowledging the
    /// write: it may be lost in a failover, so it does not count.
    #[error(
        "redis {step} for job `{job}` was acknowledged by {acked} of the {wanted} replica(s) \
         `wait_replicas` asks for: not counted (the master may be cut off, or has too few replicas)"
    )]
    Unacknowledged {
        step: &'static str,
        job: String,
        acked: u32,
        wanted: u32,
    },
    /// A Sentinel master lists fewer replicas than it did lately: a
    /// failover may be under way, and what it grants may be lost.
    /// Claims, renewals and releases alike: a replica that acknowledged
    /// it may resync from a new master and drop it.
    #[error(
        "redis {step} for job `{job}` not counted: the master lists {listed} replica(s), \
         {before} not long ago (a failover may be under way)"
    )]
    ReplicaLost {
        step: &'static str,
        job: String,
        listed: u32,
        before: u32,
    },
    /// Redlock: fewer than a majority of the masters agreed in time.
    /// `answered`: how many answered at all (fewer than `needed`: the
    /// masters are out of reach, not in disagreement).
    #[error(
        "redlock {step} for job `{job}`: {agreed} of {of} masters agreed, {needed} needed ({first_error})"
    )]
    NoQuorum {
        step: &'static str,
        job: String,
        agreed: usize,
        needed: usize,
        of: usize,
        answered: usize,
        first_error: String,
    },
    /// One Redlock master did not answer in time.
    #[error("redis {step} for job `{job}`: `{server}` did not answer in time")]
    Timeout {
        step: &'static str,
        job: String,
        server: String,
    },
}

/// The `first_error` of a [`LockError::NoQuorum`] where every master that
/// answered did, but they disagree (e.g. two nodes deciding at once).
pub const DISAGREED: &str = "no error: the masters disagreed";

impl LockError {
    /// Redlock masters answered but disagree: a retry settles it, Redis is
    /// not in trouble.
    pub fn is_disagreement(&self) -> bool {
        matches!(self, LockError::NoQuorum { first_error, .. } if first_error == DISAGREED)
    }
}

/// One history entry of a gap: an occurrence nobody decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GapEntry {
    /// The occurrence's name (RFC 3339).
    pub occurrence: String,
    /// [`Outcome::Missed`], or [`Outcome::Paused`] when a pause in effect
    /// covered it.
    pub outcome: Outcome,
    /// The entry's error text: why nobody ran it.
    pub error: String,
}

/// What is being claimed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A scheduled occurrence, and the last instant (epoch ms, Redis
    /// time) it may still be claimed.
    Scheduled { at: DateTime<Utc>, deadline_ms: i64 },
    /// Attempt `attempt` (2, 3…) of a scheduled occurrence whose attempt
    /// before failed; claimable until `deadline_ms` (the next occurrence).
    Retry {
        at: DateTime<Utc>,
        attempt: u32,
        deadline_ms: i64,
    },
    /// A manual run started at `started` (`manual-…`): never recorded as
    /// an occurrence.
    Manual { started: DateTime<Utc> },
    /// The lock of a renamed job's new name, held (like a manual run's)
    /// while a run of its old name `old` goes on: never an occurrence.
    Rename { old: String },
    /// A make-up run of the past occurrence `at` (`trigger --occurrence`):
    /// claimed like a manual run (the occurrence's record is not
    /// touched), named as the occurrence.
    MakeUp { at: DateTime<Utc> },
}

impl Target {
    /// The name the lock's holder and the history give it:
    /// the occurrence's (`SOLOCRON_OCCURRENCE`), or `rename-of-OLD`.
    pub fn name(&self) -> String {
        match self {
            Target::Scheduled { at, .. } | Target::Retry { at, .. } | Target::MakeUp { at } => {
                Occurrence::Scheduled(*at).to_string()
            }
            Target::Manual { started } => Occurrence::Manual(*started).to_string(),
            Target::Rename { old } => format!("rename-of-{old}"),
        }
    }
}

/// Where the retries of one occurrence stand ([`Locker::retry_state`]).
/// `attempt` is the last attempt marked for it (0: none, no retry yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryState {
    /// Attempt `attempt` may be claimed from `at_ms` (epoch ms) on.
    Pending { attempt: u32, at_ms: i64 },
    /// A run of the job is in progress (its lock is held).
    Running { attempt: u32 },
    /// No run is in progress and no attempt is pending: the occurrence is
    /// over, or a newer one was decided.
    Finished { attempt: u32 },
}

impl RetryState {
    /// How far along the occurrence is, to merge Redlock members' views:
    /// a later attempt says more, and pending says more than running.
    fn rank(self) -> (u32, u8) {
        match self {
            RetryState::Pending { attempt, .. } => (attempt, 2),
            RetryState::Running { attempt } => (attempt, 1),
            RetryState::Finished { attempt } => (attempt, 0),
        }
    }
}

/// The [`RetryState`] of an occurrence from its job's state hash: the last
/// attempt marked for it, whether that one is pending (and from when),
/// whether a run of the job is in progress.
fn retry_state_of(attempt: u32, pending: bool, at_ms: i64, running: bool) -> RetryState {
    if pending && attempt > 1 {
        RetryState::Pending { attempt, at_ms }
    } else if running {
        RetryState::Running { attempt }
    } else {
        RetryState::Finished { attempt }
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
    /// Redis's clock (`redis_ms`) is before the occurrence by more than its
    /// window to the deadline: the node's clock is ahead of Redis's by more
    /// than the job's period. Nothing was taken or recorded.
    TooEarly { redis_ms: i64 },
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
    /// Which attempt of the occurrence it was (1, or 2… for a retry).
    pub attempt: u32,
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

/// The answer to a `paused` record ([`Locker::record_paused`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paused {
    /// Recorded now: nobody had decided the occurrence (or a newer one).
    pub recorded: bool,
    /// As [`ClaimReply::previous_ms`], when recorded.
    pub previous_ms: Option<i64>,
    /// Not recorded: the last decision (`claimed`, `paused`, ...) and its node.
    pub decided: Option<(String, String)>,
}

/// An occurrence decided without a claim: its outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unrun {
    /// Its job is paused fleet-wide.
    Paused,
    /// Another run holds a lock that keeps it out (a renamed job's old
    /// name).
    Skipped,
    /// A calendar of the job excludes it.
    Excluded,
}

impl Unrun {
    /// As recorded: [`Outcome::Paused`], [`Outcome::Skipped`].
    pub fn outcome(self) -> Outcome {
        match self {
            Unrun::Paused => Outcome::Paused,
            Unrun::Skipped => Outcome::Skipped,
            Unrun::Excluded => Outcome::Excluded,
        }
    }
}

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

/// Talks to the coordinator on behalf of one node. Cheap to clone.
#[derive(Clone)]
pub struct Locker {
    coordinator: Coordinator,
    servers: Arc<[server::Server]>,
    /// The order of Redlock claims through the masters.
    order: Arc<quorum::Order>,
    prefix: String,
    node: String,
}

impl Locker {
    /// A locker for `node` on `coordinator`, keys under `prefix`, history
    /// streams capped near `history_max`.
    pub fn new(
        coordinator: impl Into<Coordinator>,
        prefix: &str,
        node: &str,
        history_max: u64,
    ) -> Locker {
        let coordinator = coordinator.into();
        let scripts = Arc::new(server::Scripts::new());
        let single = !coordinator.is_quorum();
        let servers = coordinator
            .members()
            .iter()
            .map(|member| server::Server::new(member, node, history_max, &scripts, single))
            .collect();
        let order = Arc::new(quorum::Order::new(
            coordinator
                .members()
                .iter()
                .map(|member| member.shown.as_str()),
        ));
        Locker {
            coordinator,
            servers,
            order,
            prefix: prefix.to_string(),
            node: node.to_string(),
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

    /// The coordinator, for the registry and the readers.
    pub fn coordinator(&self) -> &Coordinator {
        &self.coordinator
    }

    /// The connection of the first member (the only one but with Redlock).
    pub fn connection(&self) -> Conn {
        self.coordinator.first()
    }

    fn single(&self) -> Option<&server::Server> {
        (!self.coordinator.is_quorum())
            .then(|| self.servers.first())
            .flatten()
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
    /// `Err(Unacknowledged)` / `Err(NoQuorum)`: nothing was taken (a won
    /// claim was undone); retry with the same token until the deadline.
    pub async fn claim_detailed(
        &self,
        job: &str,
        target: &Target,
        token: &str,
        ttl: Duration,
    ) -> Result<ClaimReply, LockError> {
        let keys = self.keys(job);
        match self.single() {
            Some(server) => server.claim(&keys, job, target, token, ttl).await,
            None => {
                let (servers, order) = (&self.servers, &self.order);
                quorum::claim(servers, order, &self.node, &keys, job, target, token, ttl).await
            }
        }
    }

    /// Whether scheduled occurrence `target` of `job` is decided already,
    /// read without a script: `Ok(Some(reply))` is the answer a losing
    /// claim would give (log it and stop: nothing was taken), `Ok(None)`
    /// means claim it ([`Locker::claim_detailed`] decides). Always
    /// `Ok(None)` with Redlock (a majority decides, not one read) and for
    /// retries and manual runs. For nodes that are not first in line for
    /// an occurrence (`daemon::preference`): a losing claim costs Redis a
    /// script, this a few µs of reads.
    pub async fn peek(&self, job: &str, target: &Target) -> Result<Option<ClaimReply>, LockError> {
        let (Some(server), Target::Scheduled { at, .. }) = (self.single(), target) else {
            return Ok(None);
        };
        server
            .peek(&self.keys(job), job, at.timestamp_millis())
            .await
    }

    /// [`Locker::peek`] for several scheduled occurrences `(job, target)`
    /// at once, in one round trip where the coordinator allows it (one
    /// server, Sentinel); answered in order. `Err` only when the whole read
    /// failed; with Redlock every answer is `None` (claim, as with `peek`).
    pub async fn peek_many(
        &self,
        items: &[(&str, &Target)],
    ) -> Result<Vec<Option<ClaimReply>>, LockError> {
        let Some(server) = self.single() else {
            return Ok(vec![None; items.len()]);
        };
        let scheduled: Vec<(JobKeys, &str, i64)> = items
            .iter()
            .map(|(job, target)| {
                let at_ms = match target {
                    Target::Scheduled { at, .. } => at.timestamp_millis(),
                    // Only scheduled occurrences are peeked: never decided
                    // by an older instant's record.
                    _ => i64::MAX,
                };
                (self.keys(job), *job, at_ms)
            })
            .collect();
        let mut answers = server.peek_many(&scheduled).await?;
        for (answer, (_, target)) in answers.iter_mut().zip(items) {
            if !matches!(target, Target::Scheduled { .. }) {
                *answer = None;
            }
        }
        Ok(answers)
    }

    /// Whether any scheduled occurrence of `job` was ever decided (run,
    /// skipped, paused, missed): its state names a last decided occurrence
    /// on any member. A job that has none is new to the fleet (or renamed,
    /// or its Redis lost its data), and a node starting takes no catch-up
    /// occurrence of it (`daemon::occurrence`). One `HGET` per member.
    pub async fn ever_decided(&self, job: &str) -> Result<bool, LockError> {
        let mut read = redis::cmd("HGET");
        read.arg(self.keys(job).state).arg("last_occ");
        let last = self.read_any(job, "read state", "HGET", &read).await?;
        Ok(last.is_some())
    }

    /// Extends the lease by its TTL. `Ok(false)`: the lock is no longer ours.
    pub async fn extend(&self, lease: &Lease) -> Result<bool, LockError> {
        match self.single() {
            Some(server) => server.extend(lease).await,
            None => quorum::extend(&self.servers, lease).await,
        }
    }

    /// Releases the lease (only if still ours) and appends `entry` to the
    /// job's history, once per lease: a retry whose first attempt reached
    /// Redis records nothing. The entry is recorded also when the lock was
    /// not ours any more (`lock_was_ours: false`), and replaces an
    /// `abandoned` entry of the same run.
    pub async fn release(&self, lease: &Lease, entry: &Entry) -> Result<Released, LockError> {
        match self.single() {
            Some(server) => server.release(lease, entry).await,
            None => quorum::release(&self.servers, lease, entry).await,
        }
    }

    /// Records the scheduled occurrence `at` of `job` as
    /// missed, unless it or a newer one was already decided by someone else.
    /// `token` is the one this node's claims of it used (empty if it never
    /// sent one): if such a claim reached Redis after the node gave up and
    /// won, its lock is deleted and the decision becomes `missed`. Call it
    /// only once the starting deadline has passed: a recorded miss refuses
    /// every later claim of the occurrence.
    pub async fn record_missed(
        &self,
        job: &str,
        at: DateTime<Utc>,
        reason: &str,
        token: &str,
    ) -> Result<Missed, LockError> {
        self.record_unclaimed(job, at, reason, token, Outcome::Missed)
            .await
    }

    /// Records the scheduled occurrence `at` of `job` as `throttled` (every
    /// node that looked was at its `max_running`), as
    /// [`Locker::record_missed`] records a miss.
    pub async fn record_throttled(
        &self,
        job: &str,
        at: DateTime<Utc>,
        reason: &str,
    ) -> Result<Missed, LockError> {
        self.record_unclaimed(job, at, reason, "", Outcome::Throttled)
            .await
    }

    async fn record_unclaimed(
        &self,
        job: &str,
        at: DateTime<Utc>,
        reason: &str,
        token: &str,
        outcome: Outcome,
    ) -> Result<Missed, LockError> {
        let keys = self.keys(job);
        let (at_ms, name) = (at.timestamp_millis(), rfc3339(at));
        match self.single() {
            Some(server) => {
                server
                    .record_missed(&keys, job, at_ms, &name, reason, token, outcome)
                    .await
            }
            None => {
                quorum::record_missed(
                    &self.servers,
                    &keys,
                    job,
                    at_ms,
                    &name,
                    reason,
                    token,
                    outcome,
                )
                .await
            }
        }
    }

    /// Records `entries` of `job` (each `missed`, or `paused` when a pause
    /// covered it), once per `gap_id` (a retry records nothing twice). Only
    /// for occurrences a [`ClaimReply::previous_ms`] or
    /// [`Missed::previous_ms`] showed nobody decided. `Ok(false)`: already
    /// recorded.
    pub async fn record_gap(
        &self,
        job: &str,
        gap_id: &str,
        entries: &[GapEntry],
    ) -> Result<bool, LockError> {
        let keys = self.keys(job);
        match self.single() {
            Some(server) => server.record_gap(&keys, job, gap_id, entries).await,
            None => quorum::record_gap(&self.servers, &keys, job, gap_id, entries).await,
        }
    }

    /// Records the scheduled occurrence `at` of `job` as
    /// `paused`, with `why` (who paused it, since when, why) as its error
    /// text, unless it or a newer one was already decided: then it is
    /// never run, skipped or missed, and never recorded twice.
    pub async fn record_paused(
        &self,
        job: &str,
        at: DateTime<Utc>,
        why: &str,
    ) -> Result<Paused, LockError> {
        self.record_unrun(job, at, why, Unrun::Paused).await
    }

    /// Records the scheduled occurrence `at` of `job` as
    /// `outcome`, unclaimed, as [`Locker::record_paused`] does: `skipped`
    /// for an occurrence of a renamed job while its old name's run still
    /// holds that lock (`why` names it).
    pub async fn record_unrun(
        &self,
        job: &str,
        at: DateTime<Utc>,
        why: &str,
        outcome: Unrun,
    ) -> Result<Paused, LockError> {
        let keys = self.keys(job);
        let (at_ms, name) = (at.timestamp_millis(), rfc3339(at));
        match self.single() {
            Some(server) => {
                server
                    .record_decision(&keys, job, at_ms, &name, why, outcome)
                    .await
            }
            None => {
                quorum::record_decision(&self.servers, &keys, job, at_ms, &name, why, outcome).await
            }
        }
    }

    /// The node holding `job`'s lock, if any member has it held (with
    /// Redlock: any master, so a lock a minority still has counts as
    /// held). One `GET` per member; `Err` only if none answered.
    pub async fn holder(&self, job: &str) -> Result<Option<String>, LockError> {
        let mut read = redis::cmd("GET");
        read.arg(self.keys(job).lock);
        let value = self.read_any(job, "read lock", "GET", &read).await?;
        Ok(value.map(|value| match value.split_once(' ') {
            Some((_, node)) => node.to_string(),
            None => value,
        }))
    }

    /// `read` (`command`), answering a string or nil, on every member: the
    /// first non-empty answer, or `None` when none has one (a member that
    /// fails counts as having none, as long as one answers); `Err` only
    /// if none answered.
    async fn read_any(
        &self,
        job: &str,
        step: &'static str,
        command: &'static str,
        read: &redis::Cmd,
    ) -> Result<Option<String>, LockError> {
        let answers = join_all(self.servers.iter().map(|server| async move {
            let mut conn = server.conn.clone();
            tokio::time::timeout(
                ANSWER_TIMEOUT * 3,
                read.query_async::<Option<String>>(&mut conn),
            )
            .await
            .unwrap_or_else(|_| Err(timed_out(command)))
        }))
        .await;
        let (mut first_error, mut answered) = (None, 0);
        for answer in answers {
            match answer {
                Ok(Some(value)) if !value.is_empty() => return Ok(Some(value)),
                Ok(_) => answered += 1,
                Err(err) => {
                    first_error.get_or_insert(err);
                }
            }
        }
        match first_error {
            Some(err) if answered == 0 => Err(redis_error(step, job, err)),
            _ => Ok(None),
        }
    }

    /// Deletes `lease`'s lock on every member where it still holds our
    /// value, recording nothing: for a lock taken only to keep others
    /// out (a renamed job's new name while the old name's run goes on),
    /// never for a run's own lease ([`Locker::release`] records it).
    /// Best effort: a lock left behind expires by itself.
    pub async fn drop_lease(&self, lease: &Lease) {
        join_all(
            self.servers
                .iter()
                .map(|server| server.undo(&lease.keys, &lease.job, &lease.token)),
        )
        .await;
    }

    /// Takes room in `group` for `ask` (see [`group`]). `Err`: Redis
    /// failed or the Redlock masters disagree; retry until the deadline.
    pub async fn group_take(
        &self,
        group: &str,
        ask: &group::Ask,
        job: &str,
    ) -> Result<group::Taken, LockError> {
        let keys = crate::keys::GroupKeys::new(&self.prefix, group);
        match self.single() {
            // One server counts; indexes are for a majority of masters.
            Some(server) => server.group_take(&keys, ask, (-2, -2), job).await,
            None => group::quorum_take(&self.servers, &keys, ask, job).await,
        }
    }

    /// Renews the slot `member` of `group` for `ttl`; `Ok(false)`: it is
    /// gone (expired).
    pub async fn group_renew(
        &self,
        group: &str,
        member: &str,
        ttl: Duration,
        job: &str,
    ) -> Result<bool, LockError> {
        let keys = crate::keys::GroupKeys::new(&self.prefix, group);
        match self.single() {
            Some(server) => server.group_renew(&keys, member, ttl, job).await,
            None => group::quorum_renew(&self.servers, &keys, member, ttl, job).await,
        }
    }

    /// Gives back `holder`'s slot in `group` and takes it out of the
    /// queue, on every member; `Err` if a majority failed (the slot then
    /// expires by itself).
    pub async fn group_give_back(
        &self,
        group: &str,
        holder: &str,
        job: &str,
    ) -> Result<(), LockError> {
        let keys = crate::keys::GroupKeys::new(&self.prefix, group);
        let answers = join_all(
            self.servers
                .iter()
                .map(|server| server.group_give_back(&keys, holder, job)),
        )
        .await;
        let done = answers.iter().filter(|answer| answer.is_ok()).count();
        match answers.into_iter().find_map(Result::err) {
            Some(err) if done < self.coordinator.majority() => Err(err),
            _ => Ok(()),
        }
    }

    /// Whether the last run of `job` was abandoned (its lock expired without
    /// a release); if so it is recorded now, once cluster-wide.
    pub async fn check_abandoned(&self, job: &str) -> Result<AbandonCheck, LockError> {
        let keys = self.keys(job);
        match self.single() {
            Some(server) => server.check_abandoned(&keys, job).await,
            None => quorum::check_abandoned(&self.servers, &keys, job).await,
        }
    }

    /// Where the retries of `job`'s occurrence `at_ms` stand (a hint for
    /// when to claim the next attempt; the claim itself decides).
    pub async fn retry_state(&self, job: &str, at_ms: i64) -> Result<RetryState, LockError> {
        let keys = self.keys(job);
        match self.single() {
            Some(server) => server.retry_state(&keys, job, at_ms).await,
            None => quorum::retry_state(&self.servers, &keys, job, at_ms).await,
        }
    }

    /// Loads every script into every member now and probes every command
    /// the daemon sends ([`access`]): at start, so that a user without the
    /// right to run them (ACL) is refused before the first occurrence. With Redlock a refusing master is an error; one that
    /// does not answer is not (a minority may be down), as long as a
    /// majority took the scripts.
    pub async fn load_scripts(&self) -> Result<(), redis::RedisError> {
        let results = join_all(self.servers.iter().map(|server| async move {
            tokio::time::timeout(ANSWER_TIMEOUT * 3, server.load_scripts(&self.prefix))
                .await
                .unwrap_or_else(|_| Err(timed_out("SCRIPT LOAD")))
        }))
        .await;
        let mut loaded = 0;
        let mut first_error = None;
        for (server, result) in self.servers.iter().zip(results) {
            match result {
                Ok(()) => loaded += 1,
                Err(err) if crate::coordinator::errors::is_refusal(&err) => {
                    return Err(self.naming(&server.shown, err));
                }
                Err(err) => {
                    first_error.get_or_insert(err);
                }
            }
        }
        match first_error {
            Some(err) if loaded < self.coordinator.majority() => Err(err),
            _ => Ok(()),
        }
    }

    /// `err` of the server `shown`, naming it when the coordinator has
    /// several (a Redlock master whose password differs from the others'
    /// was refused without saying which one) and the error does not.
    fn naming(&self, shown: &str, err: redis::RedisError) -> redis::RedisError {
        if !self.coordinator.is_quorum() || err.to_string().contains(shown) {
            return err;
        }
        let detail = format!("redlock master `{shown}`: {err}");
        redis::RedisError::from((err.kind(), "a redlock master refused this node", detail))
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Redis `TIME` in µs since the epoch; with Redlock the median of the
    /// masters that answered (a majority must).
    pub async fn redis_time_us(&self) -> Result<i64, redis::RedisError> {
        coordinator_time_us(&self.coordinator).await
    }
}

/// Redis `TIME` of `conn` as UTC epoch ms.
pub async fn redis_time_ms(conn: &Conn) -> redis::RedisResult<i64> {
    crate::coordinator::redis_time_ms(conn).await
}

/// The step a `paused` or `skipped` record names in its errors.
fn decision_step(outcome: Unrun) -> &'static str {
    match outcome {
        Unrun::Skipped => "record skipped",
        Unrun::Paused => "record paused",
        Unrun::Excluded => "record excluded",
    }
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
