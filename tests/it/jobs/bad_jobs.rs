//! Jobs that cannot work, against a real daemon process and a real Redis:
//! each ends with a clear outcome in the history, and the daemon (and a
//! healthy job next to them) carries on. A job that prints a gigabyte
//! without a newline does not grow the daemon's memory.

use crate::common;

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use chrono::{DateTime, Timelike, Utc};
use common::{Node, RedisServer, Workdir, free_port, history, is_alive, toml_path, wait_until};

type Entry = HashMap<String, String>;

fn parse_occurrence(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .unwrap_or_else(|err| panic!("occurrence `{text}`: {err}"))
        .with_timezone(&Utc)
}

/// Every entry of `job` has `outcome`, and `check` holds for it.
fn assert_entries(job: &str, entries: &[Entry], outcome: &str, check: impl Fn(&Entry) -> bool) {
    assert!(!entries.is_empty(), "{job}: no history");
    for entry in entries {
        assert_eq!(entry["outcome"], outcome, "{job}: {entry:?}");
        assert!(check(entry), "{job}: {entry:?}");
    }
}

fn error_of(entry: &Entry) -> &str {
    entry.get("error").map_or("", String::as_str)
}

#[test]
fn bad_jobs_fail_with_a_clear_outcome_and_a_healthy_job_runs_every_second() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    let closed_port = free_port(); // bound and released: nobody listens
    let record = work.path("healthy");
    work.write_config(&format!(
        r#"
[defaults]
schedule = "* * * * * *"
lock_ttl = "5s"
timeout = "5s"
starting_deadline = "5s"

[jobs.no-command]
command = "/no/such/command"

[jobs.no-binary]
argv = ["/no/such/binary"]

[jobs.no-dir]
command = "true"
working_dir = "/no/such/dir"

[jobs.closed-port]
http = {{ url = "http://127.0.0.1:{closed_port}/", timeout = "2s" }}

[jobs.healthy]
command = 'echo "$SOLOCRON_OCCURRENCE" >> {}'
"#,
        toml_path(&record)
    ));
    let mut node = Node::start(&work, &redis, "n1", &[]);
    let bad = ["no-command", "no-binary", "no-dir", "closed-port"];
    wait_until(Duration::from_secs(20), "every job ran 4 times", || {
        bad.iter()
            .chain(["healthy"].iter())
            .all(|job| history(&redis, job).len() >= 4)
    });
    assert!(is_alive(node.pid()), "the daemon is still up");
    node.signal("TERM");
    let status = node.wait_exit(Duration::from_secs(15));
    let log = node.log();
    assert!(status.success(), "clean stop, got {status:?}; log:\n{log}");
    assert!(!log.contains("panicked"), "{log}");

    assert_entries(
        "no-command",
        &history(&redis, "no-command"),
        "failed",
        |e| e.get("exit_code").map(String::as_str) == Some("127"),
    );
    assert_entries("no-binary", &history(&redis, "no-binary"), "failed", |e| {
        !e.contains_key("exit_code")
            && error_of(e).contains("cannot start `/no/such/binary` for job `no-binary`")
            && error_of(e).contains("No such file or directory")
    });
    assert_entries("no-dir", &history(&redis, "no-dir"), "failed", |e| {
        !e.contains_key("exit_code")
            && error_of(e)
                .contains("cannot enter working directory `/no/such/dir` for job `no-dir`")
    });
    assert_entries(
        "closed-port",
        &history(&redis, "closed-port"),
        "failed",
        |e| {
            !e.contains_key("http_status")
                && error_of(e).starts_with("http hook of job `closed-port` failed")
        },
    );

    // The healthy job: every second from its first run to its last, once.
    let healthy = history(&redis, "healthy");
    assert_entries("healthy", &healthy, "succeeded", |e| e["exit_code"] == "0");
    let lines = work.lines("healthy");
    let ran: BTreeSet<DateTime<Utc>> = lines.iter().map(|l| parse_occurrence(l)).collect();
    assert_eq!(ran.len(), lines.len(), "an occurrence ran twice: {lines:?}");
    let recorded: BTreeSet<DateTime<Utc>> = healthy
        .iter()
        .map(|e| parse_occurrence(&e["occurrence"]))
        .collect();
    assert_eq!(ran, recorded, "the record file and the history agree");
    let (first, last) = (ran.first().expect("ran"), ran.last().expect("ran"));
    let expected = (*last - *first).num_seconds() + 1;
    assert_eq!(
        ran.len() as i64,
        expected,
        "every second from {first} to {last} exactly once: {lines:?}"
    );
}

/// `VmRSS` of `pid` in KiB.
fn rss_kib(pid: i32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
}

const GIGABYTE: u64 = 1_000_000_000;
/// How much the daemon may grow while the job runs.
const RSS_LIMIT_KIB: u64 = 60 * 1024;

#[test]
fn a_gigabyte_without_a_newline_does_not_grow_the_daemon() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    // One occurrence, a few seconds from now (UTC), so it runs once.
    let at = Utc::now() + chrono::Duration::seconds(4);
    work.write_config(&format!(
        r#"
[jobs.flood]
schedule = "{} {} {} * * *"
timeout = "5m"
command = "head -c {GIGABYTE} /dev/zero | tr '\\0' x"
"#,
        at.second(),
        at.minute(),
        at.hour()
    ));
    let node = Node::start(&work, &redis, "n1", &[]);
    let pid = node.pid();
    let baseline = rss_kib(pid).expect("daemon RSS");
    let started = Instant::now();
    let mut peak = baseline;
    let mut samples = 0;
    let deadline = started + Duration::from_secs(180);
    while history(&redis, "flood").is_empty() {
        assert!(
            Instant::now() < deadline,
            "no result within 180 s; log:\n{}",
            node.log()
        );
        peak = peak.max(rss_kib(pid).expect("daemon still running"));
        samples += 1;
        // The sampling interval of the daemon's RSS.
        std::thread::sleep(Duration::from_millis(100));
    }
    let entries = history(&redis, "flood");
    eprintln!(
        "flood: daemon RSS baseline {baseline} KiB, peak {peak} KiB (+{} KiB), \
         {samples} samples over {:.1} s, run took {} ms",
        peak - baseline,
        started.elapsed().as_secs_f64(),
        entries[0].get("duration_ms").map_or("?", String::as_str)
    );
    assert_eq!(entries[0]["outcome"], "succeeded", "{entries:?}");
    assert!(
        peak - baseline < RSS_LIMIT_KIB,
        "daemon RSS grew from {baseline} KiB to {peak} KiB"
    );
    let cut = format!("…[cut {} bytes]", GIGABYTE - 4096);
    let log = node.log();
    assert!(log.contains(&cut), "the cut line `{cut}` is logged");
    assert!(is_alive(pid));
}
