//! A broken log destination never costs a run (guarantee 10,
//! docs/guarantees.md).
//!
//! A node whose stdout and stderr are one pipe: the test reads until the
//! node has scheduled its jobs, then closes its end (what `solocron run |
//! head -2` does), or never reads at all (a reader that stopped: the pipe
//! fills and every write would block). The node must go on claiming,
//! running and recording every occurrence, count the lines it lost in
//! `solocron_log_lines_lost_total`, and stop cleanly. Before the fix the
//! first log line after the close panicked the occurrence task ("failed
//! printing to stderr: Broken pipe") after the claim: the lock stayed held,
//! nothing was recorded, and the job stopped on every node.
//!
//! `solocron trigger JOB | head -0`: the manual run still runs, releases the
//! lock and records its outcome, with stdout and stderr both closed.
//!
//! A node whose log is a file past the file size limit (`ulimit -f`): each
//! write past it fails, a lost line, and the node goes on running and
//! recording. Before the fix the first such write sent SIGXFSZ, whose
//! default action ended the daemon at once.
//!
//! A job printing control characters (ESC, CR) cannot forge a text log line
//! or colour the terminal or journal: they are escaped in the text log.

use crate::common;

use std::io::{BufRead as _, BufReader};
use std::os::fd::OwnedFd;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{
    Node, RedisServer, Workdir, caught_up_at_once, free_port, history, scrape_metrics,
    solocron_bin, toml_path, wait_until,
};
use redis::Commands as _;

/// A `solocron run` whose stdout and stderr go to `pipe`; killed on drop.
struct PipedNode(Child);

impl Drop for PipedNode {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A pipe whose ends are close-on-exec: no other child of this test
/// process may keep the read end open.
fn pipe() -> (std::io::PipeReader, OwnedFd) {
    let (read, write) = std::io::pipe().expect("pipe");
    (read, OwnedFd::from(write))
}

fn start_piped(work: &Workdir, redis: &RedisServer, id: &str, out: OwnedFd) -> PipedNode {
    let err = out.try_clone().expect("dup the pipe");
    let child = Command::new(solocron_bin())
        .arg("run")
        .args(["--node-id", id])
        .args(["--config", &toml_path(&work.path("jobs.toml"))])
        .args(["--redis", &redis.url()])
        .env_remove("SOLOCRON_CONFIG")
        .env_remove("SOLOCRON_REDIS_URL")
        .env_remove("SOLOCRON_LOG_FORMAT")
        .env("SOLOCRON_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .spawn()
        .expect("start solocron");
    PipedNode(child)
}

fn config(work: &Workdir, metrics_port: u16, command: &str) {
    work.write_config(&format!(
        "[daemon]\nmetrics_listen = \"127.0.0.1:{metrics_port}\"\n\n[jobs.tick]\nschedule = \"*/2 * * * * *\"\ncommand = '{command}'\n"
    ));
}

/// `solocron_log_lines_lost_total`, 0 while the endpoint is not up yet.
fn lost_lines(port: u16) -> f64 {
    if std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        return 0.0;
    }
    scrape_metrics(port)
        .lines()
        .find_map(|line| {
            line.strip_prefix("solocron_log_lines_lost_total ")?
                .parse()
                .ok()
        })
        .unwrap_or(0.0)
}

/// Succeeded runs of `tick` recorded by `node` for occurrences after `since`.
fn runs_after(redis: &RedisServer, node: &str, since: chrono::DateTime<chrono::Utc>) -> usize {
    history(redis, "tick")
        .iter()
        .filter(|entry| entry.get("node").map(String::as_str) == Some(node))
        .filter(|entry| entry.get("outcome").map(String::as_str) == Some("succeeded"))
        .filter(|entry| {
            entry
                .get("occurrence")
                .and_then(|at| chrono::DateTime::parse_from_rfc3339(at).ok())
                .is_some_and(|at| at > since)
        })
        .count()
}

/// Every occurrence after `since` was run. (Not since the start: a node
/// that starts just after an occurrence runs it late, and on a loaded
/// machine that run may still go on at the next occurrence, which is then
/// skipped for a reason that is not the log.)
fn assert_nothing_skipped(redis: &RedisServer, since: chrono::DateTime<chrono::Utc>) {
    let skipped: Vec<_> = history(redis, "tick")
        .into_iter()
        .filter(|entry| entry.get("outcome").map(String::as_str) != Some("succeeded"))
        .filter(|entry| {
            entry
                .get("occurrence")
                .and_then(|at| chrono::DateTime::parse_from_rfc3339(at).ok())
                .is_some_and(|at| at > since)
        })
        .collect();
    assert!(
        skipped.is_empty(),
        "every run must be recorded as run: {skipped:?}"
    );
}

#[test]
fn a_closed_log_pipe_costs_log_lines_not_runs() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    let metrics_port = free_port();
    config(
        &work,
        metrics_port,
        "echo run $SOLOCRON_OCCURRENCE; echo to stderr >&2",
    );
    let (read, write) = pipe();
    let mut node = start_piped(&work, &redis, "n1", write);
    let mut lines = BufReader::new(read);
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut line = String::new();
    while !line.contains("jobs scheduled") {
        line.clear();
        let read = lines.read_line(&mut line).expect("read the node's log");
        assert!(
            read > 0 && Instant::now() < deadline,
            "the node stopped logging before scheduling"
        );
    }
    drop(lines); // `| head`: the reader is gone
    let closed = chrono::Utc::now();
    wait_until(
        Duration::from_secs(40),
        "five runs recorded after the pipe closed",
        || runs_after(&redis, "n1", closed) >= 5,
    );
    assert_nothing_skipped(&redis, closed);
    assert!(lost_lines(metrics_port) >= 5.0, "lost lines are counted");
    assert!(
        node.0.try_wait().expect("try_wait").is_none(),
        "the node is still up"
    );
    let lock: Option<String> = redis.conn().get("{solocron:tick}:lock").expect("GET");
    let state: std::collections::HashMap<String, String> = redis
        .conn()
        .hgetall("{solocron:tick}:state")
        .expect("HGETALL");
    assert!(
        lock.is_none() || state.get("last_outcome").map(String::as_str) == Some("running"),
        "a lock may only be held by a run in progress: {lock:?} {state:?}"
    );
    common::signal(node.0.id() as i32, "TERM");
    let status = common::wait_exit(&mut node.0, Duration::from_secs(10), || {
        "the node did not stop".to_string()
    });
    assert_eq!(status.code(), Some(0), "a clean stop with a closed log");
}

#[test]
fn a_log_reader_that_stopped_reading_blocks_no_run() {
    // Nobody reads the pipe: after 64 KiB every write would block. 3,000
    // output lines a run fill the writer's queue in a few runs.
    let redis = RedisServer::start();
    let work = Workdir::new();
    let metrics_port = free_port();
    config(&work, metrics_port, "seq 3000");
    let (read, write) = pipe();
    let _node = start_piped(&work, &redis, "n1", write);
    let started = chrono::Utc::now();
    wait_until(
        Duration::from_secs(30),
        "the writer's queue overflowed",
        || lost_lines(metrics_port) > 0.0,
    );
    let overflowed = chrono::Utc::now();
    wait_until(
        Duration::from_secs(40),
        "five more runs recorded after the overflow",
        || runs_after(&redis, "n1", overflowed) >= 5,
    );
    assert!(runs_after(&redis, "n1", started) >= 5);
    assert_nothing_skipped(&redis, overflowed);
    drop(read);
}

#[test]
fn trigger_with_stdout_and_stderr_closed_still_releases_and_records() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    work.write_config(
        "[jobs.report]\nschedule = \"0 2 * * *\"\ncommand = 'seq 500; echo done >&2'\n",
    );
    let (read, write) = pipe();
    drop(read); // `| head -0`: closed before the first write
    let err = write.try_clone().expect("dup the pipe");
    let status = Command::new(solocron_bin())
        .args(["trigger", "report"])
        .args(["--config", &toml_path(&work.path("jobs.toml"))])
        .args(["--redis", &redis.url()])
        .args(["--node-id", "ops"])
        .env_remove("SOLOCRON_CONFIG")
        .env_remove("SOLOCRON_REDIS_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::from(write))
        .stderr(Stdio::from(err))
        .status()
        .expect("run solocron trigger");
    assert_eq!(status.code(), Some(0), "the run succeeded");
    let entries = history(&redis, "report");
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(
        entries[0].get("outcome").map(String::as_str),
        Some("succeeded")
    );
    assert!(
        entries[0]
            .get("occurrence")
            .is_some_and(|name| name.starts_with("manual-"))
    );
    let lock: Option<String> = redis.conn().get("{solocron:report}:lock").expect("GET");
    assert_eq!(lock, None, "the lock is released");
}

#[test]
fn a_jobs_control_characters_are_escaped_in_the_text_log() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    work.write_config(&format!(
        "[jobs.forger]\n{}\ncommand = 'printf \"ok \\033[31mred\\rINFO claim won job=forger node=evil\\n\"; printf \"\\033[2J\\n\" >&2'\n",
        caught_up_at_once(&redis, "forger")
    ));
    let node = Node::start(&work, &redis, "n1", &[]);
    node.wait_for_log(Duration::from_secs(10), "run finished");
    let log = node.log();
    assert!(
        !log.contains('\u{1b}') && !log.contains('\r'),
        "raw control characters in the log: {log:?}"
    );
    assert!(
        log.contains(r"line=ok \u{1b}[31mred\rINFO claim won job=forger node=evil"),
        "{log}"
    );
    assert!(log.contains(r"stream=stderr line=\u{1b}[2J"), "{log}");
    assert!(
        !log.lines().any(|line| line.starts_with("INFO claim won")),
        "{log}"
    );
}

#[test]
fn a_log_file_past_the_file_size_limit_costs_log_lines_not_the_daemon() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    let metrics_port = free_port();
    config(&work, metrics_port, "echo tick");
    let log = std::fs::File::create(work.path("node.log")).expect("create node.log");
    let err = log.try_clone().expect("dup the log");
    // dash counts `ulimit -f` in 512-byte blocks: 2 KiB, past after the
    // start-up lines.
    let mut node = PipedNode(
        Command::new("sh")
            .args(["-c", "ulimit -f 4 && exec \"$0\" \"$@\""])
            .arg(solocron_bin())
            .arg("run")
            .args(["--node-id", "n1"])
            .args(["--config", &toml_path(&work.path("jobs.toml"))])
            .args(["--redis", &redis.url()])
            .env_remove("SOLOCRON_CONFIG")
            .env_remove("SOLOCRON_REDIS_URL")
            .env_remove("SOLOCRON_LOG_FORMAT")
            .env("SOLOCRON_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(err))
            .spawn()
            .expect("start solocron"),
    );
    wait_until(Duration::from_secs(20), "a log line lost", || {
        assert!(
            node.0.try_wait().expect("wait").is_none(),
            "the node died: {}",
            std::fs::read_to_string(work.path("node.log")).unwrap_or_default()
        );
        lost_lines(metrics_port) > 0.0
    });
    let since = chrono::Utc::now();
    wait_until(Duration::from_secs(15), "two runs after the limit", || {
        assert!(node.0.try_wait().expect("wait").is_none(), "the node died");
        runs_after(&redis, "n1", since) >= 2
    });
    assert_nothing_skipped(&redis, since);
}
