//! A claim counts only once `wait_replicas` replicas acknowledged it
//! (guarantee 8, docs/guarantees.md): the claim is one pipeline
//! `[EVALSHA claim, WAIT n timeout]`, and a
//! claim whose `WAIT` comes back short is undone and never runs.
//!
//! One master and one replica (`--replicaof`), the daemon on the master's
//! `url` with `wait_replicas`:
//! - the replica paused (SIGSTOP): nothing runs, one clear line in the log
//!   (not one per occurrence), `status` shows the warning; the replica
//!   resumed: runs resume;
//! - `wait_replicas = 2` with one replica: nothing ever runs, and the
//!   occurrences are recorded `missed`.
//!
//! Breaks if a claim ran without its acknowledgement, if the undo left the
//! occurrence decided (the retry would find it "claimed"), or if every
//! occurrence logged its own error line.

use crate::common;

use std::time::Duration;

use common::{Node, RedisServer, Workdir, history, wait_until};

struct Pair {
    master: RedisServer,
    replica: RedisServer,
}

fn pair() -> Pair {
    let master = RedisServer::start();
    let port = master.port.to_string();
    let replica = RedisServer::start_with_args(&["--replicaof", "127.0.0.1", &port]);
    wait_until(Duration::from_secs(10), "the replica is in sync", || {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut master.conn())
            .unwrap_or_default();
        info.contains("connected_slaves:1") && info.contains("state=online")
    });
    Pair { master, replica }
}

fn config(work: &Workdir, master: &RedisServer, wait_replicas: u32) {
    work.write_config(&format!(
        "[redis]\nurl = \"{}\"\nwait_replicas = {wait_replicas}\nwait_timeout = \"100ms\"\n\n\
         [jobs.tick]\nschedule = \"* * * * * *\"\nstarting_deadline = \"2s\"\n\
         command = 'echo $SOLOCRON_OCCURRENCE >> {}'\n",
        master.url(),
        common::toml_path(&work.path("runs"))
    ));
}

/// How many occurrences of `tick` the history has as `missed`.
fn misses(master: &RedisServer) -> usize {
    history(master, "tick")
        .iter()
        .filter(|entry| entry.get("outcome").map(String::as_str) == Some("missed"))
        .count()
}

fn start(work: &Workdir, id: &str) -> Node {
    let config = common::toml_path(&work.path("jobs.toml"));
    Node::start_with_args(work, id, &["--config", &config], &[])
}

#[test]
fn a_replica_that_does_not_acknowledge_stops_every_run_with_one_clear_line() {
    let pair = pair();
    let work = Workdir::new();
    config(&work, &pair.master, 1);
    let node = start(&work, "n1");
    wait_until(
        Duration::from_secs(10),
        "runs with an acknowledging replica",
        || work.lines("runs").len() >= 2,
    );
    // A claim made while the replica was still syncing at start may have
    // been refused once already: count the lines from the pause on.
    let before_pause = node
        .log()
        .matches("does not confirm this node's writes")
        .count();
    pair.replica.pause();
    wait_until(
        Duration::from_secs(10),
        "the node says redis does not confirm its writes",
        || {
            node.log()
                .matches("does not confirm this node's writes")
                .count()
                > before_pause
        },
    );
    let paused_runs = work.lines("runs").len();
    let paused_misses = misses(&pair.master);
    // Let occurrences come and pass their deadline.
    wait_until(
        Duration::from_secs(15),
        "two occurrences are recorded missed",
        || misses(&pair.master) >= paused_misses + 2,
    );
    let during = work.lines("runs").len();
    assert!(
        during <= paused_runs + 1,
        "runs went on without the replica's acknowledgement: {paused_runs} -> {during}"
    );
    // `status` shows it once the node's next registry heartbeat (10 s) says so.
    let warning = || {
        let status = std::process::Command::new(common::solocron_bin())
            .args([
                "status",
                "--json",
                "--config",
                &common::toml_path(&work.path("jobs.toml")),
            ])
            .output()
            .expect("solocron status");
        let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap_or_default();
        status["nodes"][0]["redis_warning"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    wait_until(
        Duration::from_secs(15),
        "status shows the node's warning",
        || warning().contains("acknowledged by 0 of the 1"),
    );
    let log = node.log();
    assert_eq!(
        log.matches("does not confirm this node's writes").count() - before_pause,
        1,
        "one line, not one per occurrence:\n{log}"
    );
    pair.replica.resume();
    let resumed_runs = work.lines("runs").len();
    wait_until(
        Duration::from_secs(15),
        "runs resume with the replica",
        || work.lines("runs").len() >= resumed_runs + 2,
    );
    node.wait_for_log(Duration::from_secs(5), "redis reachable again after");
}

#[test]
fn more_wait_replicas_than_replicas_runs_nothing_and_records_the_misses() {
    let pair = pair();
    let work = Workdir::new();
    config(&work, &pair.master, 2);
    let node = start(&work, "n1");
    node.wait_for_log(
        Duration::from_secs(10),
        "does not confirm this node's writes",
    );
    wait_until(Duration::from_secs(15), "misses are recorded", || {
        misses(&pair.master) >= 3
    });
    assert!(work.lines("runs").is_empty(), "never run unacknowledged");
    let entries = history(&pair.master, "tick");
    assert!(
        entries
            .iter()
            .all(|entry| entry.get("outcome").map(String::as_str) == Some("missed")),
        "{entries:?}"
    );
}
