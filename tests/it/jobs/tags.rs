//! Node tags and `run_on` (guarantee 13, docs/guarantees.md): three real
//! daemons, two tagged `role=db` (one by `--tags`, one by `SOLOCRON_TAGS`)
//! and one `role=web`; a job with `run_on = ["role=db"]` and one without.
//! The `run_on` job runs once per occurrence and only on the db nodes, the
//! other on any; `status` shows each node's tags and no config drift
//! (tags differ, the file does not); `trigger` on the web node refuses the
//! job and names its `run_on`, and `trigger --fleet` is taken by a db node.
//! With both db nodes killed, the web node records the job's occurrences
//! `missed`, saying no node may run them, and `trigger --fleet` says no
//! live node may run it.
//!
//! What breaks it: a node that ignores `run_on` (a run on `web1`),
//! eligible nodes left out of line (misses in the window), tags counted as
//! drift, or nobody recording the occurrences once no eligible node is
//! left (no `missed` entry naming `run_on`).

use crate::common;

use std::process::Command;
use std::time::Duration;

use chrono::TimeDelta;
use common::cluster::{Cluster, JobSpec, whole_second_after};
use common::{Node, RedisServer, solocron_bin, toml_path, wait_until};

fn start_tagged(cluster: &mut Cluster, id: &str, tags: &str) {
    let config = toml_path(&cluster.work.path("jobs.toml"));
    let url = cluster.redis.url();
    let args = ["--config", &config, "--redis", &url, "--tags", tags];
    let node = Node::start_with_args(&cluster.work, id, &args, &[]);
    cluster.nodes.push(node);
}

fn solocron(cluster: &Cluster, args: &[&str]) -> std::process::Output {
    Command::new(solocron_bin())
        .args(args)
        .args(["--config", &toml_path(&cluster.work.path("jobs.toml"))])
        .args(["--redis", &cluster.redis.url()])
        .env_remove("SOLOCRON_CONFIG")
        .env_remove("SOLOCRON_REDIS_URL")
        .env_remove("SOLOCRON_TAGS")
        .output()
        .expect("run solocron")
}

#[test]
fn a_job_runs_only_where_its_run_on_matches_and_is_missed_without_such_a_node() {
    let dump = JobSpec::new("dump", "* * * * * *", 0.05)
        .with("run_on = [\"role=db\"]")
        .with("starting_deadline = \"2s\"");
    let any = JobSpec::new("any", "* * * * * *", 0.05);
    let jobs = [dump.clone(), any.clone()];
    let mut cluster = Cluster::new(RedisServer::start(), "", &jobs);
    start_tagged(&mut cluster, "db1", "role=db");
    cluster.start_node(
        "db2",
        &[(
            "SOLOCRON_TAGS".to_string(),
            "role=db,zone=eu-west".to_string(),
        )],
    );
    start_tagged(&mut cluster, "web1", "role=web");
    for node in &cluster.nodes {
        node.wait_for_log(Duration::from_secs(30), "count=3");
    }
    wait_until(Duration::from_secs(20), "both jobs ran once", || {
        let runs = cluster.runs();
        jobs.iter()
            .all(|job| runs.iter().any(|run| run.job == job.name))
    });
    let from = whole_second_after(2, 1);
    let to = from + TimeDelta::seconds(6);
    for job in &jobs {
        cluster.wait_for_run(
            Duration::from_secs(30),
            &format!("{}'s run after the window ended", job.name),
            |run| run.is(&job.name, to) && run.end_ns.is_some(),
        );
    }
    let report = cluster.audit(&[dump.window(from, to), any.window(from, to)]);
    println!("tags: {report}");
    assert!(
        report.duplicates.is_empty() && report.misses.is_empty() && report.overlaps.is_empty(),
        "{report}\n{}",
        cluster.logs()
    );
    let runs = cluster.runs();
    let web_dumps: Vec<_> = runs
        .iter()
        .filter(|run| run.job == "dump" && run.node == "web1")
        .collect();
    assert!(web_dumps.is_empty(), "dump ran on web1: {web_dumps:?}");

    // `status` shows each node's tags and no drift.
    let status = solocron(&cluster, &["status", "--json"]);
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).expect("status JSON");
    let tags_of = |id: &str| {
        status["nodes"]
            .as_array()
            .and_then(|nodes| nodes.iter().find(|node| node["node"] == id))
            .map(|node| node["tags"].clone())
            .unwrap_or_default()
    };
    assert_eq!(tags_of("db2")["zone"], "eu-west", "{status:#}");
    assert_eq!(tags_of("db2")["node"], "db2", "{status:#}");
    assert_eq!(tags_of("web1")["role"], "web", "{status:#}");
    assert_eq!(
        status["divergences"].as_array().map(Vec::len),
        Some(0),
        "tags are not drift: {status:#}"
    );
    let text = solocron(&cluster, &["status"]);
    let text = String::from_utf8_lossy(&text.stdout).to_string();
    assert!(
        text.contains("TAGS") && text.contains("role=db,zone=eu-west"),
        "{text}"
    );

    // `trigger` on a node the job may not run on is refused.
    let refused = solocron(&cluster, &["trigger", "dump", "--node-id", "web1"]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("runs only on nodes with run_on = [role=db], and this node (web1) has node=web1,role=web: run it")
            && stderr.contains("`solocron trigger dump --fleet` asks a running daemon that may"),
        "{stderr}"
    );

    // `trigger --fleet` is taken by a node that may run the job (the job
    // may be busy with an occurrence: exit 3 names the node that tried).
    let fleet = solocron(&cluster, &["trigger", "dump", "--fleet"]);
    let stderr = String::from_utf8_lossy(&fleet.stderr).to_string();
    assert!(
        matches!(fleet.status.code(), Some(0 | 3))
            && (stderr.contains("node `db1`") || stderr.contains("node `db2`")),
        "{:?}: {stderr}",
        fleet.status.code()
    );

    // Both db nodes gone: the web node records the occurrences missed.
    cluster.node_mut("db1").kill9();
    cluster.node_mut("db2").kill9();
    wait_until(
        Duration::from_secs(30),
        "a `missed` entry of dump naming run_on, by web1",
        || {
            common::history(&cluster.redis, "dump").iter().any(|entry| {
                entry.get("outcome").map(String::as_str) == Some("missed")
                    && entry.get("node").map(String::as_str) == Some("web1")
                    && entry
                        .get("error")
                        .is_some_and(|error| error.contains("run_on"))
            })
        },
    );
    cluster
        .node("web1")
        .wait_for_log(Duration::from_secs(5), "no alive node may run it");
    // And `trigger --fleet` says why nobody took it.
    let fleet = solocron(&cluster, &["trigger", "dump", "--fleet"]);
    let stderr = String::from_utf8_lossy(&fleet.stderr);
    assert_eq!(fleet.status.code(), Some(4), "{stderr}");
    assert!(
        stderr.contains("may run it") && stderr.contains("run_on = [role=db]"),
        "{stderr}"
    );
}
