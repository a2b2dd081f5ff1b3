//! An operator's first week with the HA modes: a `[redis]` that names
//! servers of the wrong kind, and a Redis Cluster that is entirely down.
//!
//! - `cluster = [a plain server]` (a `url` or Sentinel data node written as
//!   a seed): exit 78 at once, one line saying the seed has cluster
//!   support disabled and what to write instead. Before, the daemon retried
//!   for ever as "redis unreachable ... No connections found", and the
//!   redis crate logged every failed reconnect (some 11 lines a second);
//! - `url = a node of a Redis Cluster`: exit 78 at once, saying it is a
//!   cluster node and to write `cluster = [...]`. Before, it retried for
//!   ever as "redis unreachable ... Moved: 1635 127.0.0.1:P";
//! - `sentinel.master` misspelt: exit 78 at once, one line naming, for each
//!   sentinel, the names it does monitor. Before, "redis unreachable ...
//!   the sentinel does not monitor this master name" for ever, naming
//!   neither the name nor the sentinels;
//! - a data node's port among `sentinel.urls`: jobs run through the other
//!   sentinels, and one warning names the URL that is not a sentinel.
//!   Before, nothing said it (the group had one sentinel fewer than the
//!   operator believed), and with every URL a data node the daemon retried
//!   "unknown command 'SENTINEL'" for ever as an outage;
//! - every node of a running cluster killed: the outage gets its one line,
//!   not the redis crate's warn and error lines for each command (some
//!   300 a second for one job before).
//!
//! Breaks if one of these mistakes is retried as an outage, or if the
//! log grows with every attempt while the cluster is down.

use crate::common;

use std::time::Duration;

use common::cluster::JobSpec;
use common::fleet::Fleet;
use common::ha::{RedisCluster, SentinelGroup};
use common::{Node, RedisServer, toml_path};

fn tick() -> JobSpec {
    JobSpec::new("tick", "* * * * * *", 0.005).with("starting_deadline = \"2s\"")
}

/// Starts node `n1` of `fleet` on its jobs.toml and waits for its exit.
fn run_until_exit(fleet: &Fleet) -> (Option<i32>, String, String) {
    let config = toml_path(&fleet.work.path("jobs.toml"));
    let mut node = Node::start_with_args(&fleet.work, "n1", &["--config", &config], &[]);
    let exit = node.wait_exit(Duration::from_secs(20));
    (exit.code(), node.log(), config)
}

#[test]
fn a_plain_server_as_cluster_seed_stops_the_daemon_with_one_line() {
    let server = RedisServer::start();
    let url = format!("redis://127.0.0.1:{}/", server.port);
    let fleet = Fleet::new(&format!("cluster = [\"{url}\"]"), "", &[tick()]);
    let (code, log, config) = run_until_exit(&fleet);
    assert_eq!(code, Some(78), "{log}");
    assert!(
        log.lines().count() <= 10,
        "a few lines, not a flood:\n{log}"
    );
    // The stop line; the start-up abandon check's outage line and the
    // registry's withdrawal may quote the same error.
    let told: Vec<&str> = log
        .lines()
        .filter(|line| {
            line.contains("has cluster support disabled") && line.contains("start again")
        })
        .collect();
    assert_eq!(told.len(), 1, "{log}");
    for needle in [url.as_str(), config.as_str(), "url = "] {
        assert!(told[0].contains(needle), "`{needle}` missing:\n{log}");
    }
    assert!(fleet.runs().is_empty());
}

#[test]
fn a_cluster_node_as_url_stops_the_daemon_with_one_line() {
    let cluster = RedisCluster::start(3, 0);
    let url = cluster.url(cluster.master_ports()[1]);
    let redis = format!("url = \"{url}\"");
    let fleet = Fleet::new(&redis, "", &[tick()]);
    let (code, log, config) = run_until_exit(&fleet);
    assert_eq!(code, Some(78), "{log}");
    let told: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("is a node of a Redis Cluster"))
        .collect();
    assert_eq!(told.len(), 1, "{log}");
    for needle in [config.as_str(), "cluster = ["] {
        assert!(told[0].contains(needle), "`{needle}` missing:\n{log}");
    }
    assert!(fleet.runs().is_empty());
}

#[test]
fn a_misspelt_sentinel_master_stops_the_daemon_and_a_data_node_among_the_sentinels_is_named() {
    let group = SentinelGroup::start("solocron");
    let sentinels = group.sentinel_urls();
    let quoted = |urls: &[String]| {
        urls.iter()
            .map(|url| format!("\"{url}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let wrong = format!(
        "sentinel = {{ master = \"solocrn\", urls = [{}] }}",
        quoted(&sentinels)
    );
    let fleet = Fleet::new(&wrong, "", &[tick()]);
    let (code, log, config) = run_until_exit(&fleet);
    assert_eq!(code, Some(78), "{log}");
    let told: Vec<&str> = log
        .lines()
        .filter(|line| {
            line.contains("monitors no master named `solocrn`") && line.contains("start again")
        })
        .collect();
    assert_eq!(told.len(), 1, "{log}");
    for needle in [
        sentinels[0].as_str(),
        sentinels[2].as_str(),
        "it monitors `solocron`",
        config.as_str(),
    ] {
        assert!(told[0].contains(needle), "`{needle}` missing:\n{log}");
    }
    assert!(fleet.runs().is_empty());
    drop(fleet);

    // A data node's port instead of the second sentinel's.
    let data = format!("redis://127.0.0.1:{}/", group.data_ports()[1]);
    let mixed = vec![sentinels[0].clone(), data.clone(), sentinels[2].clone()];
    let redis = format!(
        "sentinel = {{ master = \"solocron\", urls = [{}] }}",
        quoted(&mixed)
    );
    let mut fleet = Fleet::new(&redis, "", &[tick()]);
    fleet.start_node("n1");
    fleet.wait_for_run(Duration::from_secs(15), "a run", |_| true);
    let log = fleet.node("n1").log();
    let warned: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("is not a sentinel"))
        .collect();
    assert_eq!(warned.len(), 1, "one warning:\n{log}");
    assert!(warned[0].contains(&data), "{log}");
}

#[test]
fn a_cluster_entirely_down_logs_its_outage_once_not_every_attempt() {
    let mut cluster = RedisCluster::start(3, 0);
    let seeds: Vec<String> = cluster
        .seed_urls()
        .iter()
        .map(|url| format!("\"{url}\""))
        .collect();
    let redis = format!("cluster = [{}]\nwait_replicas = 0", seeds.join(", "));
    let mut fleet = Fleet::new(&redis, "", &[tick()]);
    fleet.start_node("n1");
    fleet.wait_for_run(Duration::from_secs(15), "a run", |_| true);
    for port in cluster.ports() {
        cluster.kill(port);
    }
    let node = fleet.node("n1");
    node.wait_for_log(Duration::from_secs(10), "redis unreachable");
    let at_outage = node.log().lines().count();
    // Five seconds of claims, registry writes and clock checks against a
    // dead cluster: the one outage line is all they may log. Time itself is
    // the input: nothing but the log shows what the node tried meanwhile.
    std::thread::sleep(Duration::from_secs(5));
    let log = node.log();
    let added: Vec<&str> = log.lines().skip(at_outage).collect();
    assert!(
        added.len() <= 5,
        "{} lines in 5 s of outage:\n{}",
        added.len(),
        added.join("\n")
    );
    assert_eq!(log.matches("redis unreachable").count(), 1, "{log}");
}
