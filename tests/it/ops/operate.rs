//! Operating a real daemon process: systemd notifications in order on a
//! real NOTIFY_SOCKET, and /metrics values that match what happened.

use crate::common;

use std::time::Duration;

use common::notify::NotifySocket;
use common::{
    Node, RedisServer, Workdir, free_port, history, scrape_metrics as scrape, wait_until,
};

#[test]
fn sd_notify_messages_arrive_in_order_ready_reloading_ready_stopping() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    work.write_config("[jobs.x]\nschedule = \"@hourly\"\ncommand = \"true\"\n");
    let socket = NotifySocket::bind();
    let path = socket.path().display().to_string();
    let mut node = Node::start(
        &work,
        &redis,
        "n1",
        &[("NOTIFY_SOCKET", &path), ("WATCHDOG_USEC", "400000")],
    );
    let first = socket.recv_until("READY=1", Duration::from_secs(10));
    assert!(first.iter().all(|m| !m.contains("STOPPING")), "{first:?}");
    // WatchdogSec is set: pings arrive every half period.
    socket.recv_until("WATCHDOG=1", Duration::from_secs(5));
    socket.recv_until("WATCHDOG=1", Duration::from_secs(5));
    node.signal("HUP");
    let reload = socket.recv_until("READY=1", Duration::from_secs(10));
    let reloading = reload
        .iter()
        .position(|m| m.contains("RELOADING=1"))
        .expect("RELOADING=1 before READY=1");
    assert!(reload[reloading].contains("MONOTONIC_USEC="), "{reload:?}");
    node.signal("TERM");
    socket.recv_until("STOPPING=1", Duration::from_secs(10));
    assert!(node.wait_exit(Duration::from_secs(10)).success());
}

/// The value of the series whose line starts with `series` (name and labels).
fn value(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .find(|line| line.starts_with(series))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

fn count(redis: &RedisServer, job: &str, outcome: &str) -> f64 {
    history(redis, job)
        .iter()
        .filter(|e| e["outcome"] == outcome)
        .count() as f64
}

#[test]
fn metrics_match_what_happened() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    let port = free_port();
    work.write_config(&format!(
        "[daemon]\nmetrics_listen = \"127.0.0.1:{port}\"\n\
         [jobs.ok]\nschedule = \"* * * * * *\"\ncommand = \"true\"\n\
         [jobs.bad]\nschedule = \"* * * * * *\"\ncommand = \"exit 2\"\n"
    ));
    let _node = Node::start(&work, &redis, "n1", &[]);
    wait_until(Duration::from_secs(15), "a few runs of each job", || {
        count(&redis, "ok", "succeeded") >= 3.0 && count(&redis, "bad", "failed") >= 3.0
    });
    let (ok_before, bad_before) = (
        count(&redis, "ok", "succeeded"),
        count(&redis, "bad", "failed"),
    );
    let body = scrape(port);
    let (ok_after, bad_after) = (
        count(&redis, "ok", "succeeded"),
        count(&redis, "bad", "failed"),
    );
    let ok = value(
        &body,
        r#"solocron_runs_total{job="ok",outcome="succeeded"}"#,
    )
    .expect("ok runs series");
    let bad = value(&body, r#"solocron_runs_total{job="bad",outcome="failed"}"#)
        .expect("bad runs series");
    // A run may finish between the two history reads, never outside them.
    assert!(
        (ok_before..=ok_after).contains(&ok),
        "{ok} not in {ok_before}..={ok_after}\n{body}"
    );
    assert!(
        (bad_before..=bad_after).contains(&bad),
        "{bad} not in {bad_before}..={bad_after}\n{body}"
    );
    let won =
        value(&body, r#"solocron_claims_total{job="ok",result="won"}"#).expect("claims series");
    assert!(won >= ok, "every run was a won claim: {won} < {ok}");
    let last_success = value(
        &body,
        r#"solocron_last_success_timestamp_seconds{job="ok"}"#,
    )
    .expect("last success");
    let now = chrono::Utc::now().timestamp() as f64;
    assert!(
        (now - 10.0..=now + 1.0).contains(&last_success),
        "{last_success} vs {now}"
    );
    assert!(
        value(
            &body,
            r#"solocron_last_success_timestamp_seconds{job="bad"}"#
        )
        .is_none(),
        "bad never succeeded"
    );
    let lags =
        value(&body, r#"solocron_fire_to_start_seconds_count{job="ok"}"#).expect("lag histogram");
    assert!(lags >= ok, "{lags}");
    assert_eq!(value(&body, "solocron_jobs "), Some(2.0), "{body}");
    assert_eq!(
        value(&body, "solocron_config_divergent_jobs "),
        Some(0.0),
        "{body}"
    );
    let offset = value(&body, "solocron_clock_offset_seconds ").expect("clock offset gauge");
    assert!(offset.abs() < 0.5, "{offset}");
}
