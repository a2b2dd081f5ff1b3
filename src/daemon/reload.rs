//! SIGHUP: reload `jobs.toml` without losing the running schedule.
//!
//! The new file is loaded and validated completely before anything changes;
//! a broken or missing file is logged (file:line:col) and the old schedule
//! keeps running. Otherwise the timetable compares jobs by fingerprint:
//! added jobs start, removed jobs stop being scheduled (a run in progress
//! finishes), changed jobs are rescheduled with the new settings, which apply
//! from their next occurrence; unchanged jobs are not touched. A rescheduled
//! job catches up like a starting node, and the claim script refuses what
//! was already decided. `[redis]` and `history_max` need a restart.

use std::sync::Arc;

use tokio::sync::watch;
use tracing::{error, info, warn};

use super::timetable::Timetable;
use super::{Options, Shared};
use crate::config::{self, Config};
use crate::{metrics, notify};

/// Reloads the file named by the current config; see the module doc.
pub fn reload(
    shared: &Arc<Shared>,
    timetable: &mut Timetable,
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
            let errors = err.errors().len();
            error!(node = %options.node, config = %path.display(), error = %first_line, errors,
                "reload failed: the old schedule keeps running; fix the file (`solocron check` lists every error) and reload again");
        }
        Ok(mut new) => {
            if let Some(url) = &options.redis_override {
                new.redis.use_url(url);
            }
            keep_restart_only_settings(&current, &mut new, &options.node);
            super::log_warnings(&new, &options.node);
            shared.set_env_file(&new.env);
            shared.set_clock_source(new.daemon.clock);
            let diff = timetable.apply(shared, &new.jobs);
            info!(node = %options.node, added = ?diff.added, removed = ?diff.removed, changed = ?diff.changed,
                unchanged = diff.unchanged, "config reloaded");
            metrics::jobs_loaded(new.jobs.len());
            config_tx.send_replace(Arc::new(new));
            crate::memory::release_freed();
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
