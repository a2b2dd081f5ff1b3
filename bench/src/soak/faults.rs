//! The faults a soak injected, and what each may cost: which occurrences
//! it excuses from running, and the latest end it allows a run it cut
//! short.
//!
//! Node faults (`kill -9`, double SIGTERM) reach every job: a node may hold
//! any job's lock. A fault of the coordinator reaches what its [`Reach`]
//! says: every job for a single server or a Sentinel group (one master
//! holds every key), the failed shard's jobs for a Redis Cluster, and no
//! job for Redlock, whose faults stay within a minority of the masters
//! (guarantee 9, docs/guarantees.md: then every occurrence runs exactly
//! once).
//!
//! Excused from running (not from the history): occurrences due from 1 s
//! before a node fault until `lock_ttl + starting_deadline + 1 s` (6 s)
//! after it; for a coordinator fault, from 1 s before it began until 6 s
//! after it was over, and only for the jobs it reaches. Over means: a
//! paused server (or Cluster master that was not failed over) resumed; a
//! Sentinel group settled (one master, every running replica linked and
//! seen by every sentinel: until the old master is a replica again, a
//! master may list fewer replicas than it did in the last 30 s and then
//! grants no claim, docs/ha.md); a Cluster healthy with every replica
//! linked (with `wait_replicas` 1 and one replica per master, a promoted
//! replica grants nothing until the old master is its replica).
//!
//! Also excused: an occurrence the victim of a node fault had claimed
//! before it, by the history's word (an entry of the victim for it whose
//! fence, Redis `TIME` in µs, is at most 6 s before the fault): its run was
//! cut before the job wrote its START (on a loaded machine, the fork and
//! the shell can take longer than the 1 s before the fault).

use std::collections::{BTreeSet, HashMap};

use chrono::{DateTime, TimeDelta, Utc};

use crate::common::audit::{Decision, Run, Window};
use crate::jobs::{DEADLINE_S, LOCK_TTL_S};

/// Which jobs a coordinator fault may cost occurrences of.
#[derive(Debug, Clone)]
pub enum Reach {
    /// Every job (one server or one master holds every key).
    All,
    /// These jobs only (a Cluster shard's).
    Jobs(BTreeSet<String>),
    /// None (a Redlock minority).
    Nothing,
}

impl Reach {
    /// Whether the fault may cost `job` occurrences.
    pub fn covers(&self, job: &str) -> bool {
        match self {
            Reach::All => true,
            Reach::Jobs(jobs) => jobs.contains(job),
            Reach::Nothing => false,
        }
    }
}

/// A fault of the coordinator (a Redis pause, a failover, a master killed
/// or paused), from its start until it was over.
#[derive(Debug)]
pub struct CoordinatorFault {
    /// What it was, for the counts (`graceful SENTINEL FAILOVER`, …).
    pub kind: String,
    pub from: DateTime<Utc>,
    pub from_ns: i128,
    /// When its effect on claims ended (see the module doc): at the latest
    /// when the harness's settle (or heal) wait returned.
    pub over: DateTime<Utc>,
    pub reach: Reach,
}

/// A fault and the span of occurrences it may cost.
#[derive(Debug)]
pub enum Fault {
    /// `kill -9` of a node, restarted 3 s later (with its log pipe closed
    /// after the first line if `closed_log`).
    Kill {
        node: String,
        at: DateTime<Utc>,
        at_ns: i128,
        closed_log: bool,
    },
    /// Two SIGTERMs half a second apart; `exited_ns` is when the node was
    /// seen gone (its jobs, SIGKILLed, are gone before it exits).
    DoubleTerm {
        node: String,
        at: DateTime<Utc>,
        exited_ns: i128,
    },
    Coordinator(CoordinatorFault),
}

/// How far past a fault (or its settling) an occurrence may still be lost:
/// a cut run's lock must expire, and the claims' deadline pass.
fn reach() -> TimeDelta {
    TimeDelta::seconds(LOCK_TTL_S + DEADLINE_S + 1)
}

/// The occurrences of `window` the faults excuse from running, given the
/// history's `decisions`; see the module doc.
pub fn excused(
    faults: &[Fault],
    window: &Window,
    decisions: &[Decision],
) -> BTreeSet<DateTime<Utc>> {
    let before = TimeDelta::seconds(1);
    let reach_ns = i128::from(reach().num_milliseconds()) * 1_000_000;
    // Whether `node` had claimed `at` at most 6 s before `fault_ns`.
    let claimed_by = |at: &DateTime<Utc>, node: &str, fault_ns: i128| {
        let name = at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        decisions.iter().any(|decision| {
            let claimed_ns = i128::from(decision.fence) * 1000;
            decision.job == window.job
                && decision.occurrence == name
                && decision.node == node
                && decision.fence > 0
                && claimed_ns <= fault_ns
                && claimed_ns + reach_ns >= fault_ns
        })
    };
    window
        .occurrences()
        .into_iter()
        .filter(|at| {
            faults.iter().any(|fault| match fault {
                Fault::Kill {
                    node,
                    at: killed,
                    at_ns,
                    ..
                } => {
                    (*at >= *killed - before && *at <= *killed + reach())
                        || claimed_by(at, node, *at_ns)
                }
                Fault::DoubleTerm {
                    node,
                    at: termed,
                    exited_ns,
                } => {
                    (*at >= *termed - before && *at <= *termed + reach())
                        || claimed_by(at, node, *exited_ns)
                }
                Fault::Coordinator(fault) => {
                    fault.reach.covers(&window.job)
                        && *at >= fault.from - before
                        && *at <= fault.over + reach()
                }
            })
        })
        .collect()
}

/// Where a run's own outcome says it ended: `(job, occurrence, node,
/// fence)` → `finished_at` (ns), from the history entries its runner wrote
/// (the daemon takes it once the job's process group is gone).
pub type Ends = HashMap<(String, String, String, u64), i128>;

/// The [`Ends`] of `entries` (`solocron history --json`), leaving out the
/// entries other nodes wrote about a run (`abandoned`) and the decisions
/// that are no run (`skipped`, `missed`, `paused`).
pub fn ends(entries: &[serde_json::Value]) -> Ends {
    entries
        .iter()
        .filter(|entry| {
            !matches!(
                entry["outcome"].as_str(),
                Some("abandoned" | "skipped" | "missed" | "paused") | None
            )
        })
        .filter_map(|entry| {
            let text = |key: &str| entry[key].as_str().map(str::to_string);
            let finished = DateTime::parse_from_rfc3339(entry["finished_at"].as_str()?).ok()?;
            let ns = i128::from(finished.timestamp_nanos_opt()?);
            let key = (
                text("job")?,
                text("occurrence")?,
                text("node")?,
                entry["fence"].as_u64()?,
            );
            Some((key, ns))
        })
        .collect()
}

/// Gives runs cut short (START, no END) the latest end the guarantees
/// allow, so the overlap check covers them:
/// 1. the earliest of two sure bounds: the `finished_at` of the run's own
///    history entry (its runner takes it once the job's process group is
///    gone: a run stopped because its lease was lost, or timed out), and
///    the first fault of its node after it started: a `kill -9` (the job
///    dies with it, `PR_SET_PDEATHSIG`; a process forked just before the
///    kill may write its START a little after it), or the moment a node
///    stopped by a double SIGTERM exited (it waits for its jobs' groups);
/// 2. only without either, for a run claimed (its fence is Redis `TIME` in
///    µs) before a coordinator fault that reaches its job began, and at
///    most 30 s before it: the fault's start plus the longest `lock_ttl`
///    (3 s), by which time the watchdog has stopped it.
///
/// Any later kill of the node is no bound: a run whose lease was lost
/// long before would look as if it had lasted until then.
pub fn close_cut_runs(runs: &mut [Run], faults: &[Fault], ends: &Ends) {
    let ttl_ns = i128::from(LOCK_TTL_S) * 1_000_000_000;
    let slack_ns = 1_000_000_000;
    let longest_ns = 30 * 1_000_000_000;
    for run in runs.iter_mut().filter(|run| run.end_ns.is_none()) {
        let by_node = faults
            .iter()
            .filter_map(|fault| match fault {
                Fault::Kill { node, at_ns, .. }
                    if *node == run.node && run.start_ns <= *at_ns + slack_ns =>
                {
                    Some((*at_ns).max(run.start_ns))
                }
                Fault::DoubleTerm {
                    node, exited_ns, ..
                } if *node == run.node && run.start_ns <= *exited_ns => Some(*exited_ns),
                _ => None,
            })
            .min();
        let key = (
            run.job.clone(),
            run.occurrence.clone(),
            run.node.clone(),
            run.fence,
        );
        let own = ends.get(&key).copied();
        let sure = match (by_node, own) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let claimed_ns = i128::from(run.fence) * 1000;
        let end = sure.or_else(|| {
            faults.iter().find_map(|fault| match fault {
                Fault::Coordinator(fault)
                    if fault.reach.covers(&run.job)
                        && claimed_ns <= fault.from_ns
                        && claimed_ns + longest_ns >= fault.from_ns =>
                {
                    Some(fault.from_ns + ttl_ns)
                }
                _ => None,
            })
        });
        if let Some(end) = end {
            run.ended_at(end);
        }
    }
}

/// The faults counted by kind, in the order each kind first happened:
/// `("node kill -9", n)`, … A node kill's count says how many of its
/// restarts had a closed log pipe.
pub fn counts(faults: &[Fault]) -> Vec<(String, usize)> {
    let mut counts: Vec<(String, usize)> = Vec::new();
    let mut add = |kind: &str| match counts.iter_mut().find(|(known, _)| known == kind) {
        Some((_, count)) => *count += 1,
        None => counts.push((kind.to_string(), 1)),
    };
    for fault in faults {
        match fault {
            Fault::Kill { .. } => add("node kill -9"),
            Fault::DoubleTerm { .. } => add("double SIGTERM to a node"),
            Fault::Coordinator(fault) => add(&fault.kind),
        }
    }
    let closed = faults
        .iter()
        .filter(|fault| {
            matches!(
                fault,
                Fault::Kill {
                    closed_log: true,
                    ..
                }
            )
        })
        .count();
    if let Some((kind, _)) = counts.iter_mut().find(|(kind, _)| kind == "node kill -9") {
        *kind = format!("node kill -9 ({closed} restarted with a closed log pipe)");
    }
    counts
}
