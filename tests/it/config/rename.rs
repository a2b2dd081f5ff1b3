//! A reload that renames a job while it runs (a removed job and an added
//! one that run the same): no run of the new name starts before the old
//! name's run ends, on a fleet of real daemons, whichever node reloads
//! first.

use crate::common;

use std::collections::HashMap;
use std::time::Duration;

use common::{Node, RedisServer, Workdir, history, toml_path, wait_until};

/// Every 2 s, running 6 s: most occurrences overlap the run before.
fn config(name: &str) -> String {
    config_running(name, 6)
}

fn config_running(name: &str, seconds: u32) -> String {
    format!(
        "[jobs.{name}]\nschedule = \"*/2 * * * * *\"\nstarting_deadline = \"1s\"\ncommand = 'sleep {seconds}'\n"
    )
}

/// Three nodes running `long`, one of which (its index) just started a
/// run; `jobs.toml` already renames it `long-job` (not reloaded yet).
struct Renaming {
    redis: RedisServer,
    nodes: Vec<Node>,
    runner: usize,
    _work: Workdir,
}

fn rename_during_a_run() -> Renaming {
    let redis = RedisServer::start();
    let work = Workdir::new();
    work.write_config(&config("long"));
    let nodes: Vec<Node> = ["n1", "n2", "n3"]
        .iter()
        .map(|id| Node::start(&work, &redis, id, &[]))
        .collect();
    let runner = wait_for_a_fresh_run(&nodes);
    work.write_config(&config("long-job"));
    Renaming {
        redis,
        nodes,
        runner,
        _work: work,
    }
}

fn won(node: &Node, job: &str) -> usize {
    node.log().matches(&format!("claim won job={job} ")).count()
}

/// Waits until a node wins a new run of `long` and answers its index.
fn wait_for_a_fresh_run(nodes: &[Node]) -> usize {
    let before: Vec<usize> = nodes.iter().map(|node| won(node, "long")).collect();
    let mut runner = None;
    wait_until(Duration::from_secs(20), "a new run of `long`", || {
        runner = nodes
            .iter()
            .zip(&before)
            .position(|(node, count)| won(node, "long") > *count);
        runner.is_some()
    });
    runner.unwrap_or_default()
}

/// SIGHUP to each of `nodes`, then waits until each has reloaded.
fn reload<'a>(nodes: impl Iterator<Item = &'a Node> + Clone) {
    for node in nodes.clone() {
        node.signal("HUP");
    }
    for node in nodes {
        node.wait_for_log(Duration::from_secs(5), "config reloaded");
    }
}

fn ms(entry: &HashMap<String, String>, field: &str) -> i64 {
    entry[field].parse().expect("epoch ms")
}

/// `long-job` ran after `long`'s last run ended, never during it, and
/// the occurrences met meanwhile were skipped. Returns those skips (not
/// the later ones behind `long-job`'s own runs).
fn assert_no_overlap(redis: &RedisServer) -> Vec<HashMap<String, String>> {
    wait_until(Duration::from_secs(30), "`long-job` runs", || {
        history(redis, "long-job")
            .iter()
            .any(|entry| entry["outcome"] == "succeeded")
    });
    let old = history(redis, "long");
    let old_runs: Vec<_> = old
        .iter()
        .filter(|entry| entry["outcome"] == "succeeded")
        .collect();
    let old_end = old_runs
        .iter()
        .map(|entry| ms(entry, "finished_at"))
        .max()
        .expect("a run of `long`");
    let new = history(redis, "long-job");
    for entry in &new {
        if entry["outcome"] != "skipped" {
            assert!(
                ms(entry, "started_at") >= old_end,
                "`long-job` ran {entry:?} before `long`'s run ended at {old_end}: {old:?}"
            );
        }
    }
    let skipped: Vec<_> = new
        .into_iter()
        .filter(|entry| entry["outcome"] == "skipped" && ms(entry, "started_at") <= old_end)
        .collect();
    assert!(
        !skipped.is_empty(),
        "no occurrence of `long-job` met the run of `long`"
    );
    skipped
}

#[test]
fn a_job_renamed_while_it_runs_does_not_run_under_its_new_name_until_the_run_ends() {
    let fleet = rename_during_a_run();
    let (redis, nodes, runner) = (&fleet.redis, &fleet.nodes, fleet.runner);
    reload(nodes.iter());
    let skipped = assert_no_overlap(redis);
    let log = nodes[runner].log();
    assert!(
        log.contains("job `long` was removed while its run is in progress: it runs to its end under its lease"),
        "{log}"
    );
    assert!(
        log.contains("`long-job`'s occurrences are skipped"),
        "{log}"
    );
    let runner_id = &nodes[runner].id;
    assert!(
        skipped
            .iter()
            .all(|entry| entry["error"].contains(runner_id.as_str())),
        "each skip names the node running `long`: {skipped:?}"
    );
}

#[test]
fn a_rename_keeps_the_new_name_out_also_before_the_running_node_reloads() {
    let fleet = rename_during_a_run();
    let (redis, nodes, runner) = (&fleet.redis, &fleet.nodes, fleet.runner);
    let others = nodes.iter().enumerate().filter(|(i, _)| *i != runner);
    reload(others.map(|(_, node)| node));
    // An occurrence of `long-job` comes while only the others reloaded.
    wait_until(Duration::from_secs(5), "`long-job` decided", || {
        !history(redis, "long-job").is_empty()
    });
    reload([&nodes[runner]].into_iter());
    assert_no_overlap(redis);
    let first = &history(redis, "long-job")[0];
    assert!(
        first["error"].contains("lock of `long` held by")
            && first["error"].contains(nodes[runner].id.as_str()),
        "{first:?}"
    );
}

/// A node that never knew the old name (started with the new file) is
/// kept out by the lock the running node took for the new name at its
/// reload. The running node is drained first, so the new node is the
/// only one claiming `long-job`.
#[test]
fn a_node_started_with_the_new_name_finds_its_lock_held_by_the_old_run() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    work.write_config(&config_running("long", 10));
    let n1 = Node::start(&work, &redis, "n1", &[]);
    let nodes = [n1];
    wait_for_a_fresh_run(&nodes);
    let drained = std::process::Command::new(common::solocron_bin())
        .args(["drain", "--node", "n1", "--redis", &redis.url()])
        .args(["--config", &toml_path(&work.path("jobs.toml"))])
        .output()
        .expect("run solocron drain");
    assert!(drained.status.success(), "{drained:?}");
    nodes[0].wait_for_log(Duration::from_secs(5), "draining:");
    work.write_config(&config_running("long-job", 10));
    reload(nodes.iter());
    let _n2 = Node::start(&work, &redis, "n2", &[]);
    let skipped = assert_no_overlap(&redis);
    let log = nodes[0].log();
    assert!(
        log.contains("holding the renamed job's lock until the run of its old name ends here"),
        "{log}"
    );
    assert!(
        skipped
            .iter()
            .all(|entry| entry["node"] == "n2" && entry["error"] == "lock held by n1"),
        "{skipped:?}"
    );
}
