//! `solocron drain [--node ID]` and `solocron undrain [--node ID]`.
//!
//! A drain is a mark in `{PREFIX}:drains` keyed by node id (see
//! [`crate::control`]), so it outlives the daemon: a drained node that
//! restarts stays drained until `undrain`. Within about a second the node
//! stops claiming occurrences and taking `trigger --fleet` requests (the
//! other nodes take them); its running jobs finish under their leases.
//! `status` shows it `draining` while it still runs jobs, then `drained`.
//!
//! Failure model: see [`super`]. Draining a node that is not live is
//! allowed (it starts drained), with a note. Draining the last live node
//! that was not drained is allowed too (a maintenance of the whole fleet),
//! but then nothing runs at all, so the command says so on stderr instead
//! of "the other nodes take them" ([`undrained_live`]).

use std::collections::BTreeMap;

use super::{read_merged, write_everywhere};
use crate::control::{Mark, drains_key, who};
use crate::inspect::{Source, note, print};
use crate::registry::NodeInfo;

/// Drains `node` (`undrain`: `drain = false`); prints what it did.
pub async fn drain(
    source: &Source,
    node: &str,
    drain: bool,
    reason: Option<&str>,
) -> anyhow::Result<()> {
    let (coordinator, now_ms) = crate::inspect::open(&source.redis).await?;
    let prefix = &source.redis.key_prefix;
    let key = drains_key(prefix);
    let live = crate::inspect::live_nodes(&coordinator, prefix)
        .await
        .map_err(|err| {
            crate::inspect::redis_failed("cannot read the node registry from", &source.redis, &err)
        })?;
    let is_live = live.iter().any(|info| info.node == node);
    let current = read_merged(&coordinator, source, &key).await?;
    let was_drained = current.get(node).is_some_and(|mark| mark.active);
    if !drain && !was_drained {
        return print(&format!("node `{node}` was not drained\n"));
    }
    let mark = Mark {
        at_ms: now_ms,
        active: drain,
        by: who(),
        since_ms: now_ms,
        until_ms: None,
        reason: reason
            .map(str::trim)
            .filter(|reason| !reason.is_empty())
            .map(str::to_string),
    };
    write_everywhere(
        &coordinator,
        source,
        &key,
        &[(node.to_string(), mark.clone())],
    )
    .await?;
    let within = crate::control::REFRESH.as_secs().max(1);
    let mut after = current;
    after.insert(node.to_string(), mark.clone());
    let left = undrained_live(&live, &after);
    let others = if left.is_empty() {
        "no live node is left to take them: see the warning below"
    } else {
        "the other nodes take them"
    };
    let text = match (drain, was_drained) {
        (true, true) => format!(
            "node `{node}` was drained already; the drain is now {}\n",
            mark.describe()
        ),
        (true, false) => format!(
            "node `{node}` drains ({}): within about {within}s it claims no new occurrences and \
             takes no trigger requests ({others}); its running jobs finish. \
             `solocron status` shows it `draining`, then `drained`; it stays drained across \
             restarts until `solocron undrain --node {node}`.\n",
            mark.describe()
        ),
        (false, _) => format!(
            "node `{node}` undrained by {}: it claims occurrences again within about {within}s\n",
            mark.by
        ),
    };
    print(&text)?;
    if drain && left.is_empty() && !live.is_empty() {
        let mut ids: Vec<&str> = live.iter().map(|info| info.node.as_str()).collect();
        ids.sort_unstable();
        crate::logging::to_stderr(&format!(
            "warning: every live node is drained now ({}): no node claims occurrences or takes \
             trigger requests, so no job runs until `solocron undrain --node ID` (or a node that \
             is not drained starts); the occurrences due meanwhile are recorded `missed` by the \
             first decision after that\n",
            ids.join(", ")
        ));
    }
    if !is_live {
        note(&format!(
            "node `{node}` is not live now (it has not published itself under key prefix `{prefix}` \
             in the last {}); {}",
            humantime::format_duration(crate::registry::TTL),
            if drain {
                "it starts drained"
            } else {
                "it claims again once it runs"
            }
        ));
    }
    Ok(())
}

/// The live nodes that `marks` (every drain mark, by node id) leaves
/// undrained, by id: the ones that still claim occurrences.
pub fn undrained_live<'a>(live: &'a [NodeInfo], marks: &BTreeMap<String, Mark>) -> Vec<&'a str> {
    live.iter()
        .map(|info| info.node.as_str())
        .filter(|id| !marks.get(*id).is_some_and(|mark| mark.active))
        .collect()
}
