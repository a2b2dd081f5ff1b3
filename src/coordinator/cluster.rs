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

use anyhow::Context as _;
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::{IntoConnectionInfo as _, TlsMode};

use super::single;
use crate::config::{RedisConfig, redact_url};

/// How often a command is re-sent by the cluster client before it is an
/// error for us: enough to follow a `MOVED` and a slot refresh, few enough
/// that a failing master is soon our own retry loop's business.
const RETRIES: u32 = 3;

/// A lazily connecting cluster client for the seed nodes `urls`.
pub fn connect(urls: &[String], config: &RedisConfig) -> anyhow::Result<ClusterConnection> {
    let shown = urls
        .iter()
        .map(|url| redact_url(url))
        .collect::<Vec<_>>()
        .join(", ");
    let mut seeds = Vec::with_capacity(urls.len());
    for url in urls {
        let info = url
            .as_str()
            .into_connection_info()
            .map_err(|err| anyhow::anyhow!("{:?}", err.kind()))
            .with_context(|| format!("invalid cluster url `{}`", redact_url(url)))?;
        seeds.push(single::with_settings(info, config));
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
    Ok(client.get_pending_async_connection_with_config(cluster))
}
