//! `solocron audit` with a real daemon: every control
//! command leaves one record with who, what, target, reason and result,
//! and the daemon adds its start, a reload (what it added) and its stop.
//! A command Redis refused leaves none (`ops::security`'s viewer).
//!
//! What breaks it: a command that writes without its record (or records
//! what it did not do), a daemon event not recorded, `--since` or
//! `--limit` ignored.

use crate::common;

use std::time::Duration;

use common::cluster::{Cluster, JobSpec};
use common::{RedisServer, wait_until};

fn records(cluster: &Cluster, args: &[&str]) -> Vec<serde_json::Value> {
    let out = cluster.cli(&[&["audit", "--json"][..], args].concat());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("audit --json is JSON")
}

fn find<'a>(
    records: &'a [serde_json::Value],
    action: &str,
    target: &str,
) -> Option<&'a serde_json::Value> {
    records
        .iter()
        .find(|record| record["action"] == action && record["target"] == target)
}

#[test]
fn every_control_command_and_daemon_event_is_audited_once() {
    let tick = JobSpec::new("tick", "* * * * * *", 0.05);
    let mut cluster = Cluster::new(RedisServer::start(), "", std::slice::from_ref(&tick));
    cluster.start_node("n1", &[]);
    wait_until(
        Duration::from_secs(10),
        "the daemon's start is recorded",
        || find(&records(&cluster, &[]), "start", "n1").is_some(),
    );
    for args in [
        &["pause", "tick", "--reason", "db migration"][..],
        &["resume", "tick"],
        &[
            "drain",
            "--node",
            "ghost",
            "--force",
            "--reason",
            "decommission",
        ],
        &["undrain", "--node", "ghost"],
        &["abort", "tick", "--reason", "just checking"],
    ] {
        let out = cluster.cli(args);
        assert!(
            matches!(out.status.code(), Some(0 | 3)),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = cluster.cli(&["trigger", "tick", "--fleet"]);
    assert!(
        matches!(out.status.code(), Some(0 | 3)),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A reload that adds a job.
    let added = JobSpec::new("added", "0 0 1 1 *", 0.1);
    cluster.write_jobs(&[tick, added]);
    cluster.node("n1").signal("HUP");
    wait_until(Duration::from_secs(10), "the reload is recorded", || {
        find(&records(&cluster, &[]), "reload", "n1").is_some()
    });
    cluster.node("n1").signal("TERM");
    assert!(
        cluster
            .node_mut("n1")
            .wait_exit(Duration::from_secs(20))
            .success()
    );

    let all = records(&cluster, &["--limit", "100"]);
    let who = |record: &serde_json::Value| record["who"].as_str().unwrap_or_default().to_string();
    let pause = find(&all, "pause", "tick").unwrap_or_else(|| panic!("{all:#?}"));
    assert_eq!(pause["reason"], "db migration");
    assert_eq!(pause["result"], "ok");
    assert!(who(pause).contains('@'), "{pause}");
    assert!(find(&all, "resume", "tick").is_some(), "{all:#?}");
    let drain = find(&all, "drain", "ghost").unwrap_or_else(|| panic!("{all:#?}"));
    assert_eq!(drain["reason"], "decommission");
    assert!(find(&all, "undrain", "ghost").is_some(), "{all:#?}");
    let fleet: Vec<&serde_json::Value> = all
        .iter()
        .filter(|record| record["action"] == "trigger --fleet")
        .collect();
    assert!(
        fleet.iter().any(|record| record["result"]
            .as_str()
            .unwrap_or_default()
            .starts_with("requested")),
        "{all:#?}"
    );
    let abort = find(&all, "abort", "tick").unwrap_or_else(|| panic!("{all:#?}"));
    assert_eq!(abort["reason"], "just checking");
    let reload = find(&all, "reload", "n1").unwrap_or_else(|| panic!("{all:#?}"));
    assert!(
        reload["result"]
            .as_str()
            .unwrap_or_default()
            .contains("added [added]"),
        "{reload}"
    );
    assert_eq!(
        all.first().map(|record| record["action"].clone()),
        Some("stop".into()),
        "newest first: {all:#?}"
    );
    // Each command once.
    assert_eq!(
        all.iter()
            .filter(|record| record["action"] == "pause")
            .count(),
        1
    );
    // --limit and --since.
    assert_eq!(records(&cluster, &["--limit", "2"]).len(), 2);
    assert!(records(&cluster, &["--since", "2000-01-01T00:00:00Z"]).len() >= all.len().min(50));
    let text = cluster.cli(&["audit"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("db migration") && text.contains("ACTION"),
        "{text}"
    );
}
