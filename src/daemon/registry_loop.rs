//! Publishes this node to the registry every few seconds, warns when live
//! nodes disagree on a job's definition (a half-finished `jobs.toml`
//! rollout: [`super::drift`]), and warns when another daemon process
//! publishes under this node's id (two daemons started with the same
//! `--node-id`).
//!
//! A node-id
//! collision is noticed by the registry scripts on every write while both
//! daemons run (each one's write finds the other's instance); it is logged
//! once when it starts and every [`REPEAT`] while it lasts, and its end once
//! no write has found it for a [`registry::TTL`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::Shared;
use super::drift::DriftWatch;
use crate::config::Config;
use crate::metrics;
use crate::registry::{self, JobSchedule, NodeInfo, Refresh};

/// How often a lasting divergence or node-id collision is logged again.
pub(super) const REPEAT: Duration = Duration::from_secs(300);

/// Runs until shutdown; publishes at once after every reload.
pub async fn run(shared: Arc<Shared>, mut config_rx: watch::Receiver<Arc<Config>>) {
    // When this daemon started, on the monotonic clock: published as an
    // instant of the clock occurrences fire by (`node_info`), so that a
    // node started with its wall clock a day ahead is not shown as
    // starting tomorrow.
    let started_at = std::time::Instant::now();
    let mut drift = DriftWatch::default();
    let mut collisions = CollisionWatch::default();
    let mut config = Arc::clone(&config_rx.borrow_and_update());
    // Hashing the whole config is only redone when a reload brings a new one.
    let mut config_hash = config.fingerprint();
    // Whether Redis has this node's whole entry for the current config.
    let mut published = false;
    // Whether this process has written its entry at least once.
    let mut written_once = false;
    // The config fingerprint this process last published whole.
    let mut published_hash: Option<String> = None;
    // Whether the last whole write already had a measured clock offset
    // (then its start time was on the clock the node fires by).
    let mut whole_measured = false;
    let node = shared.locker.node();
    let instance = shared.instance.as_str();
    loop {
        let coordinator = shared.locker.coordinator();
        let prefix = shared.locker.prefix();
        let offset = shared.clock.offset_ms();
        let warning = shared.redis_warning();
        let whole = !published;
        let beat = if published {
            coordinator
                .on_members(|conn| {
                    let warning = warning.as_deref();
                    let beat = registry::Beat {
                        node,
                        instance,
                        config: &config_hash,
                        running: shared.slots.taken(),
                    };
                    async move { registry::heartbeat(&conn, prefix, beat, offset, warning).await }
                })
                .await
                .map(registry::merge_refreshes)
        } else {
            Ok(Refresh::Gone)
        };
        let sent = match beat {
            Ok(Refresh::Gone) => {
                // The per-job fields exist only for this rare write.
                let (info, schedules) = node_info(&shared, &config, &config_hash, started_at);
                let previous = published_hash.as_deref();
                let sent = coordinator
                    .on_members(|conn| {
                        let (info, schedules) = (&info, &schedules);
                        async move {
                            registry::publish(
                                &conn,
                                prefix,
                                info,
                                schedules,
                                written_once,
                                previous,
                            )
                            .await
                        }
                    })
                    .await
                    .map(registry::merge_refreshes);
                if sent.is_ok() {
                    published_hash = Some(config_hash.clone());
                }
                drop((info, schedules));
                crate::memory::release_freed();
                sent
            }
            other => other,
        };
        match sent {
            Ok(refresh) => {
                published = true;
                written_once = true;
                if whole {
                    whole_measured = offset.is_some();
                }
                collisions.observe(&refresh, node, instance);
                drift.observe(&shared, prefix, &config_hash).await;
            }
            Err(err) => {
                metrics::redis_error("registry");
                debug!(node = %shared.locker.node(), error = %err, "cannot publish to the node registry");
            }
        }
        tokio::select! {
            _ = shared.cancel.cancelled() => return,
            _ = tokio::time::sleep(registry::REFRESH) => {}
            // The first measurement of the clock: publish the whole entry
            // again, with the start time on the clock just measured, unless
            // the last whole write came after it.
            _ = shared.clock.measured.notified() => published &= whole_measured,
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

/// When this node's id was last found used by another daemon, and when
/// that was last logged.
#[derive(Debug, Default)]
struct CollisionWatch {
    seen_at: Option<Instant>,
    warned_at: Option<Instant>,
}

impl CollisionWatch {
    /// Logs a collision when it starts and every [`REPEAT`] while it lasts,
    /// and its end once a [`registry::TTL`] passed without one.
    fn observe(&mut self, refresh: &Refresh, node: &str, instance: &str) {
        let now = Instant::now();
        match refresh {
            Refresh::Collision { other } => {
                if self
                    .warned_at
                    .is_none_or(|at| now.duration_since(at) >= REPEAT)
                {
                    warn!(
                        node = %node,
                        instance = %instance,
                        other_instance = %other,
                        "another daemon uses node id `{node}`: {}; this one is {}; \
                         give each daemon its own --node-id (SOLOCRON_NODE_ID)",
                        registry::describe_instance(other),
                        registry::describe_instance(instance),
                    );
                    self.warned_at = Some(now);
                }
                self.seen_at = Some(now);
            }
            Refresh::Written | Refresh::Gone => {
                if self
                    .seen_at
                    .is_some_and(|seen| now.duration_since(seen) >= registry::TTL)
                {
                    info!(node = %node, instance = %instance,
                        "no other daemon has used node id `{node}` for {}", humantime::format_duration(registry::TTL));
                    *self = CollisionWatch::default();
                }
            }
        }
    }
}

/// The whole entry, and each job's schedule (for `status` without a config).
fn node_info(
    shared: &Shared,
    config: &Config,
    config_hash: &str,
    started_at: std::time::Instant,
) -> (NodeInfo, BTreeMap<String, JobSchedule>) {
    let up = chrono::TimeDelta::from_std(started_at.elapsed()).unwrap_or_default();
    let now = shared.clock.now();
    let started_at = now.checked_sub_signed(up).unwrap_or(now).timestamp_millis();
    let jobs: BTreeMap<String, String> = config
        .jobs
        .iter()
        .map(|job| (job.name.clone(), job.fingerprint()))
        .collect();
    let schedules: BTreeMap<String, JobSchedule> = config
        .jobs
        .iter()
        .map(|job| {
            let schedule = JobSchedule {
                expression: job.schedule.expression().to_string(),
                timezone: job.schedule.timezone().name().to_string(),
                splay_ms: u64::try_from(job.splay_offset.as_millis()).unwrap_or(u64::MAX),
            };
            (job.name.clone(), schedule)
        })
        .collect();
    let info = NodeInfo {
        node: shared.locker.node().to_string(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        started_at,
        updated_at: 0,
        config_path: config.path.display().to_string(),
        config_hash: config_hash.to_string(),
        clock_offset_ms: shared.clock.offset_ms(),
        redis_warning: shared.redis_warning(),
        jobs,
        instance: shared.instance.clone(),
        collision: None,
        running: Some(u64::try_from(shared.slots.taken()).unwrap_or(u64::MAX)),
    };
    (info, schedules)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_collision_is_remembered_until_a_ttl_without_one() {
        let mut watch = CollisionWatch::default();
        let other = Refresh::Collision {
            other: "h:2:00000002".into(),
        };
        watch.observe(&other, "n1", "h:1:00000001");
        let first = watch.warned_at.expect("warned at once");
        watch.observe(&other, "n1", "h:1:00000001");
        assert_eq!(watch.warned_at, Some(first), "not again within REPEAT");
        watch.observe(&Refresh::Written, "n1", "h:1:00000001");
        assert!(watch.seen_at.is_some(), "a quiet write is not the end yet");
    }
}
