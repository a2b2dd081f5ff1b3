//! Calendars with a real daemon: an every-second job
//! whose `skip_during` calendar covers the next minutes runs nothing;
//! each occurrence is recorded `excluded` once (never `missed`, never
//! notified); a reload without the calendar runs it again; `check` lists
//! the occurrences the calendars let run.
//!
//! What breaks it: an excluded occurrence that runs, is recorded twice or
//! `missed`, or a notifier told of it.

use crate::common;

use std::time::Duration;

use chrono::{TimeDelta, Utc};
use common::cluster::{Cluster, JobSpec, rfc3339, whole_second_after};
use common::{RedisServer, wait_until};

#[test]
fn occurrences_a_calendar_excludes_are_recorded_excluded_once_and_never_run() {
    let now = Utc::now();
    let from = (now - TimeDelta::minutes(1)).format("%Y-%m-%dT%H:%M");
    let to = (now + TimeDelta::minutes(3)).format("%Y-%m-%dT%H:%M");
    let calendar = format!("\n[calendars.freeze]\nranges = [\"{from}/{to}\"]\n");
    let told = common::toml_path(&common::Workdir::new().path("told"));
    let tick = JobSpec::new("tick", "* * * * * *", 0.05)
        .with("skip_during = [\"freeze\"]")
        .with(&format!(
            "on_failure = {{ command = 'echo told >> {told}' }}"
        ))
        .with(&format!(
            "on_success = {{ command = 'echo told >> {told}' }}"
        ));
    let mut cluster = Cluster::new(RedisServer::start(), &calendar, std::slice::from_ref(&tick));
    cluster.start_node("n1", &[]);
    cluster.start_node("n2", &[]);
    let window_from = whole_second_after(2, 1);
    let window_to = window_from + TimeDelta::seconds(4);
    let decided = |cluster: &Cluster| {
        cluster
            .decisions(&["tick"])
            .into_iter()
            .filter(|d| d.occurrence >= rfc3339(window_from) && d.occurrence < rfc3339(window_to))
            .collect::<Vec<_>>()
    };
    wait_until(Duration::from_secs(15), "four occurrences decided", || {
        decided(&cluster).len() >= 4
    });
    let decisions = decided(&cluster);
    assert_eq!(decisions.len(), 4, "each recorded once: {decisions:?}");
    assert!(
        decisions.iter().all(|d| d.outcome == "excluded"),
        "{decisions:?}\n{}",
        cluster.logs()
    );
    assert!(cluster.runs().is_empty(), "an excluded occurrence ran");
    let check = std::process::Command::new(common::solocron_bin())
        .args([
            "check",
            "--config",
            &common::toml_path(&cluster.work.path("jobs.toml")),
        ])
        .output()
        .expect("check");
    let listed = String::from_utf8_lossy(&check.stdout);
    assert!(listed.contains("skip_during [freeze]"), "{listed}");
    // The first occurrence check lists is past the freeze.
    let first = listed
        .lines()
        .find_map(|line| line.split("  =  ").nth(1))
        .unwrap_or_default()
        .trim()
        .to_string();
    assert!(first.as_str() > to.to_string().as_str(), "{listed}");
    // Without the calendar the job runs again.
    let plain = JobSpec::new("tick", "* * * * * *", 0.05);
    cluster.write_jobs(&[plain]);
    for node in &cluster.nodes {
        node.signal("HUP");
    }
    cluster.wait_for_run(Duration::from_secs(10), "a run after the reload", |run| {
        run.job == "tick"
    });
    assert!(
        std::fs::read_to_string(&told)
            .unwrap_or_default()
            .is_empty(),
        "a notifier was told of an excluded occurrence"
    );
}
