//! Whether Redis may evict solocron's keys: checked once the start-up check
//! passed and every [`PERIOD`], said in the log and in `status`.
//!
//! A Redis with `maxmemory` set and any `maxmemory-policy` but
//! `noeviction` deletes keys when it is full: `volatile-*` the keys with a
//! TTL (the locks first: the shortest TTL, or the least used), `allkeys-*`
//! any key (a job's decided occurrence, its history, the registry). Then
//! two runs of a job overlap, an occurrence runs twice, history is lost,
//! and nothing in solocron's own view of Redis says why. solocron cannot
//! fix that; it can say so, loudly, before it happens: one error line
//! when the check first finds it (and again when it changes), and the
//! same text in this node's registry entry, which `status` shows.
//!
//! Failure model: the check reads `INFO memory` (the ACL line of docs/operations.md has
//! `INFO`); a user that may not run it is told once, at info level, that
//! the policy could not be checked. A Cluster answers for every master,
//! a Redlock coordinator is checked master by master: any one of them
//! evicting is reported, naming it.

use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, error, info};

use super::Shared;
use crate::coordinator::Conn;

/// Between checks (an operator may `CONFIG SET` the policy at any time).
const PERIOD: Duration = Duration::from_secs(600);
/// Between attempts while Redis does not answer.
const RETRY: Duration = Duration::from_secs(10);

/// What one server said of its memory.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Memory {
    maxmemory: u64,
    policy: String,
}

impl Memory {
    /// Whether keys can be evicted: a limit, and a policy that evicts.
    fn evicts(&self) -> bool {
        self.maxmemory > 0 && self.policy != "noeviction"
    }
}

/// The `maxmemory` and `maxmemory_policy` lines of an `INFO memory` text.
fn parse_info(text: &str) -> Option<Memory> {
    let field = |name: &str| {
        text.lines()
            .find_map(|line| line.trim().strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    Some(Memory {
        maxmemory: field("maxmemory")?.parse().ok()?,
        policy: field("maxmemory_policy")?.to_string(),
    })
}

/// Every text in an `INFO` reply: one server's, or (a Cluster) one per
/// node.
fn texts(value: redis::Value) -> Vec<String> {
    match value {
        redis::Value::Map(pairs) => pairs.into_iter().flat_map(|(_, v)| texts(v)).collect(),
        redis::Value::Array(items) => items.into_iter().flat_map(texts).collect(),
        other => redis::from_redis_value::<String>(other)
            .into_iter()
            .collect(),
    }
}

/// The memory settings of every server behind `conn`.
async fn memory_of(conn: &Conn) -> redis::RedisResult<Vec<Memory>> {
    let reply: redis::Value = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut conn.clone())
        .await?;
    Ok(texts(reply)
        .iter()
        .filter_map(|text| parse_info(text))
        .collect())
}

/// The warning for `shown`'s evicting `memory`, or `None`.
fn warning(shown: &str, memory: &[Memory]) -> Option<String> {
    let evicting = memory.iter().find(|memory| memory.evicts())?;
    Some(format!(
        "redis at `{shown}` evicts keys when full (maxmemory {} bytes, maxmemory-policy {}): a lock, a job's decided occurrence or its history can vanish, and a run can overlap the next or an occurrence run twice; set `maxmemory-policy noeviction` on solocron's redis, or give solocron a redis of its own",
        evicting.maxmemory, evicting.policy
    ))
}

/// Runs until shutdown: checks every member once the start-up check
/// passed, then every [`PERIOD`]. Not before: a Redis that refuses the
/// node's password refuses `INFO` too, and that is the start-up check's
/// one error to tell (this loop would blame `INFO`).
pub async fn check_loop(shared: Arc<Shared>) {
    if !shared.until_started().await {
        return;
    }
    let node = shared.locker.node().to_string();
    let mut said: Option<Option<String>> = None;
    let mut told_refused = false;
    loop {
        let mut found: Option<String> = None;
        let mut answered = true;
        for member in shared.locker.coordinator().members() {
            match memory_of(&member.conn).await {
                Ok(memory) => {
                    if found.is_none() {
                        found = warning(&member.shown, &memory);
                    }
                }
                Err(err) if crate::coordinator::errors::is_refusal(&err) => {
                    if !told_refused {
                        told_refused = true;
                        info!(node = %node, redis = %member.shown, error = %err,
                            "cannot check whether redis evicts keys (its user may not run INFO): make sure its maxmemory-policy is noeviction");
                    }
                }
                Err(err) => {
                    answered = false;
                    debug!(node = %node, redis = %member.shown, error = %err, "eviction check: no answer");
                }
            }
        }
        if answered && said.as_ref() != Some(&found) {
            match &found {
                Some(text) => error!(node = %node, "{text}"),
                None if said.is_some() => {
                    info!(node = %node, "redis no longer evicts keys (maxmemory-policy noeviction, or no maxmemory)");
                }
                None => {}
            }
            shared.set_eviction_warning(found.clone());
            said = Some(found);
        }
        let wait = if answered { PERIOD } else { RETRY };
        tokio::select! {
            _ = shared.cancel.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_two_lines_and_tells_an_evicting_policy() {
        let text = "# Memory\r\nused_memory:1000\r\nmaxmemory:2097152\r\nmaxmemory_human:2.00M\r\nmaxmemory_policy:allkeys-lru\r\n";
        let memory = parse_info(text).expect("parsed");
        assert_eq!(memory.maxmemory, 2_097_152);
        assert_eq!(memory.policy, "allkeys-lru");
        assert!(memory.evicts());
        let text = "maxmemory:0\nmaxmemory_policy:allkeys-lru\n";
        assert!(!parse_info(text).expect("parsed").evicts(), "no limit");
        let text = "maxmemory:100\nmaxmemory_policy:noeviction\n";
        assert!(!parse_info(text).expect("parsed").evicts());
        assert_eq!(parse_info("used_memory:1\n"), None);
        let warned = warning(
            "redis://r:6379",
            &[parse_info("maxmemory:5\nmaxmemory_policy:volatile-ttl").expect("parsed")],
        );
        assert!(
            warned.is_some_and(|text| text.contains("volatile-ttl") && text.contains("noeviction"))
        );
    }
}
