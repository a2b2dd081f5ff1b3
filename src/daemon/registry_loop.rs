//! Publishes this node to the registry every few seconds and warns when live
//! nodes disagree on a job's definition (a half-finished `jobs.toml` rollout).
//!
//! A warning names the job and the nodes on each side. It is repeated when
//! the set of divergences changes and every [`REPEAT`] while it lasts, so the
//! journal of every node shows it without flooding.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::Shared;
use crate::config::Config;
use crate::metrics;
use crate::registry::{self, Divergence, NodeInfo};
use redis::aio::ConnectionManager;

/// How often a lasting divergence is logged again.
const REPEAT: Duration = Duration::from_secs(300);

/// Runs until shutdown; publishes at once after every reload.
pub async fn run(shared: Arc<Shared>, mut config_rx: watch::Receiver<Arc<Config>>) {
    let started_at = Utc::now().timestamp_millis();
    let mut warned: Vec<Divergence> = Vec::new();
    let mut warned_at = Instant::now();
    let mut config = Arc::clone(&config_rx.borrow_and_update());
    // Hashing the whole config is only redone when a reload brings a new one.
    let mut config_hash = config.fingerprint();
    // Whether Redis has this node's whole entry for the current config.
    let mut published = false;
    let node = shared.locker.node();
    loop {
        let conn = shared.locker.connection();
        let prefix = shared.locker.prefix();
        let alive = if published {
            registry::heartbeat(&conn, prefix, node, shared.clock_offset()).await
        } else {
            Ok(false)
        };
        let sent = match alive {
            Ok(true) => Ok(()),
            Ok(false) => {
                // The per-job fingerprints exist only for this rare write.
                let info = node_info(&shared, &config, &config_hash, started_at);
                let sent = registry::publish(&conn, prefix, &info).await;
                drop(info);
                crate::memory::release_freed();
                sent
            }
            Err(err) => Err(err),
        };
        match sent {
            Ok(()) => {
                published = true;
                match current_divergences(&conn, prefix, &config_hash).await {
                    Ok(found) => {
                        metrics::config_divergence(found.len());
                        if found != warned || (!found.is_empty() && warned_at.elapsed() >= REPEAT) {
                            report(&shared, &found, &warned);
                            warned = found;
                            warned_at = Instant::now();
                        }
                    }
                    Err(err) => {
                        metrics::redis_error("registry");
                        debug!(node = %shared.locker.node(), error = %err, "cannot read the node registry");
                    }
                }
            }
            Err(err) => {
                metrics::redis_error("registry");
                debug!(node = %shared.locker.node(), error = %err, "cannot publish to the node registry");
            }
        }
        tokio::select! {
            _ = shared.cancel.cancelled() => return,
            _ = tokio::time::sleep(registry::REFRESH) => {}
            _ = shared.clock_measured.notified() => {}
            changed = config_rx.changed() => {
                if changed.is_err() {
                    return;
                }
                config = Arc::clone(&config_rx.borrow_and_update());
                config_hash = config.fingerprint();
                published = false;
            }
        }
    }
}

/// The live nodes' divergences; the per-job fingerprints are only read when
/// some live node's whole-config fingerprint differs from `ours`.
async fn current_divergences(
    conn: &ConnectionManager,
    prefix: &str,
    ours: &str,
) -> redis::RedisResult<Vec<Divergence>> {
    let hashes = registry::config_hashes(conn, prefix).await?;
    if hashes.iter().all(|hash| hash == ours) {
        return Ok(Vec::new());
    }
    Ok(registry::divergences(
        &registry::live_nodes(conn, prefix).await?,
    ))
}

fn node_info(shared: &Shared, config: &Config, config_hash: &str, started_at: i64) -> NodeInfo {
    let jobs: BTreeMap<String, String> = config
        .jobs
        .iter()
        .map(|job| (job.name.clone(), job.fingerprint()))
        .collect();
    NodeInfo {
        node: shared.locker.node().to_string(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        started_at,
        updated_at: 0,
        config_path: config.path.display().to_string(),
        config_hash: config_hash.to_string(),
        clock_offset_ms: shared.clock_offset(),
        jobs,
    }
}

fn report(shared: &Shared, found: &[Divergence], before: &[Divergence]) {
    let node = shared.locker.node();
    for divergence in found {
        warn!(node = %node, job = %divergence.job, sides = %divergence.describe(),
            "job definition differs between nodes: finish rolling out jobs.toml and reload");
    }
    if found.is_empty() && !before.is_empty() {
        info!(node = %node, "all live nodes agree on every job definition again");
    }
}
