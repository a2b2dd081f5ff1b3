//! The soak: 5 nodes × 55 jobs for a configurable time, with random faults
//! — node kills (kill -9, restarted a few seconds later, sometimes with its
//! log pipe closed: `solocron run | head -1`), Redis pauses (SIGSTOP for
//! twice the lock TTL), and a double SIGTERM to a node (killed, released,
//! recorded, restarted) — then the occurrence-by-occurrence audit of the
//! runs and of the history. Five of the jobs ignore SIGTERM and outlive
//! their 2 s timeout by 9.5 s with a 1 s lock: their lease must be kept
//! through the kill grace.
//!
//! Not part of `scripts/test`; run it with `scripts/soak [MINUTES]`. It uses
//! the test harness (`tests/common`): a `redis-server` on a free loopback
//! port, real `solocron run` processes, jobs that record START / END lines.
//!
//! What must hold however the faults fall: no occurrence runs twice, no two
//! runs of a job overlap, fences grow in start order, every occurrence due
//! outside a fault's reach runs (occurrences due while Redis is paused, or
//! while a killed node's lock is still held, may be missed or skipped: fail
//! closed), and every occurrence of the window is in the history exactly
//! once (run, skipped, missed or abandoned). Exit status 0 only if all of
//! that holds.

#[path = "../tests/common/mod.rs"]
#[allow(unused_imports)]
mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use common::RedisServer;
use common::audit::{Run, now_ns};
use common::cluster::{Cluster, JobSpec};

const NODES: usize = 5;
const LOCK_TTL_S: i64 = 3;
const DEADLINE_S: i64 = 2;

/// 50 jobs: every second and every 5 s, short (5 ms) and long.
fn jobs() -> Vec<JobSpec> {
    let mut jobs = Vec::new();
    let mut add = |prefix: &str, count: usize, schedule: &str, seconds: f64| {
        for i in 0..count {
            jobs.push(
                JobSpec::new(&format!("{prefix}{i:02}"), schedule, seconds)
                    .with(&format!("lock_ttl = \"{LOCK_TTL_S}s\""))
                    .with(&format!("starting_deadline = \"{DEADLINE_S}s\"")),
            );
        }
    };
    add("s1-short-", 20, "* * * * * *", 0.005);
    add("s1-long-", 10, "* * * * * *", 0.4);
    add("s5-short-", 10, "*/5 * * * * *", 0.005);
    add("s5-long-", 10, "*/5 * * * * *", 3.0);
    // Time out at 2 s, ignore the SIGTERM, end by themselves at 11.5 s, just
    // before their SIGKILL: the lock (1 s) must be kept all along.
    for i in 0..5 {
        jobs.push(
            JobSpec::new(&format!("stubborn-{i}"), "*/5 * * * * *", 11.5)
                .ignoring_term()
                .with("timeout = \"2s\"")
                .with("lock_ttl = \"1s\"")
                .with(&format!("starting_deadline = \"{DEADLINE_S}s\"")),
        );
    }
    jobs
}

/// A fault and the span of occurrences it may cost.
#[derive(Debug)]
enum Fault {
    Kill {
        node: String,
        at: DateTime<Utc>,
        at_ns: i128,
    },
    Pause {
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        from_ns: i128,
    },
    /// Two SIGTERMs half a second apart; `exited_ns` is when the node was
    /// seen gone (its jobs, SIGKILLed, are gone before it exits).
    DoubleTerm {
        node: String,
        at: DateTime<Utc>,
        exited_ns: i128,
    },
}

fn minutes_from_args() -> f64 {
    std::env::args()
        .nth(1)
        .and_then(|arg| arg.parse().ok())
        .unwrap_or(10.0)
}

fn main() {
    let minutes = minutes_from_args();
    let jobs = jobs();
    let mut cluster = Cluster::new(RedisServer::start(), "shutdown_grace = \"5s\"", &jobs);
    let ids: Vec<String> = (1..=NODES).map(|i| format!("n{i}")).collect();
    for id in &ids {
        cluster.start_node(id, &[]);
    }
    let started = Utc::now();
    println!(
        "soak: {NODES} nodes, {} jobs, {minutes} min, records in {}",
        jobs.len(),
        cluster.records_path().display()
    );
    let end = Instant::now() + Duration::from_secs_f64(minutes * 60.0);
    let mut faults = Vec::new();
    let mut closed_logs = 0;
    while Instant::now() + Duration::from_secs(25) < end {
        std::thread::sleep(Duration::from_secs(10 + rand::random::<u64>() % 10));
        let node = ids[rand::random::<u64>() as usize % ids.len()].clone();
        let dice = rand::random::<u64>() % 4;
        if dice <= 1 {
            let (at, at_ns) = (Utc::now(), now_ns());
            cluster.node_mut(&node).kill9();
            faults.push(Fault::Kill {
                node: node.clone(),
                at,
                at_ns,
            });
            std::thread::sleep(Duration::from_secs(3));
            // Every other restart comes back with its log pipe closed.
            let closed_log = dice == 1;
            closed_logs += usize::from(closed_log);
            println!(
                "{} kill -9 {node}{}",
                at.format("%H:%M:%S"),
                if closed_log {
                    ", restarted with a closed log pipe"
                } else {
                    ""
                }
            );
            restart(&mut cluster, &node, closed_log);
        } else if dice == 2 {
            let at = Utc::now();
            let victim = cluster.node_mut(&node);
            victim.signal("TERM");
            std::thread::sleep(Duration::from_millis(500));
            victim.signal("TERM");
            let status = victim.wait_exit(Duration::from_secs(30));
            let exited_ns = now_ns();
            println!(
                "{} double SIGTERM to {node}: exit {:?} after {} ms",
                at.format("%H:%M:%S"),
                status.code(),
                (Utc::now() - at).num_milliseconds()
            );
            faults.push(Fault::DoubleTerm {
                node: node.clone(),
                at,
                exited_ns,
            });
            restart(&mut cluster, &node, false);
        } else {
            let (from, from_ns) = (Utc::now(), now_ns());
            cluster.redis.pause();
            std::thread::sleep(Duration::from_secs(2 * LOCK_TTL_S as u64));
            cluster.redis.resume();
            let to = Utc::now();
            println!(
                "{} redis paused for {} s",
                from.format("%H:%M:%S"),
                2 * LOCK_TTL_S
            );
            faults.push(Fault::Pause { from, to, from_ns });
        }
    }
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(200));
    }
    let window_to = Utc::now() - TimeDelta::seconds(8);
    // Let the last long runs finish and every node decide the window's end.
    std::thread::sleep(Duration::from_secs(6));
    let window_from = started + TimeDelta::seconds(10);
    let report = audit(&cluster, &jobs, &faults, window_from, window_to);
    let count = |what: fn(&Fault) -> bool| faults.iter().filter(|fault| what(fault)).count();
    println!(
        "soak over {} .. {}: {} node kills ({} restarted with a closed log pipe), {} redis pauses, {} double SIGTERMs",
        window_from.format("%H:%M:%S"),
        window_to.format("%H:%M:%S"),
        count(|fault| matches!(fault, Fault::Kill { .. })),
        closed_logs,
        count(|fault| matches!(fault, Fault::Pause { .. })),
        count(|fault| matches!(fault, Fault::DoubleTerm { .. })),
    );
    println!("{report}");
    let history = history_audit(&cluster, &jobs, window_from, window_to);
    println!(
        "history: {} occurrences, {} absent, {} recorded more than once",
        report.expected,
        history.absent.len(),
        history.repeated.len()
    );
    for (job, at) in &history.absent {
        println!("  absent from the history: {job} {}", at.to_rfc3339());
    }
    for (job, at, outcomes) in &history.repeated {
        println!(
            "  recorded {} times: {job} {} {outcomes:?}",
            outcomes.len(),
            at.to_rfc3339()
        );
    }
    let ok = report.duplicates.is_empty()
        && report.overlaps.is_empty()
        && report.fence_inversions.is_empty()
        && report.misses.is_empty()
        && history.is_exact();
    println!("soak {}", if ok { "PASSED" } else { "FAILED" });
    // `exit` skips destructors: stop the nodes and Redis first.
    drop(cluster);
    std::process::exit(if ok { 0 } else { 1 });
}

fn restart(cluster: &mut Cluster, node: &str, closed_log: bool) {
    let index = cluster
        .nodes
        .iter()
        .position(|n| n.id == node)
        .expect("known node");
    let log = cluster.work.path(&format!("{node}.log"));
    let _ = std::fs::rename(&log, cluster.work.path(&format!("{node}.log.{}", now_ns())));
    let url = cluster.redis.url();
    let fresh = if closed_log {
        common::Node::start_with_closed_log(&cluster.work, &url, node)
    } else {
        common::Node::start_with_url(&cluster.work, &url, node, &[])
    };
    cluster.nodes[index] = fresh;
}

/// Every occurrence of the window in the history exactly once.
fn history_audit(
    cluster: &Cluster,
    jobs: &[JobSpec],
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> common::audit::HistoryReport {
    let windows: Vec<_> = jobs.iter().map(|job| job.window(from, to)).collect();
    let names: Vec<&str> = jobs.iter().map(|job| job.name.as_str()).collect();
    common::audit::history_exactly_once(&cluster.decisions(&names), &windows)
}

/// Occurrences a fault may cost: from a second before it until the lock of
/// a run it interrupted has expired and the claims' deadline has passed.
fn excused(faults: &[Fault], window: &common::audit::Window) -> BTreeSet<DateTime<Utc>> {
    let reach = TimeDelta::seconds(LOCK_TTL_S + DEADLINE_S + 1);
    window
        .occurrences()
        .into_iter()
        .filter(|at| {
            faults.iter().any(|fault| match fault {
                Fault::Kill { at: killed, .. } => {
                    *at >= *killed - TimeDelta::seconds(1) && *at <= *killed + reach
                }
                Fault::Pause { from, to, .. } => {
                    *at >= *from - TimeDelta::seconds(1) && *at <= *to + reach
                }
                Fault::DoubleTerm { at: termed, .. } => {
                    *at >= *termed - TimeDelta::seconds(1) && *at <= *termed + reach
                }
            })
        })
        .collect()
}

/// Gives runs cut short by a fault (START, no END) the latest end the
/// guarantees allow: the kill itself (a process forked just before the kill
/// may write its START a little after it), the lock's expiry after a pause
/// began (the watchdog stops a run before then; 3 s is the longest
/// `lock_ttl` here), or the moment a node stopped by a double SIGTERM
/// exited (it waits for its jobs' groups to be gone). A run belongs to a
/// pause if its claim (the fence is Redis `TIME` in µs) came before it: the
/// process itself may start a little later.
fn close_cut_runs(runs: &mut [Run], faults: &[Fault]) {
    let ttl_ns = i128::from(LOCK_TTL_S) * 1_000_000_000;
    let slack_ns = 1_000_000_000;
    for run in runs.iter_mut().filter(|run| run.end_ns.is_none()) {
        let claimed_ns = i128::from(run.fence) * 1000;
        let end = faults.iter().find_map(|fault| match fault {
            Fault::Kill { node, at_ns, .. }
                if *node == run.node && run.start_ns <= *at_ns + slack_ns =>
            {
                Some((*at_ns).max(run.start_ns))
            }
            // Any run still going when Redis stopped answering is stopped
            // before its lock (at most 3 s) could expire.
            Fault::Pause { from_ns, .. } if claimed_ns <= *from_ns => Some(*from_ns + ttl_ns),
            Fault::DoubleTerm {
                node, exited_ns, ..
            } if *node == run.node && run.start_ns <= *exited_ns => Some(*exited_ns),
            _ => None,
        });
        if let Some(end) = end {
            run.ended_at(end);
        }
    }
}

fn audit(
    cluster: &Cluster,
    jobs: &[JobSpec],
    faults: &[Fault],
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> common::audit::Report {
    let windows: Vec<_> = jobs
        .iter()
        .map(|job| {
            let mut window = job.window(from, to);
            window.may_miss = excused(faults, &window);
            window
        })
        .collect();
    let mut runs = cluster.runs();
    close_cut_runs(&mut runs, faults);
    let names: Vec<&str> = jobs.iter().map(|job| job.name.as_str()).collect();
    common::audit::audit(&runs, &cluster.decisions(&names), &windows)
}
