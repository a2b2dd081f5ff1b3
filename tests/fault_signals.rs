//! Signals during load (SPEC §8, §2.7).
//!
//! SIGTERM during a long run with `shutdown_grace = "1s"`: the node exits 0
//! inside the grace plus the time to kill, the run is recorded as
//! `interrupted`, its lock is released (not left to expire), and the other
//! node runs the next occurrences without overlap. Breaks if the drain
//! ignored the grace, left the lock, or forgot the history entry.
//!
//! A second signal during the drain: `fault_stop.rs`.
//!
//! SIGHUP under load: three nodes, ten every-second jobs; a broken file, a
//! removed file and a valid change (one job changed, one added) are sent to
//! every node. The audit over the whole window shows every occurrence of
//! the ten once, and the added job runs once per occurrence from shortly
//! after the reload. Breaks if a reload restarted loops that lost or re-ran
//! an occurrence, or a failed reload dropped the schedule.

mod common;

use std::time::{Duration, Instant};

use chrono::{TimeDelta, Utc};
use common::cluster::{Cluster, JobSpec, sleep_until, wait_gone, whole_second_after, window_secs};
use common::{RedisServer, history};
use redis::Commands as _;

#[test]
fn sigterm_during_a_long_run_interrupts_it_after_the_grace_releases_the_lock_and_exits_0() {
    let long = JobSpec::new("long", "*/4 * * * * *", 3.0).with("lock_ttl = \"2s\"");
    let mut cluster = Cluster::new(
        RedisServer::start(),
        "shutdown_grace = \"1s\"",
        std::slice::from_ref(&long),
    );
    cluster.start_node("n1", &[]);
    cluster.start_node("n2", &[]);
    let from = whole_second_after(4, 4);
    let victim = cluster.wait_for_run(Duration::from_secs(20), "a long run in the window", |run| {
        run.job == "long" && run.at().is_some_and(|at| at >= from)
    });
    let node = cluster.node_mut(&victim.node);
    node.signal("TERM");
    let signalled = Instant::now();
    let status = node.wait_exit(Duration::from_secs(10));
    let took = signalled.elapsed();
    assert_eq!(status.code(), Some(0), "{}", node.log());
    // 1 s grace, then SIGTERM to the job (which dies of it) and the release.
    assert!(took < Duration::from_millis(2500), "exit took {took:?}");
    assert!(
        took >= Duration::from_millis(900),
        "the grace was not given: {took:?}"
    );
    let gone = wait_gone(victim.pid, Duration::from_millis(100));
    let lock: Option<String> = cluster
        .redis
        .conn()
        .get("{solocron:long}:lock")
        .expect("GET");
    assert_eq!(lock, None, "released at shutdown, not left to expire");
    let entry = history(&cluster.redis, "long")
        .into_iter()
        .find(|e| e["occurrence"] == victim.occurrence)
        .expect("the interrupted run is in the history");
    assert_eq!(entry["outcome"], "interrupted", "{entry:?}");
    assert_eq!(entry["node"], victim.node);
    let to = victim.at().expect("at") + TimeDelta::seconds(window_secs(8, 60));
    cluster.wait_for_run(
        Duration::from_secs(window_secs(8, 60) as u64 + 10),
        "later runs",
        |run| run.is("long", to) && run.end_ns.is_some(),
    );
    let mut runs = cluster.runs();
    for run in runs.iter_mut().filter(|run| run.pid == victim.pid) {
        run.ended_at(gone);
    }
    let report = common::audit::audit(
        &runs,
        &cluster.decisions(&["long"]),
        &[long.window(from, to)],
    );
    println!("sigterm: {report}");
    assert!(
        report.is_clean() && report.skipped.is_empty(),
        "{report}\n{}",
        cluster.logs()
    );
    for run in runs
        .iter()
        .filter(|run| run.at().is_some_and(|at| at > victim.at().expect("at")))
    {
        assert_ne!(run.node, victim.node, "a stopped node cannot run: {run}");
    }
}

#[test]
fn sighup_with_a_broken_a_missing_and_a_valid_file_under_load_loses_and_repeats_nothing() {
    let jobs: Vec<JobSpec> = (0..10)
        .map(|i| {
            JobSpec::new(&format!("j{i:02}"), "* * * * * *", 0.005)
                .with("lock_ttl = \"2s\"")
                .with("starting_deadline = \"2s\"")
        })
        .collect();
    let mut cluster = Cluster::new(RedisServer::start(), "", &jobs);
    for id in ["n1", "n2", "n3"] {
        cluster.start_node(id, &[]);
    }
    let from = whole_second_after(2, 1);
    let hup_all = |cluster: &Cluster, needle: &str, count: usize| {
        for node in &cluster.nodes {
            node.signal("HUP");
        }
        for node in &cluster.nodes {
            common::wait_until(Duration::from_secs(5), needle, || {
                node.log().matches(needle).count() == count
            });
        }
    };
    let config = cluster.work.path("jobs.toml");
    // A broken file.
    sleep_until(from + TimeDelta::milliseconds(1500));
    let mut broken = cluster.config_text(&jobs);
    broken.push_str("timeout = \"soon\"\n");
    cluster.work.write_config(&broken);
    hup_all(&cluster, "reload failed", 1);
    // No file at all.
    sleep_until(from + TimeDelta::milliseconds(3500));
    std::fs::remove_file(&config).expect("remove");
    hup_all(&cluster, "reload failed", 2);
    // A valid change: j03 works a little longer, j10 is new.
    sleep_until(from + TimeDelta::milliseconds(5500));
    let mut changed = jobs.clone();
    changed[3].seconds = 0.01;
    let added = JobSpec::new("j10", "* * * * * *", 0.005).with("lock_ttl = \"2s\"");
    changed.push(added.clone());
    cluster.write_jobs(&changed);
    hup_all(&cluster, "config reloaded", 1);
    let reloaded = Utc::now();
    for node in &cluster.nodes {
        let log = node.log();
        let line = log
            .lines()
            .find(|l| l.contains("config reloaded"))
            .expect("summary");
        assert!(
            line.contains(r#"added=["j10"]"#) && line.contains(r#"changed=["j03"]"#),
            "{line}"
        );
    }
    let to = from + TimeDelta::seconds(window_secs(12, 120));
    for job in &changed {
        cluster.wait_for_run(
            Duration::from_secs(window_secs(12, 120) as u64 + 10),
            "the last runs",
            |run| run.is(&job.name, to) && run.end_ns.is_some(),
        );
        cluster.wait_decided(Duration::from_secs(5), &job.name, to);
    }
    // j10 from its first occurrence at most 2 s after the reload.
    let first_added = whole_second_after(0, 1)
        .min(chrono::DateTime::from_timestamp(reloaded.timestamp() + 2, 0).expect("valid"));
    let mut windows: Vec<_> = jobs.iter().map(|job| job.window(from, to)).collect();
    windows.push(added.window(first_added, to));
    let report = cluster.audit(&windows);
    println!("sighup under load: {report}");
    assert!(
        report.is_clean() && report.skipped.is_empty(),
        "{report}\n{}",
        cluster.logs()
    );
    assert!(report.expected >= 10 * 13, "{report}");
}
