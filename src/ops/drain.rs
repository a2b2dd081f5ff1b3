//! `solocron drain [--node ID]` and `solocron undrain [--node ID]`.
//!
//! A drain is a mark in `{PREFIX}:drains` keyed by node id (see
//! [`crate::control`]), so it outlives the daemon: a drained node that
//! restarts stays drained until `undrain`. Within about a second the node
//! stops claiming occurrences and taking `trigger --fleet` requests (the
//! other nodes take them); its running jobs finish under their leases.
//! `status` shows it `draining` while it still runs jobs, then `drained`.
//!
//! Failure model: see [`super`]. A node that is not live and has no drain
//! mark (a typo, or a bare `drain` on a machine that runs no daemon under
//! this host's id) is refused with exit 2, naming the live nodes and the
//! closest id; `drain --force` drains it ahead (it starts drained), with a
//! note, and so does any drain of a node drained before. Draining the last
//! live node that was not drained is allowed too (a maintenance of the
//! whole fleet), but then nothing runs at all, so the command says so on
//! stderr instead of "the other nodes take them" ([`undrained_live`]).

use std::collections::BTreeMap;

use super::{read_merged, write_everywhere};
use crate::control::{Mark, who};
use crate::inspect::{Source, UsageError, closest, note, print};
use crate::keys::drains_key;
use crate::registry::NodeInfo;

/// Which node `drain` or `undrain` was asked about.
#[derive(Debug, Clone)]
pub struct Target {
    /// The node id.
    pub node: String,
    /// `--node` was not given: the id is this host's (`SOLOCRON_NODE_ID`
    /// or the host name).
    pub defaulted: bool,
    /// `--force`: drain a node that is not live and was never drained.
    pub force: bool,
}

/// Drains `target.node` (`undrain`: `drain = false`); prints what it did.
/// `Err` ([`UsageError`], exit 2) for a node that is not live and has no
/// drain mark, unless `--force` drains it ahead.
pub async fn drain(
    source: &Source,
    target: &Target,
    drain: bool,
    reason: Option<&str>,
) -> anyhow::Result<()> {
    let node = target.node.as_str();
    let (coordinator, now_ms) = super::open_as_operator(source).await?;
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
    // Drained or undrained before, live now, or drained ahead on purpose.
    let allowed = is_live || current.contains_key(node) || (drain && target.force);
    if !allowed {
        return Err(unknown_node(source, node, drain, target, &live).into());
    }
    if !drain && !was_drained {
        return print(&format!("node `{node}` was not drained\n"));
    }
    let mark = Mark {
        at_ms: now_ms,
        active: drain,
        by: who(),
        since_ms: now_ms,
        until_ms: None,
        from_ms: None,
        reason: reason
            .map(str::trim)
            .filter(|reason| !reason.is_empty())
            .map(str::to_string),
    };
    let action = if drain { "drain" } else { "undrain" };
    let record =
        crate::control::audit::Record::new(&mark.by, action, node).reason(mark.reason.as_deref());
    write_everywhere(
        &coordinator,
        source,
        &key,
        &[(node.to_string(), mark.clone())],
        &record,
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

/// The refusal for a node that is not live and was never drained: the
/// live nodes, the closest id, and how to drain it ahead.
fn unknown_node(
    source: &Source,
    node: &str,
    drain: bool,
    target: &Target,
    live: &[NodeInfo],
) -> UsageError {
    let prefix = &source.redis.key_prefix;
    let mut ids: Vec<&str> = live.iter().map(|info| info.node.as_str()).collect();
    ids.sort_unstable();
    let whose = if target.defaulted {
        format!("node `{node}` (this host's node id: `--node` was not given)")
    } else {
        format!("node `{node}`")
    };
    let live_words = if ids.is_empty() {
        format!("no node is live under key prefix `{prefix}`")
    } else {
        format!("the live nodes: {}", ids.join(", "))
    };
    let hint = match closest(node, ids.iter().copied()) {
        Some(near) => format!("did you mean `--node {near}`? "),
        None => String::new(),
    };
    let ahead = if drain {
        "; to drain a node before it starts, add `--force`"
    } else {
        ""
    };
    UsageError(format!(
        "{whose} is not live (it has not published itself under key prefix `{prefix}` in the \
         last {}) and has never been drained, so {} would change nothing that runs; \
         {live_words}; {hint}name the node with `--node ID`{ahead}",
        humantime::format_duration(crate::registry::TTL),
        if drain {
            "draining it"
        } else {
            "undraining it"
        },
    ))
}

/// The live nodes that `marks` (every drain mark, by node id) leaves
/// undrained, by id: the ones that still claim occurrences.
pub fn undrained_live<'a>(live: &'a [NodeInfo], marks: &BTreeMap<String, Mark>) -> Vec<&'a str> {
    live.iter()
        .map(|info| info.node.as_str())
        .filter(|id| !marks.get(*id).is_some_and(|mark| mark.active))
        .collect()
}
