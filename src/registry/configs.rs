//! The configs in use, each stored once: `{PREFIX}:config:FP` holds one
//! config's jobs (job -> fingerprint), `{PREFIX}:config:FP:nodes` the
//! nodes on it and `{PREFIX}:configs` the fingerprints in use, the last two
//! scored by each node's last write (Redis ms). The registry scripts keep
//! them; a node reads them instead of every node's entry, so its drift
//! check costs O(C) per period (C configs in use: 1 but during a rollout),
//! and a config's jobs are read once per fingerprint, not once per node.

use std::collections::BTreeMap;

use crate::coordinator::Conn;
use crate::keys::{config_key, config_nodes_key, configs_key, nodes_key};

/// What the fleet runs, from one read of three keys.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InUse {
    /// The live nodes (every version's).
    pub nodes: usize,
    /// The config fingerprints in use, sorted.
    pub configs: Vec<String>,
    /// The nodes on the config asked about.
    pub ours: usize,
}

/// The configs in use and how many nodes are on `ours`: one round trip,
/// whatever the number of nodes.
pub async fn in_use(conn: &Conn, prefix: &str, ours: &str) -> redis::RedisResult<InUse> {
    let (nodes, configs, on_ours): (usize, Vec<String>, usize) = redis::pipe()
        .zcard(nodes_key(prefix))
        .zrange(configs_key(prefix), 0, -1)
        .zcard(config_nodes_key(prefix, ours))
        .query_async(&mut conn.clone())
        .await?;
    Ok(InUse {
        nodes,
        configs,
        ours: on_ours,
    })
}

/// The answers of several masters (Redlock) as one: the most nodes any
/// saw, every config any lists.
pub fn merge_in_use(answers: Vec<InUse>) -> InUse {
    let mut merged = InUse::default();
    for answer in answers {
        merged.nodes = merged.nodes.max(answer.nodes);
        merged.ours = merged.ours.max(answer.ours);
        merged.configs.extend(answer.configs);
    }
    merged.configs.sort();
    merged.configs.dedup();
    merged
}

/// How many nodes are on each of `configs`, in the same order.
pub async fn node_counts(
    conn: &Conn,
    prefix: &str,
    configs: &[String],
) -> redis::RedisResult<Vec<usize>> {
    let mut pipe = redis::pipe();
    for config in configs {
        pipe.zcard(config_nodes_key(prefix, config));
    }
    pipe.query_async(&mut conn.clone()).await
}

/// One config's jobs (job -> fingerprint); `None` if no node stores it
/// any more, or it is not a JSON object.
pub async fn config_jobs(
    conn: &Conn,
    prefix: &str,
    config: &str,
) -> redis::RedisResult<Option<BTreeMap<String, String>>> {
    let text: Option<String> = redis::cmd("GET")
        .arg(config_key(prefix, config))
        .query_async(&mut conn.clone())
        .await?;
    Ok(text.and_then(|text| serde_json::from_str(&text).ok()))
}

/// The nodes on `config`, by id.
pub async fn config_nodes(
    conn: &Conn,
    prefix: &str,
    config: &str,
) -> redis::RedisResult<Vec<String>> {
    redis::cmd("ZRANGE")
        .arg(config_nodes_key(prefix, config))
        .arg(0)
        .arg(-1)
        .query_async(&mut conn.clone())
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masters_answers_merge_to_every_config_and_the_most_nodes() {
        let one = InUse {
            nodes: 3,
            configs: vec!["b".into(), "a".into()],
            ours: 2,
        };
        let two = InUse {
            nodes: 4,
            configs: vec!["a".into()],
            ours: 1,
        };
        let merged = merge_in_use(vec![one, two]);
        assert_eq!(merged.nodes, 4);
        assert_eq!(merged.ours, 2);
        assert_eq!(merged.configs, ["a", "b"]);
    }
}
