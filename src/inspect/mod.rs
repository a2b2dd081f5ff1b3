//! Read-only views for operators: `solocron status` and `solocron history`.
//!
//! Both only read what the daemons write (each job's lock, state hash and
//! history stream, and the node registry); they never take a lock or write
//! a key, so they are safe to run anywhere, any time, and need neither the
//! jobs' `${VAR}` secrets nor a config file ([`Source`]). "Now" is Redis `TIME`,
//! not this machine's clock, so "held for" and `--since` mean the same on
//! every server, however skewed the one you type on.
//!
//! The connection is the daemon's lazy manager; [`open`] sends the first
//! command under a short deadline, so an unreachable Redis is a clear error
//! naming the redacted URL within seconds, never a hang. Per-job reads are
//! pipelined: `status` on a thousand jobs is a few round trips.
//!
//! Each view is one read ([`status::read`], [`history::read_history`],
//! [`audit::read`]) and its faces (text, `--json`): the status page
//! (`crate::status_page`) renders the same reads, so what it shows and its
//! JSON are the CLI's.

pub(crate) mod audit;
pub(crate) mod format;
pub(crate) mod history;
mod source;
pub(crate) mod status;

use std::io::Write as _;
use std::time::Duration;

use crate::coordinator::Coordinator;

use crate::config::RedisConfig;
use crate::coordinator::coordinator_time_ms;

pub use audit::audit;
pub(crate) use format::flat;
pub use history::{HistoryQuery, TimeBound, UnknownJob, UsageError, history, parse_outcome};
pub use source::{DEFAULT_KEY_PREFIX, Source};
pub(crate) use source::{closest, job_hint, node_jobs, note};
pub use status::status;

/// How long the first command may take before Redis counts as unreachable.
const REACH_LIMIT: Duration = Duration::from_secs(5);

/// Connects to the configured coordinator and reads its `TIME` (UTC epoch
/// ms; with Redlock the median of a majority). `Err` names the redacted
/// URL: Redis is unreachable, refused us, or did not answer within
/// [`REACH_LIMIT`].
pub(crate) async fn open(config: &RedisConfig) -> anyhow::Result<(Coordinator, i64)> {
    let coordinator = crate::coordinator::connect(config)?;
    let now_ms = reach(&coordinator, config, REACH_LIMIT).await?;
    Ok((coordinator, now_ms))
}

/// Reads the `TIME` of `coordinator` (configured as `config`) within
/// `limit`: UTC epoch ms. `Err` names the redacted URL.
pub(crate) async fn reach(
    coordinator: &Coordinator,
    config: &RedisConfig,
    limit: Duration,
) -> anyhow::Result<i64> {
    match tokio::time::timeout(limit, coordinator_time_ms(coordinator)).await {
        Ok(Ok(now_ms)) => Ok(now_ms),
        Ok(Err(err)) => Err(redis_failed("cannot reach", config, &err)),
        Err(_) => anyhow::bail!(
            "cannot reach redis at `{}`: no answer within {}",
            config.redacted_url(),
            humantime::format_duration(limit)
        ),
    }
}

/// The live nodes, read from every member and merged.
pub(crate) async fn live_nodes(
    coordinator: &Coordinator,
    prefix: &str,
) -> redis::RedisResult<Vec<crate::registry::NodeInfo>> {
    let lists = coordinator
        .on_members(|conn| async move { crate::registry::live_nodes(&conn, prefix).await })
        .await?;
    Ok(crate::registry::merge_nodes(lists))
}

/// The job names known for `source`: the config's, and every live node's,
/// sorted, once each.
pub(crate) async fn known_jobs(
    coordinator: &Coordinator,
    source: &Source,
) -> anyhow::Result<Vec<String>> {
    let redis = &source.redis;
    let nodes = live_nodes(coordinator, &redis.key_prefix)
        .await
        .map_err(|err| redis_failed("cannot read the node registry from", redis, &err))?;
    let mut known = node_jobs(&nodes);
    if let Some(config) = &source.config {
        known.extend(config.jobs.iter().map(|job| job.name.clone()));
    }
    known.sort();
    known.dedup();
    Ok(known)
}

/// "`what` redis at `URL`: error", with the URL redacted. The error is
/// formatted, not chained: its `Display` already includes its source, which
/// `{:#}` would print a second time.
pub(crate) fn redis_failed(
    what: &str,
    config: &RedisConfig,
    err: &redis::RedisError,
) -> anyhow::Error {
    anyhow::anyhow!("{what} redis at `{}`: {err}", config.redacted_url())
}

/// Writes `text` to stdout. A closed pipe (`| head`) is not an error: the
/// reader has what it wanted.
pub(crate) fn print(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(err) if err.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(anyhow::Error::new(err).context("cannot write to stdout"))
        }
        _ => Ok(()),
    }
}
