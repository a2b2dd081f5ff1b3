//! `pause`, `drain` and `trigger --fleet` on the multi-member coordinators:
//! Redlock (written to every master, read merged: a master that missed the
//! `resume` cannot bring the pause back) and Redis Cluster (every control
//! key under the one hash tag `{PREFIX}`, the paused records on each job's
//! own shard).

use crate::common;

use std::time::Duration;

use chrono::{DateTime, Utc};
use common::audit::{Decision, Window, history_exactly_once};
use common::cluster::{JobSpec, rfc3339};
use common::fleet::Fleet;
use common::ha::{Masters, RedisCluster};
use common::{Node, wait_until};

fn ok(output: &std::process::Output) -> String {
    assert!(
        output.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn has_line(node: &Node, needles: &[&str]) -> bool {
    node.log()
        .lines()
        .any(|line| needles.iter().all(|needle| line.contains(needle)))
}

fn wait_line(node: &Node, needles: &[&str]) {
    wait_until(
        Duration::from_secs(15),
        &format!("{} logs {needles:?}", node.id),
        || has_line(node, needles),
    );
}

fn at(decision: &Decision) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(&decision.occurrence)
        .ok()
        .map(|at| at.with_timezone(&Utc))
}

fn next_second(at: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp(at.timestamp() + 1, 0).expect("a valid instant")
}

/// Pause `job` on every node, see its occurrences recorded `paused` (each
/// once, none run), resume it; returns the first occurrence run again.
fn pause_and_resume(fleet: &Fleet, job: &str, while_resuming: impl FnOnce()) -> DateTime<Utc> {
    ok(&fleet.cli(&["pause", job, "--reason", "ha"]));
    for node in &fleet.nodes {
        wait_line(node, &["job paused fleet-wide", &format!("job={job}")]);
    }
    let from = next_second(Utc::now());
    wait_until(Duration::from_secs(20), "2 paused records", || {
        fleet
            .decisions(&[job])
            .iter()
            .filter(|d| d.outcome == "paused" && at(d) >= Some(from))
            .count()
            >= 2
    });
    let status = ok(&fleet.cli(&["status", "--json"]));
    let status: serde_json::Value = serde_json::from_str(&status).expect("status --json");
    let entry = status["jobs"]
        .as_array()
        .and_then(|jobs| jobs.iter().find(|entry| entry["job"] == job).cloned())
        .expect("the job in status");
    assert_eq!(entry["paused"]["reason"], "ha", "{entry:#}");
    let resume_sent = Utc::now();
    while_resuming();
    ok(&fleet.cli(&["resume", job]));
    for node in &fleet.nodes {
        wait_line(node, &["job resumed", &format!("job={job}")]);
    }
    let back = next_second(Utc::now());
    let again = fleet.wait_for_run(Duration::from_secs(20), "runs again", |run| {
        run.job == job && run.at() >= Some(back)
    });
    let again_at = again.at().expect("scheduled");
    wait_until(Duration::from_secs(15), "the run again is recorded", || {
        fleet
            .decisions(&[job])
            .iter()
            .any(|d| d.occurrence == rfc3339(again_at))
    });
    let decisions = fleet.decisions(&[job]);
    let report = history_exactly_once(
        &decisions,
        &[Window::new(job, "* * * * * *", from, again_at)],
    );
    assert!(report.is_exact(), "{report:?}\n{}", fleet.logs());
    let paused_until = resume_sent - chrono::TimeDelta::milliseconds(200);
    for occurrence in Window::new(job, "* * * * * *", from, paused_until).occurrences() {
        let outcome = decisions
            .iter()
            .find(|d| d.occurrence == rfc3339(occurrence))
            .map(|d| d.outcome.as_str());
        assert_eq!(outcome, Some("paused"), "{}", rfc3339(occurrence));
    }
    assert!(
        !fleet.runs().iter().any(
            |run| run.job == job && run.at().is_some_and(|at| at >= from && at <= paused_until)
        ),
        "ran while paused"
    );
    again_at
}

/// Drains `node`, then sees it claim nothing while the others run `job`;
/// `trigger --fleet` then runs on one of the others, exactly once.
fn drain_and_trigger(fleet: &Fleet, drained: &str, job: &str) {
    ok(&fleet.cli(&["drain", "--node", drained]));
    let node = fleet.node(drained);
    wait_line(node, &["draining: this node claims no new occurrences"]);
    let effective = Utc::now();
    let later = next_second(effective) + chrono::TimeDelta::seconds(3);
    fleet.wait_for_run(Duration::from_secs(20), "the others run", |run| {
        run.job == job && run.at() >= Some(later)
    });
    let claimed: Vec<String> = node
        .log()
        .lines()
        .filter(|line| line.contains("claim won"))
        .filter(|line| {
            line.split("occurrence=")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|value| DateTime::parse_from_rfc3339(value).ok())
                .is_some_and(|at| at.with_timezone(&Utc) > effective)
        })
        .map(str::to_string)
        .collect();
    assert!(claimed.is_empty(), "{claimed:?}");
    let fleet_run = fleet.cli(&["trigger", job, "--fleet"]);
    let err = String::from_utf8_lossy(&fleet_run.stderr).into_owned();
    // The scheduled run of the second may hold the lock: 3 is a fine answer
    // then, and it was still taken by a node that is not drained.
    assert!(matches!(fleet_run.status.code(), Some(0 | 3)), "{err}");
    assert!(
        err.contains("taken by node `") && !err.contains(&format!("taken by node `{drained}`")),
        "{err}"
    );
    let manual: Vec<Decision> = fleet
        .decisions(&[job])
        .into_iter()
        .filter(|d| d.occurrence.starts_with("manual-"))
        .collect();
    let expected = usize::from(fleet_run.status.code() == Some(0));
    assert_eq!(manual.len(), expected, "{manual:?}\n{err}");
    ok(&fleet.cli(&["undrain", "--node", drained]));
    wait_line(node, &["undrained: this node claims occurrences again"]);
}

#[test]
fn redlock_pauses_and_drains_are_written_to_every_master_and_a_stale_master_cannot_revive_a_pause()
{
    let mut masters = Masters::start_persistent(3);
    let urls: Vec<String> = masters
        .urls()
        .iter()
        .map(|url| format!("\"{url}\""))
        .collect();
    let redis = format!("redlock = [{}]", urls.join(", "));
    let tick = JobSpec::new("tick", "* * * * * *", 0.005).with("lock_ttl = \"3s\"");
    let mut fleet = Fleet::new(&redis, "", std::slice::from_ref(&tick));
    for id in ["n1", "n2", "n3"] {
        fleet.start_node(id);
    }
    fleet.wait_for_run(Duration::from_secs(20), "tick runs", |run| {
        run.job == "tick"
    });
    // Master 0 (the first one read) is down while the resume is written
    // (killed; it restarts with its data): it keeps the pause, with an
    // older stamp.
    let again = pause_and_resume(&fleet, "tick", || masters.kill(0));
    let stale: Option<String> =
        redis::Commands::hget(&mut masters.conn(1), "{solocron}:pauses", "tick").expect("HGET");
    assert!(stale.is_some_and(|mark| mark.contains("\"active\":false")));
    masters.restart(0);
    let mut conn = masters.conn(0);
    let kept: Option<String> =
        redis::Commands::hget(&mut conn, "{solocron}:pauses", "tick").expect("HGET");
    assert!(
        kept.is_some_and(|mark| mark.contains("\"active\":true")),
        "master 0 missed the resume"
    );
    // With master 0 back, its old pause loses the merge: tick keeps running.
    let later = again + chrono::TimeDelta::seconds(4);
    fleet.wait_for_run(Duration::from_secs(20), "tick goes on running", |run| {
        run.job == "tick" && run.at() >= Some(later)
    });
    assert!(
        !fleet
            .decisions(&["tick"])
            .iter()
            .any(|d| d.outcome == "paused" && at(d) > Some(again)),
        "the stale master brought the pause back"
    );
    drain_and_trigger(&fleet, "n1", "tick");
}

#[test]
fn cluster_pauses_drains_and_fleet_triggers_work_across_shards() {
    let cluster = RedisCluster::start(3, 1);
    let seeds: Vec<String> = cluster
        .seed_urls()
        .iter()
        .map(|url| format!("\"{url}\""))
        .collect();
    let redis = format!("cluster = [{}]\nwait_timeout = \"200ms\"", seeds.join(", "));
    // Two jobs on different shards than the controls' `{solocron}` slot, most likely.
    let names: Vec<String> = cluster
        .job_names_per_shard("solocron", 1)
        .into_iter()
        .flatten()
        .collect();
    let jobs: Vec<JobSpec> = names
        .iter()
        .map(|name| JobSpec::new(name, "* * * * * *", 0.005).with("lock_ttl = \"3s\""))
        .collect();
    let mut fleet = Fleet::new(&redis, "", &jobs);
    for id in ["n1", "n2", "n3"] {
        fleet.start_node(id);
    }
    for name in &names {
        fleet.wait_for_run(Duration::from_secs(30), "every job runs", |run| {
            &run.job == name
        });
    }
    pause_and_resume(&fleet, &names[0], || {});
    drain_and_trigger(&fleet, "n2", &names[1]);
}

/// With Redlock, `trigger --fleet` requests live on the first master of
/// the list (a documented limit): with that master down it exits 1 naming
/// it, and says to bring it back or to run `solocron trigger JOB` on a
/// node. Before, it said only "cannot queue the request on redis at
/// `redlock URL1, URL2, URL3`: Connection refused", leaving the operator to
/// guess which master and why the two that answer were not enough.
#[test]
fn redlock_trigger_fleet_with_the_first_master_down_names_it_and_the_way_out() {
    let mut masters = Masters::start(3);
    let urls = masters.urls();
    let quoted: Vec<String> = urls.iter().map(|url| format!("\"{url}\"")).collect();
    let redis = format!("redlock = [{}]", quoted.join(", "));
    let fleet = Fleet::new(&redis, "", &[JobSpec::new("report", "0 0 1 1 *", 0.005)]);
    masters.kill(0);
    let output = fleet.cli(&["trigger", "report", "--fleet"]);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    for needle in [
        format!("`{}`, the first master of `[redis] redlock`", urls[0]),
        "solocron trigger report".to_string(),
    ] {
        assert!(stderr.contains(&needle), "`{needle}` missing:\n{stderr}");
    }
    assert!(
        !stderr.contains(&urls[1]),
        "names only the first master:\n{stderr}"
    );
}
