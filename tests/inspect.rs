//! `solocron status` and `solocron history` (the real binary) against a real
//! redis-server and real `solocron run` processes: the output names the node
//! that really ran each occurrence, checked against the job's own record.
//!
//! The daemons in this tree do not publish themselves to the node registry
//! yet, so the tests publish nodes (`t-a`, `t-b`) with
//! `solocron::registry::publish`, under ids no daemon uses.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use common::{Node, RedisServer, RunRecord, Workdir, free_port, records, toml_path, wait_until};
use serde_json::Value;
use solocron::config::RedisConfig;
use solocron::registry::{self, NodeInfo};

const NODES: [&str; 3] = ["n1", "n2", "n3"];
const HISTORY_KEYS: [&str; 10] = [
    "job",
    "occurrence",
    "node",
    "fence",
    "outcome",
    "exit_code",
    "http_status",
    "started_at",
    "finished_at",
    "duration_ms",
];

/// Runs `solocron ARGS --config jobs.toml --redis URL` to completion.
fn solocron(work: &Workdir, url: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_solocron"))
        .args(args)
        .arg("--config")
        .arg(work.path("jobs.toml"))
        .args(["--redis", url])
        .env_remove("SOLOCRON_LOG_FORMAT")
        .env_remove("SOLOCRON_NODE_ID")
        .output()
        .expect("run solocron")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Runs a `--json` command, asserts exit 0 and parses its stdout.
fn json(work: &Workdir, redis: &RedisServer, args: &[&str]) -> Value {
    let output = solocron(work, &redis.url(), args);
    assert!(
        output.status.success(),
        "`solocron {args:?}` failed: {output:?}"
    );
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|err| panic!("`solocron {args:?}` printed no JSON ({err}): {output:?}"))
}

fn history(work: &Workdir, redis: &RedisServer, args: &[&str]) -> Vec<Value> {
    let mut full = vec!["history", "--json"];
    full.extend_from_slice(args);
    match json(work, redis, &full) {
        Value::Array(entries) => entries,
        other => panic!("history --json must print an array, got {other}"),
    }
}

fn time(value: &Value) -> DateTime<Utc> {
    let text = value
        .as_str()
        .unwrap_or_else(|| panic!("a time, got {value}"));
    DateTime::parse_from_rfc3339(text)
        .unwrap_or_else(|err| panic!("`{text}` is not RFC 3339: {err}"))
        .with_timezone(&Utc)
}

fn of_job<'a>(entries: &'a [Value], job: &str) -> Vec<&'a Value> {
    entries.iter().filter(|e| e["job"] == job).collect()
}

/// Publishes `nodes` to the registry (prefix `solocron`), as a daemon would.
fn publish(redis: &RedisServer, nodes: &[NodeInfo]) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(async {
        let config = RedisConfig {
            url: redis.url(),
            password: None,
            key_prefix: "solocron".to_string(),
            tls: Default::default(),
        };
        let conn = solocron::daemon::connect(&config).expect("connection manager");
        for node in nodes {
            registry::publish(&conn, "solocron", node, &BTreeMap::new(), false)
                .await
                .expect("publish a node");
        }
    });
}

/// Two registry entries for the config at `path`: `t-a` agrees with it,
/// `t-b` has another definition of `tick`.
fn test_nodes(path: &Path) -> Vec<NodeInfo> {
    let config = solocron::config::load(path).expect("the test config is valid");
    let jobs: BTreeMap<String, String> = config
        .jobs
        .iter()
        .map(|job| (job.name.clone(), job.fingerprint()))
        .collect();
    let mut drifted = jobs.clone();
    drifted.insert("tick".to_string(), "0123456789ab".to_string());
    let node = |id: &str, jobs: BTreeMap<String, String>, offset| NodeInfo {
        node: id.to_string(),
        version: "0.1.0".to_string(),
        started_at: Utc::now().timestamp_millis() - 60_000,
        updated_at: 0,
        config_path: toml_path(path),
        config_hash: config.fingerprint(),
        clock_offset_ms: Some(offset),
        jobs,
        instance: format!("test-host:1:{id}"),
        collision: None,
    };
    vec![node("t-a", jobs, 12), node("t-b", drifted, -340)]
}

fn cluster_config(work: &Workdir) -> std::path::PathBuf {
    work.write_config(&format!(
        r#"
[jobs.tick]
schedule = "* * * * * *"
lock_ttl = "2s"
command = 'echo "$SOLOCRON_OCCURRENCE $SOLOCRON_NODE $SOLOCRON_FENCE" >> {}'

[jobs.fail]
schedule = "*/2 * * * * *"
lock_ttl = "2s"
command = "exit 3"

[jobs.slow]
schedule = "* * * * * *"
lock_ttl = "3s"
command = "sleep 1.5"

[jobs.never]
schedule = "0 0 1 1 *"
command = "true"
"#,
        toml_path(&work.path("runs"))
    ))
}

#[test]
fn history_and_status_name_the_node_that_really_ran_each_occurrence() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    let path = cluster_config(&work);
    let _nodes: Vec<Node> = NODES
        .iter()
        .map(|id| Node::start(&work, &redis, id, &[]))
        .collect();
    wait_until(
        Duration::from_secs(30),
        "5 ticks ran, `fail` failed and `slow` was skipped",
        || {
            records(&work.lines("runs")).len() >= 5
                && !common::history(&redis, "fail").is_empty()
                && common::history(&redis, "slow")
                    .iter()
                    .any(|e| e.get("outcome").map(String::as_str) == Some("skipped"))
        },
    );
    check_history(&work, &redis);
    check_status(&work, &redis, &path);
}

/// Every recorded run of `tick` is in the history with the same node and
/// fence (and the other way round); `fail` and `slow` show their outcomes.
fn check_history(work: &Workdir, redis: &RedisServer) {
    let recorded = records(&work.lines("runs"));
    let mut entries = Vec::new();
    wait_until(
        Duration::from_secs(10),
        "history lists every recorded run",
        || {
            entries = history(work, redis, &["--limit", "50"]);
            let ticks = of_job(&entries, "tick");
            recorded.iter().all(|r| {
                ticks
                    .iter()
                    .any(|e| e["occurrence"] == r.occurrence.as_str())
            })
        },
    );
    assert!(entries.len() <= 50);
    for entry in &entries {
        let keys: Vec<&str> = entry
            .as_object()
            .expect("objects")
            .keys()
            .map(String::as_str)
            .collect();
        let mut expected = HISTORY_KEYS;
        expected.sort();
        assert_eq!(keys, expected, "{entry}");
        assert!(
            NODES.contains(&entry["node"].as_str().expect("a node")),
            "{entry}"
        );
        assert!(entry["fence"].as_u64().is_some_and(|f| f > 0), "{entry}");
        assert!(
            time(&entry["started_at"]) <= time(&entry["finished_at"]),
            "{entry}"
        );
    }
    for pair in entries.windows(2) {
        assert!(
            time(&pair[0]["finished_at"]) >= time(&pair[1]["finished_at"]),
            "newest first: {pair:?}"
        );
    }
    // Both ways: the history names the node and fence the run itself saw.
    let again = records(&work.lines("runs"));
    for record in &recorded {
        let entry = of_job(&entries, "tick")
            .into_iter()
            .find(|e| e["occurrence"] == record.occurrence.as_str())
            .expect("checked above");
        assert_matches(entry, record);
    }
    let ticks = of_job(&entries, "tick");
    for entry in &ticks {
        let record = again
            .iter()
            .find(|r| entry["occurrence"] == r.occurrence.as_str())
            .unwrap_or_else(|| panic!("history has a tick that never ran: {entry}"));
        assert_matches(entry, record);
    }
    for pair in ticks.windows(2) {
        assert!(
            time(&pair[0]["occurrence"]) > time(&pair[1]["occurrence"]),
            "{pair:?}"
        );
    }
    let fails = of_job(&entries, "fail");
    assert!(!fails.is_empty(), "{entries:?}");
    for entry in fails {
        assert_eq!(entry["outcome"], "failed", "{entry}");
        assert_eq!(entry["exit_code"], 3, "{entry}");
        assert_eq!(entry["http_status"], Value::Null, "{entry}");
        assert!(entry["duration_ms"].is_u64(), "{entry}");
    }
    let slow = of_job(&entries, "slow");
    let skipped: Vec<_> = slow.iter().filter(|e| e["outcome"] == "skipped").collect();
    assert!(!skipped.is_empty(), "{slow:?}");
    for entry in skipped {
        assert_eq!(entry["duration_ms"], Value::Null, "{entry}");
        assert_eq!(entry["exit_code"], Value::Null, "{entry}");
    }
    assert!(of_job(&entries, "never").is_empty());
    check_history_options(work, redis);
}

fn assert_matches(entry: &Value, record: &RunRecord) {
    assert_eq!(entry["node"], record.node.as_str(), "{entry} vs {record:?}");
    assert_eq!(entry["fence"], record.fence, "{entry} vs {record:?}");
    assert_eq!(entry["outcome"], "succeeded", "{entry}");
    assert_eq!(entry["exit_code"], 0, "{entry}");
}

/// `--limit`, the JOB filter, `--since`, and the text table.
fn check_history_options(work: &Workdir, redis: &RedisServer) {
    let limited = history(work, redis, &["--limit", "3"]);
    assert_eq!(limited.len(), 3, "{limited:?}");
    let ticks = history(work, redis, &["tick", "--limit", "1000"]);
    assert!(ticks.len() >= 5, "{ticks:?}");
    assert!(ticks.iter().all(|e| e["job"] == "tick"), "{ticks:?}");
    let asked = Utc::now();
    let recent = history(work, redis, &["tick", "--since", "1s", "--limit", "1000"]);
    assert!(recent.len() < ticks.len(), "{recent:?}");
    for entry in &recent {
        let age = asked - time(&entry["finished_at"]);
        assert!(
            age < chrono::TimeDelta::milliseconds(1100),
            "older than 1s: {entry}"
        );
    }
    let output = solocron(work, &redis.url(), &["history", "tick", "--limit", "5"]);
    assert!(output.status.success(), "{output:?}");
    let text = stdout(&output);
    let mut lines = text.lines();
    let header = lines.next().expect("a header");
    for column in [
        "OCCURRENCE",
        "JOB",
        "NODE",
        "FENCE",
        "OUTCOME",
        "EXIT/HTTP",
        "DURATION",
    ] {
        assert!(header.contains(column), "{text}");
    }
    let rows: Vec<&str> = lines.collect();
    assert_eq!(rows.len(), 5, "{text}");
    let recorded = records(&work.lines("runs"));
    for row in rows {
        let occurrence = row.split_whitespace().next().expect("an occurrence");
        let record = recorded
            .iter()
            .find(|r| r.occurrence == occurrence)
            .unwrap_or_else(|| panic!("a row for a run that never happened: {row}"));
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(
            cells[1..5],
            ["tick", &record.node, &record.fence.to_string(), "succeeded"],
            "{row}"
        );
    }
}

/// Locks are held by real nodes, the last occurrence is the recorded one,
/// the next is in the future, published nodes and their drift are listed.
fn check_status(work: &Workdir, redis: &RedisServer, path: &Path) {
    publish(redis, &test_nodes(path));
    let mut status = Value::Null;
    wait_until(Duration::from_secs(10), "status shows `slow` held", || {
        status = json(work, redis, &["status", "--json"]);
        status["jobs"][2]["lock"].is_object()
    });
    let asked = Utc::now();
    let jobs = status["jobs"].as_array().expect("jobs");
    let names: Vec<&str> = jobs
        .iter()
        .map(|j| j["job"].as_str().expect("a name"))
        .collect();
    assert_eq!(names, ["tick", "fail", "slow", "never"]);
    for job in jobs {
        let lock = &job["lock"];
        if lock.is_object() {
            assert!(
                NODES.contains(&lock["node"].as_str().expect("a node")),
                "{job}"
            );
            assert!(lock["fence"].as_u64().is_some_and(|f| f > 0), "{job}");
            assert!(
                lock["held_for_ms"]
                    .as_i64()
                    .is_some_and(|ms| (0..10_000).contains(&ms)),
                "{job}"
            );
            assert!(
                lock["ttl_ms"]
                    .as_i64()
                    .is_some_and(|ms| (1..=3000).contains(&ms)),
                "{job}"
            );
        }
        let next = time(&job["next"]);
        assert!(next > asked - chrono::TimeDelta::seconds(1), "{job}");
        assert_eq!(time(&job["next_local"]), next, "{job}");
    }
    assert_eq!(jobs[3]["lock"], Value::Null);
    assert_eq!(jobs[3]["last"], Value::Null);
    assert!(time(&jobs[3]["next"]) > asked + chrono::TimeDelta::days(1));
    // The last decided tick is the one the record file names.
    let last = &jobs[0]["last"];
    let occurrence = last["occurrence"]
        .as_str()
        .expect("a last occurrence")
        .to_string();
    wait_until(
        Duration::from_secs(5),
        "the last tick wrote its record",
        || {
            records(&work.lines("runs"))
                .iter()
                .any(|r| r.occurrence == occurrence)
        },
    );
    let record = records(&work.lines("runs"))
        .into_iter()
        .find(|r| r.occurrence == occurrence)
        .expect("waited for it");
    assert_eq!(last["node"], record.node.as_str(), "{last}");
    assert_eq!(last["fence"], record.fence, "{last}");
    assert_eq!(last["decision"], "claimed", "{last}");
    assert!(
        ["running", "succeeded"].contains(&last["outcome"].as_str().unwrap_or("")),
        "{last}"
    );
    assert_eq!(
        jobs[1]["last"]["node"].as_str().map(|n| NODES.contains(&n)),
        Some(true)
    );
    // The published nodes, and the drift between them. (Daemons that
    // publish themselves may be listed too; they run the same config.)
    let nodes = status["nodes"].as_array().expect("nodes");
    let node = |id: &str| {
        nodes
            .iter()
            .find(|n| n["node"] == id)
            .unwrap_or_else(|| panic!("`{id}` is not listed: {nodes:?}"))
    };
    assert_eq!(node("t-a")["version"], "0.1.0");
    assert_eq!(node("t-a")["clock_offset_ms"], 12);
    assert_eq!(node("t-b")["clock_offset_ms"], -340);
    assert!(time(&node("t-a")["last_seen"]) > time(&node("t-a")["started_at"]));
    for other in nodes.iter().filter_map(|n| n["node"].as_str()) {
        assert!(
            ["t-a", "t-b"].contains(&other) || NODES.contains(&other),
            "{nodes:?}"
        );
    }
    let drift = status["divergences"].as_array().expect("divergences");
    assert_eq!(drift.len(), 1, "{drift:?}");
    assert_eq!(drift[0]["job"], "tick");
    let odd = drift[0]["sides"]
        .as_array()
        .expect("sides")
        .iter()
        .find(|side| side["fingerprint"] == "0123456789ab")
        .expect("t-b's side");
    assert_eq!(odd["nodes"], serde_json::json!(["t-b"]));
    // The text form says the same.
    let output = solocron(work, &redis.url(), &["status"]);
    assert!(output.status.success(), "{output:?}");
    let text = stdout(&output);
    for needle in [
        "JOB",
        "LOCK",
        "NEXT (UTC)",
        "NODES (",
        "t-a",
        "t-b",
        "-340ms",
        "CONFIG DRIFT",
        "0123456789ab: t-b",
    ] {
        assert!(text.contains(needle), "`{needle}` missing:\n{text}");
    }
    let never = text
        .lines()
        .find(|l| l.starts_with("never "))
        .expect("a row for `never`");
    assert!(never.contains("free"), "{text}");
}

#[test]
fn a_job_that_never_ran_has_no_history_and_an_unknown_job_gets_a_note() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    cluster_config(&work);
    let output = solocron(&work, &redis.url(), &["history", "never"]);
    assert!(output.status.success(), "{output:?}");
    assert_eq!(stdout(&output), "no history for job `never`\n");
    assert_eq!(history(&work, &redis, &["never"]), Vec::<Value>::new());
    let output = solocron(&work, &redis.url(), &["history", "ghost"]);
    assert!(output.status.success(), "{output:?}");
    assert!(
        stderr(&output).contains("job `ghost` is not in"),
        "{output:?}"
    );
    assert_eq!(stdout(&output), "no history for job `ghost`\n");
    // Nothing ran and no node published: everything free and unknown.
    let status = json(&work, &redis, &["status", "--json"]);
    for job in status["jobs"].as_array().expect("jobs") {
        assert_eq!(job["lock"], Value::Null, "{job}");
        assert_eq!(job["last"], Value::Null, "{job}");
    }
    assert_eq!(status["nodes"], serde_json::json!([]));
    assert_eq!(status["divergences"], serde_json::json!([]));
}

#[test]
fn status_and_history_exit_1_naming_the_redacted_url_when_redis_is_unreachable() {
    let work = Workdir::new();
    cluster_config(&work);
    let port = free_port();
    let url = format!("redis://:s3cret@127.0.0.1:{port}/");
    for args in [
        &["status"][..],
        &["status", "--json"],
        &["history"],
        &["history", "tick", "--json"],
    ] {
        let started = Instant::now();
        let output = solocron(&work, &url, args);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {output:?}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{args:?} took {:?}",
            started.elapsed()
        );
        let (out, err) = (stdout(&output), stderr(&output));
        assert!(
            err.contains(&format!("redis://:***@127.0.0.1:{port}/")),
            "{args:?} must name the redacted url: {err}"
        );
        assert!(
            !out.contains("s3cret") && !err.contains("s3cret"),
            "{args:?} leaked the password: {output:?}"
        );
        assert!(out.is_empty(), "{args:?}: {out}");
    }
}
