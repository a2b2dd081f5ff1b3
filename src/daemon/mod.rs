//! The daemon: one timer over every job's next occurrence (the timetable),
//! one task per occurrence joining lock, exec and history; plus the clock
//! check, the node registry (config drift guard) and SIGHUP reloads.
//!
//! Two tokens drive the stop: `cancel` (SIGTERM/SIGINT: stop claiming) and
//! `interrupt` (the shutdown grace is over: stop running jobs, which are then
//! recorded as `interrupted` and release their locks). Every task goes
//! through one `TaskTracker`, so the drain sees them all.

mod clock;
mod occurrence;
mod redis_conn;
mod registry_loop;
mod reload;
mod timetable;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use anyhow::Context as _;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::config::Config;
use crate::exec::Executor;
use crate::lock::Locker;
use crate::{metrics, notify, registry};

pub use clock::offset_ms;
pub use occurrence::run_lease;
pub use redis_conn::connect;
pub use timetable::rfc3339;

/// How this node was started.
#[derive(Debug, Clone)]
pub struct Options {
    /// This node's id.
    pub node: String,
    /// `--redis`: replaces `[redis] url` of every loaded file, reloads too.
    pub redis_override: Option<String>,
}

/// What every task of one daemon shares.
pub(crate) struct Shared {
    pub locker: Locker,
    pub executor: Executor,
    pub tracker: TaskTracker,
    /// Stop claiming (shutdown requested).
    pub cancel: CancellationToken,
    /// Stop running jobs (shutdown grace over).
    pub interrupt: CancellationToken,
    /// Last measured clock offset against Redis, ms; `i64::MIN` = unknown.
    clock_offset: AtomicI64,
    /// Woken when the clock offset is first measured, to publish it at once.
    pub clock_measured: tokio::sync::Notify,
    /// This daemon process's id in the node registry ([`registry::new_instance`]).
    pub instance: String,
}

impl Shared {
    pub fn set_clock_offset(&self, ms: i64) {
        self.clock_offset.store(ms, Ordering::Relaxed);
    }

    pub fn clock_offset(&self) -> Option<i64> {
        Some(self.clock_offset.load(Ordering::Relaxed)).filter(|ms| *ms != i64::MIN)
    }
}

/// Runs the daemon for `config` until `shutdown` completes, reloading the
/// file on every message from `reloads` (SIGHUP). Then drains: running jobs
/// get `shutdown_grace`, then are interrupted, their locks released and their
/// outcome recorded. `Err` only for set-up failures (metrics listener, HTTP
/// client); Redis being down is not one.
pub async fn run(
    config: Config,
    options: Options,
    shutdown: impl Future<Output = ()>,
    mut reloads: mpsc::UnboundedReceiver<()>,
) -> anyhow::Result<()> {
    if let Some(listen) = &config.daemon.metrics_listen {
        metrics::install(listen).context("cannot serve metrics")?;
    }
    let conn = connect(&config.redis)?;
    let locker = Locker::new(
        conn,
        &config.redis.key_prefix,
        &options.node,
        config.daemon.history_max,
    );
    let executor = Executor::new().context("cannot set up job execution")?;
    let shared = Arc::new(Shared {
        locker,
        executor,
        tracker: TaskTracker::new(),
        cancel: CancellationToken::new(),
        interrupt: CancellationToken::new(),
        clock_offset: AtomicI64::new(i64::MIN),
        clock_measured: tokio::sync::Notify::new(),
        instance: registry::new_instance(),
    });
    info!(
        node = %options.node,
        jobs = config.jobs.len(),
        redis = %config.redis.redacted_url(),
        config = %config.path.display(),
        version = env!("CARGO_PKG_VERSION"),
        "solocron started"
    );
    metrics::jobs_loaded(config.jobs.len());
    let config = Arc::new(config);
    let (config_tx, config_rx) = watch::channel(Arc::clone(&config));
    let tracker = &shared.tracker;
    tracker.spawn(clock::check_loop(Arc::clone(&shared)));
    tracker.spawn(registry_loop::run(Arc::clone(&shared), config_rx));
    // Watchdog pings go on through the drain; they stop once it is over.
    let watchdog_stop = CancellationToken::new();
    let watchdog = tokio::spawn(notify::watchdog_loop(watchdog_stop.clone()));
    let mut timetable = timetable::Timetable::default();
    timetable.apply(&shared, &config.jobs);
    info!(node = %options.node, jobs = config.jobs.len(), "jobs scheduled");
    tokio::pin!(shutdown);
    loop {
        let wake = timetable.next_wake();
        tokio::select! {
            _ = &mut shutdown => break,
            Some(()) = reloads.recv() => reload::reload(&shared, &mut timetable, &config_tx, &options),
            () = tokio::time::sleep_until(wake) => timetable.fire_due(&shared),
        }
    }
    notify::stopping();
    let grace = config_tx.borrow().daemon.shutdown_grace;
    drain(&shared, grace).await;
    watchdog_stop.cancel();
    let _ = watchdog.await;
    if let Err(err) = registry::withdraw(
        &shared.locker.connection(),
        shared.locker.prefix(),
        &options.node,
        &shared.instance,
    )
    .await
    {
        warn!(node = %options.node, error = %err, "cannot withdraw from the node registry; it expires by itself");
    }
    info!(node = %options.node, "stopped");
    Ok(())
}

async fn drain(shared: &Shared, grace: std::time::Duration) {
    info!(node = %shared.locker.node(), grace = ?grace, "stopping: no new claims, running jobs may finish");
    shared.cancel.cancel();
    shared.tracker.close();
    if tokio::time::timeout(grace, shared.tracker.wait())
        .await
        .is_err()
    {
        warn!(node = %shared.locker.node(), grace = ?grace, "shutdown grace over, interrupting running jobs");
        shared.interrupt.cancel();
        shared.tracker.wait().await;
    }
}
