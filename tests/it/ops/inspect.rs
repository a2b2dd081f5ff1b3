//! `solocron status` and `solocron history` (the real binary) against a real
//! redis-server and real `solocron run` processes: the output names the node
//! that really ran each occurrence, checked against the job's own record.
//!
//! The daemons in this tree do not publish themselves to the node registry
//! yet, so the tests publish nodes (`t-a`, `t-b`) with
//! `solocron::registry::publish`, under ids no daemon uses.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use common::{Node, RedisServer, RunRecord, Workdir, free_port, records, toml_path, wait_until};
use serde_json::Value;
use solocron::config::RedisConfig;
use solocron::outcome::Outcome;
use solocron::registry::{self, NodeInfo};

const NODES: [&str; 3] = ["n1", "n2", "n3"];
const HISTORY_KEYS: [&str; 14] = [
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
    "error",
    "output_tail",
    "attempt",
    "by",
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
            mode: solocron::config::RedisMode::Single,
            wait_replicas: 0,
            wait_timeout: solocron::config::DEFAULT_WAIT_TIMEOUT,
            username: None,
            url: redis.url(),
            password: None,
            key_prefix: "solocron".to_string(),
            tls: Default::default(),
        };
        let conn = solocron::daemon::connect(&config)
            .expect("connection manager")
            .first();
        for node in nodes {
            registry::publish(&conn, "solocron", node, &BTreeMap::new(), false, None)
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
        redis_warning: None,
        running: None,
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
            time(&pair[0]["occurrence"]) >= time(&pair[1]["occurrence"]),
            "newest occurrence first: {pair:?}"
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
        let age = asked - time(&entry["occurrence"]);
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
fn a_job_that_never_ran_has_no_history_and_a_removed_job_gets_a_note() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    cluster_config(&work);
    let output = solocron(&work, &redis.url(), &["history", "never"]);
    assert!(output.status.success(), "{output:?}");
    assert_eq!(stdout(&output), "no history for job `never`\n");
    assert_eq!(history(&work, &redis, &["never"]), Vec::<Value>::new());
    // A job removed from the config keeps its history, and it is shown.
    add_entry(
        &redis,
        "ghost",
        1_796_072_400_000,
        &entry_fields("2026-11-30T21:00:00Z", "n1", "succeeded"),
    );
    let output = solocron(&work, &redis.url(), &["history", "ghost"]);
    assert!(output.status.success(), "{output:?}");
    assert!(
        stderr(&output).contains("job `ghost` is not in"),
        "{output:?}"
    );
    let text = stdout(&output);
    assert!(text.contains("2026-11-30T21:00:00Z  ghost  n1"), "{text}");
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

// ---- the command line, and `status`/`history` for on-call staff ----

/// Runs `solocron ARGS` exactly as given, with no `SOLOCRON_*` setting
/// from the test's environment, only `env`.
fn cli(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_solocron"));
    command.args(args);
    for name in [
        "SOLOCRON_CONFIG",
        "SOLOCRON_REDIS_URL",
        "SOLOCRON_NODE_ID",
        "SOLOCRON_LOG_FORMAT",
        "SOLOCRON_LOG",
    ] {
        command.env_remove(name);
    }
    command.envs(env.iter().copied());
    command.output().expect("run solocron")
}

/// Parses the stdout of a `--json` command that must have succeeded.
fn parsed(output: &Output) -> Value {
    assert!(output.status.success(), "{output:?}");
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|err| panic!("no JSON ({err}): {output:?}"))
}

/// The `occurrence` of each entry of a `history --json` output.
fn occurrences(output: &Output) -> Vec<String> {
    parsed(output)
        .as_array()
        .expect("an array")
        .iter()
        .map(|entry| entry["occurrence"].as_str().expect("a string").to_string())
        .collect()
}

/// 2026-11-30T21:00:00Z, UTC epoch ms: the instant the synthetic entries
/// are placed around.
const T0: i64 = 1_796_072_400_000;

fn rfc3339(ms: i64) -> String {
    DateTime::from_timestamp_millis(ms)
        .expect("in range")
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// The fields of a history entry as the daemons write them, started and
/// finished at the occurrence.
fn entry_fields(occurrence: &str, node: &str, outcome: &str) -> Vec<(String, String)> {
    let name = occurrence.strip_prefix("manual-").unwrap_or(occurrence);
    let at = DateTime::parse_from_rfc3339(name)
        .map(|at| at.timestamp_millis())
        .unwrap_or(T0);
    let fence = if outcome == "missed" {
        0
    } else {
        at * 1000 + 7
    };
    [
        ("occurrence", occurrence.to_string()),
        ("node", node.to_string()),
        ("fence", fence.to_string()),
        ("outcome", outcome.to_string()),
        ("started_at", at.to_string()),
        ("finished_at", at.to_string()),
    ]
    .into_iter()
    .map(|(key, value)| (key.to_string(), value))
    .collect()
}

/// Appends an entry to `job`'s stream (prefix `solocron`) with stream id
/// `ID_MS-0`, i.e. as if Redis had appended it at that time.
fn add_entry(redis: &RedisServer, job: &str, id_ms: i64, fields: &[(String, String)]) {
    let mut command = redis::cmd("XADD");
    command
        .arg(format!("{{solocron:{job}}}:history"))
        .arg(format!("{id_ms}-0"));
    for (key, value) in fields {
        command.arg(key).arg(value);
    }
    let _: String = command.query(&mut redis.conn()).expect("XADD");
}

/// Redis `TIME` as UTC epoch ms.
fn redis_now_ms(redis: &RedisServer) -> i64 {
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query(&mut redis.conn()).expect("TIME");
    secs * 1000 + micros / 1000
}

/// A config with hourly jobs of these names.
fn jobs_config(work: &Workdir, names: &[&str]) {
    let jobs: String = names
        .iter()
        .map(|name| format!("[jobs.{name}]\nschedule = \"0 0 1 1 *\"\ncommand = \"true\"\n"))
        .collect();
    work.write_config(&jobs);
}

#[test]
fn each_subcommand_lists_only_its_own_options() {
    let help = |command: &str| {
        let output = cli(
            &[command, "--help"],
            &[("SOLOCRON_REDIS_URL", "redis://:s3cret@10.0.0.1/")],
        );
        assert!(output.status.success(), "{output:?}");
        let text = stdout(&output);
        assert!(
            !text.contains("s3cret"),
            "the URL's value is hidden: {text}"
        );
        text
    };
    let expect = |command: &str, present: &[&str], absent: &[&str]| {
        let text = help(command);
        for option in present {
            assert!(
                text.contains(option),
                "`{command} --help` lacks {option}:\n{text}"
            );
        }
        for option in absent {
            assert!(
                !text.contains(option),
                "`{command} --help` lists {option}:\n{text}"
            );
        }
    };
    expect(
        "check",
        &["--config", "--quiet"],
        &["--node-id", "--redis", "--log-format", "--key-prefix"],
    );
    expect(
        "run",
        &["--config", "--node-id", "--redis", "--log-format"],
        &["--key-prefix", "--json"],
    );
    expect(
        "trigger",
        &["--config", "--node-id", "--redis", "--log-format"],
        &["--key-prefix"],
    );
    expect(
        "status",
        // Every key of the `--json` object, as docs/operations.md lists them.
        &[
            "--config",
            "--redis",
            "--key-prefix",
            "--json",
            "`divergences`, `drains`",
        ],
        &["--node-id", "--log-format"],
    );
    expect(
        "history",
        &[
            "--config",
            "--redis",
            "--key-prefix",
            "--json",
            "--limit",
            "--since",
            "--until",
            "--node ",
            "--outcome",
            "abandoned",
        ],
        &["--node-id", "--log-format"],
    );
    let version = cli(&["--version"], &[]);
    assert!(version.status.success(), "{version:?}");
    assert_eq!(
        stdout(&version).trim(),
        format!("solocron {}", env!("CARGO_PKG_VERSION"))
    );
    // An option of another command is refused, not silently ignored.
    let refused = cli(&["check", "--redis", "redis://127.0.0.1:1/"], &[]);
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert!(stderr(&refused).contains("--redis"), "{refused:?}");
}

/// `tick` every second (appending its runs to `runs`) and `report` at
/// 02:00 in Tashkent, plus `extra` lines.
fn node_config(work: &Workdir, extra: &str) {
    work.write_config(&format!(
        r#"
[jobs.tick]
schedule = "* * * * * *"
lock_ttl = "2s"
command = 'echo "$SOLOCRON_OCCURRENCE $SOLOCRON_NODE $SOLOCRON_FENCE" >> {}'

[jobs.report]
schedule = "0 2 * * *"
timezone = "Asia/Tashkent"
command = "true"
{extra}"#,
        toml_path(&work.path("runs"))
    ));
}

#[test]
fn status_and_history_without_a_config_list_the_jobs_the_live_nodes_run() {
    let redis = RedisServer::start();
    let (one, two) = (Workdir::new(), Workdir::new());
    // A splayed job, published with its offset: `status` without a config
    // names the occurrence still to start and when, as with the config.
    let splay = Duration::from_secs(600);
    let spread = common::name_with_offset("spread", splay, 150_000..=590_000);
    let offset = chrono::TimeDelta::from_std(solocron::config::splay_offset(&spread, splay))
        .expect("an offset");
    node_config(&one, "");
    node_config(
        &two,
        &format!(
            "\n[jobs.yearly]\nschedule = \"0 0 1 1 *\"\ncommand = \"true\"\n\
             [jobs.{spread}]\nschedule = \"* * * * *\"\nsplay = \"10m\"\ncommand = \"true\"\n"
        ),
    );
    let mut nodes = vec![
        Node::start(&one, &redis, "n1", &[]),
        Node::start(&two, &redis, "n2", &[]),
    ];
    let url = redis.url();
    let flags = [
        "--config",
        "/nonexistent/jobs.toml",
        "--redis",
        url.as_str(),
    ];
    let env = [
        ("SOLOCRON_CONFIG", "/nonexistent/jobs.toml"),
        ("SOLOCRON_REDIS_URL", url.as_str()),
    ];
    let status_json = || cli(&[&["status", "--json"], &flags[..]].concat(), &[]);
    wait_until(
        Duration::from_secs(20),
        "both nodes published and `tick` ran",
        || {
            let status = parsed(&status_json());
            status["nodes"].as_array().is_some_and(|n| n.len() == 2)
                && !common::history(&redis, "tick").is_empty()
        },
    );
    for (args, env) in [(&flags[..], &[][..]), (&[][..], &env[..])] {
        let output = cli(&[&["status", "--json"], args].concat(), env);
        assert!(
            stderr(&output).contains("cannot read `/nonexistent/jobs.toml`"),
            "{output:?}"
        );
        let status = parsed(&output);
        let jobs = status["jobs"].as_array().expect("jobs");
        let names: Vec<&str> = jobs.iter().filter_map(|j| j["job"].as_str()).collect();
        assert_eq!(
            names,
            ["report", spread.as_str(), "tick", "yearly"],
            "{status}"
        );
        let splayed = &jobs[1];
        let (next, start) = (time(&splayed["next"]), time(&splayed["next_start"]));
        assert_eq!(start, next + offset, "{splayed}");
        assert!(next < Utc::now() && start > next, "{splayed}");
        let report = &jobs[0];
        assert_eq!(report["schedule"], "0 2 * * *", "{report}");
        assert_eq!(report["timezone"], "Asia/Tashkent", "{report}");
        let zone: chrono_tz::Tz = "Asia/Tashkent".parse().expect("a zone");
        let expected = solocron::schedule::Schedule::parse("0 2 * * *", zone)
            .expect("valid")
            .next_after(Utc::now())
            .expect("fires");
        assert_eq!(time(&report["next"]), expected, "{report}");
        assert!(
            report["next_local"]
                .as_str()
                .is_some_and(|local| local.ends_with("T02:00:00+05:00")),
            "{report}"
        );
        let tick = &jobs[2];
        assert!(
            ["n1", "n2"].contains(&tick["last"]["node"].as_str().unwrap_or("")),
            "{tick}"
        );
        let output = cli(&[&["history", "tick", "--json"], args].concat(), env);
        let entries = parsed(&output);
        let entries = entries.as_array().expect("an array");
        assert!(!entries.is_empty(), "{output:?}");
        assert!(entries.iter().all(|e| e["job"] == "tick"), "{entries:?}");
        let output = cli(
            &[&["history", "--limit", "50", "--json"], args].concat(),
            env,
        );
        assert!(
            occurrences(&output).len() >= entries.len().min(50),
            "{output:?}"
        );
    }
    let text = cli(&[&["status"], &flags[..]].concat(), &[]);
    assert!(text.status.success(), "{text:?}");
    let text = stdout(&text);
    assert!(
        text.contains("JOBS of the live nodes (no config was read)"),
        "{text}"
    );
    let report = text
        .lines()
        .find(|line| line.starts_with("report "))
        .unwrap_or_else(|| panic!("a row for `report`:\n{text}"));
    assert!(report.contains(" 02:00:00 +05 "), "{report}");
    // Another key prefix: nothing there. `status` says so and exits 0.
    let other = [&flags[..], &["--key-prefix", "elsewhere"]].concat();
    let output = cli(&[&["status"], &other[..]].concat(), &[]);
    assert!(output.status.success(), "{output:?}");
    assert!(
        stdout(&output).contains("no live node publishes its jobs under key prefix `elsewhere`"),
        "{output:?}"
    );
    // With every node stopped, `history JOB` still reads the job's stream.
    for node in &mut nodes {
        node.signal("TERM");
        assert!(node.wait_exit(Duration::from_secs(20)).success());
    }
    let status = parsed(&status_json());
    assert_eq!(status["jobs"], serde_json::json!([]), "{status}");
    assert_eq!(status["nodes"], serde_json::json!([]), "{status}");
    let output = cli(&[&["status"], &flags[..]].concat(), &[]);
    assert!(output.status.success(), "{output:?}");
    assert!(
        stdout(&output).contains("JOBS: unknown: no config was read and no live node"),
        "{output:?}"
    );
    let output = cli(&[&["history", "tick", "--json"], &flags[..]].concat(), &[]);
    assert!(!occurrences(&output).is_empty(), "{output:?}");
    // Without `--redis` there is nothing to read: a clear error.
    let output = cli(&["status", "--config", "/nonexistent/jobs.toml"], &[]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(
        stderr(&output).contains("`--redis URL` to read Redis without a config"),
        "{output:?}"
    );
}

/// `config::load_for_inspection` tolerates unset `${VAR}`s: an operator
/// reads status and history without the jobs' secrets.
#[test]
fn status_and_history_need_no_job_secrets() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    work.write_config(
        r#"
[jobs.tick]
schedule = "* * * * * *"
command = "test -n '${SOLOCRON_TEST_TOKEN}'"

[jobs.hook]
schedule = "0 0 1 1 *"
http = { url = "http://127.0.0.1:1/${SOLOCRON_TEST_PATH}", headers = { Authorization = "Bearer ${SOLOCRON_TEST_TOKEN}" } }
"#,
    );
    let secrets = [
        ("SOLOCRON_TEST_TOKEN", "t0ps3cret"),
        ("SOLOCRON_TEST_PATH", "hooks/x"),
    ];
    let _node = Node::start(&work, &redis, "n1", &secrets);
    wait_until(Duration::from_secs(15), "`tick` ran", || {
        !common::history(&redis, "tick").is_empty()
    });
    let config = toml_path(&work.path("jobs.toml"));
    let flags = ["--config", config.as_str(), "--redis", &redis.url()];
    let status = cli(&[&["status", "--json"], &flags[..]].concat(), &[]);
    let names: Vec<String> = parsed(&status)["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .filter_map(|job| job["job"].as_str().map(str::to_string))
        .collect();
    assert_eq!(names, ["tick", "hook"], "{status:?}");
    let history = cli(&[&["history", "tick", "--json"], &flags[..]].concat(), &[]);
    let entries = parsed(&history);
    assert!(
        entries
            .as_array()
            .is_some_and(|entries| !entries.is_empty()),
        "{history:?}"
    );
    for output in [&status, &history] {
        assert!(!stdout(output).contains("t0ps3cret"), "{output:?}");
        assert!(!stderr(output).contains("t0ps3cret"), "{output:?}");
    }
}

#[test]
fn history_is_ordered_by_occurrence_whatever_the_order_entries_were_appended() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    jobs_config(&work, &["a", "b"]);
    // The newest occurrence of `a` is appended first; then, after an
    // outage, the `missed` entries of the 30 occurrences before it.
    add_entry(
        &redis,
        "a",
        T0 + 10_000,
        &entry_fields(&rfc3339(T0 + 10_000), "n1", "succeeded"),
    );
    for i in 1..=30 {
        let occurrence = rfc3339(T0 - (31 - i) * 1000);
        add_entry(
            &redis,
            "a",
            T0 + 10_000 + i * 1000,
            &entry_fields(&occurrence, "n2", "missed"),
        );
    }
    let manual = "manual-2026-11-30T21:00:05.500Z";
    add_entry(
        &redis,
        "b",
        T0 + 6_000,
        &entry_fields(manual, "n3", "failed"),
    );
    let url = redis.url();
    let run = |args: &[&str]| solocron(&work, &url, args);
    assert_eq!(
        occurrences(&run(&["history", "a", "--limit", "3", "--json"])),
        [rfc3339(T0 + 10_000), rfc3339(T0 - 1000), rfc3339(T0 - 2000)]
    );
    assert_eq!(
        occurrences(&run(&["history", "--limit", "4", "--json"])),
        [
            rfc3339(T0 + 10_000),
            manual.to_string(),
            rfc3339(T0 - 1000),
            rfc3339(T0 - 2000)
        ]
    );
    let all = occurrences(&run(&["history", "--limit", "100", "--json"]));
    assert_eq!(all.len(), 32, "{all:?}");
    let instants: Vec<DateTime<Utc>> = all
        .iter()
        .map(|name| {
            time(&Value::String(
                name.trim_start_matches("manual-").to_string(),
            ))
        })
        .collect();
    assert!(instants.windows(2).all(|w| w[0] > w[1]), "{all:?}");
    let text = run(&["history", "--limit", "2"]);
    assert!(text.status.success(), "{text:?}");
    let text = stdout(&text);
    let rows: Vec<Vec<&str>> = text
        .lines()
        .skip(1)
        .map(|row| row.split_whitespace().take(3).collect())
        .collect();
    assert_eq!(
        rows,
        [["2026-11-30T21:00:10Z", "a", "n1"], [manual, "b", "n3"]],
        "{text}"
    );
}

#[test]
fn since_and_until_take_rfc3339_instants_and_durations_back_from_now() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    jobs_config(&work, &["a"]);
    let now = redis_now_ms(&redis) / 1000 * 1000;
    let ago = |secs: i64| now - secs * 1000;
    for secs in [600, 120, 30] {
        add_entry(
            &redis,
            "a",
            ago(secs),
            &entry_fields(&rfc3339(ago(secs)), "n1", "succeeded"),
        );
    }
    let url = redis.url();
    let window = |bounds: &[&str]| {
        let args = [&["history", "a", "--json"], bounds].concat();
        occurrences(&solocron(&work, &url, &args))
    };
    let names = |secs: &[i64]| -> Vec<String> { secs.iter().map(|s| rfc3339(ago(*s))).collect() };
    assert_eq!(window(&["--since", "5m"]), names(&[30, 120]));
    assert_eq!(window(&["--until", "1m"]), names(&[120, 600]));
    assert_eq!(window(&["--since", "5m", "--until", "1m"]), names(&[120]));
    let zone = chrono::FixedOffset::east_opt(5 * 3600).expect("an offset");
    let in_tashkent = DateTime::from_timestamp_millis(ago(150))
        .expect("in range")
        .with_timezone(&zone)
        .to_rfc3339();
    assert!(in_tashkent.ends_with("+05:00"), "{in_tashkent}");
    assert_eq!(window(&["--since", &in_tashkent]), names(&[30, 120]));
    assert_eq!(
        window(&["--since", &rfc3339(ago(700)), "--until", &rfc3339(ago(500))]),
        names(&[600])
    );
    assert_eq!(window(&["--until", &rfc3339(ago(600))]), names(&[600]));
    // `--since` after `--until` is a usage error (exit 2), found without
    // Redis when both are durations or both instants.
    let reversed = solocron(&work, &url, &["history", "--since", "1m", "--until", "5m"]);
    assert_eq!(reversed.status.code(), Some(2), "{reversed:?}");
    assert!(
        stderr(&reversed).contains("is after `--until`")
            && stderr(&reversed).contains("`--since 2h --until 1h`"),
        "{reversed:?}"
    );
    let nobody = format!("redis://127.0.0.1:{}/", free_port());
    let offline = solocron(
        &work,
        &nobody,
        &["history", "--since", "1m", "--until", "5m"],
    );
    assert_eq!(offline.status.code(), Some(2), "{offline:?}");
    let mixed = solocron(
        &work,
        &url,
        &["history", "--since", "1m", "--until", &rfc3339(ago(300))],
    );
    assert_eq!(mixed.status.code(), Some(2), "{mixed:?}");
    assert!(stderr(&mixed).contains("swap them"), "{mixed:?}");
    // `--limit 0` would print "no history" over a history: refused.
    let zero = solocron(&work, &url, &["history", "a", "--limit", "0"]);
    assert_eq!(zero.status.code(), Some(2), "{zero:?}");
    assert!(
        stderr(&zero).contains("`--limit 0` would show no entry; give at least 1"),
        "{zero:?}"
    );
    let bad = solocron(&work, &url, &["history", "--since", "yesterday"]);
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
    assert!(stderr(&bad).contains("RFC 3339"), "{bad:?}");
}

#[test]
fn node_and_outcome_filters_keep_only_matching_entries() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    jobs_config(&work, &["a", "b"]);
    let at = |secs: i64| rfc3339(T0 + secs * 1000);
    for (secs, node, outcome) in [
        (1, "n1", "succeeded"),
        (2, "n2", "failed"),
        (3, "n1", "timed_out"),
        (4, "n2", "missed"),
    ] {
        add_entry(
            &redis,
            "a",
            T0 + secs * 1000,
            &entry_fields(&at(secs), node, outcome),
        );
    }
    add_entry(
        &redis,
        "b",
        T0 + 5000,
        &entry_fields(&at(5), "n2", "succeeded"),
    );
    let url = redis.url();
    let only = |filters: &[&str]| {
        occurrences(&solocron(
            &work,
            &url,
            &[&["history", "--json"], filters].concat(),
        ))
    };
    assert_eq!(only(&["--node", "n2"]), [at(5), at(4), at(2)]);
    assert_eq!(only(&["--node", "n1,n2", "--limit", "2"]), [at(5), at(4)]);
    assert_eq!(only(&["--outcome", "failed"]), [at(2)]);
    assert_eq!(only(&["--outcome", "failed,missed"]), [at(4), at(2)]);
    assert_eq!(
        only(&["--outcome", "failed", "--outcome", "missed"]),
        [at(4), at(2)]
    );
    assert_eq!(only(&["--node", "n1", "--outcome", "timed_out"]), [at(3)]);
    let none = solocron(&work, &url, &["history", "--node", "n3"]);
    assert!(none.status.success(), "{none:?}");
    assert_eq!(stdout(&none), "no history for any job (node n3)\n");
    let bad = solocron(&work, &url, &["history", "--outcome", "sucess"]);
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
    let err = stderr(&bad);
    assert!(err.contains("sucess") && err.contains("succeeded"), "{err}");
    assert!(err.contains("abandoned"), "lists every outcome: {err}");
    assert!(stdout(&bad).is_empty(), "{bad:?}");
}

/// `--outcome bad` is every outcome that needs a look: all but
/// `succeeded`, `skipped` and `paused` (`failed` alone hid `timed_out`,
/// `lock_lost`, `missed`, ...); a mistyped outcome gets the closest one.
#[test]
fn outcome_bad_keeps_every_bad_outcome_and_a_typo_gets_the_closest() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    jobs_config(&work, &["a"]);
    let at = |secs: i64| rfc3339(T0 + secs * 1000);
    for (secs, outcome) in (1..).zip(Outcome::ALL.map(Outcome::as_str)) {
        add_entry(
            &redis,
            "a",
            T0 + secs * 1000,
            &entry_fields(&at(secs), "n1", outcome),
        );
    }
    let url = redis.url();
    let outcomes_of = |filters: &[&str]| -> Vec<String> {
        let output = solocron(&work, &url, &[&["history", "--json"], filters].concat());
        parsed(&output)
            .as_array()
            .expect("an array")
            .iter()
            .map(|entry| entry["outcome"].as_str().expect("a string").to_string())
            .collect()
    };
    assert_eq!(
        outcomes_of(&["--outcome", "bad"]),
        [
            "aborted",
            "throttled",
            "abandoned",
            "missed",
            "interrupted",
            "lock_lost",
            "timed_out",
            "failed"
        ]
    );
    assert_eq!(
        outcomes_of(&["--outcome", "bad,skipped"]),
        [
            "aborted",
            "throttled",
            "abandoned",
            "missed",
            "skipped",
            "interrupted",
            "lock_lost",
            "timed_out",
            "failed"
        ]
    );
    let typo = solocron(&work, &url, &["history", "--outcome", "faild"]);
    assert_eq!(typo.status.code(), Some(2), "{typo:?}");
    let err = stderr(&typo);
    assert!(
        err.contains("unknown outcome `faild`") && err.contains("did you mean `failed`?"),
        "{err}"
    );
    assert!(
        err.contains("`bad`"),
        "names the word for every bad one: {err}"
    );
    assert!(stdout(&typo).is_empty(), "{typo:?}");
}

/// A table cut by `--limit` says so on stderr; one that shows everything,
/// and `--json`, add nothing.
#[test]
fn limit_says_when_it_cut_the_table() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    jobs_config(&work, &["a"]);
    for secs in 1..=4 {
        let at = rfc3339(T0 + secs * 1000);
        add_entry(
            &redis,
            "a",
            T0 + secs * 1000,
            &entry_fields(&at, "n1", "succeeded"),
        );
    }
    let url = redis.url();
    let cut = solocron(&work, &url, &["history", "a", "--limit", "3"]);
    assert!(cut.status.success(), "{cut:?}");
    assert_eq!(
        stdout(&cut).lines().count(),
        4,
        "a header and 3 rows: {cut:?}"
    );
    assert!(
        stderr(&cut)
            .contains("showing the newest 3 entries; older ones match too: `--limit N` shows more"),
        "{cut:?}"
    );
    let whole = solocron(&work, &url, &["history", "a", "--limit", "4"]);
    assert!(whole.status.success(), "{whole:?}");
    assert_eq!(stdout(&whole).lines().count(), 5, "{whole:?}");
    assert!(!stderr(&whole).contains("showing"), "{whole:?}");
    let filtered = solocron(
        &work,
        &url,
        &["history", "a", "--limit", "3", "--outcome", "bad"],
    );
    assert!(!stderr(&filtered).contains("showing"), "{filtered:?}");
    let json = solocron(&work, &url, &["history", "a", "--limit", "3", "--json"]);
    assert_eq!(parsed(&json).as_array().map(Vec::len), Some(3));
}

/// The table shows each entry's attempt (a retry's 2, 3, ...), `-` where
/// none applies.
#[test]
fn the_history_table_shows_the_attempt() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    jobs_config(&work, &["a"]);
    let at = rfc3339(T0);
    let mut first = entry_fields(&at, "n1", "failed");
    first.push(("attempt".to_string(), "1".to_string()));
    add_entry(&redis, "a", T0, &first);
    let mut second = entry_fields(&at, "n2", "succeeded");
    second.push(("attempt".to_string(), "2".to_string()));
    add_entry(&redis, "a", T0 + 1000, &second);
    add_entry(&redis, "a", T0 + 2000, &entry_fields(&at, "n3", "skipped"));
    let output = solocron(&work, &redis.url(), &["history", "a"]);
    assert!(output.status.success(), "{output:?}");
    let text = stdout(&output);
    let rows: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows[0][5], "ATTEMPT", "{text}");
    let attempts: Vec<(&str, &str)> = rows[1..].iter().map(|row| (row[2], row[5])).collect();
    assert_eq!(attempts, [("n3", "-"), ("n2", "2"), ("n1", "1")], "{text}");
}

/// `history` without JOB shows a job the config no longer has while a
/// live node runs it (a rename under way), and says that a job gone from
/// both is left out and how to see it.
#[test]
fn history_of_every_job_covers_the_live_nodes_jobs_and_names_what_it_leaves_out() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    jobs_config(&work, &["new-name"]);
    let mut node = test_nodes(&work.path("jobs.toml")).remove(0);
    node.jobs
        .insert("old-name".to_string(), "0123456789ab".to_string());
    publish(&redis, &[node]);
    for (secs, job) in [(1, "new-name"), (2, "old-name"), (3, "gone")] {
        let at = rfc3339(T0 + secs * 1000);
        add_entry(
            &redis,
            job,
            T0 + secs * 1000,
            &entry_fields(&at, "t-a", "failed"),
        );
    }
    let url = redis.url();
    let jobs: Vec<String> = parsed(&solocron(&work, &url, &["history", "--json"]))
        .as_array()
        .expect("an array")
        .iter()
        .map(|entry| entry["job"].as_str().expect("a job").to_string())
        .collect();
    assert_eq!(jobs, ["old-name", "new-name"]);
    let table = solocron(&work, &url, &["history"]);
    assert!(table.status.success(), "{table:?}");
    let err = stderr(&table);
    assert!(
        err.contains("jobs neither in `") && err.contains("`solocron history OLD-NAME`"),
        "{err}"
    );
    let gone = history(&work, &redis, &["gone"]);
    assert_eq!(gone.len(), 1, "{gone:?}");
}

#[test]
fn an_unknown_job_is_refused_with_a_suggestion() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    jobs_config(&work, &["nightly-report", "warm-cache"]);
    let url = redis.url();
    let typo = solocron(&work, &url, &["history", "nightly-reprot"]);
    assert_eq!(typo.status.code(), Some(1), "{typo:?}");
    let err = stderr(&typo);
    assert!(err.contains("unknown job `nightly-reprot`"), "{err}");
    assert!(err.contains("did you mean `nightly-report`?"), "{err}");
    assert!(stdout(&typo).is_empty(), "{typo:?}");
    let far = solocron(&work, &url, &["history", "backup", "--json"]);
    assert_eq!(far.status.code(), Some(1), "{far:?}");
    assert!(!stderr(&far).contains("did you mean"), "{far:?}");
    assert!(stderr(&far).contains("solocron status"), "{far:?}");
    // A job some live node runs is known, even with no history yet.
    let mut node = test_nodes(&work.path("jobs.toml")).remove(0);
    node.jobs
        .insert("only-on-t-a".to_string(), "0123456789ab".to_string());
    publish(&redis, &[node]);
    let known = solocron(&work, &url, &["history", "only-on-t-a"]);
    assert!(known.status.success(), "{known:?}");
    assert_eq!(stdout(&known), "no history for job `only-on-t-a`\n");
    // Without a config the live nodes' jobs are the candidates.
    let output = cli(
        &[
            "history",
            "only-on-t-b",
            "--config",
            "/nonexistent",
            "--redis",
            &url,
        ],
        &[],
    );
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(
        stderr(&output).contains("did you mean `only-on-t-a`?"),
        "{output:?}"
    );
}

#[test]
fn history_json_has_exactly_the_spec_keys_in_order_and_the_table_the_whole_error() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    jobs_config(&work, &["a"]);
    let error = format!(
        "command of job `a` failed:\nline two\twith a tab {}",
        "and a long explanation ".repeat(5)
    );
    let mut fields = entry_fields("2026-11-30T21:00:00Z", "n1", "failed");
    fields.extend(
        [
            ("exit_code", "3".to_string()),
            ("duration_ms", "41".to_string()),
            ("error", error.clone()),
            ("output_tail", "out\nerr\n".to_string()),
            ("attempt", "2".to_string()),
        ]
        .map(|(key, value)| (key.to_string(), value)),
    );
    add_entry(&redis, "a", T0 + 41, &fields);
    let output = solocron(&work, &redis.url(), &["history", "--json"]);
    let text = stdout(&output);
    let value = parsed(&output);
    let entry = &value[0];
    let keys: Vec<&String> = entry.as_object().expect("an object").keys().collect();
    let mut sorted = HISTORY_KEYS;
    sorted.sort();
    assert_eq!(keys, sorted, "exactly these keys: {text}");
    let positions: Vec<usize> = HISTORY_KEYS
        .iter()
        .map(|key| text.find(&format!("\"{key}\":")).expect("every key"))
        .collect();
    assert!(
        positions.windows(2).all(|w| w[0] < w[1]),
        "in order: {text}"
    );
    assert_eq!(entry["error"], error.as_str(), "the whole text");
    assert_eq!(entry["output_tail"], "out\nerr\n");
    assert_eq!(entry["attempt"], 2);
    assert_eq!(entry["exit_code"], 3);
    assert_eq!(entry["duration_ms"], 41);
    let table = solocron(&work, &redis.url(), &["history"]);
    assert!(table.status.success(), "{table:?}");
    let table = stdout(&table);
    assert_eq!(table.lines().count(), 2, "one line per entry: {table}");
    let flat = error.replace(['\n', '\t'], " ");
    assert!(
        table
            .lines()
            .nth(1)
            .is_some_and(|row| row.ends_with(flat.trim_end())),
        "{table}"
    );
}

/// An every-minute job with a 10-minute splay starts each occurrence
/// minutes after its instant, so the occurrence it starts next is one whose
/// instant has passed: `status` names that one (the same that the run will
/// see in `SOLOCRON_OCCURRENCE`) and when it starts, not the first instant
/// after now, which would hide the occurrences still to start. A job
/// without a splay starts at its instant.
#[test]
fn status_names_a_splayed_jobs_next_occurrence_and_when_it_starts() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    let splay = Duration::from_secs(600);
    let name = common::name_with_offset("spread", splay, 150_000..=590_000);
    work.write_config(&format!(
        "[jobs.{name}]\nschedule = \"* * * * *\"\nsplay = \"10m\"\ncommand = \"true\"\n\
         [jobs.plain]\nschedule = \"* * * * *\"\ncommand = \"true\"\n"
    ));
    let offset = chrono::TimeDelta::from_std(solocron::config::splay_offset(&name, splay))
        .expect("an offset");
    let every_minute =
        solocron::schedule::Schedule::parse("* * * * *", chrono_tz::UTC).expect("valid");
    let before = Utc::now();
    let status = json(&work, &redis, &["status", "--json"]);
    let after = Utc::now();
    let jobs = status["jobs"].as_array().expect("jobs");
    let (splayed, plain) = (&jobs[0], &jobs[1]);
    assert_eq!(splayed["job"], name.as_str(), "{status}");
    let next = time(&splayed["next"]);
    let start = time(&splayed["next_start"]);
    assert_eq!(start, next + offset, "{splayed}");
    // The first occurrence not yet started at some instant of the call.
    let expected: Vec<_> = [before, after]
        .iter()
        .filter_map(|now| every_minute.next_after(*now - offset))
        .collect();
    assert!(
        expected.contains(&next),
        "{splayed}, expected one of {expected:?}"
    );
    assert!(next < before, "its instant has passed: {splayed}");
    assert!(start > before, "its start is still to come: {splayed}");
    let next_plain = time(&plain["next"]);
    assert_eq!(time(&plain["next_start"]), next_plain, "{plain}");
    assert!(next_plain > before, "{plain}");
    let output = solocron(&work, &redis.url(), &["status"]);
    assert!(output.status.success(), "{output:?}");
    let text = stdout(&output);
    let row = text
        .lines()
        .find(|line| line.starts_with(name.as_str()))
        .unwrap_or_else(|| panic!("no row for {name}: {text}"));
    assert!(row.contains("(starts +"), "{row}");
    let row = text
        .lines()
        .find(|line| line.starts_with("plain"))
        .unwrap_or_else(|| panic!("no row for plain: {text}"));
    assert!(!row.contains("starts"), "{row}");
}

#[test]
fn status_text_puts_every_free_text_on_one_line() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    jobs_config(&work, &["a"]);
    let url = redis.url();
    let reason = "db\nmigration \u{1b}[31mred\u{1b}[0m\rnow";
    for args in [
        &["pause", "a", "--reason", reason][..],
        &["drain", "--node", "n9", "--force", "--reason", reason][..],
    ] {
        let said = solocron(&work, &url, args);
        assert!(said.status.success(), "{said:?}");
        assert!(!stdout(&said).contains('\u{1b}'), "{said:?}");
    }
    let output = solocron(&work, &url, &["status"]);
    assert!(output.status.success(), "{output:?}");
    let text = stdout(&output);
    assert!(
        !text.contains('\u{1b}') && !text.contains('\r'),
        "raw control characters: {text:?}"
    );
    let flat = "db migration  [31mred [0m now";
    let paused = text
        .lines()
        .find(|line| line.starts_with("a ") && line.contains("paused by"))
        .unwrap_or_else(|| panic!("no PAUSED row: {text}"));
    assert!(paused.ends_with(flat), "{paused:?}");
    let drained = text
        .lines()
        .find(|line| line.starts_with("n9 "))
        .unwrap_or_else(|| panic!("no DRAINED NODES row: {text}"));
    assert!(drained.ends_with(flat), "{drained:?}");
    // The JSON form keeps the reason as it was given.
    let status = json(&work, &redis, &["status", "--json"]);
    assert_eq!(status["jobs"][0]["paused"]["reason"], reason);
    assert_eq!(status["drains"][0]["reason"], reason);
}
