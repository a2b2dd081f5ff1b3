//! The Prometheus endpoint, scraped over real HTTP. The global recorder can
//! be installed once per process, so every assertion on the served text is
//! in one test.

mod common;

use std::net::TcpListener;
use std::time::Duration;

use common::{free_port, scrape_metrics as scrape};
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
    metrics::run_finished("a", "succeeded", Duration::from_millis(40));
    metrics::run_finished("a", "succeeded", Duration::from_secs(2));
    metrics::run_finished("a", "failed", Duration::from_secs(7200));
    metrics::lock_renewed("a");
    metrics::lock_renewed("a");
    metrics::lock_lost("a");
    metrics::missed("b");
    metrics::redis_error("claim");
    metrics::clock_offset(-250);
    metrics::config_divergence(1);

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

    // HELP lines from the descriptions.
    assert_line(
        &body,
        "# HELP solocron_claims_total Claim attempts by job and result (won, lost, busy).",
    );
    assert!(body.contains("# HELP solocron_runs_total "), "{body}");
}
