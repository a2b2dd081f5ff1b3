//! `solocron abort` during a Sentinel failover: a long
//! run on one of three daemons is aborted while the master fails over.
//! The abort is written with `WAIT` (a promoted replica has it), so the
//! run stops; whatever happens, the command never lies: exit 0 goes with
//! an `aborted` entry for the run's fence, exit 3 with the outcome the run
//! really ended with, and the run's process is gone either way.
//!
//! What breaks it: an abort the failover loses (the run goes on, exit 1),
//! or an exit status that disagrees with the history.

use crate::common;

use std::time::Duration;

use common::cluster::{JobSpec, wait_gone, whole_second_after};
use common::fleet::Fleet;
use common::ha::SentinelGroup;

#[test]
fn an_abort_during_a_failover_stops_the_run_and_says_what_happened() {
    let group = SentinelGroup::start("solocron");
    let redis = group.redis_section();
    let at = whole_second_after(4, 1);
    let second = at.timestamp().rem_euclid(60);
    let long = JobSpec::new("long", &format!("{second} * * * * *"), 60.0).with("lock_ttl = \"3s\"");
    let mut fleet = Fleet::new(&redis, "", std::slice::from_ref(&long));
    for id in ["n1", "n2", "n3"] {
        fleet.start_node(id);
    }
    let run = fleet.wait_for_run(Duration::from_secs(20), "long starts", |run| {
        run.job == "long"
    });
    let (out, switch) = std::thread::scope(|scope| {
        let abort = scope.spawn(|| fleet.cli(&["abort", "long", "--reason", "failover drill"]));
        std::thread::sleep(Duration::from_millis(100));
        let switch = group.failover();
        (abort.join().expect("abort"), switch)
    });
    println!(
        "failover {} -> {} in {:?}",
        switch.from, switch.to, switch.took
    );
    let said = String::from_utf8_lossy(&out.stderr).to_string();
    wait_gone(run.pid, Duration::from_secs(20));
    // A release the failover interrupted is recorded on the new master
    // once it is known: wait for it.
    let mut entry = serde_json::Value::Null;
    common::wait_until(Duration::from_secs(20), "the run's entry", || {
        entry = fleet
            .history(&["long"])
            .into_iter()
            .find(|entry| entry["fence"] == run.fence && entry["outcome"] != "skipped")
            .unwrap_or_default();
        !entry.is_null()
    });
    match out.status.code() {
        Some(0) => assert_eq!(entry["outcome"], "aborted", "{said}"),
        Some(3) => assert!(
            said.contains(&format!(
                "ended `{}`",
                entry["outcome"].as_str().unwrap_or_default()
            )),
            "{said}\n{entry}"
        ),
        other => panic!("abort exited {other:?}: {said}\n{}", fleet.logs()),
    }
    assert_eq!(
        out.status.code(),
        Some(0),
        "the abort reached the run: {said}\n{entry}"
    );
}
