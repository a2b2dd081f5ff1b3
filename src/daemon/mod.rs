//! The daemon: one task per job sleeping until its next occurrence, joining
//! schedule, lock, exec and history.
//!
//! Two tokens drive the stop: `cancel` (SIGTERM/SIGINT: stop claiming) and
//! `interrupt` (the shutdown grace is over: stop running jobs, which are then
//! recorded as `interrupted` and release their locks). Every task goes
//! through one `TaskTracker`, so the drain sees them all.

mod clock;
mod job_loop;
mod occurrence;
mod redis_conn;

use std::future::Future;
use std::sync::Arc;

use anyhow::Context as _;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::config::Config;
use crate::exec::Executor;
use crate::lock::Locker;

pub use clock::offset_ms;
pub use redis_conn::connect;

/// What every task of one daemon shares.
pub(crate) struct Shared {
    pub locker: Locker,
    pub executor: Executor,
    pub tracker: TaskTracker,
    /// Stop claiming (shutdown requested).
    pub cancel: CancellationToken,
    /// Stop running jobs (shutdown grace over).
    pub interrupt: CancellationToken,
}

/// Runs the daemon for `config` as `node` until `shutdown` completes, then
/// drains: running jobs get `shutdown_grace`, then are interrupted, their
/// locks released and their outcome recorded.
pub async fn run(
    config: Config,
    node: &str,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let conn = connect(&config.redis)?;
    let locker = Locker::new(
        conn,
        &config.redis.key_prefix,
        node,
        config.daemon.history_max,
    );
    let executor = Executor::new().context("cannot set up job execution")?;
    let shared = Arc::new(Shared {
        locker,
        executor,
        tracker: TaskTracker::new(),
        cancel: CancellationToken::new(),
        interrupt: CancellationToken::new(),
    });
    info!(
        node = %node,
        jobs = config.jobs.len(),
        redis = %config.redis.redacted_url(),
        config = %config.path.display(),
        version = env!("CARGO_PKG_VERSION"),
        "solocron started"
    );
    shared.tracker.spawn(clock::check_loop(
        shared.locker.clone(),
        shared.cancel.clone(),
    ));
    for job in &config.jobs {
        shared
            .tracker
            .spawn(job_loop::run(Arc::clone(&shared), Arc::clone(job)));
    }
    shutdown.await;
    drain(&shared, &config).await;
    Ok(())
}

async fn drain(shared: &Shared, config: &Config) {
    let grace = config.daemon.shutdown_grace;
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
    info!(node = %shared.locker.node(), "stopped");
}
