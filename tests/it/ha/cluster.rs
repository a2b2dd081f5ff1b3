//! Redis Cluster (guarantee 8, docs/guarantees.md): 3 masters with a replica each, 21
//! every-second jobs spread over the shards (7 on each), 3 daemons. One
//! master is killed (kill -9) and its replica promoted; the killed node then
//! rejoins as a replica.
//!
//! The audit: zero duplicates and overlaps anywhere; the jobs of the other
//! two shards miss nothing at all; the failed shard's jobs miss only around
//! the fault and run again after the promotion. Breaks if a master's
//! failure stopped every job (one connection for all shards), if the
//! promoted replica's missing scripts (`NOSCRIPT`) or a re-sent claim ran
//! an occurrence twice, or if the failed shard's jobs never came back.

use crate::common;

use std::time::Duration;

use chrono::{TimeDelta, Utc};
use common::audit::{Window, audit};
use common::cluster::{JobSpec, sleep_until, whole_second_after};
use common::fleet::Fleet;
use common::ha::RedisCluster;

#[test]
fn a_killed_master_costs_only_its_own_shards_jobs_and_they_come_back() {
    let mut cluster = RedisCluster::start(3, 1);
    let shards = cluster.job_names_per_shard("solocron", 7);
    let masters = cluster.master_ports();
    let seeds: Vec<String> = cluster
        .seed_urls()
        .iter()
        .map(|url| format!("\"{url}\""))
        .collect();
    let redis = format!("cluster = [{}]\nwait_timeout = \"200ms\"", seeds.join(", "));
    let jobs: Vec<JobSpec> = shards
        .iter()
        .flatten()
        .map(|name| {
            JobSpec::new(name, "* * * * * *", 0.005)
                .with("lock_ttl = \"3s\"")
                .with("starting_deadline = \"2s\"")
        })
        .collect();
    let mut fleet = Fleet::new(&redis, "", &jobs);
    for id in ["n1", "n2", "n3"] {
        fleet.start_node(id);
    }
    let from = whole_second_after(4, 1);
    sleep_until(from + TimeDelta::seconds(5));
    let victim = masters[1];
    let killed_at = Utc::now();
    let switch = cluster.kill_master(victim);
    println!(
        "kill -9 of master {victim}: {} promoted in {:?}",
        switch.to, switch.took
    );
    cluster.restart(victim);
    let resumed_at = Utc::now();
    let to = resumed_at + TimeDelta::seconds(6);
    sleep_until(to + TimeDelta::seconds(3));
    let failed: &Vec<String> = &shards[1];
    let windows: Vec<Window> = jobs
        .iter()
        .map(|job| {
            let mut window = job.window(from, to);
            if failed.contains(&job.name) {
                for at in window.occurrences() {
                    if at >= killed_at - TimeDelta::seconds(1)
                        && at <= resumed_at + TimeDelta::seconds(2)
                    {
                        window.may_miss.insert(at);
                    }
                }
            }
            window
        })
        .collect();
    let names: Vec<&str> = jobs.iter().map(|job| job.name.as_str()).collect();
    let runs: Vec<_> = fleet
        .runs()
        .into_iter()
        .filter(|run| run.at().is_some_and(|at| at <= to))
        .collect();
    let report = audit(&runs, &fleet.decisions(&names), &windows);
    println!("cluster: {report}");
    assert!(report.is_clean(), "{report}\n{}", fleet.logs());
    // A skip (the lock of a run whose release the outage delayed) only on
    // the failed shard; the others go on as if nothing happened.
    assert!(
        report.skipped.iter().all(|skip| failed.contains(&skip.job)),
        "{report}\n{}",
        fleet.logs()
    );
    let killed_ns = i128::from(killed_at.timestamp_nanos_opt().unwrap_or(0));
    let first = runs
        .iter()
        .filter(|run| failed.contains(&run.job) && run.start_ns > killed_ns)
        .map(|run| run.start_ns)
        .min();
    println!(
        "kill -9 of a master: its shard's first run {} ms after it, {} occurrence(s) of its {} jobs missed, 0 elsewhere",
        first.map_or(-1, |first| (first - killed_ns) / 1_000_000),
        report.excused.len(),
        failed.len()
    );
    for name in failed {
        assert!(
            runs.iter().any(|run| &run.job == name
                && run
                    .at()
                    .is_some_and(|at| at > resumed_at + TimeDelta::seconds(2))),
            "{name} (on the failed shard) runs again after the promotion"
        );
    }
    assert!(
        report
            .excused
            .iter()
            .all(|(job, _, _)| failed.contains(job)),
        "only the failed shard's jobs may miss: {report}"
    );
    assert!(fleet.all_alive());
    // Every command works on the cluster.
    let status = fleet.cli(&["status", "--json"]);
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).expect("status --json");
    assert_eq!(
        status["jobs"].as_array().map(Vec::len),
        Some(jobs.len()),
        "{status:#}"
    );
    assert_eq!(
        status["nodes"].as_array().map(Vec::len),
        Some(3),
        "{status:#}"
    );
    let (trigger, printed) =
        fleet.trigger_when_free(&failed[0], std::time::Duration::from_secs(30));
    assert_eq!(trigger.status.code(), Some(0), "{printed}");
}

/// One shard's master killed (no replica to promote) while the other two
/// shards answer: the node logs one `redis unreachable` line when it
/// starts, runs the other shards' jobs meanwhile, and one `redis reachable
/// again` line once the master is back. Before, every success on a healthy
/// shard ended the "outage" and the next failure on the dead one began it
/// again: two lines a second on every node for as long as the shard was
/// down (7 of each in 10 s).
#[test]
fn a_shard_down_is_one_outage_in_the_log_not_one_a_second() {
    let mut cluster = RedisCluster::start(3, 0);
    let shards = cluster.job_names_per_shard("solocron", 2);
    let masters = cluster.master_ports();
    let seeds: Vec<String> = cluster
        .seed_urls()
        .iter()
        .map(|url| format!("\"{url}\""))
        .collect();
    let redis = format!("cluster = [{}]\nwait_replicas = 0", seeds.join(", "));
    let jobs: Vec<JobSpec> = shards
        .iter()
        .flatten()
        .map(|name| JobSpec::new(name, "* * * * * *", 0.005).with("starting_deadline = \"2s\""))
        .collect();
    let mut fleet = Fleet::new(&redis, "", &jobs);
    fleet.start_node("n1");
    fleet.wait_for_run(Duration::from_secs(15), "a run", |_| true);
    let killed_at = Utc::now();
    cluster.kill(masters[0]);
    let node = fleet.node("n1");
    node.wait_for_log(Duration::from_secs(10), "redis unreachable");
    let healthy: Vec<&String> = shards[1..].iter().flatten().collect();
    let ran_since_the_kill = || {
        fleet
            .runs()
            .iter()
            .filter(|run| healthy.contains(&&run.job))
            .filter(|run| {
                run.at()
                    .is_some_and(|at| at > killed_at + TimeDelta::seconds(1))
            })
            .count()
    };
    // About ten seconds with the shard down, told by the other shards'
    // every-second jobs: nine runs per job since the kill.
    common::wait_until(
        Duration::from_secs(30),
        "nine runs per job of the other shards",
        || ran_since_the_kill() >= healthy.len() * 9,
    );
    let log = node.log();
    assert_eq!(log.matches("redis unreachable").count(), 1, "{log}");
    assert_eq!(log.matches("reachable again").count(), 0, "{log}");
    let ran_meanwhile = ran_since_the_kill();
    assert!(
        ran_meanwhile >= healthy.len() * 5,
        "the other shards' jobs ran meanwhile: {ran_meanwhile}\n{log}"
    );
    cluster.restart(masters[0]);
    node.wait_for_log(Duration::from_secs(20), "reachable again");
    let log = node.log();
    assert_eq!(log.matches("redis unreachable").count(), 1, "{log}");
    assert_eq!(log.matches("reachable again").count(), 1, "{log}");
}
