//! Every occurrence ends up in the history exactly once (guarantee 3,
//! docs/guarantees.md), also when a node dies mid-run and when Redis goes away.
//!
//! - `kill -9` of the node running a long job whose next occurrence is far
//!   away: a surviving node records the run `abandoned`, naming the dead
//!   node and its fence, within `lock_ttl` + 10 s, and the job's state no
//!   longer says `running`. Before: no entry at all, `running` until the
//!   next occurrence.
//! - Redis paused (SIGSTOP) for 12 s under an every-2-s job and a 3 s run
//!   that finishes during the pause: the finished run is recorded with its
//!   real outcome once Redis is back (before: "release failed … history not
//!   recorded"); each occurrence nobody ran is recorded `missed`; after the
//!   pause at most the newest pending occurrence runs late and nothing is
//!   `skipped` behind a late run of an old one; every occurrence of the
//!   window has exactly one entry.

use crate::common;

use std::collections::HashMap;
use std::time::Duration;

use chrono::{TimeDelta, Utc};
use common::audit::{history_exactly_once, now_ns};
use common::cluster::{Cluster, JobSpec, sleep_until, wait_gone, whole_second_after};
use common::{RedisServer, history, wait_until};
use redis::Commands as _;

fn entries_of(cluster: &Cluster, job: &str, occurrence: &str) -> Vec<HashMap<String, String>> {
    history(&cluster.redis, job)
        .into_iter()
        .filter(|entry| entry.get("occurrence").map(String::as_str) == Some(occurrence))
        .collect()
}

#[test]
fn a_run_whose_node_died_is_recorded_abandoned_by_a_survivor_within_ttl_plus_10s() {
    let long = JobSpec::new("long", "*/30 * * * * *", 20.0).with("lock_ttl = \"2s\"");
    let mut cluster = Cluster::new(RedisServer::start(), "", std::slice::from_ref(&long));
    cluster.start_node("n1", &[]);
    cluster.start_node("n2", &[]);
    // The first run (a catch-up at start, or the next :00/:30): 20 s long.
    let victim = cluster.wait_for_run(Duration::from_secs(40), "a run of the long job", |_| true);
    // The survivor watches the lock once it has lost the claim: both nodes
    // decided the occurrence before its runner dies.
    cluster.wait_decided(
        Duration::from_secs(10),
        "long",
        victim.at().expect("scheduled"),
    );
    cluster.node_mut(&victim.node).kill9();
    let killed = now_ns();
    wait_gone(victim.pid, Duration::from_secs(2));
    let limit = Duration::from_secs(2 + 10);
    wait_until(limit, "the run is recorded abandoned", || {
        !entries_of(&cluster, "long", &victim.occurrence).is_empty()
    });
    let recorded_after_ms = (now_ns() - killed) / 1_000_000;
    let entries = entries_of(&cluster, "long", &victim.occurrence);
    assert_eq!(entries.len(), 1, "{entries:?}");
    let entry = &entries[0];
    assert_eq!(entry["outcome"], "abandoned", "{entry:?}");
    assert_eq!(entry["node"], victim.node, "names the dead node");
    assert_eq!(entry["fence"], victim.fence.to_string(), "and its fence");
    let survivor = if victim.node == "n1" { "n2" } else { "n1" };
    assert!(
        entry["error"].contains(&format!("recorded by {survivor}")),
        "{entry:?}"
    );
    let state: HashMap<String, String> = cluster
        .redis
        .conn()
        .hgetall("{solocron:long}:state")
        .expect("HGETALL");
    // `status` no longer says `running` for it (the next occurrence may
    // already be claimed and running: then the state describes that one).
    let field = |key: &str| state.get(key).map(String::as_str);
    if field("last_outcome_occ") == Some(victim.occurrence.as_str()) {
        assert_eq!(field("last_outcome"), Some("abandoned"), "{state:?}");
    } else {
        // No run in progress is the dead one's any more: the abandon
        // cleared its token (the other `run_*` fields stay until the next
        // run), or a newer run is in progress.
        assert!(
            field("run_token").unwrap_or_default().is_empty()
                || field("run_occ") != Some(victim.occurrence.as_str()),
            "{state:?}"
        );
    }
    // Its log line goes through the writer thread: it may follow the entry.
    wait_until(
        Duration::from_secs(5),
        "the survivor logs the decision",
        || cluster.node(survivor).log().contains("run abandoned"),
    );
    println!("abandoned recorded {recorded_after_ms} ms after kill -9 (lock_ttl 2 s)");
}

#[test]
fn a_dead_runner_is_found_abandoned_even_when_later_occurrences_were_skipped_meanwhile() {
    // Found by the soak: the skips decided while the dead node's lock was
    // still held overwrote the state that said its run was in progress, so
    // nobody ever recorded it.
    let long = JobSpec::new("long", "* * * * * *", 20.0).with("lock_ttl = \"3s\"");
    let mut cluster = Cluster::new(RedisServer::start(), "", std::slice::from_ref(&long));
    cluster.start_node("n1", &[]);
    cluster.start_node("n2", &[]);
    let victim = cluster.wait_for_run(Duration::from_secs(10), "a run", |_| true);
    cluster.node_mut(&victim.node).kill9();
    wait_gone(victim.pid, Duration::from_secs(2));
    wait_until(
        Duration::from_secs(3 + 10),
        "the run is recorded abandoned",
        || {
            entries_of(&cluster, "long", &victim.occurrence)
                .iter()
                .any(|entry| entry["outcome"] == "abandoned")
        },
    );
    let entries = entries_of(&cluster, "long", &victim.occurrence);
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0]["node"], victim.node);
    let skipped = cluster
        .decisions(&["long"])
        .into_iter()
        .filter(|d| d.outcome == "skipped")
        .count();
    assert!(
        skipped >= 1,
        "occurrences were skipped while the dead lock was held"
    );
}

#[test]
fn a_redis_outage_leaves_every_occurrence_in_the_history_exactly_once() {
    let quick = JobSpec::new("quick", "*/2 * * * * *", 0.05);
    let slow = JobSpec::new("slow", "*/20 * * * * *", 3.0);
    let mut cluster = Cluster::new(RedisServer::start(), "", &[quick.clone(), slow.clone()]);
    cluster.start_node("n1", &[]);
    cluster.start_node("n2", &[]);
    // Start at a slow occurrence clear of start-up, pause 1 s into its run.
    let from = whole_second_after(3, 20);
    let slow_run = cluster.wait_for_run(Duration::from_secs(30), "the slow run", |run| {
        run.is("slow", from)
    });
    sleep_until(from + TimeDelta::seconds(1));
    cluster.redis.pause();
    let paused = Utc::now();
    // The fault itself: Redis stays paused for 12 s, past the slow run's end.
    std::thread::sleep(Duration::from_secs(12));
    cluster.redis.resume();
    let resumed = Utc::now();
    let to = resumed + TimeDelta::seconds(6);
    sleep_until(to + TimeDelta::seconds(4));
    // The slow run finished during the pause: its own outcome is recorded.
    wait_until(Duration::from_secs(10), "the slow run is recorded", || {
        !entries_of(&cluster, "slow", &slow_run.occurrence).is_empty()
    });
    let slow_entries = entries_of(&cluster, "slow", &slow_run.occurrence);
    assert_eq!(slow_entries.len(), 1, "{slow_entries:?}");
    assert_eq!(slow_entries[0]["outcome"], "succeeded", "{slow_entries:?}");
    // Every quick occurrence is there once: run, or missed.
    let windows = [quick.window(from, to)];
    let decisions = cluster.decisions(&["quick"]);
    let report = history_exactly_once(&decisions, &windows);
    assert!(report.is_exact(), "{report:?}\n{}", cluster.logs());
    let mut during: Vec<_> = decisions
        .iter()
        .filter(|d| {
            chrono::DateTime::parse_from_rfc3339(&d.occurrence).is_ok_and(|at| {
                at > paused + TimeDelta::seconds(1) && at < resumed - TimeDelta::seconds(1)
            })
        })
        .collect();
    during.sort_by(|a, b| a.occurrence.cmp(&b.occurrence));
    // The newest of them may still run late (within its deadline): the one
    // pending when Redis came back.
    let older = &during[..during.len().saturating_sub(1)];
    assert!(
        older.iter().all(|d| d.outcome == "missed"),
        "occurrences due while Redis was paused are missed: {during:?}"
    );
    assert!(during.len() >= 4, "{during:?}");
    assert!(
        decisions.iter().all(|d| d.outcome != "skipped"),
        "nothing is skipped behind a late run of an old occurrence: {decisions:?}"
    );
    // At most the newest pending occurrence ran late.
    let late: Vec<_> = cluster
        .runs()
        .into_iter()
        .filter(|run| run.job == "quick" && run.at().is_some_and(|at| at >= from && at <= to))
        .filter(|run| {
            run.at().is_some_and(|at| {
                run.start_ns - i128::from(at.timestamp_millis()) * 1_000_000 > 1_000_000_000
            })
        })
        .collect();
    assert!(
        late.len() <= 1,
        "only the newest pending may run late: {late:?}"
    );
    for node in &cluster.nodes {
        let log = node.log();
        assert_eq!(log.matches("redis unreachable").count(), 1, "{log}");
        assert_eq!(
            log.matches("redis reachable again after").count(),
            1,
            "{log}"
        );
    }
}
