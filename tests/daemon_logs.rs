//! What the daemon tells the operator (SPEC §6; issue #9 items 9 and 10).
//!
//! - A wrong Redis password, or an ACL user that may not run the scripts,
//!   stops `solocron run` at once with one clear error and exit 78 (the
//!   unit does not restart it in a loop); before, it logged `Password
//!   authentication failed` forever while systemd showed "activating".
//! - A Redis outage is one line when it starts and one when it ends, with
//!   how long and how many occurrences were missed; before, ~90 lines.
//! - `--log-format json`: numbers as numbers (`duration_ms`, `exit_code`,
//!   `fence`), and a fatal start-up error as one JSON object.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{Node, RedisServer, Workdir};

const PASSWORD: &str = "c0rrect-h0rse";

fn tick(work: &Workdir) {
    work.write_config("[jobs.tick]\nschedule = \"* * * * * *\"\ncommand = 'true'\n");
}

fn exits_78_with_one_refusal_line(url: &str, redacted: &str) {
    let work = Workdir::new();
    tick(&work);
    let started = Instant::now();
    let mut node = Node::start_with_url(&work, url, "n1", &[]);
    let status = node.wait_exit(Duration::from_secs(10));
    let log = node.log();
    assert_eq!(status.code(), Some(78), "{log}");
    assert!(started.elapsed() < Duration::from_secs(10));
    let refusals = log
        .lines()
        .filter(|line| line.contains("refused node"))
        .count();
    assert_eq!(refusals, 1, "one clear line, not a loop:\n{log}");
    assert!(log.contains(redacted), "names the server:\n{log}");
    assert!(!log.contains("wr0ng"), "never the password:\n{log}");
}

#[test]
fn a_wrong_password_stops_the_daemon_at_once_with_exit_78() {
    let redis = RedisServer::start_with_args(&["--requirepass", PASSWORD]);
    let url = format!("redis://:wr0ng@127.0.0.1:{}/", redis.port);
    exits_78_with_one_refusal_line(&url, &format!("redis://:***@127.0.0.1:{}/", redis.port));
}

#[test]
fn an_acl_user_that_may_not_run_scripts_stops_the_daemon_at_once() {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    redis::cmd("ACL")
        .arg("SETUSER")
        .arg("limited")
        .arg("on")
        .arg(">wr0ng-but-right")
        .arg("~*")
        .arg("+@all")
        .arg("-evalsha")
        .arg("-eval")
        .arg("-script")
        .exec(&mut conn)
        .expect("ACL SETUSER");
    let url = format!("redis://limited:wr0ng-but-right@127.0.0.1:{}/", redis.port);
    let work = Workdir::new();
    tick(&work);
    let mut node = Node::start_with_url(&work, &url, "n1", &[]);
    let status = node.wait_exit(Duration::from_secs(10));
    let log = node.log();
    assert_eq!(status.code(), Some(78), "{log}");
    assert!(
        log.contains("NOPERM") || log.contains("permission"),
        "{log}"
    );
    assert_eq!(log.matches("refused node").count(), 1, "{log}");
}

#[test]
fn an_outage_is_one_line_when_it_starts_and_one_when_it_ends() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    tick(&work);
    let node = Node::start(&work, &redis, "n1", &[]);
    node.wait_for_log(Duration::from_secs(10), "claim won");
    let before = node.log().lines().count();
    redis.pause();
    std::thread::sleep(Duration::from_secs(6));
    redis.resume();
    node.wait_for_log(Duration::from_secs(10), "redis reachable again after");
    let log = node.log();
    let during: Vec<&str> = log
        .lines()
        .skip(before)
        .take_while(|line| !line.contains("redis reachable again after"))
        .filter(|line| !line.contains("claim won") && !line.contains("run finished"))
        .collect();
    assert_eq!(
        log.matches("redis unreachable").count(),
        1,
        "one line when it starts:\n{log}"
    );
    assert!(
        during.len() <= 3,
        "no line per attempt during the outage: {during:#?}"
    );
    let end = log
        .lines()
        .find(|line| line.contains("redis reachable again after"))
        .expect("the end line");
    let missed: u64 = end
        .split(" missed=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .expect("the end line counts the missed occurrences");
    assert!((3..=8).contains(&missed), "{end}");
}

#[test]
fn json_logs_carry_numbers_and_a_fatal_error_is_json_too() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    work.write_config("[jobs.tick]\nschedule = \"* * * * * *\"\ncommand = 'exit 3'\n");
    let node = Node::start(&work, &redis, "n1", &[("SOLOCRON_LOG_FORMAT", "json")]);
    node.wait_for_log(Duration::from_secs(10), "\"run finished\"");
    let finished: serde_json::Value = node
        .log()
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find(|event| event["message"] == "run finished")
        .expect("a JSON `run finished` line");
    assert!(finished["duration_ms"].is_u64(), "{finished}");
    assert_eq!(finished["exit_code"], 3, "{finished}");
    assert!(finished["fence"].is_u64(), "{finished}");
    assert_eq!(finished["outcome"], "failed", "{finished}");

    let broken = Workdir::new();
    let path = broken.path("jobs.toml");
    std::fs::write(&path, "[redis]\nurl = \"redis://127.0.0.1:1\"\n[jobs.x]\nschedule = \"nope\"\ncommand = \"true\"\n")
        .expect("write");
    let output = Command::new(common::solocron_bin())
        .args([
            "run",
            "--config",
            path.to_str().expect("utf-8"),
            "--log-format",
            "json",
        ])
        .env_remove("SOLOCRON_CONFIG")
        .env_remove("SOLOCRON_LOG_FORMAT")
        .output()
        .expect("run solocron");
    assert_eq!(output.status.code(), Some(78));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {stderr}");
    let fatal: serde_json::Value = serde_json::from_str(lines[0]).expect("a JSON object");
    assert_eq!(fatal["level"], "ERROR", "{fatal}");
    assert!(
        fatal["error"]
            .as_str()
            .is_some_and(|error| error.contains("jobs.toml:4:")),
        "{fatal}"
    );
}
