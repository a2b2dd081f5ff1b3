//! The fleet controls in `status`: which jobs are paused (by whom, since
//! when, until when, why) and which nodes are drained, with how many jobs
//! each still runs (`draining` while it runs any, then `drained`).
//!
//! Read from every member and merged like the registry (newest stamp per
//! field wins, [`crate::control::merge`]); only what is in effect at Redis
//! `TIME` is shown. A drained node that is not live is shown too: it stays
//! drained across restarts.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::JobStatus;
use crate::control::{self, Mark, Pauses};
use crate::coordinator::Coordinator;
use crate::inspect::format::{self, NONE, Table};
use crate::keys;
use crate::registry::NodeInfo;

/// A drained node as `status` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainShown {
    pub node: String,
    pub mark: Mark,
    /// The listed jobs whose lock this node holds now.
    pub running: Vec<String>,
    /// Whether it published itself lately.
    pub live: bool,
}

impl DrainShown {
    /// `draining` while it runs jobs, then `drained`.
    pub fn state(&self) -> &'static str {
        if self.running.is_empty() {
            "drained"
        } else {
            "draining"
        }
    }
}

/// The pauses and drain marks of every member, merged.
pub async fn read(
    coordinator: &Coordinator,
    prefix: &str,
) -> redis::RedisResult<(Pauses, BTreeMap<String, Mark>)> {
    let (pauses, drains) = (keys::pauses_key(prefix), keys::drains_key(prefix));
    let (pauses, drains) = (&pauses, &drains);
    let lists = coordinator
        .on_members(|conn| async move {
            let pauses = control::read_marks(&conn, pauses).await?;
            let drains = control::read_marks(&conn, drains).await?;
            Ok((pauses, drains))
        })
        .await?;
    let (pause_lists, drain_lists): (Vec<_>, Vec<_>) = lists.into_iter().unzip();
    Ok((
        Pauses::from_marks(control::merge(pause_lists)),
        control::merge(drain_lists),
    ))
}

/// Sets each job's pause in effect at `now_ms`.
pub fn apply_pauses(jobs: &mut [JobStatus], pauses: &Pauses, now_ms: i64) {
    for status in jobs {
        status.paused = pauses
            .covering(&status.job.name, now_ms)
            .map(|(mark, all)| (mark.clone(), all));
    }
}

/// The pauses booked ahead (`pause --from`) that have not begun at
/// `now_ms`: (`*` for every job, or the job) and the mark.
pub fn booked(pauses: &Pauses, now_ms: i64) -> Vec<(String, Mark)> {
    let all = pauses
        .all
        .iter()
        .map(|mark| (crate::control::ALL.to_string(), mark.clone()));
    let jobs = pauses
        .jobs
        .iter()
        .map(|(job, mark)| (job.clone(), mark.clone()));
    all.chain(jobs)
        .filter(|(_, mark)| mark.booked_after(now_ms))
        .collect()
}

/// The BOOKED PAUSES table (empty without any).
pub fn booked_text(booked: &[(String, Mark)]) -> String {
    if booked.is_empty() {
        return String::new();
    }
    let mut table = Table::new(&["JOB", "PAUSE"]);
    for (job, mark) in booked {
        let job = if job == crate::control::ALL {
            "(every job)".to_string()
        } else {
            job.clone()
        };
        table.row(vec![job, format!("booked {}", mark.describe())]);
    }
    format!(
        "\nBOOKED PAUSES: nothing changes before FROM; the occurrences from FROM until UNTIL will be recorded `paused`\n{}",
        table.render()
    )
}

/// The drains in effect, by node id, with what each still runs.
pub fn drains(
    marks: &BTreeMap<String, Mark>,
    jobs: &[JobStatus],
    nodes: &[NodeInfo],
) -> Vec<DrainShown> {
    marks
        .iter()
        .filter(|(_, mark)| mark.active)
        .map(|(node, mark)| DrainShown {
            node: node.clone(),
            mark: mark.clone(),
            running: jobs
                .iter()
                .filter(|status| status.held.as_ref().is_some_and(|held| &held.node == node))
                .map(|status| status.job.name.clone())
                .collect(),
            live: nodes.iter().any(|info| &info.node == node),
        })
        .collect()
}

/// `paused by X since T until U: reason` (`(pause --all)` when it is that).
pub fn describe_pause(mark: &Mark, all: bool) -> String {
    let scope = if all { " (pause --all)" } else { "" };
    format!("paused{scope} {}", mark.describe())
}

/// A job's `paused` object (`null` when it is not paused).
pub fn pause_json(paused: Option<&(Mark, bool)>) -> Value {
    match paused {
        None => Value::Null,
        Some((mark, all)) => json!({
            "by": mark.by,
            "since": format::from_ms(mark.since_ms).map(format::millis),
            "until": mark.until_ms.and_then(format::from_ms).map(format::millis),
            "reason": mark.reason,
            "all": all,
            "description": describe_pause(mark, *all),
        }),
    }
}

/// The `drains` array.
pub fn drains_json(drains: &[DrainShown]) -> Value {
    Value::Array(
        drains
            .iter()
            .map(|drain| {
                json!({
                    "node": drain.node,
                    "state": drain.state(),
                    "running": drain.running.len(),
                    "running_jobs": drain.running,
                    "live": drain.live,
                    "by": drain.mark.by,
                    "since": format::from_ms(drain.mark.since_ms).map(format::millis),
                    "reason": drain.mark.reason,
                })
            })
            .collect(),
    )
}

/// The PAUSED section of the text form (empty if no job is paused).
pub fn paused_text(jobs: &[JobStatus]) -> String {
    let mut out = String::new();
    let paused: Vec<&JobStatus> = jobs.iter().filter(|job| job.paused.is_some()).collect();
    if !paused.is_empty() {
        out.push_str(
            "\nPAUSED: no node runs these jobs' occurrences; each is recorded `paused` (`solocron resume JOB`)\n",
        );
        let mut table = Table::new(&["JOB", "PAUSE"]);
        for status in paused {
            if let Some((mark, all)) = &status.paused {
                table.row(vec![status.job.name.clone(), describe_pause(mark, *all)]);
            }
        }
        out.push_str(&table.render());
    }
    out
}

/// Whether there are live nodes and every one of them is drained: then no
/// node claims anything, and no job runs.
pub fn every_live_node_drained(nodes: &[NodeInfo], drains: &[DrainShown]) -> bool {
    !nodes.is_empty()
        && nodes
            .iter()
            .all(|info| drains.iter().any(|drain| drain.node == info.node))
}

/// The line under DRAINED NODES when every live node is drained (empty
/// otherwise): nothing runs, which the tables alone do not say.
pub fn nobody_claims_text(nodes: &[NodeInfo], drains: &[DrainShown]) -> String {
    if every_live_node_drained(nodes, drains) {
        "NO JOB RUNS: every live node is drained, so no node claims occurrences or takes trigger \
         requests until `solocron undrain --node ID` (or a node that is not drained starts); the \
         occurrences due meanwhile are recorded `missed` by the first decision after that\n"
            .to_string()
    } else {
        String::new()
    }
}

/// The DRAINED NODES section of the text form (empty if none is drained).
pub fn drains_text(drains: &[DrainShown], now_ms: i64) -> String {
    let mut out = String::new();
    if !drains.is_empty() {
        out.push_str(
            "\nDRAINED NODES: they claim no new occurrences and take no trigger requests (`solocron undrain --node ID`)\n",
        );
        let mut table = Table::new(&["NODE", "STATE", "RUNNING", "SINCE", "BY", "LIVE", "REASON"]);
        for drain in drains {
            let running = match drain.running.len() {
                0 => NONE.to_string(),
                n => format!("{n} ({})", drain.running.join(", ")),
            };
            table.row(vec![
                drain.node.clone(),
                drain.state().to_string(),
                running,
                format!(
                    "{} ({} ago)",
                    control::instant(drain.mark.since_ms),
                    format::duration_ms(now_ms - drain.mark.since_ms)
                ),
                drain.mark.by.clone(),
                if drain.live { "yes" } else { "no" }.to_string(),
                drain
                    .mark
                    .reason
                    .clone()
                    .unwrap_or_else(|| NONE.to_string()),
            ]);
        }
        out.push_str(&table.render());
    }
    out
}
