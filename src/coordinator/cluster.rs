//! A Redis Cluster, through redis-rs's async cluster connection.
//!
//! Every key of a job shares the hash tag `{PREFIX:JOB}`, so each script
//! runs on the master of that slot, and different jobs spread over the
//! shards; the registry's keys share `{PREFIX}` and live on one shard. A
//! pipeline goes to the slot of its first keyed command, which is how a
//! claim's `WAIT` runs on the claim's own master (a bare `WAIT` would go to
//! every primary and answer the minimum).
//!
//! Failure model: a master dies and its replica is promoted after the
//! cluster's node timeout. The client follows `MOVED`, refreshes its slot
//! map on `READONLY`/`CLUSTERDOWN` and re-sends on I/O errors (so a claim
//! can reach Redis twice: the claim answers a retry with the same token as
//! it did the first time). Only the jobs whose slots the failed master held
//! wait; the others go on. The connection is made in the background: the
//! daemon starts while the cluster is down and fails closed meanwhile.
//!
//! When the client has no connection at all, its error only says "No
//! connections found" (the reason, e.g. an untrusted certificate or a wrong
//! password, goes to the crate's own log). [`Cluster`] then asks the seeds
//! itself, as plain connections with the same TLS settings and credentials
//! (at most every [`PROBE_EVERY`], each bounded by the connect timeout),
//! and returns what a seed answered instead: the same error a `url` server
//! gives, so a wrong password stops the daemon (exit 78) and `status` names
//! the certificate. A seed that answers but is a plain server (mode
//! standalone: a `url` or Sentinel data node written as a seed) is said
//! so, and stops the daemon at start the same way; before, the client
//! retried it for ever as "No connections found".

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use redis::aio::ConnectionLike;
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::{
    Cmd, ErrorKind, IntoConnectionInfo as _, Pipeline, RedisError, RedisFuture, TlsMode, Value,
};
use tokio::time::Instant;

use super::single;
use crate::config::{RedisConfig, redact_url};

/// The seeds are asked why there is no connection at most this often.
const PROBE_EVERY: Duration = Duration::from_secs(1);

/// A Redis Cluster connection whose "no connection" errors name their
/// cause (see the module doc). Cheap to clone.
#[derive(Clone)]
pub struct Cluster {
    conn: ClusterConnection,
    probe: Arc<Probe>,
}

/// Plain clients for the seeds, and the last answer they gave.
struct Probe {
    /// Each seed's redacted URL and a plain client for it.
    seeds: Vec<(String, redis::Client)>,
    last: tokio::sync::Mutex<Option<(Instant, Option<RedisError>)>>,
}

impl Cluster {
    /// `err`, or when it says only that the client has no connection, what
    /// a seed answers a plain connection.
    async fn explain(&self, err: RedisError) -> RedisError {
        if !has_no_connection(&err) {
            return err;
        }
        let mut last = self.probe.last.lock().await;
        if let Some((at, found)) = last.as_ref()
            && at.elapsed() < PROBE_EVERY
        {
            return found.clone().unwrap_or(err);
        }
        let found = self.probe.ask().await;
        *last = Some((Instant::now(), found.clone()));
        found.unwrap_or(err)
    }
}

impl Probe {
    /// Connects to every seed at once and sends `PING` and `INFO server`:
    /// `None` if one answers as a cluster node (the client's own error
    /// stands), else a refusal if any seed refused us, else the first
    /// seed that answered as a plain server ([`not_a_cluster`]), else the
    /// first error.
    async fn ask(&self) -> Option<RedisError> {
        let answers =
            futures_util::future::join_all(self.seeds.iter().map(|(shown, seed)| async move {
                let ping = async {
                    let mut conn = seed.get_multiplexed_async_connection().await?;
                    redis::cmd("PING").query_async::<()>(&mut conn).await?;
                    // A user that may not run `INFO` is taken at its word.
                    let info: String = redis::cmd("INFO")
                        .arg("server")
                        .query_async(&mut conn)
                        .await
                        .unwrap_or_default();
                    Ok(super::identity::server_mode(&info).map(str::to_string))
                };
                match tokio::time::timeout(single::CONNECT_TIMEOUT, ping).await {
                    Ok(Ok(Some(mode))) if mode != "cluster" => Err(not_a_cluster(shown, &mode)),
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err(err)) => Err(err),
                    Err(_) => Err(RedisError::from(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "the cluster node did not answer",
                    ))),
                }
            }))
            .await;
        let mut errors = Vec::with_capacity(answers.len());
        for answer in answers {
            match answer {
                Ok(()) => return None,
                Err(err) => errors.push(err),
            }
        }
        let pick = errors
            .iter()
            .position(super::errors::is_refusal)
            .or_else(|| errors.iter().position(is_not_a_cluster))
            .unwrap_or(0);
        (pick < errors.len()).then(|| errors.swap_remove(pick))
    }
}

/// What a seed at `shown` that is not a cluster node (server mode `mode`)
/// is told: a mistake of the config, which no retry cures
/// ([`is_not_a_cluster`]).
fn not_a_cluster(shown: &str, mode: &str) -> RedisError {
    let detail = format!(
        "`{shown}` has cluster support disabled (server mode {mode}): `[redis] cluster` lists \
         nodes of a Redis Cluster (`cluster-enabled yes`); for one server write `url = \"{shown}\"`, \
         for a Sentinel group `sentinel = {{ master = \"NAME\", urls = [...] }}`"
    );
    RedisError::from((ErrorKind::InvalidClientConfig, NOT_A_CLUSTER, detail))
}

/// How [`not_a_cluster`]'s error begins.
const NOT_A_CLUSTER: &str = "a seed node of `cluster` is not a cluster node";

/// Whether `err` says a seed is not a cluster node (see [`not_a_cluster`]).
pub fn is_not_a_cluster(err: &RedisError) -> bool {
    err.to_string().contains(NOT_A_CLUSTER)
}

/// The cluster client's errors that hide why it has no connection.
fn has_no_connection(err: &RedisError) -> bool {
    err.kind() == ErrorKind::ClusterConnectionNotFound
        || err
            .to_string()
            .contains("Failed to create initial connections")
}

impl ConnectionLike for Cluster {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            match self.conn.req_packed_command(cmd).await {
                Ok(value) => Ok(value),
                Err(err) => Err(self.explain(err).await),
            }
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            match self.conn.req_packed_commands(pipeline, offset, count).await {
                Ok(values) => Ok(values),
                Err(err) => Err(self.explain(err).await),
            }
        })
    }

    fn get_db(&self) -> i64 {
        self.conn.get_db()
    }
}

/// How often a command is re-sent by the cluster client before it is an
/// error for us: enough to follow a `MOVED` and a slot refresh, few enough
/// that a failing master is soon our own retry loop's business.
const RETRIES: u32 = 3;

/// A lazily connecting cluster client for the seed nodes `urls`.
pub fn connect(urls: &[String], config: &RedisConfig) -> anyhow::Result<Cluster> {
    let shown = urls
        .iter()
        .map(|url| redact_url(url))
        .collect::<Vec<_>>()
        .join(", ");
    let mut seeds = Vec::with_capacity(urls.len());
    let mut probes = Vec::with_capacity(urls.len());
    for url in urls {
        let info = url
            .as_str()
            .into_connection_info()
            .map_err(|err| anyhow::anyhow!("{:?}", err.kind()))
            .with_context(|| format!("invalid cluster url `{}`", redact_url(url)))?;
        let info = single::with_settings(info, config);
        let shown = redact_url(url);
        probes.push((shown.clone(), single::client(info.clone(), config, &shown)?));
        seeds.push(info);
    }
    // Err means a provider is already installed, which is all we need.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut builder = ClusterClient::builder(seeds).retries(RETRIES);
    if let Some(password) = &config.password {
        builder = builder.password(password.clone());
    }
    if let Some(username) = &config.username {
        builder = builder.username(username.clone());
    }
    if urls.iter().all(|url| url.starts_with("rediss://")) {
        builder = builder.tls(TlsMode::Secure);
        if config.tls.is_configured() {
            builder = builder.certs(single::certificates(config));
        }
    }
    let client = builder
        .build()
        .map_err(|err| anyhow::anyhow!("{:?}", err.kind()))
        .with_context(|| format!("cannot use the redis cluster `{shown}`"))?;
    let cluster = ClusterConfig::new()
        .set_connection_timeout(single::CONNECT_TIMEOUT)
        .set_response_timeout(single::RESPONSE_TIMEOUT);
    Ok(Cluster {
        conn: client.get_pending_async_connection_with_config(cluster),
        probe: Arc::new(Probe {
            seeds: probes,
            last: tokio::sync::Mutex::new(None),
        }),
    })
}
