//! The daemon as a process: SIGTERM drain, failing closed without Redis,
//! and exit codes for a bad config.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{
    Node, RedisServer, Workdir, free_port, history, is_alive, read_pid, toml_path, wait_until,
};
use redis::Commands as _;

#[test]
fn sigterm_interrupts_a_long_run_after_the_grace_releases_the_lock_and_exits_0() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    work.write_config(&format!(
        r#"
[daemon]
shutdown_grace = "1s"

[jobs.long]
schedule = "* * * * *"
starting_deadline = "1m"
command = 'echo $$ > {}; exec sleep 60'
"#,
        toml_path(&work.path("pid"))
    ));
    let mut node = Node::start(&work, &redis, "n1", &[]);
    wait_until(Duration::from_secs(10), "the job started", || {
        read_pid(&work, "pid").is_some()
    });
    let pid = read_pid(&work, "pid").expect("pid");
    node.signal("TERM");
    let status = node.wait_exit(Duration::from_secs(15));
    assert!(
        status.success(),
        "exit 0 after a drain, got {status:?}; log:\n{}",
        node.log()
    );
    assert!(!is_alive(pid), "the job was stopped");
    let entries = history(&redis, "long");
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0]["outcome"], "interrupted");
    assert_eq!(entries[0]["node"], "n1");
    let lock: Option<String> = redis.conn().get("{solocron:long}:lock").expect("GET");
    assert_eq!(lock, None, "the lock is released at shutdown");
}

#[test]
fn sigterm_lets_a_run_finish_within_the_grace() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    work.write_config(&format!(
        r#"
[daemon]
shutdown_grace = "20s"

[jobs.short]
schedule = "* * * * *"
starting_deadline = "1m"
command = 'echo $$ > {}; sleep 1'
"#,
        toml_path(&work.path("pid"))
    ));
    let mut node = Node::start(&work, &redis, "n1", &[]);
    wait_until(Duration::from_secs(10), "the job started", || {
        read_pid(&work, "pid").is_some()
    });
    node.signal("TERM");
    let status = node.wait_exit(Duration::from_secs(15));
    assert!(status.success(), "{status:?}");
    assert_eq!(history(&redis, "short")[0]["outcome"], "succeeded");
}

#[test]
fn without_redis_nothing_runs_and_the_node_recovers_when_redis_comes() {
    let port = free_port();
    let work = Workdir::new();
    let runs = toml_path(&work.path("runs"));
    work.write_config(&format!(
        r#"
[jobs.tick]
schedule = "* * * * * *"
starting_deadline = "2s"
command = 'echo "$SOLOCRON_OCCURRENCE $SOLOCRON_NODE $SOLOCRON_FENCE" >> {runs}'
"#
    ));
    let node = Node::start_with_url(&work, &format!("redis://127.0.0.1:{port}/"), "n1", &[]);
    node.wait_for_log(
        Duration::from_secs(15),
        "occurrence missed: redis unreachable",
    );
    assert!(work.lines("runs").is_empty(), "never run without the lock");
    let _redis = RedisServer::start_on(port);
    wait_until(
        Duration::from_secs(20),
        "runs resume once redis is back",
        || !work.lines("runs").is_empty(),
    );
}

fn solocron(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_solocron"))
        .args(args)
        .env_remove("SOLOCRON_CONFIG")
        .output()
        .expect("run solocron")
}

#[test]
fn a_broken_config_exits_78_for_run_and_1_for_check_naming_file_line_and_key() {
    let work = Workdir::new();
    let path = work.write_config(
        "[jobs.x]\nschedule = \"* * * * *\"\ncommand = \"true\"\ntimezone = \"Mars/Olympus\"\n",
    );
    let path = path.to_str().expect("utf-8 path");
    let run = solocron(&["run", "--config", path, "--node-id", "n1"]);
    assert_eq!(run.status.code(), Some(78), "{run:?}");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(stderr.contains(&format!("{path}:4:")), "{stderr}");
    assert!(
        stderr.contains("timezone") && stderr.contains("Mars/Olympus"),
        "{stderr}"
    );
    let check = solocron(&["check", "--config", path]);
    assert_eq!(check.status.code(), Some(1), "{check:?}");
    let missing = solocron(&["run", "--config", "/nonexistent/jobs.toml"]);
    assert_eq!(missing.status.code(), Some(78));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/jobs.toml"));
}

#[test]
fn check_prints_the_next_three_occurrences_in_the_zone_and_utc() {
    let work = Workdir::new();
    let path = work.write_config(
        "[jobs.nightly-report]\nschedule = \"0 2 * * *\"\ntimezone = \"Asia/Tashkent\"\ncommand = \"true\"\n",
    );
    let out = solocron(&["check", "--config", path.to_str().expect("utf-8 path")]);
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("nightly-report"), "{stdout}");
    let lines: Vec<&str> = stdout
        .lines()
        .filter(|line| line.contains("02:00:00 +05"))
        .collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    for line in lines {
        assert!(
            line.contains("T21:00:00Z"),
            "local 02:00 in Tashkent is 21:00Z: {line}"
        );
    }
}

#[test]
fn the_example_jobs_toml_passes_check() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/jobs.toml");
    let out = solocron(&["check", "--config", example]);
    assert!(out.status.success(), "{out:?}");
}
