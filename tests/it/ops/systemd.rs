//! The systemd notify protocol against a real unix datagram socket.
//!
//! `Notifier::to_socket` is tested in-process. The free functions read
//! `NOTIFY_SOCKET` and `WATCHDOG_*` from the process environment, which a
//! test cannot safely change while other tests run on other threads, so
//! they are tested in a child process: this test binary re-runs itself with
//! the environment set and only the ignored `child_*` test selected.

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::notify::NotifySocket;
use solocron::systemd::{self, Notifier};
use tokio_util::sync::CancellationToken;

const LIMIT: Duration = Duration::from_secs(5);

/// Set for the child process; the `child_*` helpers do nothing without it
/// (e.g. under `cargo test -- --include-ignored`), since their parent test
/// is what sets the environment and checks the socket.
const CHILD_MARKER: &str = "SOLOCRON_NOTIFY_TEST_CHILD";

fn is_child() -> bool {
    let child = std::env::var_os(CHILD_MARKER).is_some();
    if !child {
        eprintln!("helper for a parent test in tests/it/ops/systemd.rs; nothing to do on its own");
    }
    child
}

/// The lines of one datagram (each state is sent as `KEY=VALUE\n`).
fn lines(message: &str) -> Vec<&str> {
    assert!(message.ends_with('\n'), "{message:?} must end in a newline");
    message.lines().collect()
}

fn monotonic_usec(message: &str) -> u64 {
    let lines = lines(message);
    assert_eq!(lines.len(), 2, "{message:?}");
    assert_eq!(lines[0], "RELOADING=1");
    lines[1]
        .strip_prefix("MONOTONIC_USEC=")
        .and_then(|usec| usec.parse().ok())
        .unwrap_or_else(|| panic!("second line of {message:?} must be MONOTONIC_USEC=<µs>"))
}

#[test]
fn notifications_arrive_in_order_with_systemd_text() {
    let socket = NotifySocket::bind();
    let notifier = Notifier::to_socket(socket.path());
    assert!(notifier.is_enabled());

    notifier.ready().expect("ready");
    notifier.reloading().expect("reloading");
    notifier.ready().expect("ready after reload");
    notifier.reloading().expect("second reloading");
    notifier
        .status("running 3 jobs\nnext at 02:00")
        .expect("status");
    notifier.watchdog().expect("watchdog");
    notifier.stopping().expect("stopping");

    let messages = socket.recv_until("STOPPING=1", LIMIT);
    assert_eq!(messages.len(), 7, "{messages:?}");
    assert_eq!(messages[0], "READY=1\n");
    let first = monotonic_usec(&messages[1]);
    assert_eq!(messages[2], "READY=1\n");
    let second = monotonic_usec(&messages[3]);
    assert!(first > 0 && second >= first, "{first} then {second}");
    assert_eq!(messages[4], "STATUS=running 3 jobs next at 02:00\n");
    assert_eq!(messages[5], "WATCHDOG=1\n");
    assert_eq!(messages[6], "STOPPING=1\n");
}

#[test]
fn abstract_socket_names_are_supported() {
    let socket = NotifySocket::bind_abstract();
    assert!(socket.path().to_string_lossy().starts_with('@'));
    Notifier::to_socket(socket.path())
        .ready()
        .expect("send to an abstract socket");
    assert_eq!(socket.recv_until("READY=1", LIMIT), ["READY=1\n"]);
}

#[test]
fn a_socket_nobody_listens_on_is_an_error_naming_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("gone.sock");
    let err = Notifier::to_socket(&path)
        .stopping()
        .expect_err("nobody listens");
    assert_eq!(
        err.to_string(),
        format!(
            "cannot send `STOPPING=1` to notify socket `{}`",
            path.display()
        )
    );
}

#[tokio::test]
async fn watchdog_loop_pings_until_cancelled() {
    let socket = NotifySocket::bind();
    let notifier = Notifier::to_socket(socket.path());
    let cancel = CancellationToken::new();
    let task = tokio::spawn({
        let cancel = cancel.clone();
        async move {
            notifier
                .watchdog_loop(Duration::from_millis(50), cancel)
                .await
        }
    });
    let socket = tokio::task::spawn_blocking(move || {
        for _ in 0..3 {
            assert_eq!(socket.recv_until("WATCHDOG", LIMIT), ["WATCHDOG=1\n"]);
        }
        socket
    })
    .await
    .expect("receive pings");
    cancel.cancel();
    tokio::time::timeout(LIMIT, task)
        .await
        .expect("the loop ends when cancelled")
        .expect("loop task");
    // Pings already in flight were sent before the cancel; none after it.
    let _ = socket.drain(Duration::from_millis(20));
    assert_eq!(
        socket.drain(Duration::from_millis(200)),
        Vec::<String>::new()
    );
}

/// Runs this test binary's `child` test with `env`; returns its output.
fn run_child(test: &str, env: &[(&str, &std::ffi::OsStr)]) -> std::process::Output {
    let exe = std::env::current_exe().expect("path of this test binary");
    // The test's full name in this binary: its module path without the
    // crate's name (`ops::systemd::child_...`).
    let module = module_path!().split_once("::").map_or("", |(_, path)| path);
    let test = format!("{module}::{test}");
    let mut command = Command::new(exe);
    command.args([
        "--exact",
        &test,
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ]);
    command.env(CHILD_MARKER, "1");
    for name in systemd::ENV_VARS {
        command.env_remove(name);
    }
    for (key, value) in env {
        command.env(key, value);
    }
    let output = command.output().expect("run the child test");
    assert!(
        output.status.success(),
        "child test {test} failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("running 1 test"),
        "no test named {test} in this binary:\n{}",
        String::from_utf8_lossy(&output.stdout)
    );
    output
}

#[test]
fn free_functions_use_notify_socket_and_watchdog_env() {
    let socket = NotifySocket::bind();
    run_child(
        "child_sends_through_the_environment",
        &[
            ("NOTIFY_SOCKET", socket.env_value()),
            // 200 ms watchdog timeout -> a ping every 100 ms.
            ("WATCHDOG_USEC", "200000".as_ref()),
        ],
    );
    let messages = socket.recv_until("STOPPING=1", LIMIT);
    let texts: Vec<&str> = messages
        .iter()
        .map(|message| message.lines().next().unwrap_or_default())
        .collect();
    let pings = texts.iter().filter(|text| **text == "WATCHDOG=1").count();
    let others: Vec<&str> = texts
        .iter()
        .copied()
        .filter(|text| *text != "WATCHDOG=1")
        .collect();
    assert_eq!(
        others,
        [
            "READY=1",
            "RELOADING=1",
            "READY=1",
            "STATUS=idle",
            "STOPPING=1"
        ],
        "{messages:?}"
    );
    assert!(
        pings >= 2,
        "expected pings every 100 ms for 350 ms: {messages:?}"
    );
}

#[test]
fn free_functions_do_nothing_without_notify_socket() {
    run_child("child_without_notify_socket", &[]);
}

#[test]
fn watchdog_for_another_pid_is_ignored() {
    let socket = NotifySocket::bind();
    run_child(
        "child_watchdog_for_another_pid",
        &[
            ("NOTIFY_SOCKET", socket.env_value()),
            ("WATCHDOG_USEC", "200000".as_ref()),
            ("WATCHDOG_PID", "1".as_ref()),
        ],
    );
    assert_eq!(
        socket.drain(Duration::from_millis(100)),
        Vec::<String>::new()
    );
}

#[tokio::test]
#[ignore = "run by free_functions_use_notify_socket_and_watchdog_env with NOTIFY_SOCKET set"]
async fn child_sends_through_the_environment() {
    if !is_child() {
        return;
    }
    assert_eq!(
        systemd::watchdog_interval(),
        Some(Duration::from_millis(100))
    );
    systemd::ready();
    let cancel = CancellationToken::new();
    let pings = tokio::spawn(systemd::watchdog_loop(cancel.clone()));
    // Time itself is the input: the loop pings every 100 ms meanwhile.
    tokio::time::sleep(Duration::from_millis(350)).await;
    cancel.cancel();
    pings.await.expect("watchdog loop");
    systemd::reloading();
    systemd::ready();
    systemd::status("idle");
    systemd::stopping();
    // The variables stay for the lead's exec code to remove per job.
    assert!(std::env::var_os("NOTIFY_SOCKET").is_some());
}

#[tokio::test]
#[ignore = "run by free_functions_do_nothing_without_notify_socket"]
async fn child_without_notify_socket() {
    if !is_child() {
        return;
    }
    assert_eq!(systemd::watchdog_interval(), None);
    systemd::ready();
    systemd::reloading();
    systemd::status("idle");
    systemd::stopping();
    let loop_ = systemd::watchdog_loop(CancellationToken::new());
    tokio::time::timeout(Duration::from_secs(1), loop_)
        .await
        .expect("returns at once without a watchdog");
}

#[tokio::test]
#[ignore = "run by watchdog_for_another_pid_is_ignored"]
async fn child_watchdog_for_another_pid() {
    if !is_child() {
        return;
    }
    assert_eq!(systemd::watchdog_interval(), None);
    let loop_ = systemd::watchdog_loop(CancellationToken::new());
    tokio::time::timeout(Duration::from_secs(1), loop_)
        .await
        .expect("returns at once for another pid's watchdog");
}
