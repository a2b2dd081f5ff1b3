//! Whether a JOB named to `history` (or to the status page) is one: the
//! config has it, a live node runs it, or its stream exists (a job removed
//! from the config keeps its history). Any other name is a typo, refused
//! with the closest known name ([`UnknownJob`]).
//!
//! Failure model: Redis failing is an `Err` naming the redacted URL; an
//! unknown job is an `Err` holding an [`UnknownJob`], so a caller can tell
//! the two apart (`downcast_ref`).

use redis::AsyncCommands as _;
use redis::streams::StreamRangeReply;

use crate::coordinator::Conn;
use crate::inspect::Source;
use crate::inspect::source::{closest, job_hint, node_jobs};
use crate::keys::JobKeys;
use crate::registry;

/// A JOB that is neither in the config, nor run by a live node, nor has a
/// history. Its text is the whole message, ending with a suggestion.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct UnknownJob {
    /// The name asked for.
    pub job: String,
    /// The closest known job name, if one is close enough to be a typo.
    pub closest: Option<String>,
    message: String,
}

/// `Ok(true)` if the config has `job`; `Ok(false)` if it has not but a
/// live node runs it or its stream exists; else `Err` ([`UnknownJob`]).
pub async fn check(conn: &Conn, source: &Source, job: &str) -> anyhow::Result<bool> {
    if source.has_job(job) {
        return Ok(true);
    }
    let redis = &source.redis;
    let failed =
        |err| super::super::redis_failed("cannot read the node registry from", redis, &err);
    let nodes = registry::live_nodes(conn, &redis.key_prefix)
        .await
        .map_err(failed)?;
    let run_by_a_node = nodes.iter().any(|node| node.jobs.contains_key(job));
    let has_history = run_by_a_node || {
        // `XREVRANGE`, not `EXISTS`: the ACL user of docs/operations.md may read streams only.
        let key = JobKeys::new(&redis.key_prefix, job).history;
        let newest: StreamRangeReply = conn
            .clone()
            .xrevrange_count(&key, "+", "-", 1)
            .await
            .map_err(|err| {
                super::super::redis_failed("cannot read the history from", redis, &err)
            })?;
        !newest.ids.is_empty()
    };
    if has_history {
        return Ok(false);
    }
    let mut known = node_jobs(&nodes);
    if let Some(config) = &source.config {
        known.extend(config.jobs.iter().map(|job| job.name.clone()));
    }
    let hint = job_hint(job, known.iter().map(String::as_str), || {
        "`solocron status` lists the jobs".to_string()
    });
    Err(UnknownJob {
        job: job.to_string(),
        closest: closest(job, known.iter().map(String::as_str)).map(str::to_string),
        message: format!(
            "unknown job `{job}`: {}, no live node runs it and it has no history under key \
             prefix `{}`; {hint}",
            source.config_words(),
            redis.key_prefix
        ),
    }
    .into())
}
