//! What one node's drift check reads per registry period, seen through
//! `MONITOR` on a real redis-server with real daemons: the same few
//! commands on 3 nodes as on 10, none on another node's entry, whether the
//! fleet agrees or runs two configs (a rollout, where each config's jobs
//! are read once, not once per period); and a node of an older version,
//! which stores no config, still compared with the others.

use crate::common;

use std::time::Duration;

use common::{Monitor, Node, RedisServer, Workdir, wait_until};

const AGREED: &str = "[jobs.report]\nschedule = \"0 2 * * *\"\ncommand = \"echo v1\"\n";
const ROLLED: &str = "[jobs.report]\nschedule = \"0 3 * * *\"\ncommand = \"echo v1\"\n";

/// The registry reads `n1` sends between two of its heartbeats: commands
/// (not scripts) from its connection on the `{solocron}:node*` and
/// `{solocron}:config*` keys.
#[derive(Debug, PartialEq, Eq)]
struct Period {
    reads: Vec<String>,
}

impl Period {
    fn on_other_nodes(&self) -> usize {
        self.reads
            .iter()
            .filter(|read| read.contains("{solocron}:node:") && !read.contains(":node:n1"))
            .count()
    }
}

/// The top-level commands of `text` as (client address, words).
fn commands(text: &str) -> Vec<(String, Vec<String>)> {
    text.lines()
        .filter(|line| !line.contains(" lua]"))
        .filter_map(|line| {
            let client = line.split('[').nth(1)?.split(']').next()?.to_string();
            let words = line
                .split('"')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect();
            Some((client, words))
        })
        .collect()
}

fn is_heartbeat_of_n1(words: &[String]) -> bool {
    words
        .first()
        .is_some_and(|name| name.eq_ignore_ascii_case("evalsha"))
        && words.iter().any(|word| word == "{solocron}:node:n1")
}

/// The last whole period of `n1` in `text`: between its last two
/// heartbeats, if it sent two.
fn last_period(text: &str) -> Option<Period> {
    let all = commands(text);
    let named = |at: usize, name: &str| {
        all[at]
            .1
            .first()
            .is_some_and(|word| word.eq_ignore_ascii_case(name))
    };
    // An `EVALSHA` answered `NOSCRIPT` is followed by `SCRIPT LOAD` and
    // sent again: only the second one is the heartbeat.
    let retried = |at: usize| {
        (at + 1..all.len())
            .find(|&next| all[next].0 == all[at].0)
            .is_some_and(|next| named(next, "script"))
    };
    let beats: Vec<usize> = (0..all.len())
        .filter(|&at| is_heartbeat_of_n1(&all[at].1) && !retried(at))
        .collect();
    let [.., from, to] = beats[..] else {
        return None;
    };
    let client = &all[from].0;
    let reads = (from + 1..to)
        .filter(|&at| all[at].0 == *client && !named(at, "evalsha"))
        .map(|at| &all[at].1)
        .filter(|words| {
            words.iter().any(|word| {
                word.starts_with("{solocron}:node") || word.starts_with("{solocron}:config")
            })
        })
        .map(|words| words.join(" "))
        .collect();
    Some(Period { reads })
}

fn live_nodes(redis: &RedisServer) -> usize {
    redis::cmd("ZCARD")
        .arg("{solocron}:nodes")
        .query(&mut redis.conn())
        .unwrap_or(0)
}

/// `n1`'s registry reads per period with `count` nodes: while every node
/// runs one config, then after `n1` alone reloaded another.
fn measure(count: usize) -> (Period, Period) {
    let redis = RedisServer::start();
    let (own, rest) = (Workdir::new(), Workdir::new());
    own.write_config(AGREED);
    rest.write_config(AGREED);
    let n1 = Node::start(&own, &redis, "n1", &[]);
    let _others: Vec<Node> = (2..=count)
        .map(|at| Node::start(&rest, &redis, &format!("n{at}"), &[]))
        .collect();
    wait_until(Duration::from_secs(30), "every node is live", || {
        live_nodes(&redis) == count
    });
    let monitor = Monitor::start(&redis, own.path("monitor.txt"));
    let mut agreed = None;
    wait_until(Duration::from_secs(40), "a whole period of n1", || {
        agreed = last_period(&monitor.text());
        agreed.is_some()
    });
    drop(monitor);
    own.write_config(ROLLED);
    n1.signal("HUP");
    n1.wait_for_log(
        Duration::from_secs(20),
        "job definition differs between nodes",
    );
    let monitor = Monitor::start(&redis, own.path("monitor-rollout.txt"));
    let mut rolled = None;
    wait_until(
        Duration::from_secs(40),
        "a whole period of n1 in the rollout",
        || {
            rolled = last_period(&monitor.text());
            rolled.is_some()
        },
    );
    (agreed.expect("waited"), rolled.expect("waited"))
}

#[test]
fn a_nodes_drift_check_reads_as_much_with_10_nodes_as_with_3() {
    let (agreed_3, rolled_3) = measure(3);
    let (agreed_10, rolled_10) = measure(10);
    eprintln!(
        "registry reads per period: agreeing 3 nodes {}, 10 nodes {}; rollout 3 nodes {}, 10 nodes {}",
        agreed_3.reads.len(),
        agreed_10.reads.len(),
        rolled_3.reads.len(),
        rolled_10.reads.len()
    );
    for period in [&agreed_3, &agreed_10, &rolled_3, &rolled_10] {
        assert_eq!(
            period.on_other_nodes(),
            0,
            "reads another node's entry: {period:?}"
        );
        assert!(
            !period
                .reads
                .iter()
                .any(|read| read.starts_with("GET") || read.starts_with("get")),
            "reads a config's jobs again: {period:?}"
        );
    }
    assert!(!agreed_3.reads.is_empty(), "the check reads: {agreed_3:?}");
    assert_eq!(
        agreed_3.reads.len(),
        agreed_10.reads.len(),
        "{agreed_3:?} {agreed_10:?}"
    );
    assert_eq!(
        rolled_3.reads.len(),
        rolled_10.reads.len(),
        "{rolled_3:?} {rolled_10:?}"
    );
}

#[test]
fn an_older_node_that_stores_no_config_is_still_compared() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    work.write_config(AGREED);
    let n1 = Node::start(&work, &redis, "n1", &[]);
    wait_until(Duration::from_secs(10), "n1 is live", || {
        live_nodes(&redis) == 1
    });
    // What an older daemon writes: its entry and its id, no config sets.
    let mut conn = redis.conn();
    let (secs, micros): (String, String) = redis::cmd("TIME").query(&mut conn).unwrap();
    let now_ms = secs.parse::<i64>().unwrap() * 1000 + micros.parse::<i64>().unwrap() / 1000;
    let _: () = redis::cmd("HSET")
        .arg("{solocron}:node:old")
        .arg(&["node", "old", "config_hash", "0123456789ab"])
        .arg(&["jobs", r#"{"report":"ba9876543210"}"#])
        .arg(&["updated_at", &now_ms.to_string()])
        .query(&mut conn)
        .unwrap();
    let _: () = redis::cmd("ZADD")
        .arg("{solocron}:nodes")
        .arg(now_ms)
        .arg("old")
        .query(&mut conn)
        .unwrap();
    n1.wait_for_log(
        Duration::from_secs(20),
        "job definition differs between nodes",
    );
    let log = n1.log();
    let line = log
        .lines()
        .find(|line| line.contains("job definition differs"))
        .expect("waited for it");
    assert!(
        line.contains("job=report") && line.contains("ba9876543210: old") && line.contains("n1"),
        "names the older node's side: {line}"
    );
}
