//! The config drift check: which jobs the live nodes define differently.
//!
//! Each period a node reads the configs in use (`registry::in_use`: the
//! fingerprints, the live node count and the nodes on its own config), one
//! round trip whatever the fleet's size. When its config is the only one
//! and every live node is on it, that is all. While several configs are in
//! use (a rollout), it compares their job maps, each read once per
//! fingerprint and kept while the config is in use, so the divergences are
//! found per config; the nodes on each side are read only to log them
//! ([`named`]). A live node on no config set is an older daemon that does
//! not publish one: while one runs, the check reads every node's entry as
//! before ([`legacy`]).
//!
//! A drift warning names the job and the nodes on each side. It is repeated
//! when the divergences (the jobs, their fingerprints, the configs on each
//! side) change and every [`REPEAT`] while they last, so the journal of
//! every node shows it without flooding.

use std::collections::{BTreeMap, BTreeSet};

use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::Shared;
use super::registry_loop::REPEAT;
use crate::metrics;
use crate::registry::{self, Divergence};

/// The drift check and what it last logged.
#[derive(Debug)]
pub(super) struct DriftWatch {
    check: DriftCheck,
    warned: Found,
    warned_at: Instant,
}

impl Default for DriftWatch {
    fn default() -> DriftWatch {
        DriftWatch {
            check: DriftCheck::default(),
            warned: Found::default(),
            warned_at: Instant::now(),
        }
    }
}

impl DriftWatch {
    /// Checks once, sets the metrics and [`Shared::is_drifting`], and logs
    /// what changed (or lasted [`REPEAT`]); a Redis error is counted and
    /// logged at debug, and the next period tries again.
    pub async fn observe(&mut self, shared: &Shared, prefix: &str, ours: &str) {
        let node = shared.locker.node();
        let found = match self.check.check(shared, prefix, ours).await {
            Ok(found) => found,
            Err(err) => {
                metrics::redis_error("registry");
                debug!(node = %node, error = %err, "cannot read the node registry");
                return;
            }
        };
        metrics::config_divergence(found.divergences.len());
        shared.set_drifting(found.divergences.iter().map(|d| d.job.clone()).collect());
        let lasting = !found.divergences.is_empty() && self.warned_at.elapsed() >= REPEAT;
        if found == self.warned && !lasting {
            return;
        }
        // The nodes on each side are read only to log them.
        match named(shared, prefix, &found).await {
            Ok(named) => {
                let was = !self.warned.divergences.is_empty();
                if !named.is_empty() && !was {
                    let jobs: Vec<&str> = named.iter().map(|d| d.job.as_str()).collect();
                    shared.audit(
                        "drift start",
                        &jobs.join(","),
                        "job definitions differ between nodes",
                    );
                } else if named.is_empty() && was {
                    shared.audit("drift end", "*", "every live node agrees again");
                }
                report(node, &named, was);
                self.warned = found;
                self.warned_at = Instant::now();
            }
            Err(err) => {
                metrics::redis_error("registry");
                debug!(node = %node, error = %err, "cannot read the node registry");
            }
        }
    }
}

/// Logs `found`, or that the nodes agree again if something was
/// `diverging` before.
fn report(node: &str, found: &[Divergence], diverging: bool) {
    for divergence in found {
        warn!(node = %node, job = %divergence.job, sides = %divergence.describe(),
            "job definition differs between nodes: finish rolling out jobs.toml and reload");
    }
    if found.is_empty() && diverging {
        info!(node = %node, "all live nodes agree on every job definition again");
    }
}

/// What one check found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Found {
    /// The jobs defined differently, by name.
    divergences: Vec<Divergence>,
    /// The sides name configs (by fingerprint), not nodes: [`named`]
    /// replaces them by the nodes on each.
    by_config: bool,
}

/// The job maps of the configs in use, by fingerprint.
#[derive(Debug, Default)]
struct DriftCheck {
    jobs: BTreeMap<String, BTreeMap<String, String>>,
}

impl DriftCheck {
    /// The divergences between the live nodes, as seen from a node on the
    /// config `ours`. Sets `solocron_live_nodes` on the way.
    async fn check(
        &mut self,
        shared: &Shared,
        prefix: &str,
        ours: &str,
    ) -> redis::RedisResult<Found> {
        let coordinator = shared.locker.coordinator();
        let in_use = registry::merge_in_use(
            coordinator
                .on_members(|conn| async move { registry::in_use(&conn, prefix, ours).await })
                .await?,
        );
        metrics::live_nodes(in_use.nodes);
        let alone = in_use.configs.iter().all(|config| config == ours);
        let counted = if alone {
            in_use.ours
        } else {
            let configs = in_use.configs.as_slice();
            let counts = coordinator
                .on_members(
                    |conn| async move { registry::node_counts(&conn, prefix, configs).await },
                )
                .await?;
            (0..configs.len())
                .map(|at| {
                    counts
                        .iter()
                        .filter_map(|c| c.get(at))
                        .max()
                        .copied()
                        .unwrap_or(0)
                })
                .sum()
        };
        if counted < in_use.nodes {
            return legacy(shared, prefix, ours).await;
        }
        if alone {
            self.jobs.clear();
            return Ok(Found::default());
        }
        self.jobs
            .retain(|config, _| in_use.configs.contains(config));
        for config in &in_use.configs {
            if self.jobs.contains_key(config) {
                continue;
            }
            let maps = coordinator
                .on_members(
                    |conn| async move { registry::config_jobs(&conn, prefix, config).await },
                )
                .await?;
            // A config no master stores any more is left out until it is.
            if let Some(jobs) = maps.into_iter().flatten().next() {
                self.jobs.insert(config.clone(), jobs);
            }
        }
        Ok(Found {
            divergences: registry::divergences_of(
                self.jobs
                    .iter()
                    .map(|(config, jobs)| (config.as_str(), jobs)),
            ),
            by_config: true,
        })
    }
}

/// `found` with the nodes on each side (read once per config named, from
/// every master) in place of the configs, sorted by id.
async fn named(
    shared: &Shared,
    prefix: &str,
    found: &Found,
) -> redis::RedisResult<Vec<Divergence>> {
    if !found.by_config {
        return Ok(found.divergences.clone());
    }
    let coordinator = shared.locker.coordinator();
    let configs: BTreeSet<&String> = found
        .divergences
        .iter()
        .flat_map(|divergence| divergence.sides.values().flatten())
        .collect();
    let mut nodes_on: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for config in configs {
        let lists = coordinator
            .on_members(|conn| async move { registry::config_nodes(&conn, prefix, config).await })
            .await?;
        nodes_on.insert(config, lists.into_iter().flatten().collect());
    }
    Ok(found
        .divergences
        .iter()
        .map(|divergence| Divergence {
            job: divergence.job.clone(),
            sides: divergence
                .sides
                .iter()
                .map(|(fingerprint, configs)| {
                    let mut nodes: Vec<String> = configs
                        .iter()
                        .flat_map(|config| {
                            nodes_on.get(config.as_str()).cloned().unwrap_or_default()
                        })
                        .collect();
                    nodes.sort();
                    nodes.dedup();
                    (fingerprint.clone(), nodes)
                })
                .collect(),
        })
        .collect())
}

/// The check of a fleet with older daemons (no config sets): every live
/// node's config fingerprint, and every node's jobs when one differs from
/// `ours`.
async fn legacy(shared: &Shared, prefix: &str, ours: &str) -> redis::RedisResult<Found> {
    let coordinator = shared.locker.coordinator();
    let hashes = coordinator
        .on_members(|conn| async move { registry::config_hashes(&conn, prefix).await })
        .await?;
    if hashes.iter().flatten().all(|(_, hash)| hash == ours) {
        return Ok(Found::default());
    }
    let nodes = coordinator
        .on_members(|conn| async move { registry::live_nodes(&conn, prefix).await })
        .await?;
    Ok(Found {
        divergences: registry::divergences(&registry::merge_nodes(nodes)),
        by_config: false,
    })
}
