//! A master found through Redis Sentinel, and followed across failovers.
//!
//! The sentinels are all asked at once `SENTINEL GET-MASTER-ADDR-BY-NAME`
//! and `SENTINEL MASTER` (for its `config-epoch`); the address named at the
//! highest epoch is checked with `ROLE` and gets a lazily connecting
//! manager like a `url` server. The sentinel that ran a failover names the
//! promoted replica at a new epoch as soon as it sees it promoted, while
//! the others still name the old master at the old one until they hear of
//! it: a master the up-to-date sentinels no longer name is never picked.
//! redis-rs's `SentinelClient` resolves a master once but a connection
//! built from it stays on the old address after a failover (upstream
//! #1438) and cannot skip `CLIENT SETINFO` or take a private CA for the
//! data nodes, so these commands are sent here.
//!
//! Failure model: the master may die, be demoted (graceful `SENTINEL
//! FAILOVER`), or be cut off while it still accepts writes. A command that
//! fails with `READONLY`, `MASTERDOWN`, an I/O error or a timeout (also
//! inside a pipeline's replies), and a claim, renewal or release whose
//! `WAIT` found too few replicas or whose master lists fewer replicas than
//! lately ([`SentinelFollower::suspect`]), make the next command ask the
//! sentinels again (at most every
//! [`RESOLVE_EVERY`]); the failed command itself is returned as failed, and
//! the caller retries as for any Redis error (claims with the same token).
//! Whatever a stale master still grants is refused by `WAIT` and the
//! replica-count check of `lock/server.rs`, not here: for up to a second
//! after the promotion no sentinel names the new master yet. Each pipeline
//! answers the address it was sent to
//! ([`SentinelFollower::request_pipeline_at`]), so that check judges the
//! master that answered, not the one another task switched to meanwhile.
//!
//! A sentinel that answers but cannot help is a mistake of the config, not
//! an outage: one that monitors no master by that name (it says which it
//! does) or that is not a sentinel at all (a data node's port). While some
//! sentinel names the master, each such one is said once, as a warning;
//! when every sentinel answers so, the error says it for each
//! ([`is_misconfigured`]), and the daemon stops at start (exit 78) instead
//! of retrying it for ever as "redis unreachable".

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
    /// Sentinels already said to be misconfigured (each is said once).
    warned: Mutex<Vec<String>>,
}

#[derive(Default)]
struct State {
    /// The master in use: its address, the configuration epoch the
    /// sentinels named it at, and its manager.
    current: Option<Current>,
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
            warned: Mutex::new(Vec::new()),
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
        self.state()
            .current
            .as_ref()
            .map(|current| current.addr.clone())
    }

    /// The current master is in doubt (a `WAIT` came back short): ask the
    /// sentinels again before the next command.
    pub fn suspect(&self) {
        self.state().stale = true;
    }

    /// Runs `cmd` on the current master.
    pub async fn request(&self, cmd: &Cmd) -> RedisResult<Value> {
        let (_, mut conn) = self.manager().await?;
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
        self.request_pipeline_at(pipeline, offset, count).await.1
    }

    /// [`SentinelFollower::request_pipeline`], and which master it was
    /// sent to (`host:port@epoch`; `None` if none was found).
    pub async fn request_pipeline_at(
        &self,
        pipeline: &redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> (Option<String>, RedisResult<Vec<Value>>) {
        let (address, mut conn) = match self.manager().await {
            Ok(found) => found,
            Err(err) => return (None, Err(err)),
        };
        let result = conn.req_packed_commands(pipeline, offset, count).await;
        // A command's error (`READONLY`...) comes back as a value in the
        // replies, not as the pipeline's error: judged all the same.
        match &result {
            Ok(values) => {
                if let Some(err) = first_error(values) {
                    self.judge::<()>(&Err(err));
                }
            }
            Err(_) => self.judge(&result),
        }
        (Some(address), result)
    }

    fn judge<T>(&self, result: &RedisResult<T>) {
        if let Err(err) = result
            && master_in_doubt(err)
        {
            self.suspect();
        }
    }

    /// The current master (named as in [`Current::name`]) and its manager,
    /// asking the sentinels first when there is none or it is in doubt.
    async fn manager(&self) -> RedisResult<(String, ConnectionManager)> {
        {
            let state = self.state();
            let recently = state
                .last_resolved
                .is_some_and(|at| at.elapsed() < RESOLVE_EVERY);
            if let Some(current) = &state.current
                && (!state.stale || recently)
            {
                return Ok(current.named());
            }
        }
        let _one_at_a_time = self.resolving.lock().await;
        // Another task may have resolved while this one waited.
        {
            let state = self.state();
            if let Some(current) = &state.current
                && !state.stale
            {
                return Ok(current.named());
            }
        }
        let resolved = self.resolve().await;
        let mut state = self.state();
        state.last_resolved = Some(Instant::now());
        match resolved {
            Ok(found) => {
                let same = state
                    .current
                    .as_ref()
                    .is_some_and(|old| old.addr == found.addr && old.epoch == found.epoch);
                if !same {
                    tracing::info!(master = %self.master, address = %found.addr, epoch = found.epoch,
                        "redis master found through sentinel");
                    state.current = Some(found.clone());
                }
                state.stale = false;
                Ok(state.current.as_ref().unwrap_or(&found).named())
            }
            // Keep the old one: it may still be right, and commands on it
            // fail cleanly if not.
            Err(err) => match &state.current {
                Some(current) => Ok(current.named()),
                None => Err(err),
            },
        }
    }

    /// Asks every sentinel at once which master it names, and at which
    /// configuration epoch; the address named at the highest epoch wins
    /// (the first sentinel's, in the configured order, among equals) and
    /// is checked with `ROLE`. A sentinel that has not heard of a failover
    /// yet names the old master at the old epoch, while the one that ran
    /// the failover names the promoted replica at the new epoch as soon as
    /// it sees the promotion: the old master is never picked again then.
    async fn resolve(&self) -> RedisResult<Current> {
        let answers = futures_util::future::join_all(
            self.sentinels
                .iter()
                .map(|(_, sentinel)| self.ask(sentinel)),
        )
        .await;
        let mut named: Vec<(Option<u64>, String, u16)> = Vec::new();
        let mut last: Option<RedisError> = None;
        let mut misconfigured: Vec<(String, String)> = Vec::new();
        for ((shown, _), answer) in self.sentinels.iter().zip(answers) {
            match answer {
                Ok((host, port, epoch)) => named.push((epoch, host, port)),
                Err(err) => {
                    tracing::debug!(sentinel = %shown, master = %self.master, error = %err, "sentinel did not name a usable master");
                    if let Some(why) = misconfiguration(&err, &self.master) {
                        misconfigured.push((shown.clone(), why));
                    }
                    last = Some(err);
                }
            }
        }
        if misconfigured.len() == self.sentinels.len() {
            return Err(all_misconfigured(&self.master, &misconfigured));
        }
        self.warn_misconfigured(&misconfigured);
        let newest = named.iter().map(|(epoch, ..)| *epoch).max().flatten();
        let mut tried: Vec<(String, u16)> = Vec::new();
        for (epoch, host, port) in named {
            if epoch < newest {
                tracing::debug!(master = %self.master, named = %format!("{host}:{port}"), epoch, newest,
                    "a sentinel names a master at an older epoch (it has not heard of a failover yet): ignored");
                continue;
            }
            if tried.iter().any(|(h, p)| *h == host && *p == port) {
                continue;
            }
            match self.check_master(&host, port).await {
                Ok((addr, conn)) => return Ok(Current { addr, epoch, conn }),
                Err(err) => last = Some(err),
            }
            tried.push((host, port));
        }
        Err(last.unwrap_or_else(|| {
            RedisError::from((ErrorKind::EmptySentinelList, "no sentinel configured"))
        }))
    }

    /// Says once per sentinel that it is of no use (the others named the
    /// master, or did not answer): a sentinel listed by mistake leaves the
    /// group with fewer sentinels than `sentinel.urls` lists.
    fn warn_misconfigured(&self, misconfigured: &[(String, String)]) {
        let mut warned = match self.warned.lock() {
            Ok(warned) => warned,
            Err(poisoned) => poisoned.into_inner(),
        };
        for (shown, why) in misconfigured {
            if warned.contains(shown) {
                continue;
            }
            warned.push(shown.clone());
            tracing::warn!(sentinel = %shown, master = %self.master,
                "sentinel `{shown}` of `[redis] sentinel.urls` {why}: it is of no use to this node, which follows the master through the other sentinels; fix `sentinel.urls`");
        }
    }

    /// One sentinel's master for this name and its configuration epoch
    /// (`None` if `SENTINEL MASTER` is not allowed: lowest).
    async fn ask(&self, sentinel: &redis::Client) -> RedisResult<(String, u16, Option<u64>)> {
        let lookup = async {
            let mut conn = sentinel.get_multiplexed_async_connection().await?;
            let reply: Option<(String, u16)> = redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(&self.master)
                .query_async(&mut conn)
                .await?;
            let Some((host, port)) = reply else {
                let monitored = monitored_names(&mut conn).await;
                return Err(RedisError::from((
                    ErrorKind::MasterNameNotFoundBySentinel,
                    "the sentinel does not monitor this master name",
                    monitored,
                )));
            };
            let fields: RedisResult<Vec<String>> = redis::cmd("SENTINEL")
                .arg("MASTER")
                .arg(&self.master)
                .query_async(&mut conn)
                .await;
            let epoch = fields.ok().and_then(|fields| config_epoch(&fields));
            Ok((host, port, epoch))
        };
        tokio::time::timeout(SENTINEL_TIMEOUT, lookup)
            .await
            .map_err(|_| timeout_error("the sentinel did not answer"))?
    }

    /// A manager for `host:port` once its `ROLE` says it is a master.
    async fn check_master(
        &self,
        host: &str,
        port: u16,
    ) -> RedisResult<(String, ConnectionManager)> {
        let addr = format!("{host}:{port}");
        let mut conn = self.data_node(host, port)?;
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

/// The master in use.
#[derive(Clone)]
struct Current {
    addr: String,
    /// The newest `config-epoch` it was named at (`None`: not known).
    epoch: Option<u64>,
    conn: ConnectionManager,
}

impl Current {
    /// `host:port@epoch`: the same server promoted again at a later
    /// failover is another master for the replica-count memory of
    /// `lock/server.rs`; the old and the new master of one failover are
    /// never taken for each other.
    fn name(&self) -> String {
        match self.epoch {
            Some(epoch) => format!("{}@{epoch}", self.addr),
            None => self.addr.clone(),
        }
    }

    fn named(&self) -> (String, ConnectionManager) {
        (self.name(), self.conn.clone())
    }
}

/// The first command error among a pipeline's replies.
pub fn first_error(values: &[Value]) -> Option<RedisError> {
    values.iter().find_map(|value| match value {
        Value::ServerError(err) => Some(RedisError::from(err.clone())),
        _ => None,
    })
}

/// `config-epoch` of a `SENTINEL MASTER` reply (field/value pairs).
fn config_epoch(fields: &[String]) -> Option<u64> {
    fields
        .chunks(2)
        .find(|pair| pair.first().is_some_and(|name| name == "config-epoch"))
        .and_then(|pair| pair.get(1))
        .and_then(|epoch| epoch.parse().ok())
}

fn timeout_error(what: &'static str) -> RedisError {
    RedisError::from(std::io::Error::new(std::io::ErrorKind::TimedOut, what))
}

/// How [`all_misconfigured`]'s error begins.
const MISCONFIGURED: &str = "no sentinel of `[redis] sentinel.urls` can name the master";

/// Whether `err` says no sentinel can name the master as configured (see
/// [`all_misconfigured`]): a mistake of the config, which no retry cures.
pub fn is_misconfigured(err: &RedisError) -> bool {
    err.to_string().contains(MISCONFIGURED)
}

/// Why a sentinel's `err` is a mistake of the config rather than an
/// outage: it does not monitor `master` (and which names it monitors), or
/// it is not a sentinel at all.
fn misconfiguration(err: &RedisError, master: &str) -> Option<String> {
    if err.kind() == ErrorKind::MasterNameNotFoundBySentinel {
        let monitored = err.detail().unwrap_or_default();
        return Some(format!("monitors no master named `{master}` ({monitored})"));
    }
    let text = err.to_string();
    (text.contains("unknown command") && text.contains("SENTINEL")).then(|| {
        "is not a sentinel: it answers `unknown command 'SENTINEL'` (a data node? sentinels \
         listen on 26379 by default)"
            .to_string()
    })
}

/// The error when every sentinel answered and none can name `master`.
fn all_misconfigured(master: &str, misconfigured: &[(String, String)]) -> RedisError {
    let each: Vec<String> = misconfigured
        .iter()
        .map(|(shown, why)| format!("`{shown}` {why}"))
        .collect();
    let detail = format!(
        "{}; set `sentinel.master` to the name of `sentinel monitor NAME …` in sentinel.conf \
         (now `{master}`) and `sentinel.urls` to the sentinels' addresses",
        each.join("; ")
    );
    RedisError::from((ErrorKind::InvalidClientConfig, MISCONFIGURED, detail))
}

/// The master names a sentinel monitors (`SENTINEL MASTERS`), said for a
/// message: "it monitors `a`, `b`", "it monitors none" (or that it does
/// not say, when its user may not list them).
async fn monitored_names(conn: &mut redis::aio::MultiplexedConnection) -> String {
    let masters: RedisResult<Vec<Vec<String>>> = redis::cmd("SENTINEL")
        .arg("MASTERS")
        .query_async(conn)
        .await;
    let Ok(masters) = masters else {
        return "it does not say which names it monitors".to_string();
    };
    let names: Vec<String> = masters
        .iter()
        .filter_map(|fields| {
            fields
                .chunks(2)
                .find(|pair| pair.first().is_some_and(|name| name == "name"))
                .and_then(|pair| pair.get(1))
                .map(|name| format!("`{name}`"))
        })
        .collect();
    if names.is_empty() {
        "it monitors none".to_string()
    } else {
        format!("it monitors {}", names.join(", "))
    }
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
