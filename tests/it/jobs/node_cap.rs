//! `[daemon] max_running` (guarantee 11, a node's cap): three real daemons
//! with `max_running = 1` and four jobs due together every 4 s, each
//! working 2.5 s (past their 2 s deadline). A node at its cap declines an
//! occurrence and offers it to the nodes with room (the overflow list read
//! with the controls each second), so whichever node has room runs it,
//! also one that is not in line for it: three of the four run, and the
//! fourth is recorded `throttled` at its deadline. Audited from the jobs' own START / END
//! lines: no node ever runs two at once, no occurrence runs twice, and
//! every occurrence of the window is in the history exactly once, run or
//! `throttled`.
//!
//! What breaks it: a node that claims at its cap (two runs at once on one
//! node), a declined occurrence nobody with room takes (fewer than three
//! runs a period: with three nodes a node that is not in line for it and
//! not the backstop never looks at it otherwise), or one never recorded
//! (absent from the history).

use crate::common;

use std::time::Duration;

use chrono::TimeDelta;
use common::audit::history_exactly_once;
use common::cluster::{Cluster, JobSpec, rfc3339, whole_second_after};
use common::{RedisServer, wait_until};

#[test]
fn a_node_at_its_max_running_claims_nothing_and_the_rest_is_throttled_once() {
    let jobs: Vec<JobSpec> = (0..4)
        .map(|i| {
            JobSpec::new(&format!("c{i}"), "*/4 * * * * *", 2.5)
                .with("starting_deadline = \"2s\"")
                .with("lock_ttl = \"3s\"")
        })
        .collect();
    let mut cluster = Cluster::new(RedisServer::start(), "max_running = 1", &jobs);
    for id in ["n1", "n2", "n3"] {
        cluster.start_node(id, &[]);
    }
    for node in &cluster.nodes {
        node.wait_for_log(Duration::from_secs(30), "count=3");
    }
    wait_until(Duration::from_secs(20), "a first run", || {
        !cluster.runs().is_empty()
    });
    let from = whole_second_after(2, 4);
    let to = from + TimeDelta::seconds(16);
    let names: Vec<&str> = jobs.iter().map(|job| job.name.as_str()).collect();
    let windows: Vec<_> = jobs.iter().map(|job| job.window(from, to)).collect();
    // Each occurrence of the window decided: a run's entry comes with its
    // release, a throttled one a second past its deadline.
    wait_until(
        Duration::from_secs(30),
        "every occurrence of the window in the history",
        || history_exactly_once(&cluster.decisions(&names), &windows).is_exact(),
    );
    let decisions = cluster.decisions(&names);
    let runs = cluster.runs();
    let report = common::audit::audit(&runs, &decisions, &windows);
    println!("node cap: {report}");
    assert!(
        report.duplicates.is_empty() && report.overlaps.is_empty(),
        "{report}\n{}",
        cluster.logs()
    );
    // No node runs two at once (a run is over at its END line).
    for node in ["n1", "n2", "n3"] {
        let mut mine: Vec<(i128, i128)> = runs
            .iter()
            .filter(|run| run.node == node)
            .map(|run| (run.start_ns, run.end_ns.unwrap_or(i128::MAX)))
            .collect();
        mine.sort();
        for pair in mine.windows(2) {
            assert!(
                pair[1].0 >= pair[0].1,
                "{node} ran two at once: {pair:?}\n{}",
                cluster.logs()
            );
        }
    }
    // Each period: three ran (one a node), the fourth was throttled.
    let mut at = from;
    while at < to {
        let ran = runs
            .iter()
            .filter(|run| names.iter().any(|job| run.is(job, at)))
            .count();
        let throttled = decisions
            .iter()
            .filter(|d| d.occurrence == rfc3339(at) && d.outcome == "throttled")
            .count();
        assert_eq!(
            (ran, throttled),
            (3, 1),
            "{}: {ran} ran, {throttled} throttled\n{}",
            rfc3339(at),
            decisions
                .iter()
                .filter(|d| d.occurrence == rfc3339(at))
                .map(|d| format!("  {d}\n"))
                .collect::<String>()
        );
        at += TimeDelta::seconds(4);
    }
    assert!(
        cluster.nodes.iter().any(|node| node
            .log()
            .contains("claim declined: this node is at its max_running")),
        "{}",
        cluster.logs()
    );
}
