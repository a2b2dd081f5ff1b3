//! The two faces of `status`: the text tables (JOBS, PAUSED, GROUPS, NODES,
//! DRAINED NODES, CONFIG DRIFT, NODE ID COLLISIONS) and the `--json`
//! object (`jobs`, `nodes`, `divergences`, `drains`, `groups`; RFC 3339 UTC times,
//! `null` where unknown). Durations are relative to Redis `TIME`; a
//! node-id collision is shown while it is recent
//! ([`Collision::is_recent`]).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::controls::{self, DrainShown};
use super::{JobStatus, Listing};
use crate::inspect::format::{self, NONE, Table};
use crate::registry::{self, Collision, Divergence, NodeInfo};

/// Everything `status` shows, as read once ([`super::read`]).
pub struct Fleet {
    pub jobs: Vec<JobStatus>,
    /// Pauses booked ahead, not begun yet: (job or `*`, mark).
    pub booked: Vec<(String, crate::control::Mark)>,
    /// The config's groups (none without a config).
    pub groups: Vec<super::groups::GroupStatus>,
    /// Drained nodes (live or not).
    pub drains: Vec<DrainShown>,
    pub listing: Listing,
    /// The key prefix read (named when nothing was found).
    pub prefix: String,
    pub nodes: Vec<NodeInfo>,
    /// The tags each alive node published (`--tags`).
    pub tags: BTreeMap<String, String>,
    pub drift: Vec<Divergence>,
    /// Redis `TIME`, UTC epoch ms.
    pub now_ms: i64,
}

/// The `--json` object.
pub fn to_json(view: &Fleet) -> Value {
    let Fleet {
        jobs,
        nodes,
        drift,
        drains,
        now_ms,
        tags,
        groups,
        booked,
        ..
    } = view;
    let now_ms = *now_ms;
    json!({
        "jobs": jobs.iter().map(|job| job_json(job, now_ms)).collect::<Vec<_>>(),
        "nodes": nodes.iter().map(|node| {
            let mut value = node_json(node, now_ms);
            let drain = drains.iter().find(|drain| drain.node == node.node);
            value["drain"] = json!(drain.map(DrainShown::state));
            let published = tags.get(&node.node).map_or("", String::as_str);
            let shown = crate::tags::Tags::from_published(published, &node.node);
            value["tags"] = json!(shown
                .to_string()
                .split(',')
                .filter_map(|pair| pair.split_once('='))
                .collect::<BTreeMap<&str, &str>>());
            value
        }).collect::<Vec<_>>(),
        "divergences": drift.iter().map(divergence_json).collect::<Vec<_>>(),
        "drains": controls::drains_json(drains),
        "groups": super::groups::to_json(groups),
        "booked_pauses": booked.iter().map(|(job, mark)| json!({
            "job": job,
            "by": mark.by,
            "from": mark.from_ms.and_then(format::from_ms).map(format::millis),
            "until": mark.until_ms.and_then(format::from_ms).map(format::millis),
            "reason": mark.reason,
        })).collect::<Vec<_>>(),
    })
}

fn job_json(status: &JobStatus, now_ms: i64) -> Value {
    let schedule = status.job.schedule.as_ref();
    let zone = schedule.map(|schedule| schedule.timezone());
    json!({
        "job": status.job.name,
        "schedule": schedule.map(|schedule| schedule.expression().trim()),
        "timezone": zone.map(|zone| zone.name()),
        "lock": status.held.as_ref().map(|held| json!({
            "node": held.node,
            "fence": held.fence,
            "occurrence": held.occurrence,
            "since": held.since_ms.and_then(format::from_ms).map(format::millis),
            "held_for_ms": held.since_ms.map(|since| (now_ms - since).max(0)),
            "ttl_ms": held.ttl_ms,
        })),
        "last": status.last.as_ref().map(|last| json!({
            "occurrence": last.occurrence,
            "node": last.node,
            "fence": last.fence,
            "decision": last.decision,
            "outcome": last.outcome,
        })),
        "next": status.next.map(format::secs),
        "next_local": status.next.zip(zone).map(|(at, zone)| at.with_timezone(&zone).to_rfc3339()),
        "next_start": status.next_start().map(format::millis),
        "paused": controls::pause_json(status.paused.as_ref()),
    })
}

fn node_json(node: &NodeInfo, now_ms: i64) -> Value {
    let collision = current_collision(node, now_ms).map(|collision| {
        json!({
            "instances": [collision.by, collision.with],
            "seen_at": format::from_ms(collision.at_ms).map(format::millis),
            "description": describe_collision(collision),
        })
    });
    json!({
        "node": node.node,
        "running": node.running,
        "version": node.version,
        "config_path": node.config_path,
        "config_hash": node.config_hash,
        "started_at": format::from_ms(node.started_at).map(format::millis),
        "last_seen": format::from_ms(node.updated_at).map(format::millis),
        "clock_offset_ms": node.clock_offset_ms,
        "jobs": node.jobs,
        "instance": (!node.instance.is_empty()).then_some(&node.instance),
        "collision": collision,
        "redis_warning": node.redis_warning,
    })
}

/// The node's collision if it is recent.
pub(crate) fn current_collision(node: &NodeInfo, now_ms: i64) -> Option<&Collision> {
    node.collision
        .as_ref()
        .filter(|collision| collision.is_recent(now_ms))
}

/// "two daemons publish as this node: host a, pid 1 (…) and host b, pid 2 (…)".
pub(crate) fn describe_collision(collision: &Collision) -> String {
    let [by, with] = collision.instances();
    format!("two daemons publish as this node: {by} and {with}; give each its own --node-id")
}

fn divergence_json(divergence: &Divergence) -> Value {
    let sides: Vec<Value> = divergence
        .sides
        .iter()
        .map(|(fingerprint, nodes)| json!({"fingerprint": fingerprint, "nodes": nodes}))
        .collect();
    json!({
        "job": divergence.job,
        "sides": sides,
        "description": divergence.describe(),
    })
}

/// The text form: a JOBS table, a NODES table, and CONFIG DRIFT and NODE
/// ID COLLISIONS if any.
pub fn text(view: &Fleet) -> String {
    let mut out = String::new();
    match (view.listing, view.jobs.is_empty()) {
        (Listing::Config, true) => out.push_str("JOBS: none in the config\n"),
        (Listing::LiveNodes, true) if view.nodes.is_empty() => out.push_str(&format!(
            "JOBS: unknown: no config was read and no live node publishes its jobs under \
             key prefix `{}`; pass `--config PATH`, or check `--redis` and `--key-prefix`\n",
            view.prefix
        )),
        (Listing::LiveNodes, true) => out.push_str("JOBS: the live nodes run none\n"),
        (Listing::LiveNodes, false) => {
            out.push_str("JOBS of the live nodes (no config was read)\n");
            out.push_str(&jobs_table(&view.jobs, view.now_ms).render());
        }
        (Listing::Config, false) => out.push_str(&jobs_table(&view.jobs, view.now_ms).render()),
    }
    out.push_str(&controls::paused_text(&view.jobs));
    out.push_str(&controls::booked_text(&view.booked));
    out.push_str(&super::groups::text(&view.groups));
    out.push('\n');
    if view.nodes.is_empty() {
        out.push_str(&format!(
            "NODES: none has published itself in the last {}\n",
            humantime::format_duration(registry::TTL)
        ));
    } else {
        out.push_str(&format!("NODES ({} live)\n", view.nodes.len()));
        out.push_str(&nodes_table(&view.nodes, &view.tags, view.now_ms).render());
    }
    out.push_str(&controls::drains_text(&view.drains, view.now_ms));
    out.push_str(&controls::nobody_claims_text(&view.nodes, &view.drains));
    if !view.drift.is_empty() {
        out.push_str("\nCONFIG DRIFT: live nodes disagree on these jobs (fingerprint: nodes)\n");
        let mut table = Table::new(&["JOB", "DEFINITIONS"]);
        for divergence in &view.drift {
            table.row(vec![divergence.job.clone(), divergence.describe()]);
        }
        out.push_str(&table.render());
    }
    let warned: Vec<&NodeInfo> = view
        .nodes
        .iter()
        .filter(|node| node.redis_warning.is_some())
        .collect();
    if !warned.is_empty() {
        out.push_str("\nREDIS WARNINGS: what these nodes see wrong with redis now\n");
        let mut table = Table::new(&["NODE", "WARNING"]);
        for node in warned {
            table.row(vec![
                node.node.clone(),
                node.redis_warning.clone().unwrap_or_default(),
            ]);
        }
        out.push_str(&table.render());
    }
    let collisions: Vec<(&NodeInfo, &Collision)> = view
        .nodes
        .iter()
        .filter_map(|node| Some((node, current_collision(node, view.now_ms)?)))
        .collect();
    if !collisions.is_empty() {
        out.push_str(
            "\nNODE ID COLLISIONS: two daemons publish under one node id; \
             give each its own --node-id\n",
        );
        let mut table = Table::new(&["NODE", "SEEN", "INSTANCES"]);
        for (node, collision) in collisions {
            let [by, with] = collision.instances();
            table.row(vec![
                node.node.clone(),
                format!("{} ago", format::duration_ms(view.now_ms - collision.at_ms)),
                format!("{by}; {with}"),
            ]);
        }
        out.push_str(&table.render());
    }
    out
}

fn jobs_table(jobs: &[JobStatus], now_ms: i64) -> Table {
    let mut table = Table::new(&[
        "JOB",
        "LOCK",
        "FENCE",
        "HELD FOR",
        "TTL LEFT",
        "LAST OCCURRENCE",
        "BY",
        "LAST FENCE",
        "OUTCOME",
        "NEXT (LOCAL)",
        "NEXT (UTC)",
    ]);
    let dash = || NONE.to_string();
    let number = |n: Option<u64>| n.map_or_else(dash, |n| n.to_string());
    for status in jobs {
        let zone = status.job.schedule.as_ref().map(|s| s.timezone());
        let mut row = vec![status.job.name.clone()];
        match &status.held {
            Some(held) => row.extend([
                held.node.clone(),
                number(held.fence),
                held.since_ms
                    .map_or_else(dash, |since| format::duration_ms(now_ms - since)),
                held.ttl_ms
                    .map_or_else(|| "no ttl".to_string(), format::duration_ms),
            ]),
            None => row.extend(["free".to_string(), dash(), dash(), dash()]),
        }
        match &status.last {
            Some(last) => row.extend([
                last.occurrence.clone(),
                last.node.clone(),
                number(last.fence),
                last.outcome
                    .clone()
                    .unwrap_or_else(|| last.decision.clone()),
            ]),
            None => row.extend([dash(), dash(), dash(), dash()]),
        }
        match (status.next, zone) {
            (Some(at), Some(zone)) => row.extend([
                at.with_timezone(&zone)
                    .format("%Y-%m-%d %H:%M:%S %Z")
                    .to_string(),
                next_utc(status, at),
            ]),
            (_, None) => row.extend(["unknown".to_string(), dash()]),
            (None, Some(_)) => row.extend(["never".to_string(), dash()]),
        }
        table.row(row);
    }
    table
}

/// The next occurrence in UTC and, for a splayed job, when it starts:
/// `2026-12-04T21:01:00Z (starts +14.0s)`.
fn next_utc(status: &JobStatus, at: chrono::DateTime<chrono::Utc>) -> String {
    let offset = status.job.splay_offset;
    if offset.is_zero() {
        return format::secs(at);
    }
    let millis = i64::try_from(offset.as_millis()).unwrap_or(i64::MAX);
    format!(
        "{} (starts +{})",
        format::secs(at),
        format::duration_ms(millis)
    )
}

fn nodes_table(nodes: &[NodeInfo], tags: &BTreeMap<String, String>, now_ms: i64) -> Table {
    let mut table = Table::new(&[
        "NODE",
        "TAGS",
        "RUNNING",
        "VERSION",
        "CONFIG HASH",
        "STARTED",
        "LAST SEEN",
        "CLOCK OFFSET",
        "CONFIG",
    ]);
    let ago = |ms: i64| format!("{} ago", format::duration_ms(now_ms - ms));
    for node in nodes {
        let published = tags.get(&node.node).filter(|text| !text.is_empty());
        table.row(vec![
            node.node.clone(),
            published.cloned().unwrap_or_else(|| NONE.to_string()),
            node.running
                .map_or_else(|| NONE.to_string(), |running| running.to_string()),
            node.version.clone(),
            node.config_hash.clone(),
            ago(node.started_at),
            ago(node.updated_at),
            node.clock_offset_ms
                .map_or_else(|| NONE.to_string(), |ms| format!("{ms:+}ms")),
            node.config_path.clone(),
        ]);
    }
    table
}
