//! Redis that comes back without the fleet's data is said loudly, and a
//! restart that kept it is not: real `redis-server`s restarted on the same
//! port, without persistence (empty) and with `appendonly yes` (data kept),
//! under real daemons.
//!
//! Data lost: each of two nodes that saw the data before logs one error
//! line naming the old and new `run_id` and when it last saw the data, and
//! counts `solocron_redis_data_lost_total` once, whichever of them wrote
//! the fleet's marker again first. Data kept: a new `run_id` alone is a
//! restart, said at info, with the counter at 0.

use crate::common;

use std::time::Duration;

use common::{
    Node, Persistence, RedisServer, Workdir, command_calls, free_port, reset_stats, scrape_metrics,
    wait_until,
};

const LOST: &str = "redis lost the fleet's data";
const KEPT: &str = "redis restarted (or failed over) with the fleet's data kept";
const WATCHING: &str = "watching redis for a loss of the fleet's data";
const MARKER: &str = "{solocron}:dataset";

/// A node with its own workdir and metrics port.
struct Watched {
    node: Node,
    port: u16,
    _work: Workdir,
}

fn start_node(redis: &RedisServer, id: &str) -> Watched {
    let work = Workdir::new();
    let port = free_port();
    work.write_config(&format!(
        "[daemon]\nmetrics_listen = \"127.0.0.1:{port}\"\n\
         [jobs.tick]\nschedule = \"* * * * * *\"\ncommand = \"true\"\n"
    ));
    let node = Node::start(&work, redis, id, &[]);
    Watched {
        node,
        port,
        _work: work,
    }
}

fn run_id(redis: &RedisServer) -> String {
    let mut text = String::new();
    wait_until(
        Duration::from_secs(10),
        "INFO answers",
        || match redis::cmd("INFO").arg("server").query(&mut redis.conn()) {
            Ok(answer) => {
                text = answer;
                true
            }
            Err(_) => false,
        },
    );
    text.lines()
        .find_map(|line| line.strip_prefix("run_id:"))
        .expect("run_id")
        .trim()
        .to_string()
}

/// The marker's token, once the server answers (not `LOADING` its AOF).
fn marker(redis: &RedisServer) -> Option<String> {
    let mut token = None;
    wait_until(
        Duration::from_secs(10),
        "GET answers",
        || match redis::cmd("GET").arg(MARKER).query(&mut redis.conn()) {
            Ok(found) => {
                token = found;
                true
            }
            Err(_) => false,
        },
    );
    token
}

/// `solocron_redis_data_lost_total` of the node, once its endpoint answers.
fn data_lost_total(port: u16) -> f64 {
    let mut total = None;
    wait_until(Duration::from_secs(10), "/metrics answers", || {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            return false;
        }
        total = scrape_metrics(port).lines().find_map(|line| {
            line.strip_prefix("solocron_redis_data_lost_total ")?
                .parse()
                .ok()
        });
        total.is_some()
    });
    total.unwrap_or_default()
}

/// Every node of `nodes` has read the fleet's marker; returns its token.
fn wait_marked(redis: &RedisServer, nodes: &[&Watched]) -> String {
    for watched in nodes {
        watched.node.wait_for_log(Duration::from_secs(20), WATCHING);
    }
    marker(redis).expect("the marker the nodes read")
}

#[test]
fn redis_restarted_empty_is_logged_once_and_counted_by_every_node_that_saw_the_data() {
    let mut redis = RedisServer::start();
    let a = start_node(&redis, "a");
    let b = start_node(&redis, "b");
    let before = wait_marked(&redis, &[&a, &b]);
    let old_run_id = run_id(&redis);
    assert_eq!(data_lost_total(a.port), 0.0);
    assert_eq!(data_lost_total(b.port), 0.0);

    redis.restart();
    let new_run_id = run_id(&redis);
    assert_ne!(old_run_id, new_run_id);
    for watched in [&a, &b] {
        watched.node.wait_for_log(Duration::from_secs(30), LOST);
        wait_until(Duration::from_secs(10), "the loss is counted", || {
            data_lost_total(watched.port) == 1.0
        });
    }
    wait_until(
        Duration::from_secs(10),
        "the marker is written again",
        || marker(&redis).is_some_and(|token| token != before),
    );
    // Later checks (each a `SET … NX GET` of the marker, the daemon's only
    // plain SET) do not say it again.
    reset_stats(&redis);
    wait_until(
        Duration::from_secs(30),
        "later checks of the marker",
        || command_calls(&redis).get("set").copied().unwrap_or(0) >= 4,
    );
    for watched in [&a, &b] {
        assert_eq!(data_lost_total(watched.port), 1.0);
        let log = watched.node.log();
        let lines: Vec<&str> = log.lines().filter(|line| line.contains(LOST)).collect();
        assert_eq!(lines.len(), 1, "{log}");
        let line = lines[0];
        for needle in [
            format!("old_run_id={old_run_id}"),
            format!("new_run_id={new_run_id}"),
            "last_seen=".to_string(),
            "pause and drain".to_string(),
        ] {
            assert!(line.contains(&needle), "`{needle}` missing: {line}");
        }
        assert!(!log.contains(KEPT), "{log}");
    }
}

#[test]
fn redis_restarted_with_its_data_is_a_restart_not_a_loss() {
    let mut redis = RedisServer::start_persistent(Persistence::AppendOnly);
    let a = start_node(&redis, "a");
    let before = wait_marked(&redis, &[&a]);
    let old_run_id = run_id(&redis);

    redis.restart();
    let new_run_id = run_id(&redis);
    assert_ne!(old_run_id, new_run_id);
    assert_eq!(marker(&redis), Some(before));
    // The check that would have found a loss says the restart instead.
    a.node.wait_for_log(Duration::from_secs(30), KEPT);
    let log = a.node.log();
    let line = log
        .lines()
        .find(|line| line.contains(KEPT))
        .unwrap_or_default();
    assert!(
        line.contains(&format!("old_run_id={old_run_id}"))
            && line.contains(&format!("new_run_id={new_run_id}")),
        "{line}"
    );
    assert!(!log.contains(LOST), "{log}");
    assert_eq!(data_lost_total(a.port), 0.0);
}
