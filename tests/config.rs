//! The example `jobs.toml` loads through the public API, and errors in real
//! files point at `path:line:col` and the key.

use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, Utc};
use solocron::config::{self, Action, ConfigError, OnLockLost};

fn example_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("jobs.toml")
}

fn utc(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .expect("RFC 3339")
        .with_timezone(&Utc)
}

#[test]
fn example_jobs_toml_loads_with_its_jobs_in_file_order() {
    let config = config::load(&example_path()).unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(config.redis.url, "redis://127.0.0.1:6379");
    assert_eq!(config.redis.key_prefix, "solocron");
    assert_eq!(config.daemon.shutdown_grace, Duration::from_secs(30));
    assert_eq!(config.daemon.history_max, 10_000);
    let names: Vec<&str> = config.jobs.iter().map(|job| job.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "heartbeat",
            "slow-tick",
            "disk-usage",
            "warm-cache",
            "nightly-report",
            "rotate"
        ]
    );
    for job in &config.jobs {
        assert_eq!(job.on_lock_lost, OnLockLost::Kill, "{}", job.name);
        assert!(job.lock_ttl >= Duration::from_secs(1), "{}", job.name);
    }
}

#[test]
fn example_jobs_fire_when_the_demo_expects() {
    let config = config::load(&example_path()).unwrap_or_else(|err| panic!("{err}"));
    let job = |name: &str| {
        config
            .jobs
            .iter()
            .find(|job| job.name == name)
            .unwrap_or_else(|| panic!("job {name}"))
    };
    let from = utc("2026-11-29T12:00:00Z");
    let heartbeat = job("heartbeat");
    assert_eq!(
        heartbeat.schedule.next_after(from),
        Some(utc("2026-11-29T12:00:01Z"))
    );
    assert!(matches!(&heartbeat.action, Action::Command(_)));
    let slow = job("slow-tick");
    assert_eq!(
        slow.schedule.next_after(from),
        Some(utc("2026-11-29T12:00:03Z"))
    );
    assert_eq!(slow.env["GREETING"], "hello from solocron");
    assert!(matches!(&job("disk-usage").action, Action::Argv(argv) if argv[0] == "df"));
    let Action::Http(http) = &job("warm-cache").action else {
        panic!("warm-cache is an http job");
    };
    assert_eq!(http.url, "http://127.0.0.1:8080/hooks/warm");
    assert_eq!(http.method, "POST");
    assert_eq!(
        http.headers[0],
        ("X-Source".to_string(), "solocron".to_string())
    );
    let report = job("nightly-report");
    assert_eq!(report.schedule.timezone(), chrono_tz::Asia::Tashkent);
    assert_eq!(
        report.schedule.next_after(from),
        Some(utc("2026-11-29T21:00:00Z"))
    );
    assert_eq!(report.timeout, Some(Duration::from_secs(15 * 60)));
    assert_eq!(report.env["REPORT_TO"], "ops@example.com");
    assert_eq!(job("rotate").schedule.expression(), "@hourly");
}

/// Writes `text` to a fresh `jobs.toml` and loads it.
fn load_text(text: &str) -> (tempfile::TempDir, PathBuf, ConfigError) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("jobs.toml");
    std::fs::write(&path, text).expect("write jobs.toml");
    let err = config::load(&path).expect_err("config must be refused");
    (dir, path, err)
}

#[test]
fn a_bad_time_zone_points_at_its_value() {
    let text = "[jobs.nightly-report]\nschedule = \"0 2 * * *\"\ncommand = \"true\"\n\
                timezone = \"Mars/Olympus\"\n";
    let (_dir, path, err) = load_text(text);
    assert_eq!(
        err.to_string(),
        format!(
            "{}:4:12: [jobs.nightly-report] `timezone`: unknown time zone `Mars/Olympus`; \
             use an IANA name such as `Europe/Berlin`\n  |\n4 | timezone = \"Mars/Olympus\"\n  \
             |            ^^^^^^^^^^^^^^",
            path.display()
        )
    );
}

#[test]
fn an_unknown_key_points_at_the_key() {
    let text = "# comment\n\n[jobs.x]\nschedul = \"@daily\"\ncommand = \"true\"\n";
    let (_dir, path, err) = load_text(text);
    let first_line = err.to_string().lines().next().map(str::to_string);
    assert_eq!(
        first_line,
        Some(format!(
            "{}:4:1: unknown key `schedul` in [jobs.x], did you mean `schedule`?",
            path.display()
        ))
    );
    assert!(matches!(err, ConfigError::Invalid { ref key, .. } if key == "jobs.x.schedul"));
}

#[test]
fn a_missing_variable_names_it_and_the_key() {
    let text = "[jobs.hook]\nschedule = \"@hourly\"\n\
                http = { url = \"http://127.0.0.1/\", headers = { Authorization = \"Bearer ${SOLOCRON_TEST_SURELY_UNSET}\" } }\n";
    let (_dir, path, err) = load_text(text);
    let message = err.to_string();
    assert!(
        message.starts_with(&format!(
            "{}:3:65: [jobs.hook] `http.headers.Authorization`: environment variable \
             `SOLOCRON_TEST_SURELY_UNSET` is not set",
            path.display()
        )),
        "{message}"
    );
}

#[test]
fn a_toml_syntax_error_has_the_same_prefix() {
    let (_dir, path, err) = load_text("[jobs.x]\nschedule = \"@daily\ncommand = \"true\"\n");
    assert!(matches!(err, ConfigError::Syntax { line: 2, .. }), "{err}");
    assert!(
        err.to_string()
            .starts_with(&format!("{}:2:", path.display())),
        "{err}"
    );
}

#[test]
fn a_missing_file_is_named() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("absent.toml");
    let err = config::load(&path).expect_err("no such file");
    assert_eq!(
        err.to_string(),
        format!(
            "cannot read `{}`: No such file or directory (os error 2)",
            path.display()
        )
    );
}
