//! A run keeps its lease until its last process is gone (guarantee 2), and a
//! second stop signal kills, releases and records before the daemon exits
//! (guarantee 10, docs/guarantees.md).
//!
//! Every job here ignores SIGTERM, so after its timeout, a lost lease or the
//! shutdown grace it lives on until SIGKILL. Before the fix the watchdog
//! stopped renewing when the stop began: with `lock_ttl` shorter than the
//! 10 s SIGTERM→SIGKILL wait the lock expired, and another node started the
//! next run while the first was still alive. What each test checks:
//! - timeout (lock_ttl 1 s and 3 s, two nodes): no run starts anywhere
//!   before the timed-out one is gone, and it is recorded `timed_out`;
//! - lost lease (Redis paused right after a renewal): the job is dead
//!   before the lock could expire in Redis;
//! - shutdown (grace 1 s, two nodes): the other node waits for the run to
//!   be gone; the run is recorded `interrupted`, the lock released;
//! - a second SIGTERM: SIGKILL at once, lock released, `interrupted`
//!   recorded, exit 0 — no job left running without a lease.

use crate::common;

use std::time::{Duration, Instant};

use common::audit::{Run, now_ns};
use common::cluster::{Cluster, JobSpec, wait_gone, whole_second_after};
use common::{RedisServer, history, is_alive, wait_until};
use redis::Commands as _;

/// Runs that started after `after` (real clock, ns) and before `before`.
fn started_between(cluster: &Cluster, after: &Run, before: i128) -> Vec<Run> {
    cluster
        .runs()
        .into_iter()
        .filter(|run| run.start_ns > after.start_ns && run.start_ns < before)
        .collect()
}

fn outcome_of(cluster: &Cluster, job: &str, occurrence: &str) -> Option<String> {
    history(&cluster.redis, job)
        .into_iter()
        .find(|entry| entry.get("occurrence").map(String::as_str) == Some(occurrence))
        .and_then(|entry| entry.get("outcome").cloned())
}

fn a_timed_out_run_ignoring_sigterm_keeps_its_lock_until_it_is_gone(lock_ttl: &str) {
    let stubborn = JobSpec::new("stubborn", "*/2 * * * * *", 30.0)
        .ignoring_term()
        .with("timeout = \"2s\"")
        .with(&format!("lock_ttl = \"{lock_ttl}\""));
    let mut cluster = Cluster::new(RedisServer::start(), "", std::slice::from_ref(&stubborn));
    cluster.start_node("n1", &[]);
    cluster.start_node("n2", &[]);
    let from = whole_second_after(3, 2);
    let first = cluster.wait_for_run(Duration::from_secs(20), "a run in the window", |run| {
        run.job == "stubborn" && run.at().is_some_and(|at| at >= from)
    });
    // Timeout at +2 s (SIGTERM, ignored), SIGKILL 10 s later.
    let gone = wait_gone(first.pid, Duration::from_secs(20));
    let lived_ms = (gone - first.start_ns) / 1_000_000;
    assert!(
        lived_ms >= 11_000,
        "it lived through the kill grace: {lived_ms} ms"
    );
    let early = started_between(&cluster, &first, gone);
    assert!(
        early.is_empty(),
        "a run started while the timed-out one was alive: {early:?}\n{}",
        cluster.logs()
    );
    let next = cluster.wait_for_run(Duration::from_secs(10), "the next run", |run| {
        run.start_ns > first.start_ns
    });
    assert!(next.start_ns > gone && next.fence > first.fence, "{next}");
    wait_until(Duration::from_secs(5), "the first run is recorded", || {
        outcome_of(&cluster, "stubborn", &first.occurrence).is_some()
    });
    assert_eq!(
        outcome_of(&cluster, "stubborn", &first.occurrence).as_deref(),
        Some("timed_out")
    );
    let runner = cluster.node(&first.node).log();
    assert!(
        runner.contains("sending SIGTERM to the job's process group")
            && runner.contains("sending SIGKILL to the job's process group"),
        "both signals are logged:\n{runner}"
    );
}

#[test]
fn a_timed_out_run_ignoring_sigterm_keeps_a_1s_lock_until_it_is_gone() {
    a_timed_out_run_ignoring_sigterm_keeps_its_lock_until_it_is_gone("1s");
}

#[test]
fn a_timed_out_run_ignoring_sigterm_keeps_a_3s_lock_until_it_is_gone() {
    a_timed_out_run_ignoring_sigterm_keeps_its_lock_until_it_is_gone("3s");
}

#[test]
fn a_lost_lease_kills_a_job_ignoring_sigterm_before_the_lock_can_expire() {
    let stubborn = JobSpec::new("stubborn", "0 0 1 1 *", 30.0)
        .ignoring_term()
        .with("lock_ttl = \"3s\"");
    let cluster = Cluster::new(RedisServer::start(), "", std::slice::from_ref(&stubborn));
    let trigger = std::process::Command::new(common::solocron_bin())
        .args(["trigger", "stubborn", "--node-id", "ops"])
        .args([
            "--config",
            &common::toml_path(&cluster.work.path("jobs.toml")),
        ])
        .args(["--redis", &cluster.redis.url()])
        .env_remove("SOLOCRON_CONFIG")
        .env_remove("SOLOCRON_REDIS_URL")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start solocron trigger");
    let mut trigger = scopeguard(trigger);
    let run = cluster.wait_for_run(Duration::from_secs(10), "the manual run", |_| true);
    let (base, base_ns) = (Instant::now(), now_ns());
    let expiry = cluster
        .redis
        .pause_right_after_a_renewal("{solocron:stubborn}:lock", 3000);
    let gone = wait_gone(run.pid, Duration::from_secs(5));
    cluster.redis.resume();
    let expiry_ns = base_ns + i128::try_from((expiry - base).as_nanos()).unwrap_or(0);
    assert!(
        gone < expiry_ns,
        "the job outlived its lock by {} ms",
        (gone - expiry_ns) / 1_000_000
    );
    let status = trigger.0.wait().expect("trigger exits");
    assert_eq!(status.code(), Some(1), "the run was stopped: lock_lost");
}

/// A child killed when dropped.
struct Guard(std::process::Child);

fn scopeguard(child: std::process::Child) -> Guard {
    Guard(child)
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn at_shutdown_a_run_ignoring_sigterm_keeps_its_lock_until_it_is_gone() {
    let stubborn = JobSpec::new("stubborn", "*/2 * * * * *", 30.0)
        .ignoring_term()
        .with("lock_ttl = \"1s\"");
    let mut cluster = Cluster::new(
        RedisServer::start(),
        "shutdown_grace = \"1s\"",
        std::slice::from_ref(&stubborn),
    );
    cluster.start_node("n1", &[]);
    cluster.start_node("n2", &[]);
    // The first run holds the lock for its whole 30 s: it is the one.
    let first = cluster.wait_for_run(Duration::from_secs(20), "a run", |_| true);
    let runner = cluster.node_mut(&first.node);
    runner.signal("TERM");
    let status = runner.wait_exit(Duration::from_secs(20));
    assert_eq!(status.code(), Some(0), "{}", runner.log());
    let gone = wait_gone(first.pid, Duration::from_secs(1));
    let lived_ms = (gone - first.start_ns) / 1_000_000;
    assert!(
        lived_ms >= 10_000,
        "grace 1 s, then 10 s to SIGKILL: {lived_ms} ms"
    );
    let early = started_between(&cluster, &first, gone);
    assert!(early.is_empty(), "overlap: {early:?}\n{}", cluster.logs());
    assert_eq!(
        outcome_of(&cluster, "stubborn", &first.occurrence).as_deref(),
        Some("interrupted")
    );
    cluster.wait_for_run(Duration::from_secs(10), "the other node runs next", |run| {
        run.start_ns > gone
    });
}

#[test]
fn a_second_sigterm_kills_the_job_releases_its_lock_records_it_and_exits() {
    let stubborn = JobSpec::new("stubborn", "* * * * * *", 60.0)
        .ignoring_term()
        .with("lock_ttl = \"5s\"");
    let mut cluster = Cluster::new(
        RedisServer::start(),
        "shutdown_grace = \"30s\"",
        std::slice::from_ref(&stubborn),
    );
    cluster.start_node("n1", &[]);
    let run = cluster.wait_for_run(Duration::from_secs(10), "the run started", |_| true);
    let node = cluster.node_mut("n1");
    node.signal("TERM");
    node.wait_for_log(Duration::from_secs(5), "stopping: no new claims");
    assert!(is_alive(run.pid), "the run goes on during the drain");
    node.signal("TERM");
    let signalled = Instant::now();
    let status = node.wait_exit(Duration::from_secs(10));
    assert!(
        signalled.elapsed() < Duration::from_secs(3),
        "not at once: {:?}",
        signalled.elapsed()
    );
    assert_eq!(status.code(), Some(0), "{}", node.log());
    assert!(!is_alive(run.pid), "the job did not outlive its daemon");
    let lock: Option<String> = cluster
        .redis
        .conn()
        .get("{solocron:stubborn}:lock")
        .expect("GET");
    assert_eq!(lock, None, "released, not left to expire");
    assert_eq!(
        outcome_of(&cluster, "stubborn", &run.occurrence).as_deref(),
        Some("interrupted"),
        "{}",
        cluster.node("n1").log()
    );
    let log = cluster.node("n1").log();
    assert!(log.contains("second stop signal"), "{log}");
    assert!(
        !log.contains("sending SIGTERM"),
        "a second signal sends SIGKILL only:\n{log}"
    );
}

#[test]
fn a_lease_lost_while_a_timed_out_job_takes_its_grace_kills_it_before_the_lock_expires() {
    // Found by the soak: after the timeout the job got its 10 s SIGTERM
    // grace whatever happened to the lease; a Redis pause then let the
    // lock expire while it lived, and another node started the next run.
    let stubborn = JobSpec::new("stubborn", "0 0 1 1 *", 30.0)
        .ignoring_term()
        .with("timeout = \"1s\"")
        .with("lock_ttl = \"3s\"");
    let cluster = Cluster::new(RedisServer::start(), "", std::slice::from_ref(&stubborn));
    let stderr = cluster.work.path("trigger.err");
    let mut trigger = scopeguard(
        std::process::Command::new(common::solocron_bin())
            .args(["trigger", "stubborn", "--node-id", "ops"])
            .args([
                "--config",
                &common::toml_path(&cluster.work.path("jobs.toml")),
            ])
            .args(["--redis", &cluster.redis.url()])
            .env_remove("SOLOCRON_CONFIG")
            .env_remove("SOLOCRON_REDIS_URL")
            .env("SOLOCRON_LOG", "warn")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&stderr).expect("create trigger.err"))
            .spawn()
            .expect("start solocron trigger"),
    );
    let run = cluster.wait_for_run(Duration::from_secs(10), "the manual run", |_| true);
    // The timeout fires at 1 s: SIGTERM, ignored; the 10 s grace begins.
    wait_until(Duration::from_secs(5), "trigger sends SIGTERM", || {
        std::fs::read_to_string(&stderr)
            .unwrap_or_default()
            .contains("sending SIGTERM")
    });
    // A renewal after it: the job had a whole renewal period to die of it.
    let pttl = || -> i64 {
        let mut conn = cluster.redis.conn();
        conn.pttl("{solocron:stubborn}:lock").expect("PTTL")
    };
    let at_sigterm = pttl();
    wait_until(
        Duration::from_secs(5),
        "a renewal after the SIGTERM",
        || pttl() > at_sigterm,
    );
    assert!(is_alive(run.pid), "the job ignores SIGTERM");
    let (base, base_ns) = (Instant::now(), now_ns());
    let expiry = cluster
        .redis
        .pause_right_after_a_renewal("{solocron:stubborn}:lock", 3000);
    let gone = wait_gone(run.pid, Duration::from_secs(5));
    cluster.redis.resume();
    let expiry_ns = base_ns + i128::try_from((expiry - base).as_nanos()).unwrap_or(0);
    assert!(
        gone < expiry_ns,
        "the job outlived its lock by {} ms",
        (gone - expiry_ns) / 1_000_000
    );
    assert_eq!(trigger.0.wait().expect("trigger exits").code(), Some(1));
}
