//! The Prometheus endpoint, scraped over real HTTP. The global recorder can
//! be installed once per process, so every assertion on the text served by
//! this test process is in one test; the others scrape real daemons: the
//! per-job series the alerting rules need (`contrib/prometheus/`), through
//! start, reload and restart.

use crate::common;

use std::net::TcpListener;
use std::time::Duration;

use common::{
    Node, RedisServer, Workdir, free_port, history, scrape_metrics as scrape, wait_until,
};
use solocron::metrics::{self, ClaimResult, MetricsError};

fn assert_line(body: &str, line: &str) {
    assert!(
        body.lines().any(|have| have == line),
        "missing line `{line}` in /metrics:\n{body}"
    );
}

/// The value of the series `series` (name plus labels, exactly as served).
fn value(body: &str, series: &str) -> f64 {
    body.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no series `{series}` in /metrics:\n{body}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_endpoint_serves_every_series() {
    // A port in use is refused up front, naming the address.
    let busy = TcpListener::bind("127.0.0.1:0").expect("bind a port");
    let busy_addr = busy.local_addr().expect("local addr").to_string();
    let err = metrics::install(&busy_addr).expect_err("port in use");
    assert!(matches!(err, MetricsError::Listen { .. }), "{err:?}");
    assert!(err.to_string().contains(&format!("`{busy_addr}`")), "{err}");
    drop(busy);

    let port = free_port();
    metrics::install(&format!("127.0.0.1:{port}")).expect("install the exporter");
    let again = metrics::install(&format!("127.0.0.1:{}", free_port()));
    assert!(
        matches!(again, Err(MetricsError::AlreadyInstalled)),
        "{again:?}"
    );

    metrics::jobs_loaded(3);
    metrics::claim("a", ClaimResult::Won);
    metrics::claim("a", ClaimResult::Won);
    metrics::claim("a", ClaimResult::Lost);
    metrics::claim("b", ClaimResult::Busy);
    metrics::fire_to_start("a", Duration::from_millis(3));
    let finished = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs_f64();
    metrics::run_finished(
        "a",
        solocron::outcome::Outcome::Succeeded,
        Duration::from_millis(40),
        finished,
    );
    metrics::run_finished(
        "a",
        solocron::outcome::Outcome::Succeeded,
        Duration::from_secs(2),
        finished,
    );
    metrics::run_finished(
        "a",
        solocron::outcome::Outcome::Failed,
        Duration::from_secs(7200),
        finished,
    );
    metrics::lock_renewed("a");
    metrics::lock_renewed("a");
    metrics::lock_lost("a");
    metrics::missed("b");
    metrics::redis_error("claim");
    metrics::clock_offset(-250);
    metrics::config_divergence(1);
    metrics::job_scheduled("c", Some(Duration::from_secs(90)));
    metrics::job_scheduled("d", None);
    metrics::job_period("c", Some(Duration::from_secs(3600)));
    metrics::job_period("d", None);
    metrics::live_nodes(3);
    // A success read from the history never moves the gauge back.
    metrics::last_success("e", 1_000.5);
    metrics::last_success("e", 900.0);

    let body = scrape(port);
    assert_line(&body, "solocron_jobs 3");
    assert_line(&body, r#"solocron_claims_total{job="a",result="won"} 2"#);
    assert_line(&body, r#"solocron_claims_total{job="a",result="lost"} 1"#);
    assert_line(&body, r#"solocron_claims_total{job="b",result="busy"} 1"#);
    assert_line(
        &body,
        r#"solocron_runs_total{job="a",outcome="succeeded"} 2"#,
    );
    assert_line(&body, r#"solocron_runs_total{job="a",outcome="failed"} 1"#);
    assert_line(&body, r#"solocron_lock_renewals_total{job="a"} 2"#);
    assert_line(&body, r#"solocron_lock_losses_total{job="a"} 1"#);
    assert_line(&body, r#"solocron_missed_total{job="b"} 1"#);
    assert_line(&body, r#"solocron_redis_errors_total{operation="claim"} 1"#);
    assert_line(&body, "solocron_clock_offset_seconds -0.25");
    assert_line(&body, "solocron_config_divergent_jobs 1");

    // Histograms with the configured buckets, not summaries.
    assert_line(&body, "# TYPE solocron_run_duration_seconds histogram");
    assert_line(
        &body,
        r#"solocron_run_duration_seconds_bucket{job="a",le="0.05"} 1"#,
    );
    assert_line(
        &body,
        r#"solocron_run_duration_seconds_bucket{job="a",le="3600"} 2"#,
    );
    assert_line(
        &body,
        r#"solocron_run_duration_seconds_bucket{job="a",le="+Inf"} 3"#,
    );
    assert_line(&body, r#"solocron_run_duration_seconds_count{job="a"} 3"#);
    assert_line(&body, "# TYPE solocron_fire_to_start_seconds histogram");
    assert_line(
        &body,
        r#"solocron_fire_to_start_seconds_bucket{job="a",le="0.0025"} 0"#,
    );
    assert_line(
        &body,
        r#"solocron_fire_to_start_seconds_bucket{job="a",le="0.005"} 1"#,
    );
    assert_line(&body, r#"solocron_fire_to_start_seconds_count{job="a"} 1"#);

    // Set by the succeeded runs, to about now.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs_f64();
    let last = value(&body, r#"solocron_last_success_timestamp_seconds{job="a"}"#);
    assert!((now - last).abs() < 60.0, "last success {last}, now {now}");

    // A scheduled job's counters are served at 0 before anything happened.
    for outcome in [
        "succeeded",
        "failed",
        "timed_out",
        "lock_lost",
        "interrupted",
    ] {
        assert_line(
            &body,
            &format!(r#"solocron_runs_total{{job="c",outcome="{outcome}"}} 0"#),
        );
    }
    for name in [
        "solocron_missed_total",
        "solocron_abandoned_total",
        "solocron_lock_losses_total",
        "solocron_lock_renewals_total",
    ] {
        assert_line(&body, &format!(r#"{name}{{job="c"}} 0"#));
    }
    assert_line(&body, r#"solocron_job_max_silence_seconds{job="c"} 90"#);
    assert_line(&body, r#"solocron_job_max_silence_seconds{job="d"} 0"#);
    assert_line(&body, r#"solocron_job_period_seconds{job="c"} 3600"#);
    assert_line(&body, r#"solocron_job_period_seconds{job="d"} 0"#);
    let scheduled = value(
        &body,
        r#"solocron_job_scheduled_timestamp_seconds{job="c"}"#,
    );
    assert!(
        (now - scheduled).abs() < 60.0,
        "scheduled {scheduled}, now {now}"
    );
    assert_line(&body, "solocron_live_nodes 3");
    assert_line(
        &body,
        r#"solocron_last_success_timestamp_seconds{job="e"} 1000.5"#,
    );
    // Served from the start: the first lost line is an increase.
    assert_line(&body, "solocron_log_lines_lost_total 0");

    // HELP lines from the descriptions.
    assert_line(
        &body,
        "# HELP solocron_claims_total Claim attempts by job and result (won, lost, busy).",
    );
    assert!(body.contains("# HELP solocron_runs_total "), "{body}");
}

/// `/metrics` of a daemon, `None` while its endpoint does not answer.
fn try_scrape(port: u16) -> Option<String> {
    std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    Some(scrape(port))
}

/// The value of `series` (name plus labels, exactly as served), if served.
fn served(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Scrapes until `series` is served with a value `check` accepts; returns
/// the body.
fn wait_for_series(port: u16, series: &str, check: impl Fn(f64) -> bool) -> String {
    let mut body = String::new();
    wait_until(
        Duration::from_secs(30),
        &format!("`{series}` is served as expected"),
        || {
            body = try_scrape(port).unwrap_or_default();
            served(&body, series).is_some_and(&check)
        },
    );
    body
}

/// Asserts that the timestamp `series` is served, between `since` and now.
fn served_since(body: &str, series: &str, since: f64) {
    let at = served(body, series).unwrap_or_else(|| panic!("no `{series}`:\n{body}"));
    assert!(
        (since..=unix_now() + 1.0).contains(&at),
        "`{series}` is {at}, not between {since} and now"
    );
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs_f64()
}

#[test]
fn per_job_series_follow_the_schedule_through_a_reload() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    let port = free_port();
    let daemon = format!("[daemon]\nmetrics_listen = \"127.0.0.1:{port}\"\n");
    work.write_config(&format!(
        "{daemon}[jobs.tick]\nschedule = \"* * * * * *\"\ncommand = \"true\"\nmax_silence = \"1h\"\n\
         [jobs.weekday]\nschedule = \"0 9 * * 1-5\"\ncommand = \"true\"\n"
    ));
    let started = unix_now();
    let node = Node::start(&work, &redis, "n1", &[]);
    // Friday 09:00 to Monday 09:00, whatever the day today.
    let body = wait_for_series(port, r#"solocron_job_period_seconds{job="weekday"}"#, |v| {
        v == 3.0 * 86_400.0
    });
    assert_eq!(
        served(&body, r#"solocron_job_period_seconds{job="tick"}"#),
        Some(1.0),
        "{body}"
    );
    assert_eq!(
        served(&body, r#"solocron_job_max_silence_seconds{job="tick"}"#),
        Some(3600.0),
        "{body}"
    );
    assert_eq!(
        served(&body, r#"solocron_job_max_silence_seconds{job="weekday"}"#),
        Some(0.0),
        "{body}"
    );
    served_since(
        &body,
        r#"solocron_job_scheduled_timestamp_seconds{job="weekday"}"#,
        started - 1.0,
    );
    // weekday has not run: its counters are there, at 0.
    for outcome in [
        "succeeded",
        "failed",
        "timed_out",
        "lock_lost",
        "interrupted",
    ] {
        let series = format!(r#"solocron_runs_total{{job="weekday",outcome="{outcome}"}}"#);
        assert_eq!(served(&body, &series), Some(0.0), "{series}\n{body}");
    }
    for name in ["missed", "abandoned", "lock_losses", "lock_renewals"] {
        let series = format!(r#"solocron_{name}_total{{job="weekday"}}"#);
        assert_eq!(served(&body, &series), Some(0.0), "{series}\n{body}");
    }
    wait_for_series(port, "solocron_live_nodes", |v| v == 1.0);

    // A reload removes weekday (period 0: the rules skip it) and adds
    // monthly: the 31-day months are its longest intervals.
    work.write_config(&format!(
        "{daemon}[jobs.tick]\nschedule = \"* * * * * *\"\ncommand = \"true\"\nmax_silence = \"1h\"\n\
         [jobs.monthly]\nschedule = \"0 0 1 * *\"\ncommand = \"true\"\n"
    ));
    node.signal("HUP");
    let body = wait_for_series(port, r#"solocron_job_period_seconds{job="monthly"}"#, |v| {
        v == 31.0 * 86_400.0
    });
    let body = if served(&body, r#"solocron_job_period_seconds{job="weekday"}"#) == Some(0.0) {
        body
    } else {
        wait_for_series(port, r#"solocron_job_period_seconds{job="weekday"}"#, |v| {
            v == 0.0
        })
    };
    assert_eq!(
        served(&body, r#"solocron_job_max_silence_seconds{job="monthly"}"#),
        Some(0.0),
        "{body}"
    );
    assert_eq!(
        served(&body, r#"solocron_job_period_seconds{job="tick"}"#),
        Some(1.0),
        "an unchanged job keeps its period\n{body}"
    );
}

#[test]
fn a_starting_node_reads_each_jobs_last_success_from_the_history() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    work.write_config(
        "[jobs.tick]\nschedule = \"* * * * * *\"\ncommand = \"true\"\n\
         [jobs.bad]\nschedule = \"* * * * * *\"\ncommand = \"exit 3\"\n",
    );
    let mut first = Node::start(&work, &redis, "n1", &[]);
    wait_until(
        Duration::from_secs(15),
        "tick succeeded and bad failed",
        || {
            let outcomes = |job| {
                history(&redis, job)
                    .into_iter()
                    .map(|entry| entry["outcome"].clone())
                    .collect::<Vec<_>>()
            };
            outcomes("tick").contains(&"succeeded".to_string())
                && outcomes("bad").contains(&"failed".to_string())
        },
    );
    first.signal("TERM");
    assert!(first.wait_exit(Duration::from_secs(15)).success());
    let newest_ms: i64 = history(&redis, "tick")
        .iter()
        .filter(|entry| entry["outcome"] == "succeeded")
        .map(|entry| entry["finished_at"].parse::<i64>().expect("finished_at ms"))
        .max()
        .expect("a success");

    // n2 runs neither job before next year: what it serves for them can
    // only come from the history.
    let port = free_port();
    work.write_config(&format!(
        "[daemon]\nmetrics_listen = \"127.0.0.1:{port}\"\n\
         [jobs.tick]\nschedule = \"0 0 1 1 *\"\ncommand = \"true\"\n\
         [jobs.bad]\nschedule = \"0 0 1 1 *\"\ncommand = \"exit 3\"\n"
    ));
    let second = Node::start(&work, &redis, "n2", &[]);
    second.wait_for_log(
        Duration::from_secs(15),
        "last successes read from the job histories",
    );
    assert!(second.log().contains("jobs=2 found=1"), "{}", second.log());
    let body = scrape(port);
    let served_at = served(
        &body,
        r#"solocron_last_success_timestamp_seconds{job="tick"}"#,
    )
    .unwrap_or_else(|| panic!("no last success for tick\n{body}"));
    assert!(
        (served_at - newest_ms as f64 / 1000.0).abs() < 0.002,
        "served {served_at}, newest success in the history finished at {newest_ms} ms"
    );
    assert_eq!(
        served(
            &body,
            r#"solocron_runs_total{job="tick",outcome="succeeded"}"#
        ),
        Some(0.0),
        "n2 ran nothing itself\n{body}"
    );
    // bad never succeeded: nothing to read, no series.
    assert_eq!(
        served(
            &body,
            r#"solocron_last_success_timestamp_seconds{job="bad"}"#
        ),
        None,
        "{body}"
    );
}

/// A `metrics_listen` port another process holds stops `run` at start
/// with exit 78, as a mistake of the config (a restart loop does not free
/// the port), with one `error:` naming the address, the key, the file and
/// what to do, said once.
#[test]
fn a_metrics_port_in_use_stops_the_daemon_with_one_error_naming_it() {
    let redis = RedisServer::start();
    let busy = TcpListener::bind("127.0.0.1:0").expect("bind a port");
    let addr = busy.local_addr().expect("local addr").to_string();
    let work = Workdir::new();
    work.write_config(&format!(
        "[daemon]\nmetrics_listen = \"{addr}\"\n\
         [jobs.tick]\nschedule = \"* * * * * *\"\ncommand = 'true'\n"
    ));
    let config = work.path("jobs.toml");
    let args = [
        "--config",
        &common::toml_path(&config),
        "--redis",
        &redis.url(),
    ];
    let mut node = Node::spawn_with_args(&work, "n1", &args, &[]);
    let status = node.wait_exit(Duration::from_secs(10));
    let log = node.log();
    assert_eq!(status.code(), Some(78), "{log}");
    assert!(
        log.contains(&format!("error: cannot serve metrics on `{addr}`")),
        "names the address:\n{log}"
    );
    for told in [
        "`metrics_listen` in `[daemon]`".to_string(),
        format!("`{}`", config.display()),
        "Address already in use".to_string(),
        "choose a free port".to_string(),
    ] {
        assert!(log.contains(&told), "says {told}:\n{log}");
    }
    assert_eq!(
        log.matches("cannot serve metrics").count(),
        1,
        "said once:\n{log}"
    );
    drop(busy);
}

/// `solocron_occurrences_total` counts an occurrence once, with the outcome
/// of its last attempt: `fixed` fails attempt 1 and succeeds at its retry
/// (a failed run, a succeeded occurrence, no failure timestamp); `broken`
/// fails both attempts (two failed runs, one failed occurrence, its
/// failure timestamp set).
#[test]
fn occurrences_are_counted_once_with_the_outcome_of_their_last_attempt() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    let port = free_port();
    work.write_config(&format!(
        "[daemon]\nmetrics_listen = \"127.0.0.1:{port}\"\n\
         [jobs.fixed]\nschedule = \"*/4 * * * * *\"\nretries = 1\nretry_backoff = \"1s\"\n\
         command = \"[ $SOLOCRON_ATTEMPT -ge 2 ]\"\n\
         [jobs.broken]\nschedule = \"2-59/4 * * * * *\"\nretries = 1\nretry_backoff = \"1s\"\n\
         command = \"exit 3\"\n"
    ));
    let started = unix_now();
    let _node = Node::start(&work, &redis, "n1", &[]);
    let series = |job: &str, name: &str, outcome: &str| {
        format!(r#"{name}{{job="{job}",outcome="{outcome}"}}"#)
    };
    let count = |body: &str, job: &str, name: &str, outcome: &str| {
        served(body, &series(job, name, outcome)).unwrap_or(-1.0)
    };
    let mut body = String::new();
    wait_until(
        Duration::from_secs(30),
        "an occurrence of each job decided after its retry",
        || {
            body = try_scrape(port).unwrap_or_default();
            // Never, at any scrape: a failed attempt a retry fixed is no
            // failed occurrence.
            assert!(
                count(&body, "fixed", "solocron_occurrences_total", "failed") <= 0.0,
                "{body}"
            );
            assert_eq!(
                served(
                    &body,
                    r#"solocron_last_failure_timestamp_seconds{job="fixed"}"#
                )
                .unwrap_or(0.0),
                0.0,
                "{body}"
            );
            let fixed_runs_failed = count(&body, "fixed", "solocron_runs_total", "failed");
            let fixed_runs = count(&body, "fixed", "solocron_runs_total", "succeeded");
            let fixed = count(&body, "fixed", "solocron_occurrences_total", "succeeded");
            let broken_runs = count(&body, "broken", "solocron_runs_total", "failed");
            let broken = count(&body, "broken", "solocron_occurrences_total", "failed");
            fixed >= 1.0
                && fixed == fixed_runs
                && fixed_runs_failed >= fixed
                && broken >= 1.0
                && broken_runs == 2.0 * broken
        },
    );
    assert_eq!(
        count(&body, "broken", "solocron_occurrences_total", "succeeded"),
        0.0,
        "{body}"
    );
    served_since(
        &body,
        r#"solocron_last_failure_timestamp_seconds{job="broken"}"#,
        started,
    );
}
