//! Signals during load (guarantee 7, docs/guarantees.md;
//! docs/operations.md, signals).
//!
//! SIGTERM during a long run with `shutdown_grace = "1s"`: the node exits 0
//! inside the grace plus the time to kill, the run is recorded as
//! `interrupted`, its lock is released (not left to expire), and the other
//! node runs the next occurrences without overlap. Breaks if the drain
//! ignored the grace, left the lock, or forgot the history entry.
//!
//! A second signal during the drain: `fault_stop.rs`.
//!
//! SIGTSTP (Ctrl-Z) to a `trigger` whose run holds the job's lock, and
//! SIGTSTP / SIGTTIN to a daemon whose job runs, each in a process group of
//! its own (as a terminal's foreground job): the process says it is not
//! suspended and keeps renewing, so its run ends `succeeded` under its
//! lock and no other node's run of the job overlaps it. Breaks if job
//! control could stop the process that renews a running job's lock.
//!
//! SIGHUP to a `trigger` whose run holds the lock (its terminal hung up,
//! an SSH session gone): it stops the run as Ctrl-C does, releases the
//! lock and records `interrupted`. Breaks if SIGHUP found its default
//! action: the process ended at once, the lock left to expire, nothing
//! recorded, and the job's processes running on without a lease.
//!
//! SIGUSR1, SIGUSR2, SIGQUIT and SIGALRM (an operator's "reopen the logs",
//! Ctrl-\\) to a daemon whose job runs: each is one warning and nothing
//! else, the run ends `succeeded` under the node's lock, and the daemon
//! goes on. Breaks if one of them found its default action, which ends
//! the process at once: no release, no history entry, and the job's
//! process group running on without a lease.
//!
//! SIGHUP under load: three nodes, ten every-second jobs; a broken file, a
//! removed file and a valid change (one job changed, one added) are sent to
//! every node. The audit over the whole window shows every occurrence of
//! the ten once, and the added job runs once per occurrence from shortly
//! after the reload. Breaks if a reload restarted loops that lost or re-ran
//! an occurrence, or a failed reload dropped the schedule.

use crate::common;

use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use chrono::{TimeDelta, Utc};
use common::audit::Run;
use common::cluster::{Cluster, JobSpec, sleep_until, wait_gone, whole_second_after, window_secs};
use common::{
    Node, RedisServer, history, process_state, solocron_bin, state_letter, toml_path, wait_until,
};
use redis::Commands as _;

/// A child process continued and killed on drop, so a test that fails
/// while it is stopped leaves nothing behind (its job dies with it: the
/// parent-death signal).
struct Spawned(Child);

impl Drop for Spawned {
    fn drop(&mut self) {
        common::signal(self.0.id() as i32, "CONT");
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Asserts that no two of `runs` (one job's) overlap in real time.
fn assert_no_overlap(runs: &[Run]) {
    let mut sorted: Vec<&Run> = runs.iter().collect();
    sorted.sort_by_key(|run| run.start_ns);
    for pair in sorted.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        let end = a
            .end_ns
            .unwrap_or_else(|| panic!("{a} never ended, and {b} started after it"));
        assert!(b.start_ns >= end, "overlap:\n  {a}\n  {b}");
    }
}

#[test]
fn sigtstp_does_not_suspend_a_trigger_whose_run_holds_the_lock() {
    let slow = JobSpec::new("slow", "* * * * * *", 5.0).with("lock_ttl = \"2s\"");
    let mut cluster = Cluster::new(RedisServer::start(), "", &[slow]);
    let stderr = cluster.work.path("trigger.err");
    let config = toml_path(&cluster.work.path("jobs.toml"));
    let url = cluster.redis.url();
    let mut trigger = Spawned(
        Command::new(solocron_bin())
            .args(["trigger", "slow", "--config", &config, "--node-id", "cli"])
            .args(["--redis", &url])
            .env_remove("SOLOCRON_LOG")
            .env_remove("SOLOCRON_LOG_FORMAT")
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).expect("create trigger.err"))
            .spawn()
            .expect("start solocron trigger"),
    );
    let pid = trigger.0.id() as i32;
    let manual = cluster.wait_for_run(Duration::from_secs(10), "the manual run", |run| {
        run.node == "cli"
    });
    // A daemon whose every-second occurrences meet the manual run's lock.
    cluster.start_node("n1", &[]);
    cluster
        .node("n1")
        .wait_for_log(Duration::from_secs(5), "holder=cli");
    common::signal(pid, "TSTP");
    let said = || std::fs::read_to_string(&stderr).unwrap_or_default();
    wait_until(
        Duration::from_secs(5),
        "trigger says it is not suspended",
        || said().contains("not suspended (SIGTSTP)"),
    );
    assert_ne!(state_letter(pid), Some('T'), "{}", process_state(pid));
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(status) = trigger.0.try_wait().expect("wait for trigger") {
            break status;
        }
        assert_ne!(state_letter(pid), Some('T'), "trigger stopped: {}", said());
        assert!(
            Instant::now() < deadline,
            "trigger did not exit: {}",
            said()
        );
        std::thread::sleep(common::POLL);
    };
    assert_eq!(status.code(), Some(0), "{}", said());
    assert!(said().contains("succeeded (exit 0)"), "{}", said());
    let entry = history(&cluster.redis, "slow")
        .into_iter()
        .find(|entry| entry["occurrence"] == manual.occurrence)
        .expect("the manual run is in the history");
    assert_eq!(entry["outcome"], "succeeded", "{entry:?}");
    // The daemon's occurrences were skipped while the manual run held the
    // lock; it runs the job again once the lock is free, not before.
    cluster.wait_for_run(Duration::from_secs(10), "n1 runs the job", |run| {
        run.node == "n1"
    });
    assert_no_overlap(&cluster.runs());
}

#[test]
fn sigtstp_and_sigttin_do_not_suspend_a_daemon_whose_job_runs() {
    let slow = JobSpec::new("slow", "* * * * * *", 5.0).with("lock_ttl = \"2s\"");
    let mut cluster = Cluster::new(RedisServer::start(), "", &[slow]);
    let config = toml_path(&cluster.work.path("jobs.toml"));
    let url = cluster.redis.url();
    let args = ["--config", config.as_str(), "--redis", url.as_str()];
    cluster
        .nodes
        .push(Node::start_in_own_group(&cluster.work, "n1", &args, &[]));
    let first = cluster.wait_for_run(Duration::from_secs(10), "a run on n1", |run| {
        run.node == "n1"
    });
    cluster.start_node("n2", &[]);
    let n1 = cluster.node("n1");
    for signal in ["TSTP", "TTIN"] {
        n1.signal(signal);
        n1.wait_for_log(Duration::from_secs(5), &format!("signal=\"SIG{signal}\""));
        assert_ne!(state_letter(n1.pid()), Some('T'), "{}", n1.log());
    }
    assert!(n1.log().contains("not suspended"), "{}", n1.log());
    let done = cluster.wait_for_run(Duration::from_secs(15), "n1's run ends", |run| {
        run.pid == first.pid && run.end_ns.is_some()
    });
    // The history entry comes with the release, just after the run's END.
    let mut found = None;
    common::wait_until(Duration::from_secs(10), "n1's run in the history", || {
        found = history(&cluster.redis, "slow")
            .into_iter()
            .find(|entry| entry["occurrence"] == done.occurrence);
        found.is_some()
    });
    let entry = found.expect("n1's run is in the history");
    assert_eq!(entry["outcome"], "succeeded", "{entry:?}");
    assert_eq!(entry["node"], "n1");
    cluster.wait_for_run(Duration::from_secs(10), "the next run", |run| {
        run.fence > done.fence
    });
    assert_no_overlap(&cluster.runs());
}

#[test]
fn sighup_to_a_trigger_interrupts_its_run_releases_the_lock_and_records_it() {
    let long = JobSpec::new("long", "0 0 1 1 *", 30.0).with("lock_ttl = \"2s\"");
    let cluster = Cluster::new(RedisServer::start(), "", &[long]);
    let stderr = cluster.work.path("trigger.err");
    let config = toml_path(&cluster.work.path("jobs.toml"));
    let url = cluster.redis.url();
    let mut trigger = Spawned(
        Command::new(solocron_bin())
            .args(["trigger", "long", "--config", &config, "--node-id", "cli"])
            .args(["--redis", &url])
            .env_remove("SOLOCRON_LOG")
            .env_remove("SOLOCRON_LOG_FORMAT")
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).expect("create trigger.err"))
            .spawn()
            .expect("start solocron trigger"),
    );
    let pid = trigger.0.id() as i32;
    let manual = cluster.wait_for_run(Duration::from_secs(10), "the manual run", |run| {
        run.node == "cli"
    });
    common::signal(pid, "HUP");
    let said = || std::fs::read_to_string(&stderr).unwrap_or_default();
    let status = common::wait_exit(&mut trigger.0, Duration::from_secs(15), || {
        format!("trigger did not exit: {}", said())
    });
    assert_eq!(status.signal(), None, "ended by the signal: {}", said());
    assert!(said().contains("interrupted"), "{}", said());
    wait_gone(manual.pid, Duration::from_secs(5));
    let entry = history(&cluster.redis, "long")
        .into_iter()
        .find(|entry| entry["occurrence"] == manual.occurrence)
        .expect("the manual run is in the history");
    assert_eq!(entry["outcome"], "interrupted", "{entry:?}");
    let lock: Option<String> = cluster
        .redis
        .conn()
        .get("{solocron:long}:lock")
        .expect("GET");
    assert_eq!(lock, None, "released, not left to expire");
}

#[test]
fn sigusr1_sigusr2_sigquit_and_sigalrm_do_not_end_a_daemon_whose_job_runs() {
    let slow = JobSpec::new("slow", "*/10 * * * * *", 3.0).with("lock_ttl = \"2s\"");
    let mut cluster = Cluster::new(RedisServer::start(), "", &[slow]);
    cluster.start_node("n1", &[]);
    let first = cluster.wait_for_run(Duration::from_secs(15), "a run on n1", |run| {
        run.node == "n1"
    });
    let n1 = cluster.node("n1");
    for signal in ["USR1", "USR2", "QUIT", "ALRM"] {
        n1.signal(signal);
        n1.wait_for_log(Duration::from_secs(5), &format!("signal=\"SIG{signal}\""));
    }
    assert!(n1.log().contains("signal ignored"), "{}", n1.log());
    let done = cluster.wait_for_run(Duration::from_secs(10), "n1's run ends", |run| {
        run.pid == first.pid && run.end_ns.is_some()
    });
    let mut entry = None;
    wait_until(Duration::from_secs(5), "the run's history entry", || {
        entry = history(&cluster.redis, "slow")
            .into_iter()
            .find(|entry| entry["occurrence"] == done.occurrence);
        entry.is_some()
    });
    let entry = entry.expect("found");
    assert_eq!(entry["outcome"], "succeeded", "{entry:?}");
    assert_eq!(entry["node"], "n1");
    assert!(common::is_alive(n1.pid()), "{}", n1.log());
}

#[test]
fn sigterm_during_a_long_run_interrupts_it_after_the_grace_releases_the_lock_and_exits_0() {
    let long = JobSpec::new("long", "*/4 * * * * *", 3.0).with("lock_ttl = \"2s\"");
    let mut cluster = Cluster::new(
        RedisServer::start(),
        "shutdown_grace = \"1s\"",
        std::slice::from_ref(&long),
    );
    cluster.start_node("n1", &[]);
    cluster.start_node("n2", &[]);
    let from = whole_second_after(4, 4);
    let victim = cluster.wait_for_run(Duration::from_secs(20), "a long run in the window", |run| {
        run.job == "long" && run.at().is_some_and(|at| at >= from)
    });
    let node = cluster.node_mut(&victim.node);
    node.signal("TERM");
    let signalled = Instant::now();
    let status = node.wait_exit(Duration::from_secs(10));
    let took = signalled.elapsed();
    assert_eq!(status.code(), Some(0), "{}", node.log());
    // 1 s grace, then SIGTERM to the job (which dies of it) and the release.
    assert!(took < Duration::from_millis(2500), "exit took {took:?}");
    assert!(
        took >= Duration::from_millis(900),
        "the grace was not given: {took:?}"
    );
    let gone = wait_gone(victim.pid, Duration::from_millis(100));
    let lock: Option<String> = cluster
        .redis
        .conn()
        .get("{solocron:long}:lock")
        .expect("GET");
    assert_eq!(lock, None, "released at shutdown, not left to expire");
    let entry = history(&cluster.redis, "long")
        .into_iter()
        .find(|e| e["occurrence"] == victim.occurrence)
        .expect("the interrupted run is in the history");
    assert_eq!(entry["outcome"], "interrupted", "{entry:?}");
    assert_eq!(entry["node"], victim.node);
    let to = victim.at().expect("at") + TimeDelta::seconds(window_secs(8, 60));
    cluster.wait_for_run(
        Duration::from_secs(window_secs(8, 60) as u64 + 10),
        "later runs",
        |run| run.is("long", to) && run.end_ns.is_some(),
    );
    let mut runs = cluster.runs();
    for run in runs.iter_mut().filter(|run| run.pid == victim.pid) {
        run.ended_at(gone);
    }
    let report = common::audit::audit(
        &runs,
        &cluster.decisions(&["long"]),
        &[long.window(from, to)],
    );
    println!("sigterm: {report}");
    assert!(
        report.is_clean() && report.skipped.is_empty(),
        "{report}\n{}",
        cluster.logs()
    );
    for run in runs
        .iter()
        .filter(|run| run.at().is_some_and(|at| at > victim.at().expect("at")))
    {
        assert_ne!(run.node, victim.node, "a stopped node cannot run: {run}");
    }
}

#[test]
fn sighup_with_a_broken_a_missing_and_a_valid_file_under_load_loses_and_repeats_nothing() {
    let jobs: Vec<JobSpec> = (0..10)
        .map(|i| {
            JobSpec::new(&format!("j{i:02}"), "* * * * * *", 0.005)
                .with("lock_ttl = \"2s\"")
                .with("starting_deadline = \"2s\"")
        })
        .collect();
    let mut cluster = Cluster::new(RedisServer::start(), "", &jobs);
    for id in ["n1", "n2", "n3"] {
        cluster.start_node(id, &[]);
    }
    let from = whole_second_after(2, 1);
    let hup_all = |cluster: &Cluster, needle: &str, count: usize| {
        for node in &cluster.nodes {
            node.signal("HUP");
        }
        for node in &cluster.nodes {
            common::wait_until(Duration::from_secs(5), needle, || {
                node.log().matches(needle).count() == count
            });
        }
    };
    let config = cluster.work.path("jobs.toml");
    // A broken file.
    sleep_until(from + TimeDelta::milliseconds(1500));
    let mut broken = cluster.config_text(&jobs);
    broken.push_str("timeout = \"soon\"\n");
    cluster.work.write_config(&broken);
    hup_all(&cluster, "reload failed", 1);
    // No file at all.
    sleep_until(from + TimeDelta::milliseconds(3500));
    std::fs::remove_file(&config).expect("remove");
    hup_all(&cluster, "reload failed", 2);
    // A valid change: j03 works a little longer, j10 is new.
    sleep_until(from + TimeDelta::milliseconds(5500));
    let mut changed = jobs.clone();
    changed[3].seconds = 0.01;
    let added = JobSpec::new("j10", "* * * * * *", 0.005).with("lock_ttl = \"2s\"");
    changed.push(added.clone());
    cluster.write_jobs(&changed);
    hup_all(&cluster, "config reloaded", 1);
    let reloaded = Utc::now();
    for node in &cluster.nodes {
        let log = node.log();
        let line = log
            .lines()
            .find(|l| l.contains("config reloaded"))
            .expect("summary");
        assert!(
            line.contains(r#"added=["j10"]"#) && line.contains(r#"changed=["j03"]"#),
            "{line}"
        );
    }
    let to = from + TimeDelta::seconds(window_secs(12, 120));
    for job in &changed {
        cluster.wait_for_run(
            Duration::from_secs(window_secs(12, 120) as u64 + 10),
            "the last runs",
            |run| run.is(&job.name, to) && run.end_ns.is_some(),
        );
        cluster.wait_decided(Duration::from_secs(5), &job.name, to);
    }
    // j10 from its first occurrence at most 2 s after the reload.
    let first_added = whole_second_after(0, 1)
        .min(chrono::DateTime::from_timestamp(reloaded.timestamp() + 2, 0).expect("valid"));
    let mut windows: Vec<_> = jobs.iter().map(|job| job.window(from, to)).collect();
    windows.push(added.window(first_added, to));
    let report = cluster.audit(&windows);
    println!("sighup under load: {report}");
    assert!(
        report.is_clean() && report.skipped.is_empty(),
        "{report}\n{}",
        cluster.logs()
    );
    assert!(report.expected >= 10 * 13, "{report}");
}
