//! Which nodes are alive, and what each one loaded: the config drift guard.
//!
//! Every node publishes a hash `{PREFIX}:node:NODE` (version, start time,
//! config path and fingerprint, each job's fingerprint, clock offset) with a
//! TTL, and its id in the sorted set `{PREFIX}:nodes` scored by Redis `TIME`,
//! refreshed every [`REFRESH`]. A node that stops publishing drops out after
//! [`TTL`]. The whole hash (with one fingerprint per job) is only written
//! when the node's config changes or Redis lost it; the refresh in between is
//! a small heartbeat ([`heartbeat`]), and the nodes' per-job fingerprints are
//! only read when their whole-config fingerprints differ
//! ([`config_hashes`]), so 10,000 jobs cost an idle node nothing extra. Ops edit `jobs.toml` per server, so a half-finished rollout shows
//! up as nodes that disagree on a job's fingerprint ([`divergences`]).
//! Both keys share the hash tag `{PREFIX}`, so the publish script also runs
//! on Redis Cluster.

use std::collections::BTreeMap;
use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;
use redis::aio::ConnectionManager;
use serde::Serialize;

/// How often a node publishes itself.
pub const REFRESH: Duration = Duration::from_secs(10);
/// How long a node counts as alive after its last publish.
pub const TTL: Duration = Duration::from_secs(30);

/// KEYS: nodes zset, node hash. ARGV: node, ttl ms, then field/value pairs.
/// Replaces the node's hash, stamps `updated_at` with Redis `TIME` (ms) and
/// drops ids that have not published within the TTL.
const PUBLISH: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local stamp = string.format('%.0f', now)
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[2], 'updated_at', stamp, unpack(ARGV, 3))
redis.call('PEXPIRE', KEYS[2], ARGV[2])
redis.call('ZADD', KEYS[1], stamp, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%.0f', now - tonumber(ARGV[2])))
return stamp
"#;

/// KEYS: nodes zset, node hash. ARGV: node, ttl ms, then field/value pairs
/// (the clock offset). 0 if the node's hash is gone (expired, or Redis lost
/// its data): the caller publishes it whole. Else stamps `updated_at`,
/// renews the TTL and the node's score.
const HEARTBEAT: &str = r#"
if not redis.call('HGET', KEYS[2], 'node') then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local stamp = string.format('%.0f', now)
redis.call('HSET', KEYS[2], 'updated_at', stamp, unpack(ARGV, 3))
redis.call('PEXPIRE', KEYS[2], ARGV[2])
redis.call('ZADD', KEYS[1], stamp, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%.0f', now - tonumber(ARGV[2])))
return 1
"#;

static PUBLISH_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(PUBLISH));
static HEARTBEAT_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(HEARTBEAT));

/// What one node publishes about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeInfo {
    pub node: String,
    pub version: String,
    /// UTC epoch ms.
    pub started_at: i64,
    /// UTC epoch ms (Redis time) of the last publish.
    pub updated_at: i64,
    /// The path of the jobs file it loaded.
    pub config_path: String,
    /// Fingerprint over all its jobs.
    pub config_hash: String,
    /// Its clock minus Redis's, ms, if measured.
    pub clock_offset_ms: Option<i64>,
    /// Job name -> fingerprint of its effective definition.
    pub jobs: BTreeMap<String, String>,
}

/// `{PREFIX}:nodes`.
pub fn nodes_key(prefix: &str) -> String {
    format!("{{{prefix}}}:nodes")
}

/// `{PREFIX}:node:NODE`.
pub fn node_key(prefix: &str, node: &str) -> String {
    format!("{{{prefix}}}:node:{node}")
}

/// Publishes `info` (its `updated_at` is ignored: Redis stamps it).
pub async fn publish(
    conn: &ConnectionManager,
    prefix: &str,
    info: &NodeInfo,
) -> redis::RedisResult<()> {
    let jobs = serde_json::to_string(&info.jobs).unwrap_or_else(|_| "{}".to_string());
    let mut invocation = PUBLISH_SCRIPT.prepare_invoke();
    invocation
        .key(nodes_key(prefix))
        .key(node_key(prefix, &info.node))
        .arg(&info.node)
        .arg(TTL.as_millis() as u64)
        .arg("node")
        .arg(&info.node)
        .arg("version")
        .arg(&info.version)
        .arg("started_at")
        .arg(info.started_at)
        .arg("config_path")
        .arg(&info.config_path)
        .arg("config_hash")
        .arg(&info.config_hash)
        .arg("jobs")
        .arg(jobs);
    if let Some(offset) = info.clock_offset_ms {
        invocation.arg("clock_offset_ms").arg(offset);
    }
    let _: String = invocation.invoke_async(&mut conn.clone()).await?;
    Ok(())
}

/// Refreshes this node's entry without rewriting it; `Ok(false)` if the
/// entry is gone and must be published whole.
pub async fn heartbeat(
    conn: &ConnectionManager,
    prefix: &str,
    node: &str,
    clock_offset_ms: Option<i64>,
) -> redis::RedisResult<bool> {
    let mut invocation = HEARTBEAT_SCRIPT.prepare_invoke();
    invocation
        .key(nodes_key(prefix))
        .key(node_key(prefix, node))
        .arg(node)
        .arg(TTL.as_millis() as u64);
    if let Some(offset) = clock_offset_ms {
        invocation.arg("clock_offset_ms").arg(offset);
    }
    let alive: i64 = invocation.invoke_async(&mut conn.clone()).await?;
    Ok(alive == 1)
}

/// The whole-config fingerprint of every live node (empty for a node whose
/// entry expired between the two reads).
pub async fn config_hashes(
    conn: &ConnectionManager,
    prefix: &str,
) -> redis::RedisResult<Vec<String>> {
    let mut conn = conn.clone();
    let ids = live_ids(&mut conn, prefix).await?;
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let mut pipe = redis::pipe();
    for id in &ids {
        pipe.hget(node_key(prefix, id), "config_hash");
    }
    let hashes: Vec<Option<String>> = pipe.query_async(&mut conn).await?;
    Ok(hashes.into_iter().map(Option::unwrap_or_default).collect())
}

/// Removes this node at a clean stop, so `status` stops listing it at once.
pub async fn withdraw(
    conn: &ConnectionManager,
    prefix: &str,
    node: &str,
) -> redis::RedisResult<()> {
    redis::pipe()
        .del(node_key(prefix, node))
        .ignore()
        .zrem(nodes_key(prefix), node)
        .ignore()
        .query_async(&mut conn.clone())
        .await
}

/// The nodes that published within the TTL, by id.
pub async fn live_nodes(
    conn: &ConnectionManager,
    prefix: &str,
) -> redis::RedisResult<Vec<NodeInfo>> {
    let mut conn = conn.clone();
    let ids = live_ids(&mut conn, prefix).await?;
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let mut pipe = redis::pipe();
    for id in &ids {
        pipe.hgetall(node_key(prefix, id));
    }
    let hashes: Vec<BTreeMap<String, String>> = pipe.query_async(&mut conn).await?;
    Ok(hashes.iter().filter_map(parse_node).collect())
}

/// The ids in the nodes set (expired ones are dropped by every publish).
async fn live_ids(conn: &mut ConnectionManager, prefix: &str) -> redis::RedisResult<Vec<String>> {
    redis::cmd("ZRANGE")
        .arg(nodes_key(prefix))
        .arg(0)
        .arg(-1)
        .query_async(conn)
        .await
}

fn parse_node(fields: &BTreeMap<String, String>) -> Option<NodeInfo> {
    let number = |key: &str| fields.get(key).and_then(|value| value.parse::<i64>().ok());
    Some(NodeInfo {
        node: fields.get("node")?.clone(),
        version: fields.get("version").cloned().unwrap_or_default(),
        started_at: number("started_at").unwrap_or(0),
        updated_at: number("updated_at").unwrap_or(0),
        config_path: fields.get("config_path").cloned().unwrap_or_default(),
        config_hash: fields.get("config_hash").cloned().unwrap_or_default(),
        clock_offset_ms: number("clock_offset_ms"),
        jobs: fields
            .get("jobs")
            .and_then(|jobs| serde_json::from_str(jobs).ok())
            .unwrap_or_default(),
    })
}

/// A job whose definition differs between live nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Divergence {
    pub job: String,
    /// Fingerprint (`None`: the node does not have the job) -> node ids.
    pub sides: BTreeMap<Option<String>, Vec<String>>,
}

impl Divergence {
    /// `3f2a…: n1, n2; absent: n3` for logs and `status`.
    pub fn describe(&self) -> String {
        self.sides
            .iter()
            .map(|(fingerprint, nodes)| {
                format!(
                    "{}: {}",
                    fingerprint.as_deref().unwrap_or("absent"),
                    nodes.join(", ")
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// Jobs on which the live nodes disagree, by job name.
pub fn divergences(nodes: &[NodeInfo]) -> Vec<Divergence> {
    let mut names: Vec<&String> = nodes.iter().flat_map(|node| node.jobs.keys()).collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .filter_map(|job| {
            let mut sides: BTreeMap<Option<String>, Vec<String>> = BTreeMap::new();
            for node in nodes {
                sides
                    .entry(node.jobs.get(job).cloned())
                    .or_default()
                    .push(node.node.clone());
            }
            (sides.len() > 1).then(|| Divergence {
                job: job.clone(),
                sides,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str, jobs: &[(&str, &str)]) -> NodeInfo {
        NodeInfo {
            node: id.into(),
            version: "0".into(),
            started_at: 0,
            updated_at: 0,
            config_path: String::new(),
            config_hash: String::new(),
            clock_offset_ms: None,
            jobs: jobs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn agreeing_nodes_have_no_divergence() {
        let nodes = [
            node("a", &[("x", "1"), ("y", "2")]),
            node("b", &[("x", "1"), ("y", "2")]),
        ];
        assert!(divergences(&nodes).is_empty());
    }

    #[test]
    fn a_changed_or_missing_job_names_both_sides() {
        let nodes = [
            node("a", &[("x", "1"), ("y", "2")]),
            node("b", &[("x", "9"), ("y", "2")]),
            node("c", &[("x", "1")]),
        ];
        let found = divergences(&nodes);
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(found[0].job, "x");
        assert_eq!(found[0].describe(), "1: a, c; 9: b");
        assert_eq!(found[1].job, "y");
        assert_eq!(found[1].describe(), "absent: c; 2: a, b");
    }
}
