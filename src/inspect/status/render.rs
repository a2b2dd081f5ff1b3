//! The two faces of `status`: the text tables (JOBS, NODES, CONFIG DRIFT)
//! and the `--json` object (`jobs`, `nodes`, `divergences`, RFC 3339 UTC
//! times, `null` where unknown). Durations are relative to Redis `TIME`.

use serde_json::{Value, json};

use super::JobStatus;
use crate::inspect::format::{self, NONE, Table};
use crate::registry::{self, Divergence, NodeInfo};

/// The `--json` object.
pub fn to_json(jobs: &[JobStatus], nodes: &[NodeInfo], drift: &[Divergence], now_ms: i64) -> Value {
    json!({
        "jobs": jobs.iter().map(|job| job_json(job, now_ms)).collect::<Vec<_>>(),
        "nodes": nodes.iter().map(node_json).collect::<Vec<_>>(),
        "divergences": drift.iter().map(divergence_json).collect::<Vec<_>>(),
    })
}

fn job_json(status: &JobStatus, now_ms: i64) -> Value {
    let zone = status.job.schedule.timezone();
    json!({
        "job": status.job.name,
        "schedule": status.job.schedule.expression().trim(),
        "timezone": zone.name(),
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
        "next_local": status.next.map(|at| at.with_timezone(&zone).to_rfc3339()),
    })
}

fn node_json(node: &NodeInfo) -> Value {
    json!({
        "node": node.node,
        "version": node.version,
        "config_path": node.config_path,
        "config_hash": node.config_hash,
        "started_at": format::from_ms(node.started_at).map(format::millis),
        "last_seen": format::from_ms(node.updated_at).map(format::millis),
        "clock_offset_ms": node.clock_offset_ms,
        "jobs": node.jobs,
    })
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

/// The text form: a JOBS table, a NODES table, and CONFIG DRIFT if any.
pub fn text(jobs: &[JobStatus], nodes: &[NodeInfo], drift: &[Divergence], now_ms: i64) -> String {
    let mut out = String::new();
    if jobs.is_empty() {
        out.push_str("JOBS: none in the config\n");
    } else {
        out.push_str(&jobs_table(jobs, now_ms).render());
    }
    out.push('\n');
    if nodes.is_empty() {
        out.push_str(&format!(
            "NODES: none has published itself in the last {}\n",
            humantime::format_duration(registry::TTL)
        ));
    } else {
        out.push_str(&format!("NODES ({} live)\n", nodes.len()));
        out.push_str(&nodes_table(nodes, now_ms).render());
    }
    if !drift.is_empty() {
        out.push_str("\nCONFIG DRIFT: live nodes disagree on these jobs (fingerprint: nodes)\n");
        let mut table = Table::new(&["JOB", "DEFINITIONS"]);
        for divergence in drift {
            table.row(vec![divergence.job.clone(), divergence.describe()]);
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
        let zone = status.job.schedule.timezone();
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
        match status.next {
            Some(at) => row.extend([
                at.with_timezone(&zone)
                    .format("%Y-%m-%d %H:%M:%S %Z")
                    .to_string(),
                format::secs(at),
            ]),
            None => row.extend(["never".to_string(), dash()]),
        }
        table.row(row);
    }
    table
}

fn nodes_table(nodes: &[NodeInfo], now_ms: i64) -> Table {
    let mut table = Table::new(&[
        "NODE",
        "VERSION",
        "CONFIG HASH",
        "STARTED",
        "LAST SEEN",
        "CLOCK OFFSET",
        "CONFIG",
    ]);
    let ago = |ms: i64| format!("{} ago", format::duration_ms(now_ms - ms));
    for node in nodes {
        table.row(vec![
            node.node.clone(),
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
