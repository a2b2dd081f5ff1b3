//! A group's `max_running` under faults (guarantee 11): three real daemons,
//! a group with one slot, audited from the jobs' own START / END lines
//! and the death of the holder's process.
//!
//! - `kill -9` of the node holding the slot: its job dies with it
//!   (parent-death signal), its slot ends with its lease (`lock_ttl`), and
//!   the group's next occurrence runs; nothing of the group started while
//!   the killed run was alive.
//! - Redis paused (SIGSTOP) for twice `lock_ttl` while the slot is held:
//!   the holder's lease is lost and its run stopped before the lock (and
//!   the slot) can expire; once Redis is back the group runs again, never
//!   two at once.
//! - A reload that changes `max_running` from 1 to 2 and back: each
//!   period runs as many as the limit in force.
//!
//! What breaks it: a slot that outlives its lease (the group never runs
//! again after the kill), a slot that expires while its run goes on (two
//! at once after the pause), a limit read once at start.

use crate::common;

use std::time::Duration;

use chrono::{DateTime, Utc};
use common::audit::Run;
use common::cluster::{Cluster, JobSpec, rfc3339, wait_gone, whole_second_after};
use common::{RedisServer, wait_until};

const ONE_SLOT: &str = "\n[groups.g]\nmax_running = 1\nwhen_full = \"wait\"\n";

/// `hold`, due once a minute `lead` seconds from now, working 30 s, and
/// `tick`, due every second, both in group `g` (1 slot, wait), with a 2 s
/// lease.
fn hold_and_tick(lead: i64) -> (Vec<JobSpec>, DateTime<Utc>) {
    let at = whole_second_after(lead, 1);
    let second = at.timestamp().rem_euclid(60);
    let jobs = vec![
        JobSpec::new("hold", &format!("{second} * * * * *"), 30.0)
            .with("group = \"g\"")
            .with("lock_ttl = \"2s\""),
        JobSpec::new("tick", "* * * * * *", 0.1)
            .with("group = \"g\"")
            .with("lock_ttl = \"2s\"")
            .with("starting_deadline = \"900ms\""),
        // Run by hand only (its schedule is yearly).
        JobSpec::new("manual", "0 0 1 1 *", 0.1)
            .with("group = \"g\"")
            .with("starting_deadline = \"1s\""),
    ];
    (jobs, at)
}

fn start_three(jobs: &[JobSpec], daemon: &str) -> Cluster {
    let mut cluster = Cluster::new(RedisServer::start(), daemon, jobs);
    for id in ["n1", "n2", "n3"] {
        cluster.start_node(id, &[]);
    }
    cluster
}

/// The scheduled ticks that started after `from` (ns).
fn ticks_after(runs: &[Run], from: i128) -> Vec<Run> {
    runs.iter()
        .filter(|run| run.job == "tick" && run.at().is_some() && run.start_ns >= from)
        .cloned()
        .collect()
}

#[test]
fn a_killed_holders_slot_ends_with_its_lease_and_the_group_goes_on() {
    let (jobs, at) = hold_and_tick(6);
    let mut cluster = start_three(&jobs, ONE_SLOT);
    let hold = cluster.wait_for_run(Duration::from_secs(20), "hold starts", |run| {
        run.is("hold", at)
    });
    // A tick or two may end after hold's start was taken; let them.
    std::thread::sleep(Duration::from_millis(300));
    let holder = hold.node.clone();
    // While it holds the slot: status names it, and a manual run waits
    // for room (its starting_deadline), then is throttled (exit 3),
    // unless the operator ignores the limits.
    let status = cluster.cli(&["status", "--json"]);
    let status: serde_json::Value =
        serde_json::from_slice(&status.stdout).expect("status --json is JSON");
    let group = &status["groups"][0];
    assert_eq!(group["group"], "g", "{status:#}");
    assert_eq!(group["running"], 1, "{status:#}");
    assert_eq!(group["holders"][0]["job"], "hold", "{status:#}");
    assert_eq!(group["holders"][0]["node"], holder.as_str(), "{status:#}");
    let running = status["nodes"]
        .as_array()
        .and_then(|nodes| nodes.iter().find(|node| node["node"] == holder.as_str()))
        .map(|node| node["running"].clone());
    assert!(running.is_some(), "{status:#}");
    let refused = cluster.cli(&["trigger", "manual", "--node-id", "ops"]);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(3), "{said}");
    assert!(
        said.contains("throttled") && said.contains("group `g` at max_running = 1"),
        "{said}"
    );
    let forced = cluster.cli(&["trigger", "manual", "--node-id", "ops", "--ignore-limits"]);
    assert_eq!(
        forced.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&forced.stderr)
    );
    cluster.node_mut(&holder).kill9();
    let died = wait_gone(hold.pid, Duration::from_secs(5));
    let after = cluster.wait_for_run(
        Duration::from_secs(10),
        "a tick once the killed holder's slot expired",
        |run| run.job == "tick" && run.at().is_some() && run.start_ns > died,
    );
    let waited_ms = (after.start_ns - died) / 1_000_000;
    println!("the group ran again {waited_ms} ms after the holder died");
    let runs = cluster.runs();
    let during: Vec<Run> = ticks_after(&runs, hold.start_ns)
        .into_iter()
        .filter(|run| run.start_ns < died)
        .collect();
    assert!(
        during.is_empty(),
        "ticks started while hold ran: {during:?}\n{}",
        cluster.logs()
    );
    // The slot ends with the lease: about lock_ttl after the last renewal.
    assert!(waited_ms < 6_000, "the group waited {waited_ms} ms");
}

#[test]
fn redis_paused_past_the_lease_stops_the_holder_and_the_group_never_runs_two() {
    let (jobs, at) = hold_and_tick(6);
    let cluster = start_three(&jobs, ONE_SLOT);
    let hold = cluster.wait_for_run(Duration::from_secs(20), "hold starts", |run| {
        run.is("hold", at)
    });
    cluster
        .redis
        .pause_right_after_a_renewal("{solocron:hold}:lock", 2000);
    // The fault: Redis away for twice the lease.
    std::thread::sleep(Duration::from_secs(4));
    cluster.redis.resume();
    let stopped = wait_gone(hold.pid, Duration::from_secs(15));
    let after = cluster.wait_for_run(
        Duration::from_secs(10),
        "a tick once redis is back",
        |run| run.job == "tick" && run.start_ns > hold.start_ns,
    );
    assert!(
        after.start_ns >= stopped,
        "a tick started at {} while hold still ran (gone at {stopped})\n{}",
        after.start_ns,
        cluster.logs()
    );
    assert!(
        cluster
            .node(&hold.node)
            .log()
            .contains("lock lost: stopping the run"),
        "{}",
        cluster.logs()
    );
}

#[test]
fn a_reload_that_changes_max_running_applies_from_the_next_start() {
    let jobs: Vec<JobSpec> = (0..3)
        .map(|i| {
            JobSpec::new(&format!("w{i}"), "*/4 * * * * *", 2.0)
                .with("group = \"g\"")
                .with("lock_ttl = \"3s\"")
        })
        .collect();
    let skip = |k: u32| format!("\n[groups.g]\nmax_running = {k}\nwhen_full = \"skip\"\n");
    let mut cluster = start_three(&jobs, &skip(1));
    let names: Vec<&str> = jobs.iter().map(|job| job.name.as_str()).collect();
    let ran_in = |cluster: &Cluster, at: DateTime<Utc>| -> usize {
        cluster
            .decisions(&names)
            .iter()
            .filter(|d| d.occurrence == rfc3339(at) && d.outcome == "succeeded")
            .count()
    };
    let decided = |cluster: &Cluster, at: DateTime<Utc>| {
        cluster
            .decisions(&names)
            .iter()
            .filter(|d| d.occurrence == rfc3339(at))
            .count()
            == 3
    };
    let first = whole_second_after(3, 4);
    wait_until(Duration::from_secs(15), "a period with one slot", || {
        decided(&cluster, first)
    });
    assert_eq!(ran_in(&cluster, first), 1, "{}", cluster.logs());
    for (reloads, (k, ran)) in [(2, 2), (1, 1)].into_iter().enumerate() {
        cluster.set_daemon(&skip(k));
        cluster.write_jobs(&jobs);
        for node in &cluster.nodes {
            node.signal("HUP");
        }
        wait_until(Duration::from_secs(10), "every node reloaded", || {
            cluster
                .nodes
                .iter()
                .all(|node| node.log().matches("config reloaded").count() > reloads)
        });
        // The first period that starts after every node reloaded.
        let at = whole_second_after(1, 4);
        wait_until(Duration::from_secs(15), "the period decided", || {
            decided(&cluster, at)
        });
        assert_eq!(
            ran_in(&cluster, at),
            ran,
            "max_running = {k}: {}\n{}",
            rfc3339(at),
            cluster.logs()
        );
    }
}

/// The most runs of `runs` in progress at once (START to END; a run
/// without END counts until the end).
fn peak(runs: &[Run]) -> usize {
    let mut edges: Vec<(i128, i32)> = Vec::new();
    for run in runs {
        edges.push((run.start_ns, 1));
        edges.push((run.end_ns.unwrap_or(i128::MAX), -1));
    }
    edges.sort();
    let (mut now, mut most) = (0, 0);
    for (_, step) in edges {
        now += step;
        most = most.max(now);
    }
    usize::try_from(most).unwrap_or(0)
}

#[test]
fn a_sentinel_failover_never_lets_a_group_run_two_at_once() {
    use common::cluster::sleep_until;
    use common::fleet::Fleet;
    use common::ha::SentinelGroup;
    let group = SentinelGroup::start("solocron");
    let redis = group.redis_section();
    let jobs: Vec<JobSpec> = (0..3)
        .map(|i| {
            JobSpec::new(&format!("s{i}"), "*/2 * * * * *", 0.3)
                .with("group = \"g\"")
                .with("lock_ttl = \"3s\"")
                .with("starting_deadline = \"1900ms\"")
        })
        .collect();
    let mut fleet = Fleet::new(&redis, ONE_SLOT, &jobs);
    for id in ["n1", "n2", "n3"] {
        fleet.start_node(id);
    }
    let from = whole_second_after(3, 2);
    sleep_until(from + chrono::TimeDelta::seconds(4));
    let switch = group.failover();
    println!(
        "graceful failover {} -> {} in {:?}",
        switch.from, switch.to, switch.took
    );
    let to = Utc::now() + chrono::TimeDelta::seconds(8);
    sleep_until(to + chrono::TimeDelta::seconds(3));
    let runs: Vec<Run> = fleet
        .runs()
        .into_iter()
        .filter(|run| run.at().is_some_and(|at| at >= from && at <= to))
        .collect();
    assert!(
        runs.len() >= 10,
        "the group ran: {runs:?}\n{}",
        fleet.logs()
    );
    assert_eq!(
        peak(&runs),
        1,
        "the group ran two at once across the failover\n{runs:#?}\n{}",
        fleet.logs()
    );
}

/// A node frozen (SIGSTOP) while its occurrence waits first in a group's
/// queue: its place ends after the waiter's 3 s, and the occurrence behind
/// it runs while the node is still frozen (each job pinned to one node by
/// `run_on`). Breaks if a waiter that stopped asking kept its place (the
/// one behind it would wait to its deadline, then be `throttled`).
#[test]
fn a_frozen_waiter_gives_up_its_place_in_the_queue() {
    let at = whole_second_after(6, 1);
    let second = |offset: i64| (at.timestamp() + offset).rem_euclid(60);
    let job = |name: &str, offset: i64, seconds: f64, role: &str| {
        JobSpec::new(name, &format!("{} * * * * *", second(offset)), seconds)
            .with("group = \"g\"")
            .with("lock_ttl = \"2s\"")
            .with("starting_deadline = \"15s\"")
            .with(&format!("run_on = [\"role={role}\"]"))
    };
    let jobs = vec![
        job("hold", 0, 3.0, "hold"),
        job("first", 1, 0.2, "first"),
        job("behind", 2, 0.2, "behind"),
    ];
    let mut cluster = Cluster::new(RedisServer::start(), ONE_SLOT, &jobs);
    for (id, role) in [("n1", "hold"), ("n2", "first"), ("n3", "behind")] {
        cluster.start_node(id, &[("SOLOCRON_TAGS".to_string(), format!("role={role}"))]);
    }
    let hold = cluster.wait_for_run(Duration::from_secs(20), "hold starts", |run| {
        run.job == "hold"
    });
    cluster
        .node("n2")
        .wait_for_log(Duration::from_secs(5), "group full: waiting for room");
    cluster
        .node("n3")
        .wait_for_log(Duration::from_secs(5), "group full: waiting for room");
    cluster.node("n2").signal("STOP");
    let behind = cluster.wait_for_run(Duration::from_secs(12), "behind runs", |run| {
        run.job == "behind"
    });
    cluster.node("n2").signal("CONT");
    let held_until = hold.end_ns.unwrap_or_else(|| {
        cluster
            .runs()
            .iter()
            .find(|run| run.job == "hold")
            .and_then(|run| run.end_ns)
            .unwrap_or(i128::MAX)
    });
    assert!(
        behind.start_ns >= held_until,
        "behind started while hold ran\n{}",
        cluster.logs()
    );
    println!(
        "behind started {} ms after hold ended",
        (behind.start_ns - held_until) / 1_000_000
    );
}
