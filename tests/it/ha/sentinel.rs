//! Redis Sentinel (guarantee 8, docs/guarantees.md): three daemons follow the master of a group
//! of 1 master, 2 replicas and 3 sentinels across a graceful `SENTINEL
//! FAILOVER` and, later, a `kill -9` of the master, without a restart.
//!
//! An every-second job (5 ms) and a job every 2 s working 1.5 s run for the
//! whole window. The audit over it: zero duplicates, zero overlaps, fences
//! grow in start order, every daemon still the same process, and misses
//! only within a few seconds of each fault. The old master keeps accepting
//! writes for ~10 s after the graceful failover: a claim it grants must
//! never lead to a run (no duplicate, and the replica-count check of
//! `lock/server.rs`). Breaks if the daemons stayed on the old master
//! (`READONLY` forever: everything missed after the failover), if a claim
//! granted by the old master ran, or if a lost claim let an occurrence run
//! twice.

use crate::common;

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use common::audit::{Window, audit};
use common::cluster::{JobSpec, sleep_until, whole_second_after};
use common::fleet::Fleet;
use common::ha::SentinelGroup;

fn excuse(window: &mut Window, faults: &[DateTime<Utc>]) {
    for at in window.occurrences() {
        if faults.iter().any(|fault| {
            at >= *fault - TimeDelta::seconds(1) && at <= *fault + TimeDelta::seconds(6)
        }) {
            window.may_miss.insert(at);
        }
    }
}

#[test]
fn three_daemons_follow_a_graceful_failover_and_a_killed_master_without_running_anything_twice() {
    let mut group = SentinelGroup::start("solocron");
    let urls: Vec<String> = group
        .sentinel_urls()
        .iter()
        .map(|url| format!("\"{url}\""))
        .collect();
    let redis = format!(
        "sentinel = {{ master = \"solocron\", urls = [{}] }}\nwait_timeout = \"200ms\"",
        urls.join(", ")
    );
    let tick = JobSpec::new("tick", "* * * * * *", 0.005)
        .with("lock_ttl = \"3s\"")
        .with("starting_deadline = \"2s\"");
    let slow = JobSpec::new("slow", "*/2 * * * * *", 1.5)
        .with("lock_ttl = \"3s\"")
        .with("starting_deadline = \"2s\"");
    let mut fleet = Fleet::new(
        &redis,
        "shutdown_grace = \"5s\"",
        &[tick.clone(), slow.clone()],
    );
    for id in ["n1", "n2", "n3"] {
        fleet.start_node(id);
    }
    let from = whole_second_after(3, 2);
    sleep_until(from + TimeDelta::seconds(6));
    let graceful_at = Utc::now();
    let graceful = group.failover();
    println!(
        "graceful failover {} -> {} in {:?}",
        graceful.from, graceful.to, graceful.took
    );
    sleep_until(graceful_at + TimeDelta::seconds(14));
    group.wait_settled();
    let killed_at = Utc::now();
    let killed = group.kill_master();
    println!(
        "kill -9 of {}: {} promoted in {:?}",
        killed.from, killed.to, killed.took
    );
    // Back as a replica, so that claims are acknowledged by two again.
    group.restart(killed.from);
    let to = killed_at + TimeDelta::seconds(16);
    sleep_until(to + TimeDelta::seconds(3));
    let faults = [graceful_at, killed_at];
    let windows: Vec<Window> = [&tick, &slow]
        .iter()
        .map(|job| {
            let mut window = job.window(from, to);
            excuse(&mut window, &faults);
            window
        })
        .collect();
    let mut runs = fleet.runs();
    // A run cut by nothing here has its END; none is left unfinished.
    runs.retain(|run| run.at().is_some_and(|at| at <= to));
    let report = audit(&runs, &fleet.decisions(&["tick", "slow"]), &windows);
    println!("sentinel: {report}");
    assert!(report.is_clean(), "{report}\n{}", fleet.logs());
    assert!(fleet.all_alive(), "no daemon restarted or died");
    let excused = report.excused.len();
    assert!(
        excused <= 2 * 8 * 2,
        "misses only near the faults: {report}"
    );
    // What each fault cost: the first run after it, and the misses.
    for (what, fault) in [
        ("graceful failover", graceful_at),
        ("kill -9 of the master", killed_at),
    ] {
        let fault_ns = i128::from(fault.timestamp_nanos_opt().unwrap_or(0));
        let first = runs
            .iter()
            .filter(|run| run.job == "tick" && run.start_ns > fault_ns)
            .map(|run| run.start_ns)
            .min();
        let missed = report
            .excused
            .iter()
            .filter(|(_, at, _)| {
                *at >= fault - TimeDelta::seconds(1) && *at <= fault + TimeDelta::seconds(6)
            })
            .count();
        println!(
            "{what}: first run {} ms after it, {missed} occurrence(s) missed",
            first.map_or(-1, |first| (first - fault_ns) / 1_000_000)
        );
    }
    // Runs went on after each fault, on the new master.
    for fault in faults {
        assert!(
            runs.iter().any(|run| run.job == "tick"
                && run
                    .at()
                    .is_some_and(|at| at > fault + TimeDelta::seconds(6))),
            "runs resumed after the fault at {fault}"
        );
    }
}

/// The old master after a graceful `SENTINEL FAILOVER` takes writes for
/// ~10 s, and for ~1 s the replica that was not promoted still acknowledges
/// them (then resyncs from the new master and drops them). A node still
/// talking to it must get no claim that the new master does not know:
/// every claim granted through the failover is on the new master once it
/// settled; every other claim is refused (`WAIT` short, or the master lists
/// fewer replicas than a moment ago, or `READONLY`).
#[test]
fn a_stale_master_that_still_takes_writes_grants_no_claim_the_new_master_loses() {
    use redis::Commands as _;
    use solocron::lock::{Claim, LockError, Locker, Target, new_token};

    let group = SentinelGroup::start("solocron");
    let old = group.master_port();
    let mut config = solocron::config::RedisConfig {
        url: String::new(),
        mode: solocron::config::RedisMode::Single,
        wait_replicas: 1,
        wait_timeout: std::time::Duration::from_millis(100),
        username: None,
        password: None,
        key_prefix: "solocron".to_string(),
        tls: Default::default(),
    };
    config.use_url(&format!("redis://127.0.0.1:{old}/"));
    config.wait_replicas = 1;
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let locker = runtime.block_on(async {
        Locker::new(
            solocron::daemon::connect(&config).expect("connect"),
            "solocron",
            "stale",
            100,
        )
    });
    let claim = |at_ms: i64| {
        // A job of its own each time: a won claim keeps its lock.
        runtime.block_on(locker.claim(
            &format!("job-{at_ms}"),
            &Target::Scheduled {
                at: chrono::DateTime::from_timestamp_millis(at_ms).expect("an instant"),
                deadline_ms: i64::MAX,
            },
            &new_token(),
            std::time::Duration::from_secs(30),
        ))
    };
    // Before: the master and its two replicas acknowledge.
    assert!(matches!(claim(1_000), Ok(Claim::Won(_))));
    // Claim all through the failover, from before it starts until the old
    // master has been a stale master for a few seconds.
    let mut granted = Vec::new();
    let mut refused = 0;
    let sent = std::sync::atomic::AtomicUsize::new(0);
    let new = std::thread::scope(|scope| {
        let failover = scope.spawn(|| {
            common::wait_until(
                Duration::from_secs(5),
                "claims go on before the failover",
                || sent.load(std::sync::atomic::Ordering::SeqCst) >= 20,
            );
            group.failover()
        });
        let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let mut at = 2_000;
        while std::time::Instant::now() < until {
            match claim(at) {
                Ok(Claim::Won(_)) => granted.push(at),
                Err(LockError::Unacknowledged { .. } | LockError::ReplicaLost { .. }) => {
                    refused += 1
                }
                Err(LockError::Redis { .. }) => refused += 1, // READONLY once converted
                other => panic!("unexpected answer: {other:?}"),
            }
            at += 1_000;
            sent.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            // Paced, so that the claims span the whole failover.
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let switch = failover.join().expect("failover");
        assert_eq!(switch.from, old);
        switch.to
    });
    group.wait_settled();
    let mut promoted = group.conn(new);
    let lost: Vec<i64> = granted
        .iter()
        .copied()
        .filter(|at| {
            let decided: Option<String> = promoted
                .hget(format!("{{solocron:job-{at}}}:state"), "last_occ")
                .expect("HGET on the new master");
            decided.as_deref() != Some(at.to_string().as_str())
        })
        .collect();
    println!(
        "through the failover: {} claims granted (all kept: {}), {refused} refused",
        granted.len(),
        lost.is_empty()
    );
    assert!(
        lost.is_empty(),
        "{} of {} claims the stale master granted are unknown to the new master",
        lost.len(),
        granted.len()
    );
    assert!(refused >= 5, "{refused}");
}

/// Passwords in every place they go with Sentinel: the data nodes' (an ACL
/// user, `username` and `password_file`) and the sentinels' own
/// (`sentinel.password_file`). Jobs run, `status` and `history` read, and
/// `trigger` runs a job, all through the sentinels; no password shows.
#[test]
fn with_passwords_for_the_data_nodes_and_the_sentinels_every_command_works() {
    use common::ha::SentinelOptions;

    let group = SentinelGroup::start_with(
        "solocron",
        SentinelOptions {
            data_password: Some("data-s3cret".to_string()),
            data_user: Some("solocron".to_string()),
            sentinel_password: Some("sentinel-s3cret".to_string()),
            ..SentinelOptions::default()
        },
    );
    let urls: Vec<String> = group
        .sentinel_urls()
        .iter()
        .map(|url| format!("\"{url}\""))
        .collect();
    let work_dir = tempfile::tempdir().expect("temp dir");
    let data_pass = work_dir.path().join("redis.pass");
    let sentinel_pass = work_dir.path().join("sentinel.pass");
    std::fs::write(&data_pass, "data-s3cret\n").expect("write");
    std::fs::write(&sentinel_pass, "sentinel-s3cret\n").expect("write");
    let redis = format!(
        "sentinel = {{ master = \"solocron\", urls = [{}], password_file = \"{}\" }}\n\
         username = \"solocron\"\npassword_file = \"{}\"",
        urls.join(", "),
        sentinel_pass.display(),
        data_pass.display()
    );
    let tick = JobSpec::new("tick", "* * * * * *", 0.005);
    let mut fleet = Fleet::new(&redis, "", std::slice::from_ref(&tick));
    fleet.start_node("n1");
    fleet.start_node("n2");
    fleet.wait_for_run(
        Duration::from_secs(15),
        "a run through the sentinels",
        |_| true,
    );
    let status = fleet.cli(&["status", "--json"]);
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).expect("status --json");
    assert_eq!(status["jobs"][0]["job"], "tick", "{status:#}");
    common::wait_until(
        Duration::from_secs(15),
        "both nodes are live in status",
        || {
            let status = fleet.cli(&["status", "--json"]);
            serde_json::from_slice::<serde_json::Value>(&status.stdout).is_ok_and(|status| {
                status["nodes"]
                    .as_array()
                    .is_some_and(|nodes| nodes.len() == 2)
            })
        },
    );
    assert!(!fleet.decisions(&["tick"]).is_empty(), "history reads");
    let (trigger, printed) = fleet.trigger_when_free("tick", Duration::from_secs(30));
    assert_eq!(trigger.status.code(), Some(0), "{printed}");
    let everything = format!("{}{printed}", fleet.logs());
    assert!(
        !everything.contains("s3cret"),
        "a password shows:\n{everything}"
    );
}

/// `status` and `history` through a Sentinel group print their answer and
/// nothing else on stderr: before, each began with the daemon's log line
/// `INFO redis master found through sentinel master=… address=… epoch=…`
/// (the commands logged at `info`, as the daemon does).
#[test]
fn status_and_history_through_sentinel_print_no_log_line() {
    let group = SentinelGroup::start("solocron");
    let urls: Vec<String> = group
        .sentinel_urls()
        .iter()
        .map(|url| format!("\"{url}\""))
        .collect();
    let redis = format!(
        "sentinel = {{ master = \"solocron\", urls = [{}] }}",
        urls.join(", ")
    );
    let fleet = Fleet::new(&redis, "", &[JobSpec::new("tick", "* * * * * *", 0.005)]);
    for command in ["status", "history"] {
        let output = fleet.cli(&[command]);
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(output.status.success(), "{command}: {stderr}");
        assert!(
            !stderr.contains("redis master found"),
            "{command} printed a log line:\n{stderr}"
        );
    }
}
