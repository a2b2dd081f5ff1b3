//! An operator's first week with the HA modes: a `[redis]` that names
//! servers of the wrong kind, and a Redis Cluster that is entirely down.
//!
//! - every node of a running cluster killed: the outage gets its one line,
//!   not the redis crate's warn and error lines for each command (some
//!   300 a second for one job before).
//!
//! Breaks if the log grows with every attempt while the cluster is down.

mod common;

use std::time::{Duration, Instant};

use common::cluster::JobSpec;
use common::fleet::Fleet;
use common::ha::RedisCluster;

fn tick() -> JobSpec {
    JobSpec::new("tick", "* * * * * *", 0.005).with("starting_deadline = \"2s\"")
}

#[test]
fn a_cluster_entirely_down_logs_its_outage_once_not_every_attempt() {
    let mut cluster = RedisCluster::start(3, 0);
    let seeds: Vec<String> = cluster
        .seed_urls()
        .iter()
        .map(|url| format!("\"{url}\""))
        .collect();
    let redis = format!("cluster = [{}]\nwait_replicas = 0", seeds.join(", "));
    let mut fleet = Fleet::new(&redis, "", &[tick()]);
    fleet.start_node("n1");
    fleet.wait_for_run(Duration::from_secs(15), "a run", |_| true);
    for port in cluster.ports() {
        cluster.kill(port);
    }
    let node = fleet.node("n1");
    node.wait_for_log(Duration::from_secs(10), "redis unreachable");
    let at_outage = node.log().lines().count();
    // Five seconds of claims, registry writes and clock checks against a
    // dead cluster: the one outage line is all they may log.
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(200));
    }
    let log = node.log();
    let added: Vec<&str> = log.lines().skip(at_outage).collect();
    assert!(
        added.len() <= 5,
        "{} lines in 5 s of outage:\n{}",
        added.len(),
        added.join("\n")
    );
    assert_eq!(log.matches("redis unreachable").count(), 1, "{log}");
}
