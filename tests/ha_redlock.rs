//! Redlock over 5 independent masters (SPEC §2.9), three daemons, an
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

mod common;

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
    let trigger = fleet.cli(&["trigger", "tick", "--node-id", "ops"]);
    assert_eq!(
        trigger.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&trigger.stderr)
    );
}
