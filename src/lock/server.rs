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

use std::sync::Arc;
use std::time::Duration;

use redis::{FromRedisValue, Script, ScriptInvocation};

use super::scripts;
use super::{
    AbandonCheck, Abandoned, Claim, ClaimReply, Lease, LockError, Missed, Released, Target,
    redis_error, ttl_ms,
};
use crate::coordinator::{Conn, Member, Wait};
use crate::history::Entry;

/// How long Redis remembers that a release (or a gap) was recorded, so that
/// a retry of it records nothing twice: beyond a node's retry pause once
/// Redis answers again, by a wide margin for a retry that sat in a socket.
const RECORD_REMEMBERED: Duration = Duration::from_secs(30);

/// The scripts, parsed and hashed once per process.
pub(super) struct Scripts {
    claim: Script,
    extend: Script,
    release: Script,
    missed: Script,
    gap: Script,
    abandon: Script,
    undo: Script,
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
            undo: Script::new(scripts::UNDO),
        }
    }

    fn all(&self) -> [&Script; 7] {
        [
            &self.claim,
            &self.extend,
            &self.release,
            &self.missed,
            &self.gap,
            &self.abandon,
            &self.undo,
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
}

impl Server {
    pub(super) fn new(
        member: &Member,
        node: &str,
        history_max: u64,
        scripts: &Arc<Scripts>,
    ) -> Server {
        Server {
            conn: member.conn.clone(),
            wait: member.wait,
            shown: member.shown.clone(),
            node: node.to_string(),
            history_max,
            scripts: Arc::clone(scripts),
        }
    }

    /// Runs `invocation`; with acknowledgements asked, pipelined with `WAIT`
    /// and answering how many replicas acknowledged.
    async fn invoke<T: FromRedisValue>(
        &self,
        invocation: &ScriptInvocation<'_>,
        step: &'static str,
        job: &str,
    ) -> Result<(T, Option<u32>), LockError> {
        let mut conn = self.conn.clone();
        if self.wait.replicas == 0 {
            let reply = invocation
                .invoke_async(&mut conn)
                .await
                .map_err(|source| redis_error(step, job, source))?;
            return Ok((reply, None));
        }
        let mut pipe = redis::pipe();
        pipe.invoke_script(invocation)
            .cmd("WAIT")
            .arg(self.wait.replicas)
            .arg(u64::try_from(self.wait.timeout.as_millis()).unwrap_or(u64::MAX));
        let mut sent = pipe.query_async::<(T, u32)>(&mut conn).await;
        if let Err(err) = &sent
            && err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
        {
            // A pipeline does not load a script by itself (a restarted or
            // promoted server has none): load it, then send once more.
            invocation
                .load_async(&mut conn)
                .await
                .map_err(|source| redis_error(step, job, source))?;
            sent = pipe.query_async::<(T, u32)>(&mut conn).await;
        }
        let (reply, acked) = sent.map_err(|source| redis_error(step, job, source))?;
        Ok((reply, Some(acked)))
    }

    /// `Err(Unacknowledged)` when `acked` falls short of `wait_replicas`.
    fn check_acked(
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

    pub(super) async fn claim(
        &self,
        lease_keys: &super::JobKeys,
        job: &str,
        target: &Target,
        token: &str,
        ttl: Duration,
    ) -> Result<ClaimReply, LockError> {
        let (mode, at_ms, deadline_ms) = match target {
            Target::Scheduled {
                at_ms, deadline_ms, ..
            } => ("scheduled", *at_ms, *deadline_ms),
            Target::Manual { .. } => ("manual", 0, 0),
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
            .arg(deadline_ms);
        let (reply, acked): (Vec<String>, _) = self.invoke(&invocation, "claim", job).await?;
        let answer = parse_claim(&reply, lease_keys, job, token, ttl)?;
        if let Err(short) = self.check_acked(acked, "claim", job) {
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
    /// expires by itself and a record the next claim sees as decided).
    pub(super) async fn undo(&self, keys: &super::JobKeys, job: &str, token: &str) {
        let mut invocation = self.scripts.undo.prepare_invoke();
        invocation
            .key(&keys.lock)
            .key(&keys.state)
            .arg(format!("{token} {}", self.node))
            .arg(token);
        if let Err(err) = invocation.invoke_async::<i64>(&mut self.conn.clone()).await {
            tracing::debug!(job = %job, server = %self.shown, error = %err, "cannot undo an unconfirmed claim; its lock expires by itself");
        }
    }

    pub(super) async fn extend(&self, lease: &Lease) -> Result<bool, LockError> {
        let mut invocation = self.scripts.extend.prepare_invoke();
        invocation
            .key(&lease.keys.lock)
            .arg(lease.value(&self.node))
            .arg(ttl_ms(lease.ttl));
        let (extended, acked): (i64, _) = self.invoke(&invocation, "extend", &lease.job).await?;
        if extended == 1 {
            self.check_acked(acked, "extend", &lease.job)?;
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
            .arg(lease.value(&self.node))
            .arg(&lease.token)
            .arg(self.history_max)
            .arg(ttl_ms(RECORD_REMEMBERED))
            .arg(lease.fence);
        for (field, value) in entry.to_fields() {
            invocation.arg(field).arg(value);
        }
        let (reply, acked): (Vec<i64>, _) = self.invoke(&invocation, "release", &lease.job).await?;
        self.check_acked(acked, "release", &lease.job)?;
        Ok(Released {
            lock_was_ours: reply.first() == Some(&1),
            replaced_abandoned: reply.get(1) == Some(&1),
        })
    }

    pub(super) async fn record_missed(
        &self,
        keys: &super::JobKeys,
        job: &str,
        at_ms: i64,
        name: &str,
        reason: &str,
        token: &str,
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
        entries: &[(String, String)],
    ) -> Result<bool, LockError> {
        let mut invocation = self.scripts.gap.prepare_invoke();
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

    pub(super) async fn load_scripts(&self) -> Result<(), redis::RedisError> {
        for script in self.scripts.all() {
            script
                .prepare_invoke()
                .load_async(&mut self.conn.clone())
                .await?;
        }
        Ok(())
    }
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
