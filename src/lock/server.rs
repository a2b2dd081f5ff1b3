//! The lock's scripts on one member of the coordinator (one server, a
//! Sentinel master, a Cluster, or one Redlock master): claim, extend,
//! release, miss and gap records, the abandoned check and the undo.
//!
//! With `wait_replicas` set, a claim, an extend and a release are each one
//! pipeline `[EVALSHA …, WAIT n timeout]` on the same connection (WAIT
//! cannot run inside a script, and a WAIT sent on its own, after a
//! reconnect, proves nothing about this write). Too few acknowledgements
//! count as a failure ([`LockError::Unacknowledged`]): a won claim is undone
//! with its token before that is returned, so a master that is cut off (or
//! already demoted but still accepting writes) grants nothing that runs; a
//! renewal does not move the lease's deadline; a release is retried.
//!
//! With `wait_replicas` on one master (Sentinel, or a `url` with
//! replicas) the claim, extend and release pipelines also ask `ROLE`:
//! after a graceful `SENTINEL FAILOVER` the old master keeps accepting
//! writes, and for about a second the replica that was *not* promoted still
//! acknowledges them before it resyncs from the new master and drops them
//! (measured: `tests/it/ha/probe.rs`), so `WAIT 1` alone can let a write
//! through that the new master never sees. The promoted replica leaves the
//! old master's replica list the moment it is promoted, so a master that
//! lists fewer replicas than it did within [`REPLICA_MEMORY`] (remembered
//! per master, for the master the pipeline actually ran on: with Sentinel
//! its address and the configuration epoch the sentinels named it at) is
//! in doubt, and the master is looked up again:
//! - a claim on it is undone and not counted ([`LockError::ReplicaLost`]);
//! - a renewal on it does not count: the lease's deadline stays where the
//!   last renewal the new master can have seen put it, so the watchdog
//!   stops the run before that lock can expire on the new master (a
//!   renewal acknowledged by a replica about to drop it is no renewal);
//! - a release on it does not count and is retried, on the new master
//!   once the sentinels name it (token-checked and recorded once per
//!   master, so the retry deletes the lock there and records the outcome
//!   exactly once in the history that survives).
//!
//! Failure model: any command may fail or its answer be lost; every step
//! is safe to retry with the same token. What a master grants is counted
//! only with its acknowledgements and, on one master, its replica count:
//! an unconfirmed claim never runs. An unconfirmed claim undone after a
//! newer occurrence was decided is recorded `missed` by the undo
//! ([`scripts::UNDO`]), so it still ends in exactly one history record.

use std::sync::Arc;
use std::time::Duration;

use redis::{FromRedisValue, Script, ScriptInvocation};

use super::scripts;
use super::{
    AbandonCheck, Abandoned, Claim, ClaimReply, Lease, LockError, Missed, Paused, Released, Target,
    Unrun, redis_error, ttl_ms,
};
use crate::coordinator::{Conn, Member, Wait};
use crate::history::Entry;
use crate::outcome::Outcome;

/// How long Redis remembers that a release (or a gap) was recorded, so that
/// a retry of it records nothing twice: beyond a node's retry pause once
/// Redis answers again, by a wide margin for a retry that sat in a socket.
const RECORD_REMEMBERED: Duration = Duration::from_secs(30);

/// How long a Sentinel master's replica count is remembered: a master that
/// lists fewer replicas than this long ago grants no claim (a failover may
/// be under way); after it, the smaller count is the new normal.
const REPLICA_MEMORY: Duration = Duration::from_secs(30);

/// The most replicas each master listed lately, by master (`host:port`,
/// with Sentinel `host:port@epoch`): kept per master, so that answers from
/// the old and the new master interleaving through a failover (tasks that
/// sent before and after the switch) never make each other look fresh,
/// while a server promoted again at a later failover (a newer epoch)
/// starts afresh.
#[derive(Default)]
struct Replicas {
    seen: std::collections::HashMap<String, (u32, std::time::Instant)>,
}

impl Replicas {
    /// Whether `listed` replicas on `master` now are fewer than lately:
    /// `Some(the most listed lately)` if so.
    fn dropped(&mut self, master: &str, listed: u32) -> Option<u32> {
        let now = std::time::Instant::now();
        self.seen
            .retain(|_, (_, at)| now.duration_since(*at) < REPLICA_MEMORY);
        match self.seen.get(master) {
            Some((most, _)) if listed < *most => Some(*most),
            _ => {
                self.seen.insert(master.to_string(), (listed, now));
                None
            }
        }
    }
}

/// The scripts, parsed and hashed once per process.
pub(super) struct Scripts {
    claim: Script,
    extend: Script,
    release: Script,
    missed: Script,
    gap: Script,
    abandon: Script,
    undo: Script,
    paused: Script,
}

impl Scripts {
    pub(super) fn new() -> Scripts {
        Scripts {
            claim: Script::new(&scripts::with_prelude(scripts::CLAIM)),
            extend: Script::new(scripts::EXTEND),
            release: Script::new(&scripts::with_prelude(scripts::RELEASE)),
            missed: Script::new(&scripts::with_prelude(scripts::MISSED)),
            gap: Script::new(&scripts::with_prelude(scripts::GAP)),
            abandon: Script::new(&scripts::with_prelude(scripts::ABANDON)),
            undo: Script::new(&scripts::with_prelude(scripts::UNDO)),
            paused: Script::new(&scripts::with_prelude(scripts::PAUSED)),
        }
    }

    fn all(&self) -> [&Script; 8] {
        [
            &self.claim,
            &self.extend,
            &self.release,
            &self.missed,
            &self.gap,
            &self.abandon,
            &self.undo,
            &self.paused,
        ]
    }
}

/// One member's view of the lock, for one node.
#[derive(Clone)]
pub(super) struct Server {
    pub(super) conn: Conn,
    wait: Wait,
    pub(super) shown: String,
    node: String,
    history_max: u64,
    scripts: Arc<Scripts>,
    pub(super) group_scripts: Arc<super::group::GroupScripts>,
    replicas: Arc<std::sync::Mutex<Replicas>>,
    /// The undo records an occurrence it leaves behind (not on one of the
    /// Redlock masters: there a majority decides, not this one).
    records_undone: bool,
}

impl Server {
    pub(super) fn new(
        member: &Member,
        node: &str,
        history_max: u64,
        scripts: &Arc<Scripts>,
        records_undone: bool,
    ) -> Server {
        Server {
            conn: member.conn.clone(),
            wait: member.wait,
            shown: member.shown.clone(),
            node: node.to_string(),
            history_max,
            scripts: Arc::clone(scripts),
            group_scripts: Arc::new(super::group::GroupScripts::new()),
            replicas: Arc::default(),
            records_undone,
        }
    }

    /// With `wait_replicas` on one master (Sentinel, or a `url`), the claim
    /// pipeline lists the master's replicas too (see the module doc). A
    /// Cluster connection has many masters behind it: not there.
    pub(super) fn watches_replicas(&self) -> bool {
        self.wait.replicas > 0 && !matches!(self.conn, Conn::Cluster(_))
    }

    /// Runs `invocation`; with acknowledgements asked, pipelined with `WAIT`
    /// and answering how many replicas acknowledged, and with `role` which
    /// master it ran on and how many replicas its `ROLE` lists, from the
    /// same pipeline.
    pub(super) async fn invoke_with<T: FromRedisValue>(
        &self,
        invocation: &ScriptInvocation<'_>,
        step: &'static str,
        job: &str,
        role: bool,
    ) -> Result<(T, Option<u32>, Option<(String, u32)>), LockError> {
        let mut conn = self.conn.clone();
        if self.wait.replicas == 0 {
            let reply = invocation
                .invoke_async(&mut conn)
                .await
                .map_err(|source| redis_error(step, job, source))?;
            return Ok((reply, None, None));
        }
        let mut pipe = redis::pipe();
        pipe.invoke_script(invocation)
            .cmd("WAIT")
            .arg(self.wait.replicas)
            .arg(u64::try_from(self.wait.timeout.as_millis()).unwrap_or(u64::MAX));
        if role {
            pipe.cmd("ROLE");
        }
        let (mut master, mut sent) = self.send(&pipe).await;
        if let Err(err) = &sent
            && err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
        {
            // A pipeline does not load a script by itself (a restarted or
            // promoted server has none): load it, then send once more.
            invocation
                .load_async(&mut conn)
                .await
                .map_err(|source| redis_error(step, job, source))?;
            (master, sent) = self.send(&pipe).await;
        }
        let mut values = sent
            .map_err(|source| redis_error(step, job, source))?
            .into_iter();
        let bad = |what: &str| LockError::Reply {
            step,
            job: job.to_string(),
            reply: format!("no {what} in the reply"),
        };
        let reply = T::from_redis_value(values.next().ok_or_else(|| bad("script answer"))?)
            .map_err(|source| redis_error(step, job, source.into()))?;
        let acked = u32::from_redis_value(values.next().ok_or_else(|| bad("WAIT answer"))?)
            .map_err(|source| redis_error(step, job, source.into()))?;
        let listed = values.next().map(|role| (master, replicas_listed(&role)));
        Ok((reply, Some(acked), listed))
    }

    /// Sends `pipe` and answers which master it ran on: with Sentinel the
    /// one the follower picked for it (another task may switch the follower
    /// meanwhile), else the member's name.
    async fn send(
        &self,
        pipe: &redis::Pipeline,
    ) -> (String, redis::RedisResult<Vec<redis::Value>>) {
        match &self.conn {
            Conn::Sentinel(follower) => {
                let count = pipe.cmd_iter().count();
                let (address, sent) = follower.request_pipeline_at(pipe, 0, count).await;
                // As `query_async` does: a command's error is the pipeline's.
                let sent =
                    sent.and_then(|values| {
                        match crate::coordinator::sentinel::first_error(&values) {
                            Some(err) => Err(err),
                            None => Ok(values),
                        }
                    });
                (address.unwrap_or_else(|| self.shown.clone()), sent)
            }
            conn => (
                self.shown.clone(),
                pipe.query_async::<Vec<redis::Value>>(&mut conn.clone())
                    .await,
            ),
        }
    }

    /// `Err(Unacknowledged)` when `acked` falls short of `wait_replicas`.
    pub(super) fn check_acked(
        &self,
        acked: Option<u32>,
        step: &'static str,
        job: &str,
    ) -> Result<(), LockError> {
        match acked {
            Some(acked) if acked < self.wait.replicas => {
                self.conn.suspect();
                Err(LockError::Unacknowledged {
                    step,
                    job: job.to_string(),
                    acked,
                    wanted: self.wait.replicas,
                })
            }
            _ => Ok(()),
        }
    }

    /// `Err(ReplicaLost)` when the master lists fewer replicas than lately.
    /// `listed`: the master the pipeline ran on, and what its `ROLE` listed.
    pub(super) fn check_replicas(
        &self,
        listed: Option<(String, u32)>,
        step: &'static str,
        job: &str,
    ) -> Result<(), LockError> {
        let Some((master, listed)) = listed else {
            return Ok(());
        };
        let dropped = match self.replicas.lock() {
            Ok(mut replicas) => replicas.dropped(&master, listed),
            Err(poisoned) => poisoned.into_inner().dropped(&master, listed),
        };
        match dropped {
            Some(before) => {
                self.conn.suspect();
                Err(LockError::ReplicaLost {
                    step,
                    job: job.to_string(),
                    listed,
                    before,
                })
            }
            None => Ok(()),
        }
    }

    pub(super) async fn claim(
        &self,
        lease_keys: &super::JobKeys,
        job: &str,
        target: &Target,
        token: &str,
        ttl: Duration,
    ) -> Result<ClaimReply, LockError> {
        let (mode, at_ms, deadline_ms, attempt) = match target {
            Target::Scheduled { at, deadline_ms } => {
                ("scheduled", at.timestamp_millis(), *deadline_ms, 1)
            }
            Target::Retry {
                at,
                deadline_ms,
                attempt,
            } => ("retry", at.timestamp_millis(), *deadline_ms, *attempt),
            Target::Manual { .. } | Target::Rename { .. } | Target::MakeUp { .. } => {
                ("manual", 0, 0, 1)
            }
        };
        let mut invocation = self.scripts.claim.prepare_invoke();
        invocation
            .key(&lease_keys.lock)
            .key(&lease_keys.state)
            .key(&lease_keys.history)
            .arg(mode)
            .arg(at_ms)
            .arg(token)
            .arg(&self.node)
            .arg(ttl_ms(ttl))
            .arg(target.name())
            .arg(self.history_max)
            .arg(deadline_ms)
            .arg(attempt);
        let (reply, acked, listed): (Vec<String>, _, _) = self
            .invoke_with(&invocation, "claim", job, self.watches_replicas())
            .await?;
        let answer = parse_claim(&reply, lease_keys, job, token, ttl)?;
        let checked = self
            .check_acked(acked, "claim", job)
            .and_then(|()| self.check_replicas(listed, "claim", job));
        if let Err(short) = checked {
            if matches!(answer.claim, Claim::Won(_)) {
                // Not known to the replicas: never run on it. Undo it (with
                // its token) so the occurrence can be claimed again.
                self.undo(lease_keys, job, token).await;
            }
            return Err(short);
        }
        Ok(answer)
    }

    /// Deletes a lock this node took with `token` and un-records the
    /// occurrence it claimed, best effort (a failure leaves a lock that
    /// expires by itself, then found `abandoned`, and a record the next
    /// claim sees as decided). An occurrence a newer decision left behind
    /// is recorded `missed` by the undo itself ([`scripts::UNDO`]), except
    /// on a Redlock master (`records_undone` false).
    pub(super) async fn undo(&self, keys: &super::JobKeys, job: &str, token: &str) {
        let mut invocation = self.scripts.undo.prepare_invoke();
        invocation
            .key(&keys.lock)
            .key(&keys.state)
            .key(&keys.history)
            .arg(format!("{token} {}", self.node))
            .arg(token)
            .arg(&self.node)
            .arg(self.history_max)
            .arg(if self.records_undone { "1" } else { "0" });
        match invocation.invoke_async::<i64>(&mut self.conn.clone()).await {
            Ok(2) => {
                tracing::warn!(job = %job, server = %self.shown, node = %self.node,
                    "an unconfirmed claim was undone after a newer occurrence had been decided: its occurrence is recorded missed");
            }
            Ok(_) => {}
            Err(err) => {
                tracing::debug!(job = %job, server = %self.shown, error = %err, "cannot undo an unconfirmed claim; its lock expires by itself");
            }
        }
    }

    pub(super) async fn extend(&self, lease: &Lease) -> Result<bool, LockError> {
        let mut invocation = self.scripts.extend.prepare_invoke();
        invocation
            .key(&lease.keys.lock)
            .arg(lease.value(&self.node))
            .arg(ttl_ms(lease.ttl));
        let (extended, acked, listed): (i64, _, _) = self
            .invoke_with(&invocation, "extend", &lease.job, self.watches_replicas())
            .await?;
        if extended == 1 {
            // A renewal a stale master took does not move the deadline: the
            // new master's lock keeps the TTL of the last one it got.
            self.check_acked(acked, "extend", &lease.job)?;
            self.check_replicas(listed, "extend", &lease.job)?;
        }
        Ok(extended == 1)
    }

    pub(super) async fn release(
        &self,
        lease: &Lease,
        entry: &Entry,
    ) -> Result<Released, LockError> {
        let mut invocation = self.scripts.release.prepare_invoke();
        invocation
            .key(&lease.keys.lock)
            .key(&lease.keys.state)
            .key(&lease.keys.history)
            .key(lease.keys.recorded(&lease.token))
            .arg(lease.value(&self.node))
            .arg(&lease.token)
            .arg(self.history_max)
            .arg(ttl_ms(RECORD_REMEMBERED))
            .arg(lease.fence);
        for (field, value) in entry.to_fields() {
            invocation.arg(field).arg(value);
        }
        let (reply, acked, listed): (Vec<i64>, _, _) = self
            .invoke_with(&invocation, "release", &lease.job, self.watches_replicas())
            .await?;
        // Not on a master that may be stale: retried (token-checked, the
        // entry recorded once) until the current master takes it.
        self.check_acked(acked, "release", &lease.job)?;
        self.check_replicas(listed, "release", &lease.job)?;
        Ok(Released {
            lock_was_ours: reply.first() == Some(&1),
            replaced_abandoned: reply.get(1) == Some(&1),
        })
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) async fn record_missed(
        &self,
        keys: &super::JobKeys,
        job: &str,
        at_ms: i64,
        name: &str,
        reason: &str,
        token: &str,
        outcome: Outcome,
    ) -> Result<Missed, LockError> {
        let reply: Vec<String> = self
            .scripts
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
            .arg(outcome.as_str())
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|source| redis_error("record missed", job, source))?;
        Ok(Missed {
            recorded: reply.first().map(String::as_str) == Some("1"),
            previous_ms: reply.get(1).and_then(|ms| ms.parse().ok()),
        })
    }

    pub(super) async fn record_gap(
        &self,
        keys: &super::JobKeys,
        job: &str,
        gap_id: &str,
        entries: &[super::GapEntry],
    ) -> Result<bool, LockError> {
        let mut invocation = self.scripts.gap.prepare_invoke();
        invocation
            .key(&keys.state)
            .key(&keys.history)
            .arg(gap_id)
            .arg(self.history_max)
            .arg(ttl_ms(RECORD_REMEMBERED))
            .arg(&self.node);
        for entry in entries {
            invocation
                .arg(&entry.occurrence)
                .arg(entry.outcome.as_str())
                .arg(&entry.error);
        }
        let recorded: i64 = invocation
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|source| redis_error("record missed", job, source))?;
        Ok(recorded == 1)
    }

    /// Records `name` as `outcome` (`paused` or `skipped`) unless it or a
    /// newer occurrence was decided ([`scripts::PAUSED`]).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn record_decision(
        &self,
        keys: &super::JobKeys,
        job: &str,
        at_ms: i64,
        name: &str,
        why: &str,
        outcome: Unrun,
    ) -> Result<Paused, LockError> {
        let reply: Vec<String> = self
            .scripts
            .paused
            .key(&keys.state)
            .key(&keys.history)
            .arg(at_ms)
            .arg(name)
            .arg(&self.node)
            .arg(self.history_max)
            .arg(why)
            .arg(outcome.outcome().as_str())
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|source| redis_error(super::decision_step(outcome), job, source))?;
        let text = |i: usize| reply.get(i).cloned().unwrap_or_default();
        Ok(match text(0).as_str() {
            "1" => Paused {
                recorded: true,
                previous_ms: text(1).parse().ok(),
                decided: None,
            },
            _ => Paused {
                recorded: false,
                previous_ms: None,
                decided: Some((text(1), text(2))),
            },
        })
    }

    pub(super) async fn check_abandoned(
        &self,
        keys: &super::JobKeys,
        job: &str,
    ) -> Result<AbandonCheck, LockError> {
        let reply: Vec<String> = self
            .scripts
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
            word if word == Outcome::Abandoned.as_str() => AbandonCheck::Abandoned(Abandoned {
                node: text(1),
                fence: text(2).parse().unwrap_or(0),
                occurrence: text(3),
                attempt: attempt_of(&text(4)),
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

    pub(super) async fn retry_state(
        &self,
        keys: &super::JobKeys,
        job: &str,
        at_ms: i64,
    ) -> Result<super::RetryState, LockError> {
        let fields: Vec<Option<String>> = redis::cmd("HMGET")
            .arg(&keys.state)
            .arg(&[
                "retry_occ",
                "retry_attempt",
                "retry_state",
                "retry_at",
                "run_token",
            ])
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|source| redis_error("retry state", job, source))?;
        let field = |i: usize| fields.get(i).cloned().flatten().unwrap_or_default();
        let occurrence = at_ms.to_string();
        let this_one = field(0) == occurrence;
        let attempt = if this_one {
            field(1).parse().unwrap_or(0)
        } else {
            0
        };
        Ok(super::retry_state_of(
            attempt,
            this_one && field(2) == "pending",
            field(3).parse().unwrap_or(0),
            !field(4).is_empty(),
        ))
    }

    /// Reads, without a script, whether scheduled occurrence `at_ms` of
    /// `job` is decided already: `Some` with the answer a losing claim
    /// would give (see [`scripts::CLAIM`]'s usual losing path: the job's
    /// last decided occurrence is this one or newer, and either the lock is
    /// held or no run is in progress), `None` when only the claim script
    /// can say (undecided, a run whose lock is gone to be recorded
    /// `abandoned`, or the read was not acknowledged as a claim would have
    /// to be). One round trip of plain reads (`HMGET`, `PTTL`; with
    /// `wait_replicas` also `WAIT` and, on one master, `ROLE`, checked as a
    /// claim's are), so a node that is not first in line pays Redis a few
    /// µs instead of a script ([`super::Locker::peek`]).
    pub(super) async fn peek(
        &self,
        keys: &super::JobKeys,
        job: &str,
        at_ms: i64,
    ) -> Result<Option<ClaimReply>, LockError> {
        let mut pipe = redis::pipe();
        add_peek(&mut pipe, keys);
        self.add_acknowledgement(&mut pipe);
        let (master, sent) = self.send(&pipe).await;
        let mut values = sent
            .map_err(|source| redis_error("claim", job, source))?
            .into_iter();
        let bad = |what: &str| LockError::Reply {
            step: "claim",
            job: job.to_string(),
            reply: format!("no {what} in the reply"),
        };
        let fields: Vec<Option<String>> =
            FromRedisValue::from_redis_value(values.next().ok_or_else(|| bad("HMGET answer"))?)
                .map_err(|source| redis_error("claim", job, source.into()))?;
        let pttl = i64::from_redis_value(values.next().ok_or_else(|| bad("PTTL answer"))?)
            .map_err(|source| redis_error("claim", job, source.into()))?;
        if self.wait.replicas > 0 {
            let acked = u32::from_redis_value(values.next().ok_or_else(|| bad("WAIT answer"))?)
                .map_err(|source| redis_error("claim", job, source.into()))?;
            let listed = values.next().map(|role| (master, replicas_listed(&role)));
            let checked = self
                .check_acked(Some(acked), "claim", job)
                .and_then(|()| self.check_replicas(listed, "claim", job));
            if checked.is_err() {
                return Ok(None);
            }
        }
        Ok(peeked(&fields, pttl, at_ms))
    }

    /// Several [`Server::peek`]s in one pipeline, one round trip (with
    /// `wait_replicas` one `WAIT`, and `ROLE`, for them all): `(keys, job,
    /// occurrence ms)` each, answered in order. A Cluster connection routes
    /// each command to its own shard, so there each is peeked on its own.
    /// An answer that does not parse, or a `WAIT`/replica check that fails,
    /// reads as undecided (`None`): the claim then decides.
    pub(super) async fn peek_many(
        &self,
        items: &[(super::JobKeys, &str, i64)],
    ) -> Result<Vec<Option<ClaimReply>>, LockError> {
        if matches!(self.conn, Conn::Cluster(_)) {
            let each = items
                .iter()
                .map(|(keys, job, at_ms)| self.peek(keys, job, *at_ms));
            return Ok(futures_util::future::join_all(each)
                .await
                .into_iter()
                .map(|peeked| peeked.ok().flatten())
                .collect());
        }
        let job = items.first().map_or("", |(_, job, _)| *job);
        let mut pipe = redis::pipe();
        for (keys, _, _) in items {
            add_peek(&mut pipe, keys);
        }
        self.add_acknowledgement(&mut pipe);
        let (master, sent) = self.send(&pipe).await;
        let values = sent.map_err(|source| redis_error("claim", job, source))?;
        let mut values = values.into_iter();
        let mut answers = Vec::with_capacity(items.len());
        for (_, _, at_ms) in items {
            let fields: Option<Vec<Option<String>>> = values
                .next()
                .and_then(|value| FromRedisValue::from_redis_value(value).ok());
            let pttl: Option<i64> = values
                .next()
                .and_then(|value| i64::from_redis_value(value).ok());
            answers.push(match (fields, pttl) {
                (Some(fields), Some(pttl)) => peeked(&fields, pttl, *at_ms),
                _ => None,
            });
        }
        if self.wait.replicas > 0 {
            let acked = values
                .next()
                .and_then(|value| u32::from_redis_value(value).ok());
            let listed = values.next().map(|role| (master, replicas_listed(&role)));
            let checked = self
                .check_acked(acked, "claim", job)
                .and_then(|()| self.check_replicas(listed, "claim", job));
            if checked.is_err() {
                return Ok(vec![None; items.len()]);
            }
        }
        Ok(answers)
    }

    /// With `wait_replicas`, adds the `WAIT` (and on one master the `ROLE`)
    /// that a peek's reads are checked with, as a claim is.
    fn add_acknowledgement(&self, pipe: &mut redis::Pipeline) {
        if self.wait.replicas > 0 {
            pipe.cmd("WAIT")
                .arg(self.wait.replicas)
                .arg(u64::try_from(self.wait.timeout.as_millis()).unwrap_or(u64::MAX));
            if self.watches_replicas() {
                pipe.cmd("ROLE");
            }
        }
    }

    /// Loads the scripts, then probes what the user may run on the keys
    /// under `prefix` ([`super::access`]): a refused command is an error
    /// that [`crate::coordinator::errors::is_refusal`] recognises.
    pub(super) async fn load_scripts(&self, prefix: &str) -> Result<(), redis::RedisError> {
        // All at once on the multiplexed connection: one round trip, not
        // one per script, so a slow link to Redis stays within the time the
        // start-up check allows.
        let loads = self
            .scripts
            .all()
            .into_iter()
            .chain(self.group_scripts.all())
            .map(|script| {
                let mut conn = self.conn.clone();
                async move { script.prepare_invoke().load_async(&mut conn).await }
            });
        for loaded in futures_util::future::join_all(loads).await {
            loaded?;
        }
        let refused = super::access::refused_commands(&self.conn, prefix).await?;
        if refused.is_empty() {
            Ok(())
        } else {
            Err(super::access::refusal(&self.shown, &refused))
        }
    }
}

/// The attempt an `abandoned` answer names: 1 when it names none (it
/// cannot be told, e.g. a reply shaped by an older script) or garbage.
fn attempt_of(text: &str) -> u32 {
    text.parse()
        .ok()
        .filter(|&attempt| attempt >= 1)
        .unwrap_or(1)
}

/// A claim script's reply as a [`ClaimReply`].
fn parse_claim(
    reply: &[String],
    keys: &super::JobKeys,
    job: &str,
    token: &str,
    ttl: Duration,
) -> Result<ClaimReply, LockError> {
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
            attempt: attempt_of(text(i + 3)),
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
                keys: keys.clone(),
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
        "early" => Claim::TooEarly {
            redis_ms: number(1).ok_or_else(bad)?,
        },
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

/// What [`Server::peek`]'s reads say of occurrence `at_ms`: the losing
/// claim's answer when the script would give it from the same reads (the
/// last decided occurrence is `at_ms` or newer, and the lock is held or no
/// run is in progress), else `None`. `fields`: `last_occ`, `last_node`,
/// `last_fence`, `last_decision`, `run_token`; `pttl`: the lock's (-2: none).
/// Adds one peek's reads of `keys` to `pipe`: the state's decision fields
/// (`HMGET`) and the lock's `PTTL`, answered by [`peeked`].
fn add_peek(pipe: &mut redis::Pipeline, keys: &super::JobKeys) {
    pipe.cmd("HMGET")
        .arg(&keys.state)
        .arg(&[
            "last_occ",
            "last_node",
            "last_fence",
            "last_decision",
            "run_token",
        ])
        .cmd("PTTL")
        .arg(&keys.lock);
}

fn peeked(fields: &[Option<String>], pttl: i64, at_ms: i64) -> Option<ClaimReply> {
    let text = |i: usize| fields.get(i).cloned().flatten().unwrap_or_default();
    let last: i64 = text(0).parse().ok()?;
    let held = pttl != -2;
    let running = !text(4).is_empty();
    if at_ms > last || (running && !held) {
        return None;
    }
    let claim = if at_ms < last {
        Claim::Superseded { last_ms: last }
    } else {
        let decision = text(3);
        Claim::Taken {
            by: text(1),
            fence: text(2).parse().unwrap_or(0),
            decision: if decision.is_empty() {
                "claimed".to_string()
            } else {
                decision
            },
        }
    };
    Some(ClaimReply {
        claim,
        previous_ms: None,
        lock_ttl_left: u64::try_from(pttl).ok().map(Duration::from_millis),
        abandoned: None,
    })
}

/// How many replicas a `ROLE` reply of a master lists (0 for anything else).
fn replicas_listed(role: &redis::Value) -> u32 {
    match role {
        redis::Value::Array(parts) => match parts.get(2) {
            Some(redis::Value::Array(replicas)) => {
                u32::try_from(replicas.len()).unwrap_or(u32::MAX)
            }
            _ => 0,
        },
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_master_that_lost_a_replica_lately_is_in_doubt_until_the_memory_ends() {
        let mut replicas = Replicas::default();
        let old = "127.0.0.1:6379";
        let new = "127.0.0.1:6380";
        assert_eq!(replicas.dropped(old, 2), None);
        assert_eq!(replicas.dropped(old, 2), None);
        assert_eq!(replicas.dropped(old, 1), Some(2), "one replica gone");
        assert_eq!(replicas.dropped(old, 3), None, "more is fine");
        assert_eq!(replicas.dropped(old, 1), Some(3));
        // Another master: its own count from scratch, and answers of the
        // two interleaving keep each one's memory.
        assert_eq!(replicas.dropped(new, 1), None);
        assert_eq!(replicas.dropped(old, 1), Some(3), "still in doubt");
        assert_eq!(replicas.dropped(new, 1), None);
        // Once the memory is over, fewer is the new normal.
        for (_, at) in replicas.seen.values_mut() {
            *at = at.checked_sub(REPLICA_MEMORY).unwrap_or(*at);
        }
        assert_eq!(replicas.dropped(old, 1), None);
    }

    fn state(
        last: &str,
        node: &str,
        fence: &str,
        decision: &str,
        run: &str,
    ) -> Vec<Option<String>> {
        [last, node, fence, decision, run]
            .iter()
            .map(|v| (!v.is_empty()).then(|| v.to_string()))
            .collect()
    }

    #[test]
    fn a_peek_answers_only_what_the_losing_claim_would_answer_from_the_same_reads() {
        let taken = |reply: Option<ClaimReply>| reply.map(|r| (r.claim, r.lock_ttl_left));
        // Decided by n1, its run in progress under the lock: lost.
        assert_eq!(
            taken(peeked(
                &state("1000", "n1", "77", "claimed", "tok"),
                2500,
                1000
            )),
            Some((
                Claim::Taken {
                    by: "n1".into(),
                    fence: 77,
                    decision: "claimed".into()
                },
                Some(Duration::from_millis(2500))
            ))
        );
        // Decided and over (lock released, no run): lost, lock free.
        assert_eq!(
            taken(peeked(&state("1000", "n1", "77", "skipped", ""), -2, 1000)),
            Some((
                Claim::Taken {
                    by: "n1".into(),
                    fence: 77,
                    decision: "skipped".into()
                },
                None
            ))
        );
        // A newer occurrence was decided.
        assert_eq!(
            taken(peeked(&state("2000", "n1", "78", "claimed", ""), -2, 1000)),
            Some((Claim::Superseded { last_ms: 2000 }, None))
        );
        // Not decided yet, never decided, or a run whose lock is gone (to be
        // recorded abandoned by the claim script): only the script can say.
        assert_eq!(
            taken(peeked(&state("999", "n1", "77", "claimed", ""), 100, 1000)),
            None
        );
        assert_eq!(taken(peeked(&state("", "", "", "", ""), -2, 1000)), None);
        assert_eq!(
            taken(peeked(
                &state("1000", "n1", "77", "claimed", "tok"),
                -2,
                1000
            )),
            None
        );
    }

    #[test]
    fn role_replies_count_their_replicas() {
        use redis::Value;
        let replica = || Value::Array(vec![Value::BulkString(b"127.0.0.1".to_vec())]);
        let master = Value::Array(vec![
            Value::BulkString(b"master".to_vec()),
            Value::Int(10),
            Value::Array(vec![replica(), replica()]),
        ]);
        assert_eq!(replicas_listed(&master), 2);
        assert_eq!(replicas_listed(&Value::Nil), 0);
    }
}
