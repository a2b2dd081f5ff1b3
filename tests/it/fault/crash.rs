//! `kill -9` of the node running a long job (guarantees 1 and 2,
//! docs/guarantees.md): the job's
//! process dies with its daemon (parent-death signal) within a second, the
//! occurrence is not run again, later occurrences run on the survivors, and
//! nothing overlaps — audited over the whole window.
//!
//! What breaks it: no parent-death signal (the orphan keeps running: the
//! pid check fails, and with a job that outlived the lock the audit sees an
//! overlap), a claim that only checks the lock (the killed occurrence is
//! re-run once the lock expires: a duplicate), a survivor that cannot take
//! the lock after the dead holder's TTL (misses).

use crate::common;

use std::time::Duration;

use chrono::TimeDelta;
use common::cluster::{Cluster, JobSpec, wait_gone, whole_second_after, window_secs};
use common::{RedisServer, is_alive};

#[test]
fn kill_9_of_the_runner_neither_reruns_nor_overlaps_and_later_occurrences_run_elsewhere() {
    // Due every 4 s, works 3 s; the dead holder's lock (2 s TTL) expires
    // before the next occurrence, so nothing is skipped either.
    let long = JobSpec::new("long", "*/4 * * * * *", 3.0).with("lock_ttl = \"2s\"");
    let mut cluster = Cluster::new(RedisServer::start(), "", std::slice::from_ref(&long));
    for id in ["n1", "n2", "n3"] {
        cluster.start_node(id, &[]);
    }
    // Clear of a start-up catch-up run (3 s from the first node's start).
    let from = whole_second_after(4, 4);
    let victim_at = from + TimeDelta::seconds(4);
    let victim = cluster.wait_for_run(
        Duration::from_secs(20),
        "the second run in the window",
        |run| run.is("long", victim_at),
    );
    assert!(is_alive(victim.pid), "the run is going on: {victim}");
    // The fault: once every node decided the occurrence (nothing about it
    // is in flight), SIGKILL the runner's daemon while its run goes on.
    cluster.wait_decided(Duration::from_secs(2), "long", victim_at);
    assert!(is_alive(victim.pid), "the run is going on: {victim}");
    cluster.node_mut(&victim.node).kill9();
    let killed = common::audit::now_ns();
    let gone = wait_gone(victim.pid, Duration::from_secs(1));
    println!(
        "job process gone {} ms after kill -9",
        (gone - killed) / 1_000_000
    );
    let to = victim_at + TimeDelta::seconds(window_secs(12, 120));
    cluster.wait_for_run(
        Duration::from_secs(window_secs(12, 120) as u64 + 15),
        "the window's last run ended",
        |run| run.is("long", to) && run.end_ns.is_some(),
    );
    let mut runs = cluster.runs();
    for run in runs.iter_mut().filter(|run| run.is("long", victim_at)) {
        run.ended_at(gone);
    }
    let decisions = cluster.decisions(&["long"]);
    let report = common::audit::audit(&runs, &decisions, &[long.window(from, to)]);
    println!("kill -9: {report}");
    assert!(report.is_clean(), "{report}\n{}", cluster.logs());
    assert!(report.skipped.is_empty(), "{report}");
    let later: Vec<_> = runs
        .iter()
        .filter(|run| run.at().is_some_and(|at| at > victim_at && at <= to))
        .collect();
    assert_eq!(later.len() as i64, window_secs(12, 120) / 4, "{report}");
    for run in later {
        assert_ne!(run.node, victim.node, "a dead node cannot run: {run}");
        assert!(
            run.start_ns > gone,
            "started after the orphan was gone: {run}"
        );
        assert!(run.fence > victim.fence, "{run}");
    }
}
