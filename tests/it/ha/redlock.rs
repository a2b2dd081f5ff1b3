//! Redlock over 5 independent masters (guarantee 9, docs/guarantees.md), three daemons, an
//! every-second job:
//! 1. a minority down (one killed, one paused): every occurrence runs
//!    exactly once, nothing is missed;
//! 2. a majority down (two more paused): nothing runs (fail closed);
//! 3. all back, the killed one restarted *without its data*: runs resume,
//!    fences keep growing, and the occurrences of phase 2 are recorded
//!    `missed` once a majority answers.
//!
//! Breaks if a claim could win without a majority, if one master's answer
//! ("already decided") were ignored, if a restarted empty master let an
//! occurrence run twice, or if a paused master stalled the others' claims.

use crate::common;

use std::time::Duration;

use chrono::TimeDelta;
use common::audit::{Window, audit, history_exactly_once};
use common::cluster::{JobSpec, sleep_until, whole_second_after};
use common::fleet::Fleet;
use common::ha::Masters;

#[test]
fn a_minority_down_costs_nothing_a_majority_down_runs_nothing_and_all_back_resumes() {
    let mut masters = Masters::start(5);
    let urls: Vec<String> = masters
        .urls()
        .iter()
        .map(|url| format!("\"{url}\""))
        .collect();
    let redis = format!("redlock = [{}]", urls.join(", "));
    let tick = JobSpec::new("tick", "* * * * * *", 0.005)
        .with("lock_ttl = \"3s\"")
        .with("starting_deadline = \"2s\"");
    let mut fleet = Fleet::new(&redis, "", std::slice::from_ref(&tick));
    for id in ["n1", "n2", "n3"] {
        fleet.start_node(id);
    }
    // Phase 1: a minority down.
    let minority_at = whole_second_after(3, 1);
    sleep_until(minority_at - TimeDelta::milliseconds(500));
    masters.kill(0);
    masters.pause(1);
    let majority_at = minority_at + TimeDelta::seconds(10);
    sleep_until(majority_at - TimeDelta::milliseconds(500));
    // Phase 2: a majority down.
    masters.pause(2);
    masters.pause(3);
    let back_at = majority_at + TimeDelta::seconds(6);
    sleep_until(back_at - TimeDelta::milliseconds(500));
    // Phase 3: all back; master 0 without its data.
    masters.restart_empty(0);
    for i in 1..4 {
        masters.resume(i);
    }
    let to = back_at + TimeDelta::seconds(8);
    sleep_until(to + TimeDelta::seconds(3));

    let runs: Vec<_> = fleet
        .runs()
        .into_iter()
        .filter(|run| run.at().is_some_and(|at| at >= minority_at && at <= to))
        .collect();
    let decisions = fleet.decisions(&["tick"]);
    // Phase 1 alone: nothing missed, nothing twice.
    let phase1 = audit(
        &runs,
        &decisions,
        &[tick.window(minority_at, majority_at - TimeDelta::seconds(1))],
    );
    println!("redlock, minority down: {phase1}");
    assert!(
        phase1.is_clean() && phase1.skipped.is_empty(),
        "{phase1}\n{}",
        fleet.logs()
    );
    // Phase 2: nothing ran.
    let during: Vec<_> = runs
        .iter()
        .filter(|run| {
            run.at().is_some_and(|at| {
                at >= majority_at + TimeDelta::seconds(1) && at < back_at - TimeDelta::seconds(1)
            })
        })
        .collect();
    assert!(during.is_empty(), "ran without a majority: {during:?}");
    // The whole window: no duplicate, no overlap, fences grow.
    let mut whole: Window = tick.window(minority_at, to);
    for at in whole.occurrences() {
        if at >= majority_at - TimeDelta::seconds(1) && at <= back_at + TimeDelta::seconds(3) {
            whole.may_miss.insert(at);
        }
    }
    let report = audit(&runs, &decisions, &[whole]);
    println!("redlock, whole window: {report}");
    assert!(report.is_clean(), "{report}\n{}", fleet.logs());
    assert!(
        runs.iter().any(|run| run
            .at()
            .is_some_and(|at| at > back_at + TimeDelta::seconds(3))),
        "runs resumed once a majority was back"
    );
    // Phase 2's occurrences are in the (merged) history, as missed.
    let phase2 = tick.window(
        majority_at + TimeDelta::seconds(1),
        back_at - TimeDelta::seconds(1),
    );
    let history = history_exactly_once(&decisions, &[phase2]);
    assert!(history.absent.is_empty(), "{history:?}");
    assert!(fleet.all_alive());
    // Every command works on the merged masters.
    let status = fleet.cli(&["status", "--json"]);
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).expect("status --json");
    assert_eq!(
        status["nodes"].as_array().map(Vec::len),
        Some(3),
        "{status:#}"
    );
    let (trigger, printed) = fleet.trigger_when_free("tick", Duration::from_secs(30));
    assert_eq!(trigger.status.code(), Some(0), "{printed}");
}

/// Three nodes claiming the same occurrence at the same instant split the
/// five masters (2–2–1 at worst): exactly one of them must win it in the
/// end, every time. Before the fix each saw the others' fresh grants as
/// "decided" and all three gave up (387 of 1,995 occurrences in the claim
/// benchmark had no winner). The daemon's own claim code, retried as the
/// daemon retries it (`NoQuorum`: undo, random pause, again).
#[test]
fn three_nodes_claiming_at_once_always_leave_one_winner() {
    use solocron::config::{RedisConfig, RedisMode};
    use solocron::lock::{Claim, Locker, Target, new_token};

    let masters = Masters::start(5);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let config = RedisConfig {
        url: String::new(),
        mode: RedisMode::Redlock {
            urls: masters.urls(),
        },
        wait_replicas: 0,
        wait_timeout: Duration::from_millis(250),
        username: None,
        password: None,
        key_prefix: "split".to_string(),
        tls: Default::default(),
    };
    let occurrences = 300;
    let (winners, undecided) = runtime.block_on(async {
        let mut lockers = Vec::new();
        for node in ["n1", "n2", "n3"] {
            let coordinator = solocron::coordinator::connect(&config).expect("connect");
            let locker = Locker::new(coordinator, "split", node, 100);
            locker.load_scripts().await.expect("scripts");
            lockers.push(std::sync::Arc::new(locker));
        }
        let at_ms = chrono::Utc::now().timestamp_millis() - 1_000;
        let deadline_ms = chrono::Utc::now().timestamp_millis() + 20_000;
        // Every claim a task of its own on the multi-threaded runtime, all
        // at once: the masters see the three nodes' claims of a job in
        // different orders, which is what splits them.
        let mut tasks = Vec::new();
        for i in 0..occurrences {
            // A job of its own each time: nothing is released here.
            let job = format!("job{i}");
            for locker in &lockers {
                let (locker, job) = (std::sync::Arc::clone(locker), job.clone());
                tasks.push(tokio::spawn(async move {
                    let target = Target::Scheduled {
                        at: chrono::DateTime::from_timestamp_millis(at_ms).expect("an instant"),
                        deadline_ms,
                    };
                    let token = new_token();
                    for _ in 0..100 {
                        match locker
                            .claim(&job, &target, &token, Duration::from_secs(10))
                            .await
                        {
                            Ok(Claim::Won(_)) => return (i, Some(true)),
                            Ok(_) => return (i, Some(false)),
                            Err(_) => {
                                // A random back-off, so the contenders do not retry in step.
                                let pause = 5 + rand::random::<u64>() % 20;
                                tokio::time::sleep(Duration::from_millis(pause)).await;
                            }
                        }
                    }
                    (i, None)
                }));
            }
        }
        let mut winners = vec![0usize; occurrences];
        let mut undecided = 0;
        for task in tasks {
            let (i, answer) = task.await.expect("claim task");
            match answer {
                Some(true) => winners[i] += 1,
                Some(false) => {}
                None => undecided += 1,
            }
        }
        (winners, undecided)
    });
    assert_eq!(undecided, 0, "every claim came to an answer: {winners:?}");
    assert!(
        winners.iter().all(|won| *won == 1),
        "exactly one winner per occurrence: {winners:?}"
    );
}

/// Five nodes claiming 20 every-second jobs at the same instants, with the
/// first master by address (the one every claim goes to first) killed and
/// the second paused for 20 s, then both back (the killed one empty): not
/// one occurrence missed or run twice, and the merged history names every
/// occurrence exactly once. Before the claims took an order (the lead),
/// the nodes split the three masters left 1–1–1 and 2–1 again and again
/// until the deadline passed; and the paused master, resumed, ran the
/// claims queued in its socket, kept their locks and recorded `skipped`
/// for the next occurrences beside the runs the others recorded.
#[test]
fn five_nodes_lose_nothing_with_the_lead_master_killed_and_the_next_paused() {
    let mut masters = Masters::start(5);
    let urls = masters.urls();
    let quoted: Vec<String> = urls.iter().map(|url| format!("\"{url}\"")).collect();
    let redis = format!("redlock = [{}]", quoted.join(", "));
    let mut by_address: Vec<usize> = (0..urls.len()).collect();
    by_address.sort_by(|&a, &b| urls[a].cmp(&urls[b]));
    let (lead, next) = (by_address[0], by_address[1]);
    let jobs: Vec<JobSpec> = (0..20)
        .map(|i| {
            JobSpec::new(&format!("tick{i:02}"), "* * * * * *", 0.005)
                .with("lock_ttl = \"3s\"")
                .with("starting_deadline = \"2s\"")
        })
        .collect();
    let mut fleet = Fleet::new(&redis, "", &jobs);
    for id in ["n1", "n2", "n3", "n4", "n5"] {
        fleet.start_node(id);
    }
    let fault_at = whole_second_after(4, 1);
    sleep_until(fault_at - TimeDelta::milliseconds(500));
    masters.kill(lead);
    masters.pause(next);
    let back_at = fault_at + TimeDelta::seconds(20);
    sleep_until(back_at - TimeDelta::milliseconds(500));
    masters.resume(next);
    masters.restart_empty(lead);
    let to = back_at + TimeDelta::seconds(8);
    sleep_until(to + TimeDelta::seconds(4));

    let names: Vec<&str> = jobs.iter().map(|job| job.name.as_str()).collect();
    let decisions = fleet.decisions(&names);
    let windows: Vec<Window> = jobs.iter().map(|job| job.window(fault_at, to)).collect();
    let report = audit(&fleet.runs(), &decisions, &windows);
    println!("redlock, 5 nodes, lead killed and next paused: {report}");
    assert!(
        report.is_clean() && report.skipped.is_empty() && report.excused.is_empty(),
        "{report}\n{}",
        fleet.logs()
    );
    let history = history_exactly_once(&decisions, &windows);
    assert!(history.is_exact(), "{history:?}");
    assert!(fleet.all_alive());
}

/// `redlock = [127.0.0.1:A, localhost:A, 127.0.0.1:B]`: two URLs that the
/// config check cannot tell apart reach one server, which would count
/// twice towards the majority (2 of 3 on A alone: A down stops every job,
/// A restarted empty forgets a majority's grants). The daemon compares the
/// masters' `run_id`s before its first claim and stops with exit 78,
/// naming both URLs and the file; nothing runs, nothing is recorded.
/// Before the fix it started and ran every occurrence on "a majority"
/// that was one server.
#[test]
fn one_master_listed_under_two_names_stops_the_daemon_before_any_claim() {
    let masters = Masters::start(2);
    let ports = masters.ports();
    let (a, b) = (ports[0], ports[1]);
    let redis = format!(
        "redlock = [\"redis://127.0.0.1:{a}/\", \"redis://localhost:{a}/\", \"redis://127.0.0.1:{b}/\"]"
    );
    let tick = JobSpec::new("tick", "* * * * * *", 0.005).with("starting_deadline = \"2s\"");
    let fleet = Fleet::new(&redis, "", std::slice::from_ref(&tick));
    let config = common::toml_path(&fleet.work.path("jobs.toml"));
    let mut node = common::Node::start_with_args(&fleet.work, "n1", &["--config", &config], &[]);
    let exit = node.wait_exit(Duration::from_secs(20));
    let log = node.log();
    assert_eq!(exit.code(), Some(78), "{log}");
    let lines: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("are the same redis server"))
        .collect();
    assert_eq!(lines.len(), 1, "one clear line:\n{log}");
    for needle in [
        format!("redis://localhost:{a}/"),
        format!("redis://127.0.0.1:{a}/"),
        config.clone(),
        "list each master once".to_string(),
    ] {
        assert!(lines[0].contains(&needle), "`{needle}` missing:\n{log}");
    }
    assert!(fleet.runs().is_empty(), "ran on one server's \"majority\"");
    for i in 0..masters.len() {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("*tick*")
            .query(&mut masters.conn(i))
            .expect("KEYS");
        assert!(keys.is_empty(), "master {i} has a decision: {keys:?}");
    }
}

/// One Redlock master whose password differs from the others' (a rotation
/// half done): the daemon stops at start (exit 78) as for any refusal, and
/// its line names the master that refused, so the operator knows which of
/// the N to fix. Before the fix it said only "refused node `n1` at start:
/// Password authentication failed", after the list of all three URLs.
#[test]
fn a_master_with_another_password_is_named_when_it_refuses_the_daemon() {
    let masters = Masters::start(3);
    for (i, password) in ["right-s3cret", "right-s3cret", "other-s3cret"]
        .iter()
        .enumerate()
    {
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("requirepass")
            .arg(password)
            .exec(&mut masters.conn(i))
            .expect("CONFIG SET requirepass");
    }
    let urls = masters.urls();
    let secrets = tempfile::tempdir().expect("temp dir");
    let file = secrets.path().join("redis.pass");
    std::fs::write(&file, "right-s3cret\n").expect("write the password file");
    let quoted: Vec<String> = urls.iter().map(|url| format!("\"{url}\"")).collect();
    let redis = format!(
        "redlock = [{}]\npassword_file = \"{}\"",
        quoted.join(", "),
        common::toml_path(&file)
    );
    let tick = JobSpec::new("tick", "* * * * * *", 0.005).with("starting_deadline = \"2s\"");
    let fleet = Fleet::new(&redis, "", std::slice::from_ref(&tick));
    let config = common::toml_path(&fleet.work.path("jobs.toml"));
    let mut node = common::Node::start_with_args(&fleet.work, "n1", &["--config", &config], &[]);
    let exit = node.wait_exit(Duration::from_secs(20));
    let log = node.log();
    assert_eq!(exit.code(), Some(78), "{log}");
    let told: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("refused node"))
        .collect();
    assert_eq!(told.len(), 1, "{log}");
    assert!(
        told[0].contains(&format!("redlock master `{}`", urls[2])),
        "the refusing master is named:\n{log}"
    );
    assert!(!log.contains("s3cret"), "a password shows:\n{log}");
    assert!(fleet.runs().is_empty());
}

/// Lockers of `nodes` on Redlock `masters`, keys under `prefix`, their
/// scripts loaded.
async fn redlock_lockers(
    masters: &Masters,
    prefix: &str,
    nodes: &[&str],
) -> Vec<solocron::lock::Locker> {
    use solocron::config::{RedisConfig, RedisMode};

    let config = RedisConfig {
        url: String::new(),
        mode: RedisMode::Redlock {
            urls: masters.urls(),
        },
        wait_replicas: 0,
        wait_timeout: Duration::from_millis(250),
        username: None,
        password: None,
        key_prefix: prefix.to_string(),
        tls: Default::default(),
    };
    let mut lockers = Vec::new();
    for node in nodes {
        let coordinator = solocron::coordinator::connect(&config).expect("connect");
        let locker = solocron::lock::Locker::new(coordinator, prefix, node, 100);
        locker.load_scripts().await.expect("scripts");
        lockers.push(locker);
    }
    lockers
}

/// A paused occurrence recorded on every master by one node, then by
/// another: the second is told it was decided `paused` and by whom, which
/// its "occurrence already decided by another node" line prints (it printed
/// `decided_by= decision=` with nothing after them). The daemon's own call,
/// on three real masters.
#[test]
fn a_pause_recorded_by_another_node_names_that_node() {
    let masters = Masters::start(3);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let (first, second) = runtime.block_on(async {
        let lockers = redlock_lockers(&masters, "paused", &["n1", "n2"]).await;
        let at = chrono::Utc::now();
        let first = lockers[0]
            .record_paused("tick", at, "paused by ops")
            .await
            .expect("n1 records the pause");
        let second = lockers[1]
            .record_paused("tick", at, "paused by ops")
            .await
            .expect("n2 finds it decided");
        (first, second)
    });
    assert!(first.recorded, "{first:?}");
    assert!(!second.recorded, "{second:?}");
    assert_eq!(
        second.decided,
        Some(("paused".to_string(), "n1".to_string())),
        "{second:?}"
    );
}

/// What a rename's lock and skip need, on three real masters: the node
/// running the old name takes the new name's lock with a manual claim (a
/// scheduled claim of it is then `busy`), its holder reads back, the lock
/// goes without a record, and an occurrence recorded `skipped` unclaimed
/// is decided once.
#[test]
fn a_renamed_jobs_lock_and_skip_record_hold_on_redlock() {
    use solocron::lock::{Claim, Target, Unrun, new_token};

    let masters = Masters::start(3);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let lockers = redlock_lockers(&masters, "renamed", &["n1", "n2"]).await;
        let ttl = Duration::from_secs(5);
        let manual = Target::Rename {
            old: "long".to_string(),
        };
        let Claim::Won(lease) = lockers[0]
            .claim("long-job", &manual, &new_token(), ttl)
            .await
            .expect("claim")
        else {
            panic!("n1 takes the free lock of the new name");
        };
        assert_eq!(
            lockers[1].holder("long-job").await.expect("read"),
            Some("n1".to_string())
        );
        let at_ms = chrono::Utc::now().timestamp_millis();
        let busy = lockers[1]
            .claim("long-job", &common::scheduled(at_ms), &new_token(), ttl)
            .await
            .expect("claim");
        assert!(
            matches!(&busy, Claim::Busy { holder, .. } if holder == "n1"),
            "{busy:?}"
        );
        lockers[0].drop_lease(&lease).await;
        assert_eq!(lockers[1].holder("long-job").await.expect("read"), None);
        let next = chrono::DateTime::from_timestamp_millis(at_ms + 1000).expect("an instant");
        let why = "lock of `long` held by n1";
        let first = lockers[1]
            .record_unrun("long-job", next, why, Unrun::Skipped)
            .await
            .expect("n2 records the skip");
        let second = lockers[0]
            .record_unrun("long-job", next, why, Unrun::Skipped)
            .await
            .expect("n1 finds it decided");
        assert!(first.recorded, "{first:?}");
        assert_eq!(
            second.decided,
            Some(("skipped".to_string(), "n2".to_string())),
            "{second:?}"
        );
    });
}

#[test]
fn drift_on_redlock_is_found_from_the_stored_configs_and_ends_with_the_rollout() {
    use common::{Node, Workdir};
    let masters = Masters::start(3);
    let urls: Vec<String> = masters
        .urls()
        .iter()
        .map(|url| format!("\"{url}\""))
        .collect();
    let redis = format!("[redis]\nredlock = [{}]\n\n", urls.join(", "));
    let v1 = format!("{redis}[jobs.report]\nschedule = \"0 2 * * *\"\ncommand = \"echo v1\"\n");
    let v2 = format!("{redis}[jobs.report]\nschedule = \"0 3 * * *\"\ncommand = \"echo v1\"\n");
    let (one, two) = (Workdir::new(), Workdir::new());
    one.write_config(&v1);
    two.write_config(&v2);
    let config = |work: &Workdir| common::toml_path(&work.path("jobs.toml"));
    let n1 = Node::start_with_args(&one, "n1", &["--config", &config(&one)], &[]);
    let n2 = Node::start_with_args(&two, "n2", &["--config", &config(&two)], &[]);
    for node in [&n1, &n2] {
        node.wait_for_log(
            Duration::from_secs(30),
            "job definition differs between nodes",
        );
        let log = node.log();
        let line = log
            .lines()
            .find(|line| line.contains("job definition differs"))
            .expect("waited for it");
        assert!(
            line.contains("job=report") && line.contains("n1") && line.contains("n2"),
            "names the nodes on each side: {line}"
        );
    }
    // n2 finishes the rollout: it leaves its old config on every master.
    two.write_config(&v1);
    n2.signal("HUP");
    n1.wait_for_log(
        Duration::from_secs(30),
        "all live nodes agree on every job definition again",
    );
    // Each config's jobs are stored once, on every master.
    for i in 0..masters.len() {
        let stored: Vec<String> = redis::cmd("ZRANGE")
            .arg("{solocron}:configs")
            .arg(0)
            .arg(-1)
            .query(&mut masters.conn(i))
            .expect("ZRANGE");
        assert_eq!(stored.len(), 1, "master {i}: {stored:?}");
    }
}
