//! `solocron abort` with real daemons and real jobs:
//!
//! - a run that ignores SIGTERM, on whichever of two nodes won it, is
//!   stopped from the command line of neither (SIGTERM, then SIGKILL 10 s
//!   later), recorded `aborted` with who and why, not retried; exit 0;
//! - nothing running: exit 3, nothing written to the history;
//! - a `trigger --fleet` run is aborted the same way;
//! - an abort racing the run's own end says what happened: exit 0 and an
//!   `aborted` entry, or exit 3 and a `succeeded` one, never a mix;
//! - a pending retry is cancelled, recorded `aborted`, and never runs.
//!
//! What breaks it: a node that does not read the aborts (the command
//! times out, exit 1), a run killed at once instead of after its grace, an
//! aborted run retried, a cancelled retry run all the same.

use crate::common;

use std::time::{Duration, Instant};

use common::cluster::{Cluster, JobSpec, wait_gone, whole_second_after};
use common::{Node, RedisServer, Workdir, wait_until};

/// `name`, due once a minute `lead` seconds from now, working `seconds`.
fn once_soon(name: &str, lead: i64, seconds: f64) -> JobSpec {
    let at = whole_second_after(lead, 1);
    let second = at.timestamp().rem_euclid(60);
    JobSpec::new(name, &format!("{second} * * * * *"), seconds)
}

fn entries(cluster: &Cluster, job: &str) -> Vec<serde_json::Value> {
    let out = cluster.cli(&["history", job, "--json"]);
    serde_json::from_slice::<Vec<serde_json::Value>>(&out.stdout).unwrap_or_default()
}

#[test]
fn abort_stops_a_run_ignoring_sigterm_records_who_and_why_and_no_retry() {
    let long = once_soon("long", 5, 60.0)
        .ignoring_term()
        .with("retries = 2")
        .with("retry_backoff = \"1s\"");
    let mut cluster = Cluster::new(RedisServer::start(), "", std::slice::from_ref(&long));
    cluster.start_node("n1", &[]);
    cluster.start_node("n2", &[]);
    let run = cluster.wait_for_run(Duration::from_secs(20), "long starts", |run| {
        run.job == "long"
    });
    let asked = Instant::now();
    let out = cluster.cli(&["abort", "long", "--reason", "hammering the db"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{said}\n{}", cluster.logs());
    assert!(
        said.contains(&format!("job `long` aborted on node `{}`", run.node))
            && said.contains("hammering the db"),
        "{said}"
    );
    wait_gone(run.pid, Duration::from_secs(1));
    // It ignored SIGTERM: only the SIGKILL 10 s later stopped it.
    assert!(
        asked.elapsed() >= Duration::from_secs(10),
        "stopped after {:?}: SIGKILL came before the grace",
        asked.elapsed()
    );
    let history = entries(&cluster, "long");
    let aborted: Vec<&serde_json::Value> = history
        .iter()
        .filter(|entry| entry["fence"] == run.fence && entry["outcome"] != "skipped")
        .collect();
    assert_eq!(aborted.len(), 1, "{history:#?}");
    assert_eq!(aborted[0]["outcome"], "aborted");
    let error = aborted[0]["error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with("aborted by ") && error.ends_with(": hammering the db"),
        "{error}"
    );
    // Not retried: no second attempt within its 1 s backoff and more.
    std::thread::sleep(Duration::from_secs(3));
    let attempts = cluster.runs().iter().filter(|r| r.job == "long").count();
    assert_eq!(
        attempts,
        1,
        "an aborted run was retried\n{}",
        cluster.logs()
    );
    assert!(
        cluster
            .node(&run.node)
            .log()
            .contains("run aborted by an operator"),
        "{}",
        cluster.logs()
    );
    // Nothing running now: exit 3, and nothing more in the history.
    let out = cluster.cli(&["abort", "long"]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("nothing to abort"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(entries(&cluster, "long").len(), history.len());
}

#[test]
fn abort_stops_a_trigger_fleet_run_and_a_race_with_the_end_never_lies() {
    let manual = JobSpec::new("manual", "0 0 1 1 *", 30.0);
    let short = JobSpec::new("short", "* * * * * *", 1.0).with("lock_ttl = \"3s\"");
    let mut cluster = Cluster::new(RedisServer::start(), "", &[manual, short]);
    cluster.start_node("n1", &[]);
    // A `trigger --fleet` run, aborted while it runs.
    let config = common::toml_path(&cluster.work.path("jobs.toml"));
    let url = cluster.redis.url();
    let trigger = std::process::Command::new(common::solocron_bin())
        .args([
            "trigger", "manual", "--fleet", "--config", &config, "--redis", &url,
        ])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("trigger --fleet");
    let run = cluster.wait_for_run(Duration::from_secs(15), "the manual run starts", |run| {
        run.job == "manual"
    });
    let out = cluster.cli(&["abort", "manual", "--reason", "wrong day"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_gone(run.pid, Duration::from_secs(2));
    let told = trigger.wait_with_output().expect("trigger --fleet ends");
    let told = String::from_utf8_lossy(&told.stderr);
    assert!(
        told.contains("aborted"),
        "trigger --fleet says how it ended: {told}"
    );
    // Racing the end: abort a 1 s run 0.9 s after it started, a few times.
    for _ in 0..3 {
        let run = cluster.wait_for_run(Duration::from_secs(5), "a short run", |run| {
            run.job == "short" && run.end_ns.is_none()
        });
        let since_start = common::audit::now_ns() - run.start_ns;
        let left = 900_000_000i128 - since_start;
        if left > 0 {
            std::thread::sleep(Duration::from_nanos(left as u64));
        }
        let out = cluster.cli(&["abort", "short"]);
        let said = String::from_utf8_lossy(&out.stderr).to_string();
        let mut outcome = String::new();
        wait_until(Duration::from_secs(15), "the run's entry", || {
            outcome = entries(&cluster, "short")
                .iter()
                .find(|entry| entry["fence"] == run.fence && entry["outcome"] != "skipped")
                .map(|entry| entry["outcome"].as_str().unwrap_or_default().to_string())
                .unwrap_or_default();
            !outcome.is_empty()
        });
        match out.status.code() {
            Some(0) => assert_eq!(outcome, "aborted", "{said}"),
            Some(3) => assert!(
                outcome == "succeeded" || said.contains("nothing to abort"),
                "exit 3 but the run ended `{outcome}`: {said}"
            ),
            other => panic!("abort exited {other:?}: {said}\n{}", cluster.logs()),
        }
    }
}

#[test]
fn abort_cancels_a_pending_retry_which_then_never_runs() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    let at = whole_second_after(4, 1);
    let second = at.timestamp().rem_euclid(60);
    let ran = common::toml_path(&work.path("ran"));
    work.write_config(&format!(
        r#"
[jobs.flaky]
schedule = "{second} * * * * *"
command = 'echo "$SOLOCRON_ATTEMPT" >> {ran}; exit 1'
retries = 1
retry_backoff = "6s"
"#
    ));
    let node = Node::start(&work, &redis, "n1", &[]);
    let history = || -> Vec<serde_json::Value> {
        let out = std::process::Command::new(common::solocron_bin())
            .args(["history", "flaky", "--json", "--redis", &redis.url()])
            .output()
            .expect("history");
        serde_json::from_slice(&out.stdout).unwrap_or_default()
    };
    // Recorded, with its retry pending (the release marks it so).
    wait_until(Duration::from_secs(20), "the first attempt failed", || {
        history().iter().any(|entry| entry["outcome"] == "failed")
    });
    let out = std::process::Command::new(common::solocron_bin())
        .args(["abort", "flaky", "--reason", "known broken"])
        .args([
            "--config",
            &common::toml_path(&work.path("jobs.toml")),
            "--redis",
            &redis.url(),
        ])
        .output()
        .expect("abort");
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{said}\n{}", node.log());
    assert!(
        said.contains("pending retry") && said.contains("attempt 2"),
        "{said}"
    );
    // Past the backoff: the second attempt never ran.
    std::thread::sleep(Duration::from_secs(8));
    let attempts = work.lines("ran");
    assert_eq!(attempts, vec!["1".to_string()], "{}", node.log());
    let history = history();
    let cancelled = history
        .iter()
        .find(|entry| entry["outcome"] == "aborted")
        .unwrap_or_else(|| panic!("{history:#?}"));
    assert_eq!(cancelled["attempt"], 2, "{cancelled}");
    assert!(
        cancelled["error"]
            .as_str()
            .is_some_and(|error| error.ends_with("known broken")),
        "{cancelled}"
    );
}

/// An occurrence waiting for room in its group is aborted without its
/// process ever starting. Breaks if the abort waited for the room (the
/// command times out) or started the job first.
#[test]
fn abort_of_a_run_waiting_for_room_never_starts_it() {
    let hold = once_soon("hold", 5, 30.0)
        .with("group = \"g\"")
        .with("lock_ttl = \"3s\"");
    let waiting = once_soon("waiting", 6, 1.0)
        .with("group = \"g\"")
        .with("starting_deadline = \"20s\"");
    let groups = "\n[groups.g]\nmax_running = 1\nwhen_full = \"wait\"\n";
    let mut cluster = Cluster::new(RedisServer::start(), groups, &[hold, waiting]);
    cluster.start_node("n1", &[]);
    cluster.wait_for_run(Duration::from_secs(20), "hold starts", |run| {
        run.job == "hold"
    });
    wait_until(Duration::from_secs(10), "waiting waits for room", || {
        cluster
            .node("n1")
            .log()
            .contains("group full: waiting for room")
    });
    let out = cluster.cli(&["abort", "waiting", "--reason", "not today"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{said}\n{}", cluster.logs());
    assert!(
        said.contains("while it waited for room in its group"),
        "{said}"
    );
    assert!(
        cluster.runs().iter().all(|run| run.job != "waiting"),
        "the aborted occurrence started\n{}",
        cluster.logs()
    );
}
