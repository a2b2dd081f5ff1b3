//! SIGHUP: reload `jobs.toml` without losing the running schedule.
//!
//! The new file is loaded and validated completely before anything changes;
//! a broken or missing file is logged (file:line:col) and the old schedule
//! keeps running. Otherwise jobs are compared by fingerprint: added jobs
//! start, removed jobs stop being scheduled (a run in progress finishes),
//! changed jobs restart their loop with the new settings, which apply from
//! their next occurrence; unchanged jobs are not touched. A restarted loop
//! catches up like a starting node, and the claim script refuses what was
//! already decided. `[redis]` and `history_max` need a restart.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::{Options, Shared, job_loop};
use crate::config::{self, Config, Job};
use crate::{metrics, notify};

/// The running job loops, by job name.
#[derive(Default)]
pub struct JobLoops {
    running: HashMap<String, Running>,
}

struct Running {
    fingerprint: String,
    cancel: CancellationToken,
}

/// What a reload changed, by job name.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Diff {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub changed: Vec<String>,
    pub unchanged: usize,
}

impl JobLoops {
    /// Makes the running loops match `jobs`.
    pub fn apply(&mut self, shared: &Arc<Shared>, jobs: &[Arc<Job>]) -> Diff {
        let mut diff = Diff::default();
        let wanted: HashMap<&str, &Arc<Job>> =
            jobs.iter().map(|job| (job.name.as_str(), job)).collect();
        let mut names: Vec<String> = self.running.keys().cloned().collect();
        names.sort();
        for name in names {
            if !wanted.contains_key(name.as_str()) {
                if let Some(old) = self.running.remove(&name) {
                    old.cancel.cancel();
                }
                diff.removed.push(name);
            }
        }
        for job in jobs {
            let fingerprint = job.fingerprint();
            match self.running.get(&job.name) {
                Some(old) if old.fingerprint == fingerprint => {
                    diff.unchanged += 1;
                    continue;
                }
                Some(old) => {
                    old.cancel.cancel();
                    diff.changed.push(job.name.clone());
                }
                None => diff.added.push(job.name.clone()),
            }
            let cancel = shared.cancel.child_token();
            shared.tracker.spawn(job_loop::run(
                Arc::clone(shared),
                Arc::clone(job),
                cancel.clone(),
            ));
            self.running.insert(
                job.name.clone(),
                Running {
                    fingerprint,
                    cancel,
                },
            );
        }
        diff
    }
}

/// Reloads the file named by the current config; see the module doc.
pub fn reload(
    shared: &Arc<Shared>,
    loops: &mut JobLoops,
    config_tx: &watch::Sender<Arc<Config>>,
    options: &Options,
) {
    notify::reloading();
    let current = Arc::clone(&config_tx.borrow());
    let path = current.path.clone();
    info!(node = %options.node, config = %path.display(), "reloading");
    match config::load(&path) {
        Err(err) => {
            let first_line = err
                .to_string()
                .lines()
                .next()
                .unwrap_or_default()
                .to_string();
            error!(node = %options.node, config = %path.display(), error = %first_line,
                "reload failed: the old schedule keeps running; fix the file and reload again");
        }
        Ok(mut new) => {
            if let Some(url) = &options.redis_override {
                new.redis.url = url.clone();
            }
            keep_restart_only_settings(&current, &mut new, &options.node);
            let diff = loops.apply(shared, &new.jobs);
            info!(node = %options.node, added = ?diff.added, removed = ?diff.removed, changed = ?diff.changed,
                unchanged = diff.unchanged, "config reloaded");
            metrics::jobs_loaded(new.jobs.len());
            config_tx.send_replace(Arc::new(new));
        }
    }
    notify::ready();
}

/// The Redis connection and the lock's history cap are fixed for the life
/// of the process: keep the old ones and say so.
fn keep_restart_only_settings(current: &Config, new: &mut Config, node: &str) {
    let redis_changed = new.redis.url != current.redis.url
        || new.redis.password != current.redis.password
        || new.redis.key_prefix != current.redis.key_prefix;
    if redis_changed {
        warn!(node = %node, "`[redis]` changed: it takes effect at the next restart, not on reload");
        new.redis = current.redis.clone();
    }
    if new.daemon.history_max != current.daemon.history_max {
        warn!(node = %node, "`history_max` changed: it takes effect at the next restart, not on reload");
        new.daemon.history_max = current.daemon.history_max;
    }
    if new.daemon.metrics_listen != current.daemon.metrics_listen {
        warn!(node = %node, "`metrics_listen` changed: it takes effect at the next restart, not on reload");
        new.daemon.metrics_listen = current.daemon.metrics_listen.clone();
    }
}
