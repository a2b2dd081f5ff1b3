//! Which nodes are alive, and what each one loaded: the config drift guard
//! and the node-id collision check.
//!
//! Every node publishes a hash `{PREFIX}:node:NODE` (version, start time,
//! config path and fingerprint, each job's fingerprint and schedule, clock
//! offset, the daemon's instance id) with a TTL, and its id in the sorted
//! set `{PREFIX}:nodes` scored by Redis `TIME`, refreshed every [`REFRESH`].
//! A node that stops publishing drops out after [`TTL`]. The whole hash
//! (with one fingerprint and one schedule per job) is only written when the
//! node's config changes or Redis lost it; the refresh in between is a small
//! heartbeat ([`heartbeat`]), and the nodes' per-job fields are read by
//! `status` (schedules only without a config: [`schedules`]), so 10,000
//! jobs cost an idle node nothing extra. Ops edit `jobs.toml` per server,
//! so a half-finished rollout shows up as nodes that disagree on a job's
//! fingerprint ([`divergences`]). The same writes keep each distinct config
//! once, with the nodes on it ([`in_use`]): the daemon's drift check reads
//! those, O(configs) per period, and reads the nodes' entries
//! ([`config_hashes`], [`live_nodes`]) only while an older daemon that
//! stores no config runs.
//!
//! Hash fields: `node`, `version`, `started_at`, `updated_at` (Redis ms),
//! `config_path`, `config_hash`, `clock_offset_ms`, `instance`, `jobs` (JSON
//! object: job -> fingerprint), `schedules` (JSON object: job ->
//! `[expression, time zone]`), `splays` (JSON object: job -> its splay
//! offset in ms, only the jobs that have one; a field of its own, so that
//! an older `status` still reads `schedules`), and while two daemons share the node id
//! `collision_at` (Redis ms), `collision_by` and `collision_with` (the
//! instance that noticed and the one it found; emptied when one of the two
//! stops cleanly).
//!
//! Each daemon process has its own instance id (`HOST:PID:RANDOM`, see
//! [`new_instance`]). Every write first checks that the entry's instance is
//! still ours: if another instance wrote it since, a second daemon runs
//! under the same `--node-id`, which the scripts record in the entry
//! ([`Collision`]) and report to the caller, before re-asserting ours. The
//! first publish of a process does not count a foreign instance: it may be
//! the entry of the crashed process it replaces, which never writes again.
//! Both keys share the hash tag `{PREFIX}`, so the scripts also run on Redis
//! Cluster.

pub mod alive;
mod configs;
mod instance;
mod scripts;

use std::collections::BTreeMap;
use std::time::Duration;

use crate::coordinator::Conn;
use crate::keys::{config_key, config_nodes_key, configs_key, node_key, nodes_key};
use serde::{Deserialize, Serialize};

pub use configs::{InUse, config_jobs, config_nodes, in_use, merge_in_use, node_counts};
pub use instance::{Collision, describe_instance, new_instance};
use scripts::{HEARTBEAT_SCRIPT, PUBLISH_SCRIPT, WITHDRAW_SCRIPT};

/// How often a node publishes itself.
pub const REFRESH: Duration = Duration::from_secs(10);
/// How long a node counts as alive after its last publish; also how long
/// a recorded collision counts as current ([`Collision::is_recent`]).
pub const TTL: Duration = Duration::from_secs(30);

/// The fields [`live_nodes`] reads (not `schedules`: only `status` without
/// a config needs them, through [`schedules`]).
const NODE_FIELDS: [&str; 14] = [
    "node",
    "version",
    "started_at",
    "updated_at",
    "config_path",
    "config_hash",
    "clock_offset_ms",
    "jobs",
    "instance",
    "collision_at",
    "collision_by",
    "collision_with",
    "redis_warning",
    "running",
];

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
    /// The daemon process that wrote the entry last ([`new_instance`]);
    /// empty for a daemon too old to write one.
    pub instance: String,
    /// The last time two daemons were seen writing this entry; ignored by
    /// [`publish`] (the scripts write it). Current only if
    /// [`Collision::is_recent`].
    pub collision: Option<Collision>,
    /// What is wrong with Redis as this node sees it right now (e.g. claims
    /// not acknowledged by enough replicas), if anything.
    pub redis_warning: Option<String>,
    /// Runs in progress on it (and claims in flight) at its last publish;
    /// `None` from a daemon too old to say.
    pub running: Option<u64>,
}

/// A job's schedule as a node published it; stored as `[expression, zone]`
/// in `schedules`, the splay offset apart in `splays`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(from = "(String, String)", into = "(String, String)")]
pub struct JobSchedule {
    /// The cron expression as written in the node's `jobs.toml`.
    pub expression: String,
    /// Its IANA time zone.
    pub timezone: String,
    /// Its splay offset (`splay`, docs/configuration.md), ms; 0 without a
    /// splay, and for a node too old to publish one.
    pub splay_ms: u64,
}

impl From<(String, String)> for JobSchedule {
    fn from((expression, timezone): (String, String)) -> JobSchedule {
        JobSchedule {
            expression,
            timezone,
            splay_ms: 0,
        }
    }
}

impl From<JobSchedule> for (String, String) {
    fn from(schedule: JobSchedule) -> (String, String) {
        (schedule.expression, schedule.timezone)
    }
}

/// What a [`publish`] or [`heartbeat`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refresh {
    /// The entry is ours and up to date.
    Written,
    /// The entry is gone (expired, or Redis lost its data): publish it
    /// whole. Only from [`heartbeat`].
    Gone,
    /// Another daemon process (`other`, empty if it wrote no instance id)
    /// wrote this node's entry since our last write: it uses the same node
    /// id. Recorded in the entry; ours is written again.
    Collision { other: String },
}

/// Publishes `info` whole, as `info.instance`, with `schedules` (job ->
/// schedule; `info.updated_at` and `info.collision` are ignored: the script
/// writes them), and its config (`info.jobs` under `info.config_hash`) if
/// no node stored it yet. `after_own_write`: this process has published
/// before, so an entry written by another instance means a collision (for
/// the first publish it may be a crashed predecessor's). `previous`: the
/// config fingerprint this process published last, which the node leaves.
/// Never [`Refresh::Gone`].
pub async fn publish(
    conn: &Conn,
    prefix: &str,
    info: &NodeInfo,
    schedules: &BTreeMap<String, JobSchedule>,
    after_own_write: bool,
    previous: Option<&str>,
) -> redis::RedisResult<Refresh> {
    // Also the config's content under its fingerprint (`{PREFIX}:config:FP`).
    let jobs = serde_json::to_string(&info.jobs).unwrap_or_else(|_| "{}".to_string());
    let splays: BTreeMap<&str, u64> = schedules
        .iter()
        .filter(|(_, schedule)| schedule.splay_ms > 0)
        .map(|(job, schedule)| (job.as_str(), schedule.splay_ms))
        .collect();
    let splays = serde_json::to_string(&splays).unwrap_or_else(|_| "{}".to_string());
    let schedules = serde_json::to_string(schedules).unwrap_or_else(|_| "{}".to_string());
    let fingerprint = info.config_hash.as_str();
    let previous = previous.filter(|previous| *previous != fingerprint);
    let mut invocation = PUBLISH_SCRIPT.prepare_invoke();
    invocation
        .key(nodes_key(prefix))
        .key(node_key(prefix, &info.node))
        .key(configs_key(prefix))
        .key(config_key(prefix, fingerprint))
        .key(config_nodes_key(prefix, fingerprint))
        .key(config_nodes_key(prefix, previous.unwrap_or(fingerprint)))
        .arg(&info.node)
        .arg(ttl_ms())
        .arg(&info.instance)
        .arg(if after_own_write { "1" } else { "0" })
        .arg(fingerprint)
        .arg(&jobs)
        .arg(previous.unwrap_or_default())
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
        .arg(&jobs)
        .arg("schedules")
        .arg(schedules)
        .arg("splays")
        .arg(splays);
    if let Some(offset) = info.clock_offset_ms {
        invocation.arg("clock_offset_ms").arg(offset);
    }
    invocation
        .arg("redis_warning")
        .arg(info.redis_warning.as_deref().unwrap_or_default());
    if let Some(running) = info.running {
        invocation.arg("running").arg(running);
    }
    let reply: Vec<String> = invocation.invoke_async(&mut conn.clone()).await?;
    Ok(refresh(reply))
}

/// What one node is, for a [`heartbeat`]: its id, its daemon process
/// ([`new_instance`]) and the fingerprint of the config it published.
#[derive(Debug, Clone, Copy)]
pub struct Beat<'a> {
    pub node: &'a str,
    pub instance: &'a str,
    pub config: &'a str,
    /// Runs in progress (and claims in flight) now.
    pub running: usize,
}

/// Refreshes this node's entry and its config's without rewriting them:
/// [`Refresh::Gone`] if the entry or the config must be published whole,
/// [`Refresh::Collision`] if another instance wrote the entry since our
/// last write.
pub async fn heartbeat(
    conn: &Conn,
    prefix: &str,
    beat: Beat<'_>,
    clock_offset_ms: Option<i64>,
    redis_warning: Option<&str>,
) -> redis::RedisResult<Refresh> {
    let mut invocation = HEARTBEAT_SCRIPT.prepare_invoke();
    invocation
        .key(nodes_key(prefix))
        .key(node_key(prefix, beat.node))
        .key(configs_key(prefix))
        .key(config_key(prefix, beat.config))
        .key(config_nodes_key(prefix, beat.config))
        .arg(beat.node)
        .arg(ttl_ms())
        .arg(beat.instance)
        .arg(beat.config);
    if let Some(offset) = clock_offset_ms {
        invocation.arg("clock_offset_ms").arg(offset);
    }
    invocation
        .arg("redis_warning")
        .arg(redis_warning.unwrap_or_default())
        .arg("running")
        .arg(beat.running);
    let reply: Vec<String> = invocation.invoke_async(&mut conn.clone()).await?;
    Ok(refresh(reply))
}

fn ttl_ms() -> u64 {
    u64::try_from(TTL.as_millis()).unwrap_or(u64::MAX)
}

/// A script's reply: `{}`, `{'ok'}` or `{'collision', OTHER}`.
fn refresh(reply: Vec<String>) -> Refresh {
    let mut reply = reply.into_iter();
    match (reply.next().as_deref(), reply.next()) {
        (None, _) => Refresh::Gone,
        (Some("collision"), Some(other)) => Refresh::Collision { other },
        _ => Refresh::Written,
    }
}

/// Every live node's id and whole-config fingerprint (empty for a node
/// whose entry expired between the two reads): O(N), for a fleet with
/// daemons too old to store their config once.
pub async fn config_hashes(conn: &Conn, prefix: &str) -> redis::RedisResult<Vec<(String, String)>> {
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
    Ok(ids
        .into_iter()
        .zip(hashes.into_iter().map(Option::unwrap_or_default))
        .collect())
}

/// Removes this node at a clean stop, so `status` stops listing it at once;
/// only if `instance` wrote the entry last (else another daemon under the
/// same id owns it now: it is left alone, except that a collision naming
/// `instance` is cleared).
pub async fn withdraw(
    conn: &Conn,
    prefix: &str,
    node: &str,
    instance: &str,
) -> redis::RedisResult<()> {
    let mut conn = conn.clone();
    let config: Option<String> = redis::cmd("HGET")
        .arg(node_key(prefix, node))
        .arg("config_hash")
        .query_async(&mut conn)
        .await?;
    let config = config.unwrap_or_default();
    let _: i64 = WITHDRAW_SCRIPT
        .key(nodes_key(prefix))
        .key(node_key(prefix, node))
        .key(configs_key(prefix))
        .key(config_nodes_key(prefix, &config))
        .arg(node)
        .arg(instance)
        .arg(&config)
        .invoke_async(&mut conn)
        .await?;
    Ok(())
}

/// The nodes that published within the TTL, by id (without their
/// schedules: see [`schedules`]).
pub async fn live_nodes(conn: &Conn, prefix: &str) -> redis::RedisResult<Vec<NodeInfo>> {
    let mut conn = conn.clone();
    let ids = live_ids(&mut conn, prefix).await?;
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let mut pipe = redis::pipe();
    for id in &ids {
        pipe.cmd("HMGET")
            .arg(node_key(prefix, id))
            .arg(&NODE_FIELDS[..]);
    }
    let rows: Vec<Vec<Option<String>>> = pipe.query_async(&mut conn).await?;
    Ok(rows
        .into_iter()
        .filter_map(|row| {
            let fields: BTreeMap<&str, String> = NODE_FIELDS
                .iter()
                .zip(row)
                .filter_map(|(name, value)| Some((*name, value?)))
                .collect();
            parse_node(&fields)
        })
        .collect())
}

/// The schedules each of `nodes` published (job -> schedule, with its
/// splay offset), in the same order; empty for a node that published none
/// (an older version) or whose entry expired meanwhile.
pub async fn schedules(
    conn: &Conn,
    prefix: &str,
    nodes: &[&str],
) -> redis::RedisResult<Vec<BTreeMap<String, JobSchedule>>> {
    if nodes.is_empty() {
        return Ok(Vec::new());
    }
    let mut pipe = redis::pipe();
    for node in nodes {
        pipe.hget(node_key(prefix, node), "schedules")
            .hget(node_key(prefix, node), "splays");
    }
    let texts: Vec<Option<String>> = pipe.query_async(&mut conn.clone()).await?;
    Ok(texts
        .chunks(2)
        .map(|pair| {
            let mut schedules: BTreeMap<String, JobSchedule> = pair[0]
                .as_deref()
                .and_then(|text| serde_json::from_str(text).ok())
                .unwrap_or_default();
            let splays: BTreeMap<String, u64> = pair
                .get(1)
                .and_then(|text| text.as_deref())
                .and_then(|text| serde_json::from_str(text).ok())
                .unwrap_or_default();
            for (job, splay_ms) in splays {
                if let Some(schedule) = schedules.get_mut(&job) {
                    schedule.splay_ms = splay_ms;
                }
            }
            schedules
        })
        .collect())
}

/// The live nodes as several masters (Redlock) see them, one list each:
/// every node once, as the master that heard from it last has it.
pub fn merge_nodes(lists: Vec<Vec<NodeInfo>>) -> Vec<NodeInfo> {
    let mut by_id: BTreeMap<String, NodeInfo> = BTreeMap::new();
    for node in lists.into_iter().flatten() {
        match by_id.get(&node.node) {
            Some(known) if known.updated_at >= node.updated_at => {}
            _ => {
                by_id.insert(node.node.clone(), node);
            }
        }
    }
    by_id.into_values().collect()
}

/// Combines the answers of several masters to a refresh: a collision seen
/// by any, else gone if any lost the entry (it is then published whole to
/// every master), else written.
pub fn merge_refreshes(answers: Vec<Refresh>) -> Refresh {
    let mut merged = Refresh::Written;
    for answer in answers {
        match answer {
            Refresh::Collision { .. } => return answer,
            Refresh::Gone => merged = Refresh::Gone,
            Refresh::Written => {}
        }
    }
    merged
}

/// The ids in the nodes set (expired ones are dropped by every publish).
async fn live_ids(conn: &mut Conn, prefix: &str) -> redis::RedisResult<Vec<String>> {
    redis::cmd("ZRANGE")
        .arg(nodes_key(prefix))
        .arg(0)
        .arg(-1)
        .query_async(conn)
        .await
}

fn parse_node(fields: &BTreeMap<&str, String>) -> Option<NodeInfo> {
    let text = |key: &str| fields.get(key).cloned().unwrap_or_default();
    let number = |key: &str| fields.get(key).and_then(|value| value.parse::<i64>().ok());
    Some(NodeInfo {
        node: fields.get("node")?.clone(),
        version: text("version"),
        started_at: number("started_at").unwrap_or(0),
        updated_at: number("updated_at").unwrap_or(0),
        config_path: text("config_path"),
        config_hash: text("config_hash"),
        clock_offset_ms: number("clock_offset_ms"),
        jobs: fields
            .get("jobs")
            .and_then(|jobs| serde_json::from_str(jobs).ok())
            .unwrap_or_default(),
        instance: text("instance"),
        collision: number("collision_at").map(|at_ms| Collision {
            at_ms,
            by: text("collision_by"),
            with: text("collision_with"),
        }),
        redis_warning: fields
            .get("redis_warning")
            .filter(|warning| !warning.is_empty())
            .cloned(),
        running: number("running").and_then(|running| u64::try_from(running).ok()),
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
    divergences_of(nodes.iter().map(|node| (node.node.as_str(), &node.jobs)))
}

/// Jobs on which `members` (a name and its jobs: job -> fingerprint)
/// disagree, by job name; each side lists members in the order given.
pub fn divergences_of<'a>(
    members: impl Iterator<Item = (&'a str, &'a BTreeMap<String, String>)> + Clone,
) -> Vec<Divergence> {
    let mut names: Vec<&String> = members.clone().flat_map(|(_, jobs)| jobs.keys()).collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .filter_map(|job| {
            let mut sides: BTreeMap<Option<String>, Vec<String>> = BTreeMap::new();
            for (name, jobs) in members.clone() {
                sides
                    .entry(jobs.get(job).cloned())
                    .or_default()
                    .push(name.to_string());
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
            redis_warning: None,
            running: None,
            jobs: jobs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            instance: String::new(),
            collision: None,
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

    #[test]
    fn script_replies_map_to_what_the_write_found() {
        assert_eq!(refresh(vec![]), Refresh::Gone);
        assert_eq!(refresh(vec!["ok".into()]), Refresh::Written);
        assert_eq!(
            refresh(vec!["collision".into(), "h:1:ab".into()]),
            Refresh::Collision {
                other: "h:1:ab".into()
            }
        );
    }

    #[test]
    fn schedules_are_stored_as_pairs() {
        let schedules = BTreeMap::from([(
            "report".to_string(),
            JobSchedule {
                expression: "0 2 * * *".into(),
                timezone: "Asia/Tashkent".into(),
                splay_ms: 0,
            },
        )]);
        let text = serde_json::to_string(&schedules).expect("serializes");
        assert_eq!(text, r#"{"report":["0 2 * * *","Asia/Tashkent"]}"#);
        let back: BTreeMap<String, JobSchedule> = serde_json::from_str(&text).expect("parses");
        assert_eq!(back, schedules);
    }
}
