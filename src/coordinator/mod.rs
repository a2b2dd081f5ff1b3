//! How solocron talks to its coordinator: the one place that knows the four
//! `[redis]` modes (docs/configuration.md, docs/ha.md).
//!
//! - `url`: one server ([`single`]);
//! - `sentinel`: the master of a Sentinel group, followed across failovers
//!   ([`sentinel`]);
//! - `cluster`: a Redis Cluster, each job's keys on the shard of its slot
//!   ([`cluster`]);
//! - `redlock`: N independent masters, each a `url` server; a majority
//!   decides ([`crate::lock`] combines them; guarantee 9, docs/guarantees.md);
//!   [`identity`] finds two masters that are one server.
//!
//! Everything above this module sees a [`Coordinator`]: its [`Member`]s (one,
//! or the N Redlock masters), each a [`Conn`] that runs commands, scripts and
//! pipelines like any redis-rs connection, plus how many replicas must
//! acknowledge its writes ([`Wait`]). The lock runs its scripts per member and
//! combines the answers; the registry and `status`/`history` read every
//! member and merge. Failure model per mode: see each submodule; common to
//! all: commands may fail at any time (the callers retry with the same
//! token), and nothing here ever panics on what Redis or the network does.

pub mod cluster;
pub mod errors;
pub mod identity;
pub mod sentinel;
pub mod single;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::{Cmd, Pipeline, RedisFuture, Value};

use crate::config::{RedisConfig, RedisMode, redact_url};
use errors::timed_out;

pub use sentinel::SentinelFollower;

/// Longest wait for one Redlock master's answer; one command of any mode
/// waits at most three times as long.
pub const ANSWER_TIMEOUT: Duration = Duration::from_millis(300);

/// A connection to one logical Redis: a server, a followed Sentinel master,
/// or a Cluster. Cheap to clone; commands may run concurrently.
#[derive(Clone)]
pub enum Conn {
    Single(ConnectionManager),
    Sentinel(Arc<SentinelFollower>),
    Cluster(cluster::Cluster),
}

impl Conn {
    /// A write was not acknowledged by enough replicas: with Sentinel the
    /// master may have changed, so it is looked up again.
    pub fn suspect(&self) {
        if let Conn::Sentinel(follower) = self {
            follower.suspect();
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(conn) => conn.req_packed_command(cmd),
            Conn::Sentinel(follower) => Box::pin(async move { follower.request(cmd).await }),
            Conn::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(conn) => conn.req_packed_commands(pipeline, offset, count),
            Conn::Sentinel(follower) => {
                Box::pin(async move { follower.request_pipeline(pipeline, offset, count).await })
            }
            Conn::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(conn) => conn.get_db(),
            Conn::Sentinel(_) => 0,
            Conn::Cluster(conn) => conn.get_db(),
        }
    }
}

/// How many replicas must acknowledge a write (`WAIT`), and for how long
/// to wait for them. `replicas == 0`: no `WAIT` at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wait {
    pub replicas: u32,
    pub timeout: Duration,
}

impl Wait {
    /// No acknowledgement asked.
    pub const NONE: Wait = Wait {
        replicas: 0,
        timeout: Duration::ZERO,
    };
}

/// One member of the coordinator: its connection, acknowledgements, and how
/// messages name it (redacted).
#[derive(Clone)]
pub struct Member {
    pub conn: Conn,
    pub wait: Wait,
    pub shown: String,
}

/// The coordinator: one member, or the N independent masters of Redlock.
#[derive(Clone)]
pub struct Coordinator {
    members: Arc<[Member]>,
    quorum: bool,
    shown: String,
}

impl Coordinator {
    /// Every member, in the configured order (one, except with Redlock).
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// Whether a majority of independent masters decides (Redlock).
    pub fn is_quorum(&self) -> bool {
        self.quorum
    }

    /// How many members must agree: a majority of N, or 1.
    pub fn majority(&self) -> usize {
        self.members.len() / 2 + 1
    }

    /// The connection of the first member: the only one unless Redlock.
    pub fn first(&self) -> Conn {
        self.members[0].conn.clone()
    }

    /// Where the coordinator is, redacted, for messages.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// Runs `op` on every member at once (each bounded by [`MEMBER_TIMEOUT`]
    /// with Redlock) and returns the answers of those that answered, in
    /// member order: writes of the registry go to every master, reads are
    /// merged by the caller. `Err` (the first error) if fewer than
    /// [`Coordinator::majority`] answered.
    pub async fn on_members<T, F, Fut>(&self, op: F) -> redis::RedisResult<Vec<T>>
    where
        F: Fn(Conn) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        if !self.quorum {
            return Ok(vec![op(self.first()).await?]);
        }
        let answers = futures_util::future::join_all(self.members.iter().map(|member| {
            let answer = op(member.conn.clone());
            async move {
                tokio::time::timeout(MEMBER_TIMEOUT, answer)
                    .await
                    .unwrap_or_else(|_| {
                        Err(redis::RedisError::from(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            "a redlock master did not answer in time",
                        )))
                    })
            }
        }))
        .await;
        let mut done = Vec::with_capacity(answers.len());
        let mut first_error = None;
        for answer in answers {
            match answer {
                Ok(value) => done.push(value),
                Err(err) => {
                    first_error.get_or_insert(err);
                }
            }
        }
        match first_error {
            Some(err) if done.len() < self.majority() => Err(err),
            _ => Ok(done),
        }
    }
}

/// Longest wait for one Redlock master's answer to a registry write or a
/// read of `status`/`history`.
pub const MEMBER_TIMEOUT: Duration = Duration::from_secs(2);

impl From<ConnectionManager> for Coordinator {
    /// One server without acknowledgements (tests, tools).
    fn from(conn: ConnectionManager) -> Coordinator {
        Coordinator {
            members: Arc::from(vec![Member {
                conn: Conn::Single(conn),
                wait: Wait::NONE,
                shown: "redis".to_string(),
            }]),
            quorum: false,
            shown: "redis".to_string(),
        }
    }
}

/// Connects (lazily: nothing is sent yet) to the coordinator `config`
/// describes. Errors name the redacted URLs, never a password.
pub fn connect(config: &RedisConfig) -> anyhow::Result<Coordinator> {
    let wait = Wait {
        replicas: config.wait_replicas,
        timeout: config.wait_timeout,
    };
    let shown = config.redacted_url();
    let member = |conn: Conn, wait: Wait, shown: String| Member { conn, wait, shown };
    let (members, quorum) = match &config.mode {
        RedisMode::Single => {
            let conn = Conn::Single(single::connect_url(&config.url, config)?);
            (vec![member(conn, wait, shown.clone())], false)
        }
        RedisMode::Sentinel {
            master,
            urls,
            password,
        } => {
            let follower = SentinelFollower::new(config, master, urls, password.as_deref())?;
            let conn = Conn::Sentinel(Arc::new(follower));
            (vec![member(conn, wait, shown.clone())], false)
        }
        RedisMode::Cluster { urls } => {
            let conn = Conn::Cluster(cluster::connect(urls, config)?);
            (vec![member(conn, wait, shown.clone())], false)
        }
        RedisMode::Redlock { urls } => {
            let mut members = Vec::with_capacity(urls.len());
            for url in urls {
                let conn = Conn::Single(single::connect_url(url, config)?);
                members.push(member(conn, Wait::NONE, redact_url(url)));
            }
            (members, true)
        }
    };
    Ok(Coordinator {
        members: Arc::from(members),
        quorum,
        shown,
    })
}

/// Runs `groups` (each a pipeline whose commands share one hash tag, e.g.
/// one job's keys) and returns each group's replies, in order: as one
/// pipeline (one round trip), or with a Cluster, one pipeline per group at
/// once (a pipeline may not cross slots there).
pub async fn query_groups(
    conn: &Conn,
    groups: Vec<Pipeline>,
) -> redis::RedisResult<Vec<Vec<Value>>> {
    if matches!(conn, Conn::Cluster(_)) {
        let answers = futures_util::future::join_all(groups.iter().map(|group| {
            let mut conn = conn.clone();
            async move { group.query_async::<Vec<Value>>(&mut conn).await }
        }))
        .await;
        return answers.into_iter().collect();
    }
    let sizes: Vec<usize> = groups
        .iter()
        .map(|group| group.cmd_iter().count())
        .collect();
    let mut all = redis::pipe();
    for group in &groups {
        for cmd in group.cmd_iter() {
            all.add_command(cmd.clone());
        }
    }
    let replies: Vec<Value> = all.query_async(&mut conn.clone()).await?;
    let mut replies = replies.into_iter();
    Ok(sizes
        .into_iter()
        .map(|size| replies.by_ref().take(size).collect())
        .collect())
}

/// Redis `TIME` of `conn` as UTC epoch ms.
pub async fn redis_time_ms(conn: &Conn) -> redis::RedisResult<i64> {
    Ok(redis_time_us(conn).await?.div_euclid(1000))
}

/// Redis `TIME` of `conn` as UTC epoch µs.
pub async fn redis_time_us(conn: &Conn) -> redis::RedisResult<i64> {
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query_async(&mut conn.clone()).await?;
    Ok(secs * 1_000_000 + micros)
}

/// Redis `TIME` of `coordinator` as UTC epoch ms: one member's, or the
/// median of a majority of Redlock masters.
pub async fn coordinator_time_ms(coordinator: &Coordinator) -> Result<i64, redis::RedisError> {
    Ok(coordinator_time_us(coordinator).await?.div_euclid(1000))
}

/// [`coordinator_time_ms`] in µs.
pub async fn coordinator_time_us(coordinator: &Coordinator) -> Result<i64, redis::RedisError> {
    let answers =
        futures_util::future::join_all(coordinator.members().iter().map(|member| async move {
            tokio::time::timeout(ANSWER_TIMEOUT * 3, redis_time_us(&member.conn))
                .await
                .unwrap_or_else(|_| Err(timed_out("TIME")))
        }))
        .await;
    let mut times = Vec::new();
    let mut first_error = None;
    for answer in answers {
        match answer {
            Ok(time) => times.push(time),
            Err(err) => {
                first_error.get_or_insert(err);
            }
        }
    }
    if times.len() < coordinator.majority() {
        return Err(first_error.unwrap_or_else(|| timed_out("TIME")));
    }
    times.sort_unstable();
    Ok(times[times.len() / 2])
}
