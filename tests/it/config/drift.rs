//! The config drift guard and the clock check, with real daemon processes.

use crate::common;

use std::time::Duration;

use common::{Node, RedisServer, Workdir, faketime_env, wait_until};

#[test]
fn two_nodes_with_different_definitions_of_a_job_both_warn() {
    let redis = RedisServer::start();
    let old = Workdir::new();
    let new = Workdir::new();
    let same = "[jobs.same]\nschedule = \"@hourly\"\ncommand = \"true\"\n";
    old.write_config(&format!(
        "{same}[jobs.report]\nschedule = \"0 2 * * *\"\ncommand = \"echo v1\"\n"
    ));
    new.write_config(&format!(
        "{same}[jobs.report]\nschedule = \"0 3 * * *\"\ncommand = \"echo v1\"\n"
    ));
    let n1 = Node::start(&old, &redis, "n1", &[]);
    let n2 = Node::start(&new, &redis, "n2", &[]);
    for node in [&n1, &n2] {
        node.wait_for_log(
            Duration::from_secs(20),
            "job definition differs between nodes",
        );
        let log = node.log();
        let warnings: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("job definition differs"))
            .collect();
        assert!(
            warnings.iter().all(|l| l.contains("job=report")),
            "{warnings:?}"
        );
        let line = warnings[0];
        assert!(
            line.contains("n1") && line.contains("n2"),
            "names the nodes on each side: {line}"
        );
        assert!(
            !log.contains("job=same sides"),
            "agreeing jobs are not reported: {log}"
        );
    }
}

#[test]
fn a_node_whose_clock_is_off_by_2_s_warns_with_its_offset() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    work.write_config("[jobs.x]\nschedule = \"@hourly\"\ncommand = \"true\"\n");
    let env = faketime_env("+2");
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let node = Node::start(&work, &redis, "skewed", &env);
    node.wait_for_log(
        Duration::from_secs(10),
        "clock differs from redis by more than 500 ms",
    );
    let offset = common::logged_clock_offset(&node.log()).expect("offset logged");
    assert!((1800..=2200).contains(&offset), "offset {offset}");
    let fine = Node::start(&work, &redis, "fine", &[]);
    fine.wait_for_log(Duration::from_secs(10), "clock checked against redis");
    assert!(!fine.log().contains("clock differs"));
}

#[test]
fn status_shows_every_live_node_its_clock_offset_and_the_drift() {
    let redis = RedisServer::start();
    let old = Workdir::new();
    let new = Workdir::new();
    old.write_config("[jobs.report]\nschedule = \"0 2 * * *\"\ncommand = \"echo v1\"\n");
    new.write_config("[jobs.report]\nschedule = \"0 2 * * *\"\ncommand = \"echo v2\"\n");
    let env = faketime_env("+3");
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let n1 = Node::start(&old, &redis, "n1", &[]);
    let n2 = Node::start(&new, &redis, "n2", &env);
    // Each node publishes once its clock was checked; n2 sees n1 at start.
    n2.wait_for_log(
        Duration::from_secs(20),
        "job definition differs between nodes",
    );
    let status = || -> serde_json::Value {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_solocron"))
            .args(["status", "--json", "--config"])
            .arg(old.path("jobs.toml"))
            .args(["--redis", &redis.url()])
            .output()
            .expect("run status");
        assert!(out.status.success(), "{out:?}");
        serde_json::from_slice(&out.stdout).expect("status --json is JSON")
    };
    let offset = |status: &serde_json::Value, id: &str| {
        status["nodes"]
            .as_array()
            .and_then(|nodes| nodes.iter().find(|node| node["node"] == id))
            .and_then(|node| node["clock_offset_ms"].as_i64())
    };
    // Both nodes publish their offset as soon as they measured it.
    wait_until(
        Duration::from_secs(10),
        "status lists both nodes with offsets",
        || {
            let now = status();
            offset(&now, "n1").is_some() && offset(&now, "n2").is_some()
        },
    );
    let status = status();
    assert!(
        offset(&status, "n1").is_some_and(|ms| ms.abs() < 500),
        "{status}"
    );
    assert!(
        offset(&status, "n2").is_some_and(|ms| (2700..=3300).contains(&ms)),
        "{status}"
    );
    let drift = status["divergences"].as_array().expect("divergences");
    assert_eq!(drift.len(), 1, "{status}");
    assert_eq!(drift[0]["job"], "report");
    let description = drift[0]["description"].as_str().expect("description");
    assert!(
        description.contains("n1") && description.contains("n2"),
        "{description}"
    );
    drop(n1);
}

#[test]
fn a_reload_republishes_the_new_job_fingerprints_at_once() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    let before = "[jobs.report]\nschedule = \"0 2 * * *\"\ncommand = \"echo v1\"\n";
    let after = "[jobs.report]\nschedule = \"0 3 * * *\"\ncommand = \"echo v1\"\n";
    let fingerprint = |text: &str| {
        let text = format!("[redis]\nurl = \"redis://127.0.0.1:1/\"\n\n{text}");
        solocron::config::parse(&text, std::path::Path::new("jobs.toml"), &|_| None)
            .expect("valid")
            .jobs[0]
            .fingerprint()
    };
    let path = work.write_config(before);
    let node = Node::start(&work, &redis, "n1", &[]);
    let published = || -> Option<String> {
        let jobs: Option<String> = redis::cmd("HGET")
            .arg("{solocron}:node:n1")
            .arg("jobs")
            .query(&mut redis.conn())
            .expect("HGET");
        let jobs: serde_json::Value = serde_json::from_str(&jobs?).ok()?;
        jobs["report"].as_str().map(str::to_string)
    };
    wait_until(Duration::from_secs(10), "the first publish", || {
        published() == Some(fingerprint(before))
    });
    assert_eq!(work.write_config(after), path);
    node.signal("HUP");
    node.wait_for_log(Duration::from_secs(5), "config reloaded");
    // Well before the 10 s refresh: the reload itself triggers the publish.
    wait_until(
        Duration::from_secs(3),
        "the new fingerprint is published",
        || published() == Some(fingerprint(after)),
    );
}

#[test]
fn the_registry_entry_is_refreshed_by_heartbeats_and_written_whole_again_when_lost() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    work.write_config("[jobs.x]\nschedule = \"@hourly\"\ncommand = \"true\"\n");
    let node = Node::start(&work, &redis, "n1", &[]);
    let mut conn = redis.conn();
    let key = "{solocron}:node:n1";
    let field = |conn: &mut redis::Connection, name: &str| -> Option<String> {
        redis::cmd("HGET")
            .arg(key)
            .arg(name)
            .query(conn)
            .ok()
            .flatten()
    };
    wait_until(
        Duration::from_secs(10),
        "the node publishes its jobs",
        || field(&mut conn, "jobs").is_some_and(|jobs| jobs.contains("\"x\"")),
    );
    // The first clock measurement writes the entry whole once more (its
    // start time on the clock it fires by): past that write, which follows
    // the measurement at once, only heartbeats come.
    node.wait_for_log(Duration::from_secs(10), "clock checked against redis");
    let measured = field(&mut conn, "updated_at");
    wait_until(
        Duration::from_secs(25),
        "the write after the first measurement",
        || field(&mut conn, "updated_at") != measured,
    );
    // A heartbeat renews the entry without rewriting it: a field the node
    // does not know survives the next refresh.
    let stamp = field(&mut conn, "updated_at");
    let _: () = redis::cmd("HSET")
        .arg(key)
        .arg("marker")
        .arg("1")
        .query(&mut conn)
        .unwrap();
    wait_until(Duration::from_secs(25), "the next heartbeat", || {
        field(&mut conn, "updated_at") != stamp
    });
    assert_eq!(field(&mut conn, "marker").as_deref(), Some("1"));
    // Lost (expired, or Redis lost its data): the next refresh writes it all.
    let _: () = redis::cmd("DEL").arg(key).query(&mut conn).unwrap();
    wait_until(
        Duration::from_secs(25),
        "the entry written whole again",
        || field(&mut conn, "jobs").is_some_and(|jobs| jobs.contains("\"x\"")),
    );
    assert_eq!(field(&mut conn, "marker"), None);
}

/// `status --json` with `--config` and `--redis`.
fn status_json(work: &Workdir, redis: &RedisServer) -> serde_json::Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_solocron"))
        .args(["status", "--json", "--config"])
        .arg(work.path("jobs.toml"))
        .args(["--redis", &redis.url()])
        .output()
        .expect("run status");
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).expect("status --json is JSON")
}

/// The `nodes` entry of `id` in a `status --json` object.
fn node_entry(status: &serde_json::Value, id: &str) -> Option<serde_json::Value> {
    status["nodes"]
        .as_array()?
        .iter()
        .find(|node| node["node"] == id)
        .cloned()
}

fn field(redis: &RedisServer, key: &str, name: &str) -> Option<String> {
    redis::cmd("HGET")
        .arg(key)
        .arg(name)
        .query(&mut redis.conn())
        .ok()
        .flatten()
}

const COLLISION: &str = "another daemon uses node id `dup`";

#[test]
fn two_daemons_with_one_node_id_both_warn_and_status_shows_it_until_one_stops() {
    let redis = RedisServer::start();
    let (one, two) = (Workdir::new(), Workdir::new());
    for work in [&one, &two] {
        work.write_config("[jobs.x]\nschedule = \"@hourly\"\ncommand = \"true\"\n");
    }
    let first = Node::start(&one, &redis, "dup", &[]);
    let mut second = Node::start(&two, &redis, "dup", &[]);
    for (node, other) in [(&first, &second), (&second, &first)] {
        node.wait_for_log(Duration::from_secs(30), COLLISION);
        let log = node.log();
        let line = log
            .lines()
            .find(|line| line.contains(COLLISION))
            .expect("waited for it");
        assert!(
            line.contains(&format!("pid {}", other.pid()))
                && line.contains(&format!("pid {}", node.pid())),
            "names both daemons by host and pid: {line}"
        );
    }
    // `status` shows it on the node, text and JSON.
    let status = status_json(&one, &redis);
    let entry = node_entry(&status, "dup").expect("`dup` is listed");
    let instances: Vec<&str> = entry["collision"]["instances"]
        .as_array()
        .unwrap_or_else(|| panic!("a collision: {entry}"))
        .iter()
        .filter_map(|i| i.as_str())
        .collect();
    for node in [&first, &second] {
        let pid = format!(":{}:", node.pid());
        assert!(instances.iter().any(|i| i.contains(&pid)), "{entry}");
    }
    assert!(entry["collision"]["seen_at"].is_string(), "{entry}");
    let text = std::process::Command::new(env!("CARGO_BIN_EXE_solocron"))
        .args(["status", "--config"])
        .arg(one.path("jobs.toml"))
        .args(["--redis", &redis.url()])
        .output()
        .expect("run status");
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(text.contains("NODE ID COLLISIONS"), "{text}");
    for node in [&first, &second] {
        assert!(text.contains(&format!("pid {}", node.pid())), "{text}");
    }
    // Each daemon keeps finding the other at its heartbeats, but warns
    // once, not every 10 s.
    let key = "{solocron}:node:dup";
    let mut found_by: Vec<String> = Vec::new();
    let mut stamp = field(&redis, key, "collision_at");
    wait_until(
        Duration::from_secs(40),
        "both daemons found the collision again",
        || {
            let now = field(&redis, key, "collision_at");
            if now != stamp {
                stamp = now;
                found_by.extend(field(&redis, key, "collision_by"));
            }
            found_by
                .iter()
                .any(|by| by.contains(&format!(":{}:", first.pid())))
                && found_by
                    .iter()
                    .any(|by| by.contains(&format!(":{}:", second.pid())))
        },
    );
    for node in [&first, &second] {
        let warnings = node.log().matches(COLLISION).count();
        assert_eq!(
            warnings,
            1,
            "node {} warned {warnings} times:\n{}",
            node.pid(),
            node.log()
        );
    }
    // One stops: the collision is over, and `status` stops showing it.
    second.signal("TERM");
    assert!(second.wait_exit(Duration::from_secs(20)).success());
    let first_pid = format!(":{}:", first.pid());
    wait_until(
        Duration::from_secs(40),
        "status lists `dup` (the first daemon) without a collision",
        || {
            node_entry(&status_json(&one, &redis), "dup").is_some_and(|entry| {
                entry["collision"].is_null()
                    && entry["instance"]
                        .as_str()
                        .is_some_and(|i| i.contains(&first_pid))
            })
        },
    );
}

#[test]
fn a_daemon_restarted_after_a_crash_is_not_a_collision() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    work.write_config("[jobs.x]\nschedule = \"@hourly\"\ncommand = \"true\"\n");
    let key = "{solocron}:node:n1";
    let mut crashed = Node::start(&work, &redis, "n1", &[]);
    let old = format!(":{}:", crashed.pid());
    wait_until(Duration::from_secs(10), "the first publish", || {
        field(&redis, key, "instance").is_some_and(|i| i.contains(&old))
    });
    // kill -9: no withdraw, the entry stays for its TTL.
    crashed.kill9();
    let restarted = Node::start(&work, &redis, "n1", &[]);
    let new = format!(":{}:", restarted.pid());
    wait_until(Duration::from_secs(10), "the new process publishes", || {
        field(&redis, key, "instance").is_some_and(|i| i.contains(&new))
    });
    // Two heartbeats later, still no collision.
    let mut beats = 0;
    let mut stamp = field(&redis, key, "updated_at");
    wait_until(Duration::from_secs(30), "two heartbeats", || {
        let now = field(&redis, key, "updated_at");
        if now != stamp {
            stamp = now;
            beats += 1;
        }
        beats >= 2
    });
    assert!(
        !restarted.log().contains("another daemon uses"),
        "{}",
        restarted.log()
    );
    assert_eq!(field(&redis, key, "collision_at"), None);
    assert!(
        node_entry(&status_json(&work, &redis), "n1").is_some_and(|n| n["collision"].is_null())
    );
}
