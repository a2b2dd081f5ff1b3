//! A fleet over time, with real daemons on a real Redis: what an operator
//! does on day 10 rather than at minute 1. Draining node after node until
//! none is left says that nothing runs any more (the command and
//! `status`), instead of "the other nodes take them". A node whose clock
//! stays off warns once (then every 5 minutes), not at every measurement,
//! and says when it is right again. A node started with its wall clock a
//! day off (a VM booted before NTP) runs its occurrences at Redis's
//! instants (and `status` shows it started then, not tomorrow), and one
//! whose clock is stepped a day ahead records its runs
//! at the true time, in `history` and in the last-success gauge; a
//! `pause --for` stops its pending retries and is logged as in effect.

use crate::common;

use std::process::{Command, Output};
use std::time::Duration;

use chrono::{DateTime, Utc};
use common::{
    Node, RedisServer, Workdir, faketime_env, faketime_file_env, free_port, scrape_metrics,
    solocron_bin, toml_path, wait_until,
};

/// `solocron ARGS --config jobs.toml`.
fn cli(work: &Workdir, args: &[&str]) -> Output {
    Command::new(solocron_bin())
        .args(args)
        .args(["--config", &toml_path(&work.path("jobs.toml"))])
        .env_remove("SOLOCRON_CONFIG")
        .env_remove("SOLOCRON_REDIS_URL")
        .env_remove("SOLOCRON_NODE_ID")
        .env_remove("SOLOCRON_LOG")
        .env("USER", "tester")
        .output()
        .expect("run solocron")
}

/// Stdout and stderr of a command that must have exited 0.
fn ok(output: &Output) -> (String, String) {
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    );
    assert!(
        output.status.success(),
        "exit {:?}\nstdout: {stdout}\nstderr: {stderr}",
        output.status.code()
    );
    (stdout, stderr)
}

fn status_text(work: &Workdir) -> String {
    ok(&cli(work, &["status"])).0
}

#[test]
fn draining_every_live_node_says_that_no_job_runs_until_an_undrain() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    work.write_config(&format!(
        "[redis]\nurl = \"{}\"\n\n[jobs.tick]\nschedule = \"* * * * * *\"\ncommand = \"true\"\n",
        redis.url()
    ));
    let _n1 = Node::start(&work, &redis, "n1", &[]);
    let _n2 = Node::start(&work, &redis, "n2", &[]);
    wait_until(Duration::from_secs(15), "status lists both nodes", || {
        status_text(&work).contains("NODES (2 live)")
    });

    // One of two: the other takes its occurrences, as the message says.
    let (said, warned) = ok(&cli(&work, &["drain", "--node", "n1"]));
    assert!(said.contains("(the other nodes take them)"), "{said}");
    assert!(!warned.contains("warning"), "{warned}");
    assert!(!status_text(&work).contains("NO JOB RUNS"));

    // The last one: nobody is left to take them, and both say so.
    let (said, warned) = ok(&cli(&work, &["drain", "--node", "n2"]));
    assert!(!said.contains("the other nodes take them"), "{said}");
    assert!(said.contains("no live node is left to take them"), "{said}");
    assert!(
        warned.contains("warning: every live node is drained now (n1, n2): no node claims")
            && warned.contains("`solocron undrain --node ID`"),
        "{warned}"
    );
    let status = status_text(&work);
    assert!(
        status.contains("NO JOB RUNS: every live node is drained"),
        "{status}"
    );

    // One undrained node runs the jobs again: the line goes away.
    ok(&cli(&work, &["undrain", "--node", "n1"]));
    let status = status_text(&work);
    assert!(!status.contains("NO JOB RUNS"), "{status}");
}

#[test]
fn a_clock_that_stays_off_is_warned_once_not_at_every_measurement_and_its_end_is_said() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    work.write_config(&format!(
        "[redis]\nurl = \"{}\"\n\n[jobs.x]\nschedule = \"@hourly\"\ncommand = \"true\"\n",
        redis.url()
    ));
    let offset = work.path("faketime");
    std::fs::write(&offset, "+2\n").expect("write the offset");
    let mut env = faketime_file_env(&offset);
    env.push(("SOLOCRON_LOG".to_string(), "debug".to_string()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let node = Node::start(&work, &redis, "skewed", &env);
    // Measured at start, then 1, 2 and 4 s apart: four measurements, each
    // a line (the warning, or the debug line of a check).
    let warnings = || node.log().matches("clock differs from redis").count();
    let measured = || warnings() + node.log().matches("clock checked against redis").count();
    wait_until(Duration::from_secs(20), "four clock measurements", || {
        measured() >= 4
    });
    assert_eq!(warnings(), 1, "{}", node.log());
    assert!(node.log().contains("said again every 5m while it lasts"));
    std::fs::write(&offset, "+0\n").expect("write the offset");
    node.wait_for_log(Duration::from_secs(10), "clock agrees with redis again");
    assert_eq!(warnings(), 1, "{}", node.log());
}

/// `solocron history tick --json` as (occurrence, started_at, finished_at).
fn tick_runs(work: &Workdir) -> Vec<(DateTime<Utc>, DateTime<Utc>, DateTime<Utc>)> {
    let (json, _) = ok(&cli(
        work,
        &["history", "tick", "--json", "--limit", "1000"],
    ));
    let entries: serde_json::Value = serde_json::from_str(&json).expect("history --json");
    let at = |entry: &serde_json::Value, key: &str| {
        DateTime::parse_from_rfc3339(entry[key].as_str().unwrap_or_default())
            .map(|at| at.with_timezone(&Utc))
            .unwrap_or_else(|err| panic!("{key} of {entry}: {err}"))
    };
    entries
        .as_array()
        .expect("an array")
        .iter()
        .filter(|entry| entry["outcome"] == "succeeded")
        .map(|entry| {
            (
                at(entry, "occurrence"),
                at(entry, "started_at"),
                at(entry, "finished_at"),
            )
        })
        .collect()
}

/// Every run started and ended within 5 s after its occurrence.
fn assert_at_true_time(runs: &[(DateTime<Utc>, DateTime<Utc>, DateTime<Utc>)]) {
    for (occurrence, started, finished) in runs {
        let late = |at: &DateTime<Utc>| (*at - *occurrence).num_milliseconds();
        assert!(
            (0..5_000).contains(&late(started)) && (0..5_000).contains(&late(finished)),
            "occurrence {occurrence}: started {started}, finished {finished}"
        );
    }
}

fn tick_config(work: &Workdir, redis: &RedisServer, metrics_port: u16) {
    work.write_config(&format!(
        "[redis]\nurl = \"{}\"\n\n[daemon]\nmetrics_listen = \"127.0.0.1:{metrics_port}\"\n\n\
         [jobs.tick]\nschedule = \"* * * * * *\"\ncommand = \"true\"\n",
        redis.url()
    ));
}

#[test]
fn a_node_started_with_its_clock_a_day_ahead_runs_its_occurrences_at_redis_instants() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    tick_config(&work, &redis, free_port());
    let env = faketime_env("+1d");
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let node = Node::start(&work, &redis, "ahead", &env);
    wait_until(Duration::from_secs(15), "the node runs tick", || {
        tick_runs(&work).len() >= 3
    });
    assert_at_true_time(&tick_runs(&work));
    // `status` shows it started a moment ago, not tomorrow.
    let (json, _) = ok(&cli(&work, &["status", "--json"]));
    let status: serde_json::Value = serde_json::from_str(&json).expect("status --json");
    let started = status["nodes"][0]["started_at"]
        .as_str()
        .unwrap_or_default();
    let started = DateTime::parse_from_rfc3339(started)
        .unwrap_or_else(|err| panic!("started_at of {status}: {err}"));
    let ago = (Utc::now() - started.with_timezone(&Utc)).num_seconds();
    assert!((0..60).contains(&ago), "started_at {started}: {ago} s ago");
    assert!(
        node.log()
            .contains("schedule computed again by redis's clock"),
        "{}",
        node.log()
    );
}

#[test]
fn a_node_whose_clock_is_stepped_a_day_ahead_records_its_runs_at_the_true_time() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    let metrics_port = free_port();
    tick_config(&work, &redis, metrics_port);
    let offset = work.path("faketime");
    std::fs::write(&offset, "+0\n").expect("write the offset");
    let env = faketime_file_env(&offset);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let node = Node::start(&work, &redis, "stepped", &env);
    wait_until(Duration::from_secs(15), "a first run", || {
        !tick_runs(&work).is_empty()
    });
    std::fs::write(&offset, "+1d\n").expect("write the offset");
    node.wait_for_log(
        Duration::from_secs(10),
        "clock offset against redis changed",
    );
    let before = tick_runs(&work).len();
    wait_until(Duration::from_secs(15), "three runs after the step", || {
        tick_runs(&work).len() >= before + 3
    });
    assert_at_true_time(&tick_runs(&work));
    let body = scrape_metrics(metrics_port);
    let last = body
        .lines()
        .find_map(|line| {
            line.strip_prefix(r#"solocron_last_success_timestamp_seconds{job="tick"} "#)
        })
        .and_then(|value| value.trim().parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no last success in {body}"));
    let now = Utc::now().timestamp_millis() as f64 / 1000.0;
    assert!(
        (now - 60.0..=now + 5.0).contains(&last),
        "last success {last}, now {now}"
    );
}

#[test]
fn a_node_a_day_ahead_sees_a_pause_for_an_hour_and_drops_the_pending_retries() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    work.write_config(&format!(
        "[redis]\nurl = \"{}\"\n\n[jobs.flaky]\nschedule = \"*/15 * * * * *\"\n\
         command = \"exit 1\"\nretries = 2\nretry_backoff = \"3s\"\n",
        redis.url()
    ));
    let env = faketime_env("+1d");
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let node = Node::start(&work, &redis, "ahead", &env);
    let attempts = || -> Vec<u64> {
        let (json, _) = ok(&cli(&work, &["history", "flaky", "--json"]));
        let entries: serde_json::Value = serde_json::from_str(&json).expect("history --json");
        entries
            .as_array()
            .expect("an array")
            .iter()
            .filter_map(|entry| entry["attempt"].as_u64())
            .collect()
    };
    wait_until(Duration::from_secs(25), "a first failed attempt", || {
        attempts().contains(&1)
    });
    ok(&cli(&work, &["pause", "flaky", "--for", "1h"]));
    node.wait_for_log(Duration::from_secs(5), "job paused fleet-wide");
    node.wait_for_log(Duration::from_secs(10), "retry dropped");
    assert!(
        node.log()
            .lines()
            .any(|line| line.contains("retry dropped") && line.contains("the job is paused")),
        "{}",
        node.log()
    );
    assert_eq!(attempts(), vec![1], "{}", node.log());
}
