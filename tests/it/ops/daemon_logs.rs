//! What the daemon tells the operator (docs/operations.md, logs).
//!
//! - A wrong Redis password, or an ACL user that may not run the scripts,
//!   stops `solocron run` at once with one clear error and exit 78 (the
//!   unit does not restart it in a loop); before, it logged `Password
//!   authentication failed` forever while systemd showed "activating".
//! - A Redis outage is one line when it starts and one when it ends, with
//!   how long and how many occurrences were missed; before, ~90 lines.
//! - `--log-format json`: numbers as numbers (`duration_ms`, `exit_code`,
//!   `fence`), and a fatal start-up error as one JSON object.

use crate::common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{Node, RedisServer, Workdir};

const PASSWORD: &str = "c0rrect-h0rse";

fn tick(work: &Workdir) {
    work.write_config("[jobs.tick]\nschedule = \"* * * * * *\"\ncommand = 'true'\n");
}

/// `tick` every second, each run appending `OCCURRENCE NODE` to `runs`; an
/// occurrence may still be claimed up to 2 s late.
fn tick_recording_runs(work: &Workdir) {
    work.write_config(&format!(
        "[defaults]\nstarting_deadline = \"2s\"\n\
         [jobs.tick]\nschedule = \"* * * * * *\"\n\
         command = 'echo $SOLOCRON_OCCURRENCE $SOLOCRON_NODE >> {}'\n",
        common::toml_path(&work.path("runs"))
    ));
}

/// Waits until every node logged `said` (Redis refuses it), then while
/// four occurrences pass (a node counts its misses during a trouble rather
/// than logging each): at most one run starts meanwhile (one whose claim
/// was decided before). Returns the runs recorded after the window.
fn nothing_runs_while_refused(work: &Workdir, nodes: &[Node], said: &str) -> usize {
    common::wait_until(Duration::from_secs(20), "every node refused", || {
        nodes.iter().all(|node| node.log().contains(said))
    });
    let runs_then = work.lines("runs").len();
    let refused_at = std::time::Instant::now();
    common::wait_until(Duration::from_secs(10), "occurrences pass refused", || {
        refused_at.elapsed() > Duration::from_secs(4)
    });
    let runs = work.lines("runs");
    assert!(runs.len() <= runs_then + 1, "ran while refused: {runs:?}");
    runs.len()
}

/// Stops every node with SIGTERM; each exits 0.
fn stop(nodes: &mut [Node]) {
    for node in nodes {
        node.signal("TERM");
        assert!(node.wait_exit(Duration::from_secs(20)).success());
    }
}

/// `job`'s history, after checking that it has each occurrence once.
fn each_occurrence_recorded_once(
    redis: &RedisServer,
    job: &str,
) -> Vec<std::collections::HashMap<String, String>> {
    let history = common::history(redis, job);
    let mut recorded = std::collections::BTreeMap::new();
    for entry in &history {
        *recorded
            .entry(entry.get("occurrence").cloned().unwrap_or_default())
            .or_insert(0) += 1;
    }
    assert!(recorded.values().all(|n| *n == 1), "{history:?}");
    history
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
    only_the_refusal_is_told(&log);
    assert!(log.contains(redacted), "names the server:\n{log}");
    assert!(!log.contains("wr0ng"), "never the password:\n{log}");
}

/// A start Redis refused says so in its one error line, and nothing else
/// blames a command or tells the operator to fix something else (before,
/// a wrong password also logged that the user may not run `INFO`, that
/// the fleet controls read needs the README's commands, the same refusal
/// as an `abandon check` error, and a refused registry withdraw).
fn only_the_refusal_is_told(log: &str) {
    for told in [
        "may not run INFO",
        "fleet controls",
        "refuses this node",
        "cannot withdraw",
    ] {
        assert!(!log.contains(told), "`{told}` besides the refusal:\n{log}");
    }
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
    only_the_refusal_is_told(&log);
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
    // The outage itself: six seconds of every-second occurrences.
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
fn json_logs_carry_numbers_and_a_fatal_or_usage_error_is_json_too() {
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

    // A usage error is JSON too when JSON was asked for, by the option or
    // (for `run`) by the environment; still exit 2.
    let usage = |args: &[&str], env: Option<&str>| {
        let mut command = Command::new(common::solocron_bin());
        command.args(args).env_remove("SOLOCRON_LOG_FORMAT");
        if let Some(format) = env {
            command.env("SOLOCRON_LOG_FORMAT", format);
        }
        command.output().expect("run solocron")
    };
    for (args, env, names) in [
        (&["trigger", "--log-format", "json"][..], None, "<JOB>"),
        (&["run", "--nodeid", "x"][..], Some("json"), "--nodeid"),
    ] {
        let output = usage(args, env);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {output:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{args:?}: one line: {stderr}");
        let error: serde_json::Value = serde_json::from_str(lines[0]).expect("a JSON object");
        assert_eq!(error["level"], "ERROR", "{error}");
        assert!(
            error["error"]
                .as_str()
                .is_some_and(|text| text.contains(names)),
            "{error}"
        );
    }
    // Without JSON asked for, clap's own words.
    let plain = usage(&["trigger"], None);
    assert_eq!(plain.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&plain.stderr).starts_with("error: "));
}

/// Every command of the ACL line in docs/operations.md that a daemon needs to run jobs
/// is checked at start: a user without any one of them stops the daemon
/// with exit 78 naming it. Before, a user without `HSET` passed the start,
/// failed inside the claim script after the script had taken the lock,
/// and every node ran every occurrence with fence 0. The commands only the
/// fleet controls and the command line send are not needed to run jobs:
/// without one of them the daemon starts and runs.
#[test]
fn a_user_without_any_one_command_the_daemon_needs_is_stopped_at_start_naming_it() {
    let redis = RedisServer::start();
    let line = common::readme_acl(PASSWORD);
    // Run by the start-up itself (the other tests), or only with a
    // database number in the URL.
    let started_with = ["+evalsha", "+script|load", "+select"];
    let not_needed_to_run = [
        "+hgetall",
        "+lrange",
        "+lrem",
        "+hdel",
        "+lpush",
        "+xrevrange",
        "+zcount",
        "+multi",
        "+exec",
        "+info",
    ];
    let url = format!("redis://solocron:{PASSWORD}@127.0.0.1:{}/", redis.port);
    let commands: Vec<&String> = line
        .iter()
        .filter(|word| word.starts_with('+') && !started_with.contains(&word.as_str()))
        .collect();
    assert!(commands.len() >= 20, "{line:?}");
    for command in commands {
        let name = command.trim_start_matches('+');
        let without: Vec<&String> = line.iter().filter(|word| *word != command).collect();
        redis::cmd("ACL")
            .arg("SETUSER")
            .arg(&without)
            .exec(&mut redis.conn())
            .expect("ACL SETUSER");
        let work = Workdir::new();
        work.write_config(&format!(
            "[jobs.tick]\nschedule = \"* * * * * *\"\ncommand = 'echo ran >> {}'\n",
            common::toml_path(&work.path("runs"))
        ));
        let mut node = Node::spawn_with_args(
            &work,
            "n1",
            &[
                "--config",
                &common::toml_path(&work.path("jobs.toml")),
                "--redis",
                &url,
            ],
            &[],
        );
        if not_needed_to_run.contains(&command.as_str()) {
            common::wait_until(Duration::from_secs(15), "a run without it", || {
                !work.lines("runs").is_empty()
            });
            node.signal("TERM");
            assert!(node.wait_exit(Duration::from_secs(20)).success(), "{name}");
            continue;
        }
        let status = node.wait_exit(Duration::from_secs(10));
        let log = node.log();
        assert_eq!(status.code(), Some(78), "without {name}:\n{log}");
        assert!(
            log.contains(&format!("`{name}`")) || log.contains(&format!("'{name}'")),
            "names {name}:\n{log}"
        );
        assert_eq!(log.matches("refused node").count(), 1, "{log}");
        assert!(work.lines("runs").is_empty(), "nothing ran without {name}");
        assert!(!log.contains(PASSWORD), "never the password:\n{log}");
    }
}

/// An ACL user that loses a command while the daemons run (`ACL SETUSER
/// solocron -hset`): claims fail inside the script, and nothing may run
/// then: no occurrence twice, no run without its recorded decision. The
/// failures are Redis refusing the node, not an outage. Once the command
/// is given back, the occurrences of the window are recorded `missed`,
/// each once. Before, the claim script took the lock before its `HSET`
/// failed, the retried claim found its own lock and ran the job, and the
/// other node, finding no decision, ran it too.
#[test]
fn a_command_taken_from_the_user_while_daemons_run_stops_runs_without_running_any_twice() {
    let redis = RedisServer::start();
    let line = common::readme_acl(PASSWORD);
    let setuser = |extra: &[&str]| {
        redis::cmd("ACL")
            .arg("SETUSER")
            .arg(&line)
            .arg(extra)
            .exec(&mut redis.conn())
            .expect("ACL SETUSER");
    };
    setuser(&[]);
    let url = format!("redis://solocron:{PASSWORD}@127.0.0.1:{}/", redis.port);
    let work = Workdir::new();
    tick_recording_runs(&work);
    let mut nodes: Vec<Node> = ["n1", "n2"]
        .iter()
        .map(|id| Node::start_with_url(&work, &url, id, &[]))
        .collect();
    common::wait_until(Duration::from_secs(20), "runs", || {
        work.lines("runs").len() >= 3
    });
    setuser(&["-hset"]);
    let runs_then = nothing_runs_while_refused(&work, &nodes, "redis refuses this node");
    setuser(&["+hset"]);
    common::wait_until(Duration::from_secs(30), "runs again", || {
        work.lines("runs").len() >= runs_then + 3
    });
    stop(&mut nodes);
    let runs = work.lines("runs");
    let mut seen = std::collections::BTreeSet::new();
    for run in &runs {
        let occurrence = run.split(' ').next().unwrap_or_default();
        assert!(
            seen.insert(occurrence.to_string()),
            "twice: {run}\n{runs:?}"
        );
    }
    let history = each_occurrence_recorded_once(&redis, "tick");
    let missed = history
        .iter()
        .filter(|entry| entry.get("outcome").map(String::as_str) == Some("missed"))
        .count();
    assert!(
        missed >= 4,
        "the window's occurrences recorded missed: {history:?}"
    );
    for node in &nodes {
        let log = node.log();
        assert!(
            !log.contains("redis unreachable"),
            "a refusal, not an outage:\n{log}"
        );
        assert_eq!(
            log.matches("redis refuses this node").count(),
            1,
            "one line when it starts, not one per read:\n{log}"
        );
    }
}

/// A Redis that evicts keys when full (`maxmemory` with a policy other
/// than `noeviction`) can delete a held lock or a job's decided
/// occurrence: runs overlap, occurrences run twice. The daemon says so at
/// start, naming the policy and what to set, and `status` shows it on the
/// node; with `noeviction` it says nothing.
#[test]
fn a_redis_that_evicts_keys_is_named_in_the_log_and_in_status() {
    let evicting = RedisServer::start_with_args(&[
        "--maxmemory",
        "64mb",
        "--maxmemory-policy",
        "volatile-lru",
    ]);
    let safe =
        RedisServer::start_with_args(&["--maxmemory", "64mb", "--maxmemory-policy", "noeviction"]);
    let work = Workdir::new();
    work.write_config(&format!(
        "[jobs.tick]\nschedule = \"* * * * * *\"\ncommand = 'echo ran >> {}'\n",
        common::toml_path(&work.path("runs"))
    ));
    let mut warned = Node::start_with_url(&work, &evicting.url(), "n1", &[]);
    let mut quiet = Node::start_with_url(&work, &safe.url(), "n2", &[]);
    warned.wait_for_log(Duration::from_secs(15), "evicts keys when full");
    let log = warned.log();
    assert!(
        log.contains("volatile-lru") && log.contains("noeviction"),
        "{log}"
    );
    let status = || {
        let output = Command::new(common::solocron_bin())
            .args(["status", "--json", "--redis", &evicting.url()])
            .args(["--config", &common::toml_path(&work.path("jobs.toml"))])
            .output()
            .expect("status");
        serde_json::from_slice::<serde_json::Value>(&output.stdout).unwrap_or_default()
    };
    common::wait_until(Duration::from_secs(30), "status names the policy", || {
        status()["nodes"][0]["redis_warning"]
            .as_str()
            .is_some_and(|warning| warning.contains("maxmemory-policy volatile-lru"))
    });
    // The other node ran jobs on its server meanwhile, and said nothing.
    common::wait_until(Duration::from_secs(15), "runs on the safe server", || {
        common::history(&safe, "tick").len() >= 2
    });
    assert!(!quiet.log().contains("evicts keys"), "{}", quiet.log());
    for node in [&mut warned, &mut quiet] {
        node.signal("TERM");
        assert!(node.wait_exit(Duration::from_secs(20)).success());
    }
}

/// A database number the server does not have is a mistake of the config
/// that no retry cures: exit 78 at start, saying what to fix. Before, the
/// daemon logged `redis unreachable` forever.
#[test]
fn a_database_number_the_server_does_not_have_stops_the_daemon_at_start() {
    let redis = RedisServer::start();
    let url = format!("redis://127.0.0.1:{}/20", redis.port);
    let work = Workdir::new();
    tick(&work);
    let mut node = Node::spawn_with_args(
        &work,
        "n1",
        &[
            "--config",
            &common::toml_path(&work.path("jobs.toml")),
            "--redis",
            &url,
        ],
        &[],
    );
    let status = node.wait_exit(Duration::from_secs(10));
    let log = node.log();
    assert_eq!(status.code(), Some(78), "{log}");
    assert!(log.contains("fix the database number"), "{log}");
}

/// A Redis out of memory (`maxmemory` reached, `noeviction`) answers reads
/// and refuses writes: one line when that starts, saying so (not
/// "unreachable"), and one when writes go through again; nothing runs
/// meanwhile (fail closed) and the occurrences of the window are recorded
/// `missed` once it has room, each once. Before, every read ended the
/// "outage" and the next write began it again: two lines a second.
#[test]
fn a_redis_out_of_memory_is_one_line_when_it_starts_and_one_when_it_ends() {
    let redis = RedisServer::start_with_args(&["--maxmemory-policy", "noeviction"]);
    let work = Workdir::new();
    tick_recording_runs(&work);
    let mut nodes: Vec<Node> = ["n1", "n2"]
        .iter()
        .map(|id| Node::start(&work, &redis, id, &[]))
        .collect();
    common::wait_until(Duration::from_secs(20), "runs", || {
        work.lines("runs").len() >= 2
    });
    let config_set = |value: &str| {
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory")
            .arg(value)
            .exec(&mut redis.conn())
            .expect("CONFIG SET");
    };
    config_set("1");
    let runs_then = nothing_runs_while_refused(&work, &nodes, "redis refuses this node's writes");
    config_set("0");
    common::wait_until(Duration::from_secs(30), "runs again", || {
        work.lines("runs").len() >= runs_then + 3
    });
    stop(&mut nodes);
    for node in &nodes {
        let log = node.log();
        assert_eq!(
            log.matches("redis refuses this node's writes").count(),
            1,
            "one line when it starts:\n{log}"
        );
        assert_eq!(
            log.matches("reachable again").count(),
            1,
            "one line when it ends:\n{log}"
        );
        assert!(!log.contains("redis unreachable"), "{log}");
    }
    each_occurrence_recorded_once(&redis, "tick");
}
