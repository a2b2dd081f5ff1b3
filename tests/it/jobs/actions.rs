//! `exec`: what a run sees and how it ends (docs/configuration.md), through the public API.
//!
//! Process tests run real `/bin/sh` jobs; HTTP tests talk to a tiny
//! std-only server on a loopback port (`common::http`). Waits poll with
//! deadlines.

use crate::common;

use std::future::{Future, pending};
use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::http::HttpServer;

use solocron::config::{Action, HttpAction, Job, OnLockLost, Overlap};
use solocron::exec::{Executor, Notice, Outcome, Report, RunContext, StopReason};
use solocron::schedule::Schedule;

const OCCURRENCE: &str = "2026-11-30T21:00:00Z";
const KILL_GRACE: Duration = Duration::from_secs(2);

fn job(name: &str, action: Action) -> Job {
    Job {
        name: name.to_string(),
        schedule: Schedule::parse("* * * * *", chrono_tz::UTC).expect("schedule"),
        lock_ttl: Duration::from_secs(30),
        timeout: None,
        starting_deadline: Duration::from_secs(60),
        on_lock_lost: OnLockLost::Kill,
        overlap: Overlap::Skip,
        action,
        output_log_max: solocron::config::DEFAULT_OUTPUT_LOG_MAX,
        splay_offset: Duration::ZERO,
        retries: 0,
        extras: Default::default(),
        fingerprint: Default::default(),
    }
}

fn shell(name: &str, line: &str) -> Job {
    job(name, Action::Command(line.to_string()))
}

fn ctx(job: Job) -> RunContext {
    RunContext {
        job: Arc::new(job),
        occurrence: OCCURRENCE.to_string(),
        fence: 812,
        node: "web-2".to_string(),
        env_file: Default::default(),
        mask: Default::default(),
        lost_lease_grace: Duration::from_millis(500),
        lease_lost: Default::default(),
        attempt: 1,
        notice: None,
    }
}

fn executor() -> Executor {
    Executor::new()
        .expect("executor")
        .with_kill_grace(KILL_GRACE)
}

fn never() -> impl Future<Output = StopReason> {
    pending()
}

async fn run(job: Job) -> Report {
    run_with(job, never()).await
}

/// Runs with a generous overall deadline, so a hang fails instead of blocking.
async fn run_with(job: Job, stop: impl Future<Output = StopReason>) -> Report {
    let exec = executor();
    let ctx = ctx(job);
    tokio::time::timeout(Duration::from_secs(30), exec.execute(&ctx, stop))
        .await
        .expect("execute must return")
}

async fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(common::POLL).await;
    }
}

/// A running, non-zombie process with this pid exists.
fn is_alive(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rsplit(')')
        .next()
        .and_then(|rest| rest.trim_start().chars().next());
    !matches!(state, Some('Z' | 'X') | None)
}

async fn read_pid(path: &Path) -> i32 {
    let mut pid = None;
    wait_until("the job wrote its pid", Duration::from_secs(5), || {
        pid = std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse().ok());
        pid.is_some()
    })
    .await;
    pid.expect("pid")
}

async fn assert_gone(pid: i32) {
    wait_until(
        &format!("process {pid} is gone"),
        Duration::from_secs(5),
        || !is_alive(pid),
    )
    .await;
}

fn kill_if_alive(pid: i32) {
    if is_alive(pid) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

// ---- exit codes, environment, argv ----

#[tokio::test]
async fn exit_zero_succeeds() {
    let report = run(shell("ok", "exit 0")).await;
    assert_eq!(report.outcome, Outcome::Succeeded);
    assert_eq!(report.exit_code, Some(0));
    assert_eq!(report.error, None);
    assert!(report.finished_at >= report.started_at);
}

#[tokio::test]
async fn nonzero_exit_fails_with_its_code() {
    let report = run(shell("bad", "exit 3")).await;
    assert_eq!(report.outcome, Outcome::Failed);
    assert_eq!(report.exit_code, Some(3));
}

#[tokio::test]
async fn missing_shell_command_is_exit_127() {
    let report = run(shell("typo", "no-such-command-solocron")).await;
    assert_eq!(report.outcome, Outcome::Failed);
    assert_eq!(report.exit_code, Some(127));
}

#[tokio::test]
async fn job_killed_by_foreign_signal_fails_without_exit_code() {
    let report = run(shell("suicide", "kill -9 $$")).await;
    assert_eq!(report.outcome, Outcome::Failed);
    assert_eq!(report.exit_code, None);
    assert_eq!(report.error.as_deref(), Some("killed by signal SIGKILL"));
}

#[tokio::test]
async fn command_sees_solocron_env_and_job_env() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("env.txt");
    let mut job = shell(
        "env-job",
        &format!(
            "printf '%s|%s|%s|%s|%s' \"$SOLOCRON_JOB\" \"$SOLOCRON_OCCURRENCE\" \
             \"$SOLOCRON_FENCE\" \"$SOLOCRON_NODE\" \"$GREETING\" > '{}'",
            out.display()
        ),
    );
    Arc::make_mut(&mut job.extras)
        .env
        .insert("GREETING".to_string(), "hello world".to_string());
    let report = run(job).await;
    assert_eq!(report.outcome, Outcome::Succeeded);
    let seen = std::fs::read_to_string(&out).expect("env.txt");
    assert_eq!(seen, format!("env-job|{OCCURRENCE}|812|web-2|hello world"));
}

#[tokio::test]
async fn command_runs_in_working_dir_with_stdin_closed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut job = shell("wd", "pwd > pwd.txt; cat > stdin.txt");
    Arc::make_mut(&mut job.extras).working_dir = Some(dir.path().to_path_buf());
    let report = run(job).await;
    assert_eq!(report.outcome, Outcome::Succeeded);
    let pwd = std::fs::read_to_string(dir.path().join("pwd.txt")).expect("pwd.txt");
    let expected = dir.path().canonicalize().expect("canonical");
    assert_eq!(PathBuf::from(pwd.trim()), expected);
    assert_eq!(
        std::fs::read(dir.path().join("stdin.txt")).expect("stdin.txt"),
        b""
    );
}

#[tokio::test]
async fn argv_is_not_interpreted_by_a_shell() {
    let dir = tempfile::tempdir().expect("tempdir");
    let literal = dir.path().join("a;b $HOME");
    let argv = vec!["/usr/bin/touch".to_string(), literal.display().to_string()];
    let report = run(job("argv", Action::Argv(argv))).await;
    assert_eq!(report.outcome, Outcome::Succeeded);
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .expect("read_dir")
        .map(|entry| entry.expect("entry").file_name())
        .collect();
    assert_eq!(names, ["a;b $HOME"]);
}

#[tokio::test]
async fn missing_binary_fails_and_names_it() {
    let report = run(job(
        "ghost",
        Action::Argv(vec!["/no/such/binary".to_string()]),
    ))
    .await;
    assert_eq!(report.outcome, Outcome::Failed);
    assert_eq!(report.exit_code, None);
    let error = report.error.expect("error");
    assert!(
        error.contains("`/no/such/binary`") && error.contains("`ghost`"),
        "{error}"
    );
    assert!(error.contains("No such file or directory"), "{error}");
}

/// The job starts with no blocked signal, and ignores only what the daemon
/// inherited as ignored: not SIGPIPE, which every Rust program (the daemon
/// too) ignores for itself. `/proc/self/status` of the job tells.
#[tokio::test]
async fn the_job_starts_with_no_blocked_signal_and_sigpipe_not_ignored() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("status.txt");
    let job = shell(
        "signals",
        &format!(
            "grep -E '^Sig(Ign|Blk):' /proc/self/status > '{}'",
            out.display()
        ),
    );
    let report = run(job).await;
    assert_eq!(report.outcome, Outcome::Succeeded);
    let mask = |status: &str, field: &str| -> u64 {
        let line = status
            .lines()
            .find(|line| line.starts_with(field))
            .unwrap_or_else(|| panic!("{field} in {status}"));
        u64::from_str_radix(line[field.len()..].trim(), 16).expect("hex mask")
    };
    let ours = std::fs::read_to_string("/proc/self/status").expect("own status");
    let sigpipe = 1u64 << (libc::SIGPIPE - 1);
    assert_ne!(
        mask(&ours, "SigIgn:") & sigpipe,
        0,
        "the test process ignores SIGPIPE"
    );
    let theirs = std::fs::read_to_string(&out).expect("status.txt");
    assert_eq!(mask(&theirs, "SigBlk:"), 0, "blocked signals: {theirs}");
    assert_eq!(
        mask(&theirs, "SigIgn:"),
        mask(&ours, "SigIgn:") & !sigpipe,
        "ignored signals: {theirs}"
    );
}

/// `argv` without a `/` is looked up in the PATH of the job's environment.
#[tokio::test]
async fn argv_program_is_looked_up_in_the_jobs_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join("only-here");
    std::fs::write(&script, "#!/bin/sh\nexit 7\n").expect("script");
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let mut found = job("path", Action::Argv(vec!["only-here".to_string()]));
    Arc::make_mut(&mut found.extras).env.insert(
        "PATH".to_string(),
        format!("/usr/bin:{}", dir.path().display()),
    );
    let report = run(found).await;
    assert_eq!(
        (report.outcome, report.exit_code),
        (Outcome::Failed, Some(7))
    );
    let missing = run(job("path", Action::Argv(vec!["only-here".to_string()]))).await;
    assert_eq!(missing.exit_code, None);
    assert!(
        missing
            .error
            .as_deref()
            .is_some_and(|error| error.contains("No such file or directory")),
        "{:?}",
        missing.error
    );
}

#[tokio::test]
async fn missing_working_dir_fails_and_names_it() {
    let mut job = shell("nowhere", "exit 0");
    Arc::make_mut(&mut job.extras).working_dir = Some(PathBuf::from("/no/such/dir"));
    let report = run(job).await;
    assert_eq!(report.outcome, Outcome::Failed);
    assert_eq!(report.exit_code, None);
    let error = report.error.expect("error");
    assert!(
        error.contains("working directory `/no/such/dir`"),
        "{error}"
    );
}

// ---- stopping: timeout, stop future, drop ----

#[tokio::test]
async fn timeout_kills_the_whole_process_group() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pid_file = dir.path().join("child.pid");
    let mut job = shell(
        "slow",
        &format!("sleep 300 & echo $! > '{}'; sleep 300", pid_file.display()),
    );
    job.timeout = Some(Duration::from_secs(1));
    let report = run(job).await;
    let child = read_pid(&pid_file).await;
    assert_eq!(report.outcome, Outcome::TimedOut);
    assert_eq!(report.exit_code, None);
    assert!(
        report.duration >= Duration::from_secs(1),
        "{:?}",
        report.duration
    );
    assert!(
        report.duration < Duration::from_secs(1) + KILL_GRACE,
        "{:?}",
        report.duration
    );
    assert_gone(child).await;
}

#[tokio::test]
async fn job_ignoring_sigterm_gets_sigkill_after_the_grace() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pid_file = dir.path().join("child.pid");
    let mut job = shell(
        "stubborn",
        &format!(
            "trap '' TERM; sleep 300 & echo $! > '{}'; wait",
            pid_file.display()
        ),
    );
    job.timeout = Some(Duration::from_secs(1));
    let report = run(job).await;
    let child = read_pid(&pid_file).await;
    assert_eq!(report.outcome, Outcome::TimedOut);
    assert_eq!(report.exit_code, None);
    assert!(
        report.duration >= Duration::from_secs(1) + KILL_GRACE,
        "{:?}",
        report.duration
    );
    assert_gone(child).await;
}

#[tokio::test]
async fn clean_exit_after_sigterm_is_still_timed_out() {
    let mut job = shell("polite", "trap 'exit 0' TERM; sleep 300 & wait");
    job.timeout = Some(Duration::from_secs(1));
    let report = run(job).await;
    assert_eq!(report.outcome, Outcome::TimedOut);
    assert_eq!(report.exit_code, Some(0));
    assert!(
        report.duration < Duration::from_secs(1) + KILL_GRACE,
        "{:?}",
        report.duration
    );
}

async fn stopped_by(reason: StopReason) -> (Report, i32) {
    let dir = tempfile::tempdir().expect("tempdir");
    let pid_file = dir.path().join("child.pid");
    let job = shell(
        "long",
        &format!("sleep 300 & echo $! > '{}'; wait", pid_file.display()),
    );
    // Stop once the job is surely running (its background child exists).
    let stop = async {
        read_pid(&pid_file).await;
        reason
    };
    let report = run_with(job, stop).await;
    (report, read_pid(&pid_file).await)
}

#[tokio::test]
async fn lock_loss_stops_the_group() {
    let (report, child) = stopped_by(StopReason::LockLost).await;
    assert_eq!(report.outcome, Outcome::LockLost);
    assert!(
        report.duration < Duration::from_secs(2),
        "{:?}",
        report.duration
    );
    assert_gone(child).await;
}

#[tokio::test]
async fn shutdown_interrupts_the_group() {
    let (report, child) = stopped_by(StopReason::Interrupted).await;
    assert_eq!(report.outcome, Outcome::Interrupted);
    assert!(
        report.duration < Duration::from_secs(2),
        "{:?}",
        report.duration
    );
    assert_gone(child).await;
}

#[tokio::test]
async fn dropped_run_kills_the_group() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pid_file = dir.path().join("child.pid");
    let job = shell(
        "dropped",
        &format!("sleep 300 & echo $! > '{}'; wait", pid_file.display()),
    );
    let (exec, ctx) = (executor(), ctx(job));
    let run = exec.execute(&ctx, never());
    assert!(
        tokio::time::timeout(Duration::from_millis(500), run)
            .await
            .is_err()
    );
    assert_gone(read_pid(&pid_file).await).await;
}

#[tokio::test]
async fn job_dies_with_the_thread_that_started_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pid_file = dir.path().join("job.pid");
    let job = shell(
        "orphan",
        &format!("echo $$ > '{}'; exec sleep 300", pid_file.display()),
    );
    let spawner = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let (exec, ctx) = (executor(), ctx(job));
        let mut run = Box::pin(exec.execute(&ctx, never()));
        runtime.block_on(async {
            let started = tokio::time::timeout(Duration::from_millis(500), &mut run).await;
            assert!(started.is_err(), "the job should still be running");
        });
        // Skip the drop-time SIGKILL, as a crash would: only the parent-death
        // signal is left to stop the job when this thread ends.
        std::mem::forget(run);
    });
    spawner.join().expect("spawner thread");
    assert_gone(read_pid(&pid_file).await).await;
}

#[tokio::test]
async fn a_process_left_in_the_group_keeps_the_run_going_until_it_ends() {
    // Guarantee 2 (docs/guarantees.md): a run is over when its last process is; until then its
    // lease is kept, so a leftover `cmd &` cannot overlap the next run.
    let dir = tempfile::tempdir().expect("tempdir");
    let pid_file = dir.path().join("child.pid");
    let job = shell(
        "leaky",
        &format!("sleep 300 & echo $! > '{}'; echo done", pid_file.display()),
    );
    let exec = executor();
    let ctx = ctx(job);
    let run = tokio::spawn(async move { exec.execute(&ctx, never()).await });
    let child = read_pid(&pid_file).await;
    // Time itself is the input: the run stays open while only the leftover
    // lives (the shell itself exits at once).
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(
        !run.is_finished(),
        "the run ended while a process of its group still ran"
    );
    kill_if_alive(child);
    let report = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("the run ends once its last process is gone")
        .expect("join");
    assert_eq!(report.outcome, Outcome::Succeeded);
    assert!(
        report.duration >= Duration::from_millis(700),
        "{:?}",
        report.duration
    );
}

#[tokio::test]
async fn a_leftover_process_is_stopped_by_the_timeout() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pid_file = dir.path().join("child.pid");
    let mut job = shell(
        "leaky",
        &format!("sleep 300 & echo $! > '{}'; exit 0", pid_file.display()),
    );
    job.timeout = Some(Duration::from_secs(1));
    let report = run(job).await;
    let child = read_pid(&pid_file).await;
    assert_eq!(report.outcome, Outcome::TimedOut);
    assert!(!is_alive(child), "the leftover process outlived the run");
}

#[tokio::test]
async fn a_process_outside_the_group_holding_the_pipes_does_not_block_the_report() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pid_file = dir.path().join("child.pid");
    let job = shell(
        "escaper",
        &format!(
            "setsid sleep 300 & echo $! > '{}'; echo done",
            pid_file.display()
        ),
    );
    let report = run(job).await;
    let child = read_pid(&pid_file).await;
    kill_if_alive(child);
    assert_eq!(report.outcome, Outcome::Succeeded);
    assert!(
        report.duration < Duration::from_secs(10),
        "{:?}",
        report.duration
    );
}

// ---- output ----

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log buffer").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Runs `job` with a JSON subscriber on this thread; returns the `job output` events.
async fn run_captured(job: Job) -> (Report, Vec<serde_json::Value>) {
    let (report, events) = run_captured_all(job).await;
    let output = events
        .into_iter()
        .filter(|event| event["fields"]["message"] == "job output")
        .collect();
    (report, output)
}

/// Runs `job` with a JSON subscriber on this thread; returns every event.
async fn run_captured_all(job: Job) -> (Report, Vec<serde_json::Value>) {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .with_writer(move || writer.clone())
        .finish();
    let report = {
        let _guard = tracing::subscriber::set_default(subscriber);
        run(job).await
    };
    let bytes = captured.0.lock().expect("log buffer").clone();
    let events = String::from_utf8(bytes)
        .expect("utf-8 log")
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).expect("json log line"))
        .collect();
    (report, events)
}

#[tokio::test]
async fn output_past_output_log_max_is_counted_not_logged_and_the_tail_is_kept() {
    // Issue #9 item 8: a job printing 100 MB wrote 675,000 log lines a run.
    // 20,000 lines of 8 bytes with a 1,000-byte budget: 111 lines logged,
    // one summary line for the rest, the last 4 KiB kept for the history.
    let mut job = shell("flood", "seq 10000000 10019999; echo the-end");
    job.output_log_max = 1000;
    let (report, events) = run_captured_all(job).await;
    assert_eq!(report.outcome, Outcome::Succeeded);
    let logged = events
        .iter()
        .filter(|event| event["fields"]["message"] == "job output")
        .count();
    assert!((100..=125).contains(&logged), "{logged} lines logged");
    let summaries: Vec<_> = events
        .iter()
        .filter(|event| {
            event["fields"]["message"]
                .as_str()
                .is_some_and(|message| message.starts_with("job output over output_log_max"))
        })
        .collect();
    assert_eq!(summaries.len(), 1, "{summaries:?}");
    let unlogged = summaries[0]["fields"]["lines"].as_u64().expect("lines");
    assert_eq!(
        unlogged as usize + logged,
        20_001,
        "every line logged or counted"
    );
    let tail = report.output_tail.expect("a tail");
    assert!(tail.len() <= 4096 && tail.len() > 4000, "{}", tail.len());
    assert!(tail.ends_with("10019999\nthe-end\n"), "{tail}");
}

#[tokio::test]
async fn output_log_max_zero_logs_no_line_but_keeps_the_tail() {
    let mut job = shell("quiet", "echo secret-looking output");
    job.output_log_max = 0;
    let (report, events) = run_captured(job).await;
    assert!(events.is_empty(), "{events:?}");
    assert_eq!(
        report.output_tail.as_deref(),
        Some("secret-looking output\n")
    );
}

#[tokio::test]
async fn output_lines_are_logged_with_job_fields() {
    let job = shell(
        "chatty",
        "echo one; echo 'two  spaced'; echo oops >&2; printf three",
    );
    let (report, events) = run_captured(job).await;
    assert_eq!(report.outcome, Outcome::Succeeded);
    let mut seen: Vec<(String, String, String)> = events
        .iter()
        .map(|event| {
            let fields = &event["fields"];
            assert_eq!(fields["job"], "chatty");
            assert_eq!(fields["occurrence"], OCCURRENCE);
            assert_eq!(fields["node"], "web-2");
            assert_eq!(fields["fence"], 812);
            let text = |v: &serde_json::Value| v.as_str().expect("string").to_string();
            (
                text(&event["level"]),
                text(&fields["stream"]),
                text(&fields["line"]),
            )
        })
        .collect();
    seen.sort();
    let expected = [
        ("INFO", "stdout", "one"),
        ("INFO", "stdout", "three"),
        ("INFO", "stdout", "two  spaced"),
        ("WARN", "stderr", "oops"),
    ]
    .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()));
    assert_eq!(seen, expected);
}

#[tokio::test]
async fn long_line_is_cut_at_the_cap() {
    let job = shell(
        "flood",
        "head -c 10000000 /dev/zero | tr '\\0' x; echo; echo after",
    );
    let (report, events) = run_captured(job).await;
    assert_eq!(report.outcome, Outcome::Succeeded);
    let lines: Vec<&str> = events
        .iter()
        .map(|event| event["fields"]["line"].as_str().expect("line"))
        .collect();
    assert_eq!(
        lines.len(),
        2,
        "{:?}",
        lines.iter().map(|l| l.len()).collect::<Vec<_>>()
    );
    let kept = lines[0].trim_end_matches(|c| c != 'x');
    assert_eq!(kept, "x".repeat(4096));
    assert!(
        lines[0].ends_with("[cut 9995904 bytes]"),
        "{}",
        &lines[0][4096..]
    );
    assert_eq!(lines[1], "after");
}

fn anon_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("RssAnon:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("RssAnon")
}

#[tokio::test]
async fn endless_line_does_not_grow_memory() {
    // Samples anonymous memory (not code pages other tests fault in) while
    // the job runs; buffering the line would add 100 MB.
    let before = anon_rss_kib();
    let running = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let running = Arc::clone(&running);
        std::thread::spawn(move || {
            let mut peak = 0;
            while running.load(std::sync::atomic::Ordering::Relaxed) {
                peak = peak.max(anon_rss_kib());
                // The sampling interval: fine enough to see a 100 MB buffer.
                std::thread::sleep(Duration::from_millis(5));
            }
            peak
        })
    };
    let report = run(shell("endless", "head -c 100000000 /dev/zero | tr '\\0' x")).await;
    running.store(false, std::sync::atomic::Ordering::Relaxed);
    let peak = sampler.join().expect("sampler");
    assert_eq!(report.outcome, Outcome::Succeeded);
    let grown = peak.saturating_sub(before);
    assert!(grown < 40_000, "anonymous memory grew by {grown} KiB");
}

// ---- http ----

fn hook(url: String) -> HttpAction {
    HttpAction {
        url,
        method: "POST".to_string(),
        timeout: None,
        headers: Vec::new(),
        body: None,
        secrets: Vec::new(),
    }
}

#[tokio::test]
async fn http_hook_sends_method_headers_and_body() {
    let server = HttpServer::start(Some(200));
    let mut action = hook(server.url("/hooks/warm?x=1"));
    action.method = "PUT".to_string();
    action.headers = vec![
        (
            "Authorization".to_string(),
            "Bearer s3cret-token".to_string(),
        ),
        ("X-Team".to_string(), "ops".to_string()),
    ];
    action.body = Some(r#"{"warm":true}"#.to_string());
    let report = run(job("warm-cache", Action::Http(Box::new(action)))).await;
    assert_eq!(report.outcome, Outcome::Succeeded, "{:?}", report.error);
    assert_eq!(report.http_status, Some(200));
    assert_eq!(report.exit_code, None);
    let request = server.received();
    assert!(
        request.head.starts_with("PUT /hooks/warm?x=1 HTTP/1.1\r\n"),
        "{}",
        request.head
    );
    assert_eq!(request.header("solocron-job"), Some("warm-cache"));
    assert_eq!(request.header("solocron-occurrence"), Some(OCCURRENCE));
    assert_eq!(request.header("solocron-fence"), Some("812"));
    assert_eq!(request.header("solocron-node"), Some("web-2"));
    let key = format!("warm-cache@{OCCURRENCE}");
    assert_eq!(request.header("idempotency-key"), Some(key.as_str()));
    assert_eq!(request.header("authorization"), Some("Bearer s3cret-token"));
    assert_eq!(request.header("x-team"), Some("ops"));
    assert_eq!(request.body, r#"{"warm":true}"#);
}

/// A notifier hook without a `body` of its own: the run's outcome as
/// `Solocron-*` headers (one line, even for a multi-line error) and the
/// whole of it, output tail included, as a JSON body.
#[tokio::test]
async fn an_http_notifier_gets_the_outcome_as_headers_and_a_json_body() {
    let server = HttpServer::start(Some(204));
    let mut ctx = ctx(job(
        "nightly",
        Action::Http(Box::new(hook(server.url("/alert")))),
    ));
    ctx.attempt = 3;
    ctx.notice = Some(Arc::new(Notice {
        outcome: Outcome::Failed,
        exit_code: Some(3),
        http_status: None,
        error: Some("first line\nsecond line".into()),
        output_tail: Some("boom\n".into()),
    }));
    let report = executor().execute(&ctx, never()).await;
    assert_eq!(report.outcome, Outcome::Succeeded, "{:?}", report.error);
    let request = server.received();
    assert_eq!(request.header("solocron-outcome"), Some("failed"));
    assert_eq!(request.header("solocron-exit-code"), Some("3"));
    assert_eq!(request.header("solocron-attempt"), Some("3"));
    assert_eq!(
        request.header("solocron-error"),
        Some("first line second line")
    );
    assert_eq!(request.header("content-type"), Some("application/json"));
    let body: serde_json::Value = serde_json::from_str(&request.body).expect("JSON body");
    assert_eq!(body["job"], "nightly");
    assert_eq!(body["occurrence"], OCCURRENCE);
    assert_eq!(body["fence"], 812);
    assert_eq!(body["attempt"], 3);
    assert_eq!(body["outcome"], "failed");
    assert_eq!(body["exit_code"], 3);
    assert_eq!(body["error"], "first line\nsecond line");
    assert_eq!(body["output_tail"], "boom\n");
}

/// A notifier process gets `SOLOCRON_OUTCOME` & co. besides the run's own.
#[tokio::test]
async fn a_command_notifier_gets_the_outcome_variables() {
    let dir = tempfile::tempdir().expect("dir");
    let out = dir.path().join("env");
    let line = format!(
        "printf '%s|%s|%s|%s|%s' \"$SOLOCRON_OUTCOME\" \"$SOLOCRON_EXIT_CODE\" \"$SOLOCRON_ERROR\" \"$SOLOCRON_OUTPUT_TAIL\" \"$SOLOCRON_ATTEMPT\" > {}",
        out.display()
    );
    let mut ctx = ctx(shell("nightly", &line));
    ctx.attempt = 2;
    ctx.notice = Some(Arc::new(Notice {
        outcome: Outcome::TimedOut,
        exit_code: None,
        http_status: None,
        error: Some("ran longer than 1s".into()),
        output_tail: Some("last words".into()),
    }));
    let report = executor().execute(&ctx, never()).await;
    assert_eq!(report.outcome, Outcome::Succeeded, "{:?}", report.error);
    let seen = std::fs::read_to_string(&out).expect("written");
    assert_eq!(seen, "timed_out||ran longer than 1s|last words|2");
}

#[tokio::test]
async fn http_error_status_fails_with_it() {
    let server = HttpServer::start(Some(500));
    let report = run(job("hook", Action::Http(Box::new(hook(server.url("/x")))))).await;
    assert_eq!(report.outcome, Outcome::Failed);
    assert_eq!(report.http_status, Some(500));
    assert_eq!(server.received().body, "");
}

#[tokio::test]
async fn http_connection_refused_fails_without_leaking_secrets() {
    let port = {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr").port()
    };
    let mut action = hook(format!(
        "http://deploy:pa55word-x@127.0.0.1:{port}/x?token=q7"
    ));
    action.headers = vec![(
        "Authorization".to_string(),
        "Bearer s3cret-token".to_string(),
    )];
    let report = run(job("refused", Action::Http(Box::new(action)))).await;
    assert_eq!(report.outcome, Outcome::Failed);
    assert_eq!(report.http_status, None);
    let error = report.error.expect("error");
    assert!(error.contains("`refused`"), "{error}");
    for secret in ["pa55word", "s3cret", "deploy", "token=q7"] {
        assert!(!error.contains(secret), "`{secret}` leaked: {error}");
    }
}

#[tokio::test]
async fn http_timeout_is_timed_out() {
    let server = HttpServer::start(None);
    let mut action = hook(server.url("/slow"));
    action.timeout = Some(Duration::from_secs(1));
    let report = run(job("slow-hook", Action::Http(Box::new(action)))).await;
    assert_eq!(report.outcome, Outcome::TimedOut, "{:?}", report.error);
    assert!(
        report.duration < Duration::from_secs(5),
        "{:?}",
        report.duration
    );
    assert!(report.error.is_some());
}

#[tokio::test]
async fn job_timeout_caps_the_http_timeout() {
    let server = HttpServer::start(None);
    let mut action = hook(server.url("/slow"));
    action.timeout = Some(Duration::from_secs(60));
    let mut job = job("capped-hook", Action::Http(Box::new(action)));
    job.timeout = Some(Duration::from_secs(1));
    let report = run(job).await;
    assert_eq!(report.outcome, Outcome::TimedOut, "{:?}", report.error);
    assert!(
        report.duration < Duration::from_secs(5),
        "{:?}",
        report.duration
    );
}

#[tokio::test]
async fn stop_aborts_an_http_request() {
    let server = HttpServer::start(None);
    let action = hook(server.url("/slow"));
    // Stopped once the request is in flight: the server has it, unanswered.
    let stop = async move {
        tokio::task::spawn_blocking(move || server.received())
            .await
            .expect("the request reached the server");
        StopReason::Interrupted
    };
    let report = run_with(job("stopped-hook", Action::Http(Box::new(action))), stop).await;
    assert_eq!(report.outcome, Outcome::Interrupted);
    assert!(
        report.duration < Duration::from_secs(2),
        "{:?}",
        report.duration
    );
}

/// A 304 Not Modified fails like any other non-2xx status: its error is
/// not the redirect's ("a redirect without a `Location`: ... put the final
/// URL in jobs.toml", advice that fits no 304).
#[tokio::test]
async fn a_304_is_a_plain_failure_not_a_redirect() {
    let server = HttpServer::start(Some(304));
    let report = run(job(
        "unchanged",
        Action::Http(Box::new(hook(server.url("/hooks/run")))),
    ))
    .await;
    assert_eq!(report.outcome, Outcome::Failed, "{report:?}");
    assert_eq!(report.http_status, Some(304));
    assert_eq!(report.error, None);
}

/// A redirect is not followed (following a 302 turned the POST into a GET
/// without its body, and the GET's 200 was recorded a success): the hook
/// fails with the 3xx, and the error names where it pointed, resolved and
/// with its password and secrets masked, and what to do.
#[tokio::test]
async fn a_redirect_is_a_failure_naming_its_location_and_is_not_followed() {
    for status in [302, 307] {
        let target = HttpServer::start(Some(200));
        let location = target.url("/status/200");
        let server = HttpServer::answering(status, &[("Location", &location)]);
        let mut action = hook(server.url("/hooks/run"));
        action.body = Some("payload".to_string());
        let report = run(job("moved", Action::Http(Box::new(action)))).await;
        assert_eq!(report.outcome, Outcome::Failed, "{status}: {report:?}");
        assert_eq!(report.http_status, Some(status));
        let error = report.error.expect("an error");
        assert!(
            error.starts_with("http hook of job `moved` was answered "),
            "{error}"
        );
        assert!(
            error.contains(&format!("a redirect to `{location}`")),
            "{error}"
        );
        assert!(error.ends_with("put the final URL in jobs.toml"), "{error}");
        let request = server.received();
        assert_eq!(request.line(), "POST /hooks/run HTTP/1.1");
        assert_eq!(request.body, "payload");
        assert!(
            target.received_within(Duration::from_millis(500)).is_none(),
            "the redirect was followed"
        );
    }
    // A relative `Location` is shown resolved against the hook's URL.
    let server = HttpServer::answering(301, &[("Location", "/status/200")]);
    let report = run(job(
        "moved",
        Action::Http(Box::new(hook(server.url("/hooks/run")))),
    ))
    .await;
    assert_eq!(report.http_status, Some(301));
    let error = report.error.expect("an error");
    let resolved = server.url("/status/200");
    assert!(
        error.contains(&format!("a redirect to `{resolved}`")),
        "{error}"
    );
    assert_eq!(server.received().line(), "POST /hooks/run HTTP/1.1");
    assert!(
        server.received_within(Duration::from_millis(500)).is_none(),
        "the redirect was followed"
    );
    // A notifier hook likewise; the Location's password and the hook's
    // secrets are masked.
    let server = HttpServer::answering(
        302,
        &[(
            "Location",
            "http://ops:pa55-in-location@127.0.0.1:1/next?key=t0ken-s3cret&job=report",
        )],
    );
    let mut action = hook(server.url("/alert?key=t0ken-s3cret"));
    action.secrets = vec!["t0ken-s3cret".to_string()];
    let mut ctx = ctx(job("report", Action::Http(Box::new(action))));
    ctx.notice = Some(Arc::new(Notice::of(Outcome::Failed)));
    let report = executor().execute(&ctx, never()).await;
    assert_eq!(report.outcome, Outcome::Failed);
    assert_eq!(report.http_status, Some(302));
    let error = report.error.expect("an error");
    assert!(
        error.contains("a redirect to `http://ops:***@127.0.0.1:1/next?key=***&job=report`"),
        "{error}"
    );
    assert!(
        !error.contains("pa55") && !error.contains("t0ken"),
        "{error}"
    );
    assert_eq!(
        server.received().line(),
        "POST /alert?key=t0ken-s3cret HTTP/1.1"
    );
}

/// A hook loaded from jobs.toml whose URL and header carry a `${TOKEN}`:
/// its error when the connection is refused reads as it was, with the job
/// name and every word in place, and no secret in it.
#[tokio::test]
async fn a_refused_hooks_error_from_jobs_toml_is_readable_and_secret_free() {
    let port = {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr").port()
    };
    let text = format!(
        "[redis]\nurl = \"redis://127.0.0.1:6379\"\n[jobs.nightly-report]\nschedule = \"@daily\"\n\
         http = {{ url = \"http://deploy:pa55word-x@127.0.0.1:{port}/hooks/run?job=nightly-report&on=error&key=${{TOKEN}}\", \
         headers = {{ Authorization = \"Bearer ${{TOKEN}}\" }} }}\n"
    );
    let env = |name: &str| (name == "TOKEN").then(|| "t0ken-s3cret".to_string());
    let config = solocron::config::parse(&text, Path::new("jobs.toml"), &env).expect("valid");
    let report = run(Job::clone(&config.jobs[0])).await;
    assert_eq!(report.outcome, Outcome::Failed);
    let error = report.error.expect("an error");
    assert_eq!(
        error,
        "http hook of job `nightly-report` failed: error sending request: \
         client error (Connect): tcp connect error: Connection refused (os error 111)"
    );
}

/// A command notifier about a run whose output (or error) holds a NUL
/// byte starts all the same, with U+FFFD in the byte's place.
#[tokio::test]
async fn a_command_notifier_starts_when_the_output_holds_a_nul_byte() {
    let dir = tempfile::tempdir().expect("dir");
    let out = dir.path().join("env");
    let line = format!(
        "printf '%s|%s' \"$SOLOCRON_ERROR\" \"$SOLOCRON_OUTPUT_TAIL\" > {}",
        out.display()
    );
    let mut ctx = ctx(shell("nf-nul", &line));
    ctx.notice = Some(Arc::new(Notice {
        outcome: Outcome::Failed,
        exit_code: Some(1),
        http_status: None,
        error: Some("e\0".into()),
        output_tail: Some("a\0b\n".into()),
    }));
    let report = executor().execute(&ctx, never()).await;
    assert_eq!(report.outcome, Outcome::Succeeded, "{:?}", report.error);
    let seen = std::fs::read_to_string(&out).expect("written");
    assert_eq!(seen, "e\u{fffd}|a\u{fffd}b\n");
}
