//! A master found through Redis Sentinel, and followed across failovers.
//!
//! The sentinels are asked `SENTINEL GET-MASTER-ADDR-BY-NAME` in turn; the
//! address they give is checked with `ROLE` and gets a lazily connecting
//! manager like a `url` server. redis-rs's `SentinelClient` resolves a
//! master once but a connection built from it stays on the old address after
//! a failover (upstream #1438) and cannot skip `CLIENT SETINFO` or take a
//! private CA for the data nodes, so the three commands are sent here.
//!
//! Failure model: the master may die, be demoted (graceful `SENTINEL
//! FAILOVER`), or be cut off while it still accepts writes. A command that
//! fails with `READONLY`, `MASTERDOWN`, an I/O error or a timeout, and a
//! claim whose `WAIT` found too few replicas ([`SentinelFollower::suspect`]),
//! make the next command ask the sentinels again (at most every
//! [`RESOLVE_EVERY`]); the failed command itself is returned as failed, and
//! the caller retries as for any Redis error (claims with the same token).
//! Whatever a stale master still grants is refused by `WAIT`, not here.

use std::sync::Mutex;
use std::time::Duration;

use redis::aio::{ConnectionLike as _, ConnectionManager};
use redis::{Cmd, ErrorKind, RedisError, RedisResult, ServerErrorKind, Value};
use tokio::time::Instant;

use super::single;
use crate::config::{RedisConfig, redact_url};

/// Longest wait for one sentinel's answer.
const SENTINEL_TIMEOUT: Duration = Duration::from_millis(500);
/// The sentinels are asked again at most this often.
const RESOLVE_EVERY: Duration = Duration::from_millis(250);

/// The current master of one Sentinel-monitored group.
pub struct SentinelFollower {
    master: String,
    sentinels: Vec<(String, redis::Client)>,
    config: RedisConfig,
    /// Data nodes use TLS when the sentinels do.
    tls: bool,
    state: Mutex<State>,
    resolving: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct State {
    current: Option<(String, ConnectionManager)>,
    /// Set when the current master is in doubt: resolve before the next use.
    stale: bool,
    last_resolved: Option<Instant>,
}

impl SentinelFollower {
    /// A follower of `master` through the sentinels at `urls` (their own
    /// password: `password`, or the one in each URL). Connects lazily.
    pub fn new(
        config: &RedisConfig,
        master: &str,
        urls: &[String],
        password: Option<&str>,
    ) -> anyhow::Result<SentinelFollower> {
        let mut sentinels = Vec::with_capacity(urls.len());
        for url in urls {
            let shown = redact_url(url);
            let info = redis::IntoConnectionInfo::into_connection_info(url.as_str())
                .map_err(|err| anyhow::anyhow!("{:?}", err.kind()))
                .map_err(|err| err.context(format!("invalid sentinel url `{shown}`")))?;
            let mut settings = info.redis_settings().clone().set_skip_set_lib_name();
            if let Some(password) = password {
                settings = settings.set_password(password);
            }
            let info = info.set_redis_settings(settings);
            sentinels.push((shown.clone(), single::client(info, config, &shown)?));
        }
        let tls = urls.iter().all(|url| url.starts_with("rediss://"));
        Ok(SentinelFollower {
            master: master.to_string(),
            sentinels,
            config: config.clone(),
            tls,
            state: Mutex::new(State::default()),
            resolving: tokio::sync::Mutex::new(()),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        match self.state.lock() {
            Ok(state) => state,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// The current master's address (`host:port`), if one was found.
    pub fn master_address(&self) -> Option<String> {
        self.state().current.as_ref().map(|(addr, _)| addr.clone())
    }

    /// The current master is in doubt (a `WAIT` came back short): ask the
    /// sentinels again before the next command.
    pub fn suspect(&self) {
        self.state().stale = true;
    }

    /// Runs `cmd` on the current master.
    pub async fn request(&self, cmd: &Cmd) -> RedisResult<Value> {
        let mut conn = self.manager().await?;
        let result = conn.req_packed_command(cmd).await;
        self.judge(&result);
        result
    }

    /// Runs `count` replies' worth of `pipeline` on the current master.
    pub async fn request_pipeline(
        &self,
        pipeline: &redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let mut conn = self.manager().await?;
        let result = conn.req_packed_commands(pipeline, offset, count).await;
        self.judge(&result);
        result
    }

    fn judge<T>(&self, result: &RedisResult<T>) {
        if let Err(err) = result
            && master_in_doubt(err)
        {
            self.suspect();
        }
    }

    /// The manager for the current master, asking the sentinels first when
    /// there is none or it is in doubt.
    async fn manager(&self) -> RedisResult<ConnectionManager> {
        {
            let state = self.state();
            let recently = state
                .last_resolved
                .is_some_and(|at| at.elapsed() < RESOLVE_EVERY);
            if let Some((_, conn)) = &state.current
                && (!state.stale || recently)
            {
                return Ok(conn.clone());
            }
        }
        let _one_at_a_time = self.resolving.lock().await;
        // Another task may have resolved while this one waited.
        {
            let state = self.state();
            if let Some((_, conn)) = &state.current
                && !state.stale
            {
                return Ok(conn.clone());
            }
        }
        let resolved = self.resolve().await;
        let mut state = self.state();
        state.last_resolved = Some(Instant::now());
        match resolved {
            Ok((addr, conn)) => {
                let same = state.current.as_ref().is_some_and(|(old, _)| *old == addr);
                if !same {
                    tracing::info!(master = %self.master, address = %addr, "redis master found through sentinel");
                    state.current = Some((addr, conn.clone()));
                }
                state.stale = false;
                Ok(state
                    .current
                    .as_ref()
                    .map_or(conn, |(_, current)| current.clone()))
            }
            // Keep the old one: it may still be right, and commands on it
            // fail cleanly if not.
            Err(err) => match &state.current {
                Some((_, conn)) => Ok(conn.clone()),
                None => Err(err),
            },
        }
    }

    /// Asks the sentinels in turn for the master and checks its `ROLE`.
    async fn resolve(&self) -> RedisResult<(String, ConnectionManager)> {
        let mut last: Option<RedisError> = None;
        for (shown, sentinel) in &self.sentinels {
            match self.ask(sentinel).await {
                Ok(found) => return Ok(found),
                Err(err) => {
                    tracing::debug!(sentinel = %shown, master = %self.master, error = %err, "sentinel did not name a usable master");
                    last = Some(err);
                }
            }
        }
        Err(last.unwrap_or_else(|| {
            RedisError::from((ErrorKind::EmptySentinelList, "no sentinel configured"))
        }))
    }

    async fn ask(&self, sentinel: &redis::Client) -> RedisResult<(String, ConnectionManager)> {
        let lookup = async {
            let mut conn = sentinel.get_multiplexed_async_connection().await?;
            let reply: Option<(String, u16)> = redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(&self.master)
                .query_async(&mut conn)
                .await?;
            reply.ok_or_else(|| {
                RedisError::from((
                    ErrorKind::MasterNameNotFoundBySentinel,
                    "the sentinel does not monitor this master name",
                ))
            })
        };
        let (host, port) = tokio::time::timeout(SENTINEL_TIMEOUT, lookup)
            .await
            .map_err(|_| timeout_error("the sentinel did not answer"))??;
        let addr = format!("{host}:{port}");
        let mut conn = self.data_node(&host, port)?;
        let role: Vec<Value> =
            tokio::time::timeout(SENTINEL_TIMEOUT, redis::cmd("ROLE").query_async(&mut conn))
                .await
                .map_err(|_| timeout_error("the master named by the sentinel did not answer"))??;
        match role.first() {
            Some(Value::BulkString(kind)) if kind == b"master" => Ok((addr, conn)),
            Some(Value::SimpleString(kind)) if kind == "master" => Ok((addr, conn)),
            _ => Err(RedisError::from((
                ErrorKind::Server(ServerErrorKind::ReadOnly),
                "the server the sentinel named is not a master (yet)",
            ))),
        }
    }

    fn data_node(&self, host: &str, port: u16) -> RedisResult<ConnectionManager> {
        let scheme = if self.tls { "rediss" } else { "redis" };
        let url = format!("{scheme}://{host}:{port}/");
        let built = single::connect_url(&url, &self.config);
        built.map_err(|err| {
            RedisError::from((
                ErrorKind::InvalidClientConfig,
                "cannot connect to the master",
                format!("{err:#}"),
            ))
        })
    }
}

fn timeout_error(what: &'static str) -> RedisError {
    RedisError::from(std::io::Error::new(std::io::ErrorKind::TimedOut, what))
}

/// Errors after which the master may have moved.
fn master_in_doubt(err: &RedisError) -> bool {
    matches!(
        err.kind(),
        ErrorKind::Server(ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown) | ErrorKind::Io
    ) || err.is_timeout()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
}
