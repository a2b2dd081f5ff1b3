//! The example `jobs.toml` loads through the public API, and errors in real
//! files point at `path:line:col` and the key.

use std::path::{Path, PathBuf};
use std::process::Command;
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
    assert_eq!(slow.extras.env["GREETING"], "hello from solocron");
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
    assert_eq!(report.extras.env["REPORT_TO"], "ops@example.com");
    assert_eq!(job("rotate").schedule.expression(), "@hourly");
}

/// What every file needs and these tests are not about; appended, so that
/// the lines of a test's text stay where they are.
const REDIS: &str = "\n[redis]\nurl = \"redis://127.0.0.1:6379\"\n";

/// Writes `text` (with a `[redis]` section) to a fresh `jobs.toml` and
/// loads it.
fn load_text(text: &str) -> (tempfile::TempDir, PathBuf, ConfigError) {
    let (dir, path) = write_text(&format!("{text}{REDIS}"));
    let err = config::load(&path).expect_err("config must be refused");
    (dir, path, err)
}

/// Writes `text` as is to a fresh `jobs.toml`.
fn write_text(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("jobs.toml");
    std::fs::write(&path, text).expect("write jobs.toml");
    (dir, path)
}

/// `solocron check` of the valid file `path`: its stderr lines (the
/// warnings) and its stdout.
fn check_valid(path: &Path) -> (Vec<String>, String) {
    let output = solocron(&["check"], path);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let lines = stderr.lines().map(str::to_string).collect();
    (lines, String::from_utf8_lossy(&output.stdout).into_owned())
}

/// `solocron SUBCOMMAND --config PATH` with a clean environment.
fn solocron(args: &[&str], path: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_solocron"))
        .args(args)
        .arg("--config")
        .arg(path)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .output()
        .expect("run solocron")
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

/// Warnings never fail `check`: it prints each with its position to
/// stderr, says how many, and exits 0.
#[test]
fn check_prints_warnings_and_exits_0() {
    let text = "[redis]\nurl = \"redis://127.0.0.1:6379\"\n\n\
                [jobs.report]\nschedule = \"@daily\"\ncommand = \"true\"\nworking_dir = \"/nonexistent/reports\"\n\n\
                [jobs.rotate]\nschedule = \"@hourly\"\nargv = [\"/nonexistent/logrotate\", \"/etc/x\"]\n\n\
                [jobs.hook]\nschedule = \"@hourly\"\nhttp = { url = \"http://127.0.0.1/\", method = \"PURGE\" }\n\n\
                [jobs.first-monday]\nschedule = \"0 0 1-7 * MON\"\ncommand = \"true\"\n";
    let (_dir, path) = write_text(text);
    let (lines, stdout) = check_valid(&path);
    let p = path.display();
    assert_eq!(
        lines,
        [
            format!(
                "warning: {p}:7:15: [jobs.report] `working_dir`: `/nonexistent/reports` does not exist \
                 on this machine; the job cannot start here"
            ),
            format!(
                "warning: {p}:11:8: [jobs.rotate] `argv`: `/nonexistent/logrotate` does not exist on \
                 this machine; the job cannot start here"
            ),
            format!(
                "warning: {p}:15:46: [jobs.hook] `http.method`: `PURGE` is an unusual HTTP method \
                 (expected one of GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS); check the spelling"
            ),
            format!(
                "warning: {p}:18:12: [jobs.first-monday] `schedule`: `0 0 1-7 * MON` restricts both \
                 day-of-month (`1-7`) and day-of-week (`MON`), so a day that matches either one runs, \
                 as in cron (`0 0 1-7 * 1` is the 1st to the 7th and every Monday); for \"the first \
                 Monday of the month\" write `0 0 * * 1#1`, and write `*` in the day field you do not mean"
            ),
        ]
    );
    assert!(
        stdout.starts_with(&format!("{p}: valid, 4 job(s), 4 warning(s)\n")),
        "{stdout}"
    );
}

/// Retries that can never start (`retry_backoff` not shorter than the
/// schedule's interval: a retry never starts once the next occurrence is
/// due) are a warning of `check`, at the key, saying how many can happen
/// and what to do; the file stays valid (exit 0).
#[test]
fn check_warns_when_retries_can_never_happen_before_the_next_occurrence() {
    let text = "[redis]\nurl = \"redis://127.0.0.1:6379\"\n\n\
                [defaults]\nretries = 3\nretry_backoff = \"5m\"\n\n\
                [jobs.fixme]\nschedule = \"*/5 * * * * *\"\ncommand = \"true\"\nretries = 2\nretry_backoff = \"10s\"\n\n\
                [jobs.every-minute]\nschedule = \"* * * * *\"\ncommand = \"true\"\n\n\
                [jobs.nightly]\nschedule = \"0 2 * * *\"\ncommand = \"true\"\n";
    let (_dir, path) = write_text(text);
    let (lines, stdout) = check_valid(&path);
    let p = path.display();
    assert_eq!(
        lines,
        [
            format!(
                "warning: {p}:6:17: [defaults] `retry_backoff`: for [jobs.every-minute], 5m is not \
                 shorter than the 1m between its occurrences (`* * * * *`), and a retry never starts \
                 once the next occurrence is due: none of its 3 retries can ever happen; give \
                 [jobs.every-minute] a `retry_backoff` shorter than 1m (8s 571ms or less for all 3 \
                 to fit), or `retries = 0` if it is not to be retried"
            ),
            format!(
                "warning: {p}:12:17: [jobs.fixme] `retry_backoff`: 10s is not shorter than the 5s \
                 between its occurrences (`*/5 * * * * *`), and a retry never starts once the next \
                 occurrence is due: none of its 2 retries can ever happen; make `retry_backoff` \
                 shorter than 5s (1s 666ms or less for both to fit), or set `retries = 0` if the job \
                 is not to be retried"
            ),
        ]
    );
    assert!(
        stdout.starts_with(&format!("{p}: valid, 3 job(s), 2 warning(s)\n")),
        "{stdout}"
    );
}

/// A splayed job's line in `check` says when it starts after each
/// occurrence, and its list begins with the first occurrence still to
/// start: with a splay longer than the period, one whose instant passed.
#[test]
fn check_shows_a_splayed_jobs_offset_and_the_occurrences_still_to_start() {
    let text = "[redis]\nurl = \"redis://127.0.0.1:6379\"\n\n\
                [jobs.pulse]\nschedule = \"* * * * * *\"\ncommand = \"true\"\nsplay = \"30s\"\n\n\
                [jobs.plain]\nschedule = \"@hourly\"\ncommand = \"true\"\n";
    let (_dir, path) = write_text(text);
    let before = Utc::now();
    let output = solocron(&["check"], &path);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    let offset = solocron::config::splay_offset("pulse", Duration::from_secs(30));
    let header = format!(
        "pulse  `* * * * * *` in UTC  (command)  splay 30s: starts {} after each occurrence",
        humantime::format_duration(offset)
    );
    let mut lines = stdout.lines().skip_while(|line| *line != header);
    assert!(lines.next().is_some(), "no line `{header}` in:\n{stdout}");
    let first = lines
        .next()
        .and_then(|line| line.rsplit("  =  ").next())
        .and_then(|at| DateTime::parse_from_rfc3339(at).ok())
        .unwrap_or_else(|| panic!("no occurrence under `{header}`:\n{stdout}"));
    let offset = chrono::TimeDelta::from_std(offset).expect("a small offset");
    assert!(
        first < before && first + offset > before - chrono::TimeDelta::seconds(1),
        "{first}: the first occurrence listed is not the first still to start at {before}"
    );
    assert!(
        stdout.contains("plain  `@hourly` in UTC  (command)\n"),
        "a job without a splay says nothing of it:\n{stdout}"
    );
}

/// Guarantee 7 (docs/guarantees.md): `check` reports every error of a file, then how many, exit 1.
#[test]
fn check_lists_every_error_and_exits_1() {
    let text = "[redis]\nurl = \"redis://127.0.0.1:6379\"\n\n\
                [jobs.a]\nschedule = \"0 25 * * *\"\ncommand = \"true\"\n\n\
                [jobs.b]\nschedule = \"@daily\"\ncommand = \"true\"\ntimeout = \"soon\"\non_lock_lost = \"ignore\"\n\n\
                [jobs.c]\nschedule = \"@daily\"\nargv = []\n";
    let (_dir, path) = write_text(text);
    let output = solocron(&["check"], &path);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(output.stdout.is_empty());
    let p = path.display();
    let heads: Vec<&str> = stderr
        .lines()
        .filter(|line| line.starts_with(&format!("{p}:")) || line.starts_with("error: "))
        .collect();
    assert_eq!(
        heads,
        [
            format!(
                "error: {p}:5:12: [jobs.a] `schedule`: invalid cron expression `0 25 * * *`: hour `25` \
                 is out of range 0–23"
            ),
            format!(
                "{p}:11:11: [jobs.b] `timeout`: invalid duration `soon`; write it like `500ms`, `30s`, \
                 `5m` or `1h30m`"
            ),
            format!(
                "{p}:12:16: [jobs.b] `on_lock_lost`: expected `kill` or `continue`, found `ignore`"
            ),
            format!("{p}:16:8: [jobs.c] `argv`: must name a program; it is empty"),
        ]
    );
    assert!(
        stderr.ends_with(&format!("\n\n4 errors in {p}\n")),
        "{stderr}"
    );
}

/// A truncated (empty) file stops `check` and `run` with a clear error:
/// exit 1 and 78, not a daemon with nothing to do.
#[test]
fn an_empty_file_is_refused_by_check_and_run() {
    let (_dir, path) = write_text("");
    let message = format!(
        "error: {}:1:1: the file is empty: it may be truncated; restore it, or write `[redis]` \
         with `url = \"redis://10.0.0.5:6379\"` and at least one `[jobs.NAME]` table",
        path.display()
    );
    for (command, code) in [("check", 1), ("run", 78)] {
        let output = solocron(&[command], &path);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(code), "{command}: {stderr}");
        assert!(stderr.contains(&message), "{command}: {stderr}");
    }
    // `--redis` does not stand in for the file's `[redis]`.
    let (_dir, jobs_only) = write_text("[jobs.a]\nschedule = \"@daily\"\ncommand = \"true\"\n");
    let output = solocron(&["run", "--redis", "redis://127.0.0.1:6379"], &jobs_only);
    assert_eq!(output.status.code(), Some(78));
    assert!(String::from_utf8_lossy(&output.stderr).contains("no `[redis]` section"));
}

/// `status` and `history` load the file without the jobs' secrets: unset
/// `${VAR}`s and an unreadable `env_file` or `password_file` are fine
/// there, and only there (docs/operations.md).
#[test]
fn inspection_loads_a_file_whose_secrets_are_not_here() {
    let text = "[redis]\nurl = \"redis://solocron@127.0.0.1:6379\"\npassword_file = \"redis.pass\"\n\n\
                [daemon]\nenv_file = \"secrets.env\"\n\n\
                [jobs.warm]\nschedule = \"*/30 * * * * *\"\n\
                http = { url = \"https://${SOLOCRON_TEST_UNSET_HOST}/warm\", headers = { Authorization = \"Bearer ${SOLOCRON_TEST_UNSET_TOKEN}\" } }\n\n\
                [jobs.report]\nschedule = \"0 2 * * *\"\ncommand = \"send --token ${SOLOCRON_TEST_UNSET_TOKEN}\"\n";
    let (_dir, path) = write_text(text);
    let refused = config::load(&path).expect_err("load needs the secrets");
    assert_eq!(refused.errors().len(), 5, "{refused}");
    let config = config::load_for_inspection(&path).unwrap_or_else(|err| panic!("{err}"));
    let names: Vec<&str> = config.jobs.iter().map(|job| job.name.as_str()).collect();
    assert_eq!(names, ["warm", "report"]);
    assert_eq!(config.redis.password, None);
    assert_eq!(config.redis.url, "redis://solocron@127.0.0.1:6379");
    assert!(config.env.is_empty());
    // Not a way around the rules that need no secret.
    let (_dir, broken) = write_text(&text.replace("0 2 * * *", "0 25 * * *"));
    let err = config::load_for_inspection(&broken).expect_err("bad schedule");
    assert!(
        err.to_string().contains("hour `25` is out of range 0–23"),
        "{err}"
    );
}

/// `check` says on its second line which coordinator the file chose, its
/// servers with every password masked, and how a claim is acknowledged;
/// a password planted in every form a URL carries one and in
/// both password files shows nowhere in its output.
#[test]
fn check_prints_the_redis_mode_and_never_a_password() {
    const PLANTED: &str = "pl4nted-pw";
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("redis.pass"), format!("{PLANTED}\n")).expect("write");
    std::fs::write(dir.path().join("sentinel.pass"), PLANTED).expect("write");
    let files = "password_file = \"redis.pass\"";
    let cases = [
        (
            format!("url = \"redis://solocron:{PLANTED}@127.0.0.1:6379/0\"\n{files}"),
            "redis: url redis://solocron:***@127.0.0.1:6379/0 (wait_replicas 0), key_prefix solocron",
        ),
        (
            format!("url = \"redis+unix:///run/redis.sock?db=0&pass={PLANTED}\""),
            "redis: url redis+unix:///run/redis.sock?db=0&pass=*** (wait_replicas 0), key_prefix solocron",
        ),
        (
            format!(
                "sentinel = {{ master = \"solocron\", urls = [\"redis://:{PLANTED}@10.0.0.1:26379\", \
                 \"redis://u:p%2F{PLANTED}@10.0.0.2:26379\", \"redis://10.0.0.3:26379\"], \
                 password_file = \"sentinel.pass\" }}\nusername = \"solocron\"\n{files}\n\
             key_prefix = \"payroll\""
            ),
            "redis: sentinel `solocron` via redis://:***@10.0.0.1:26379, redis://u:***@10.0.0.2:26379, \
             redis://10.0.0.3:26379 (wait_replicas 1, wait_timeout 250ms), key_prefix payroll",
        ),
        (
            format!(
                "cluster = [\"rediss://u:{PLANTED}@10.0.0.1:6380\", \"rediss://10.0.0.2:6380/?password={PLANTED}\"]\n\
                 wait_replicas = 2\nwait_timeout = \"1s\"\n{files}"
            ),
            "redis: cluster rediss://u:***@10.0.0.1:6380, rediss://10.0.0.2:6380/?password=*** \
             (wait_replicas 2, wait_timeout 1s), key_prefix solocron",
        ),
        (
            format!(
                "redlock = [\"redis://u:{PLANTED}@10.0.0.1:6379\", \"redis://10.0.0.2:6379\", \
                 \"redis://10.0.0.3:6379\"]\n{files}"
            ),
            "redis: redlock redis://u:***@10.0.0.1:6379, redis://10.0.0.2:6379, redis://10.0.0.3:6379 \
             (majority 2 of 3), key_prefix solocron",
        ),
    ];
    for (redis, expected) in &cases {
        let path = dir.path().join("jobs.toml");
        let text =
            format!("[redis]\n{redis}\n\n[jobs.a]\nschedule = \"@daily\"\ncommand = \"true\"\n");
        std::fs::write(&path, text).expect("write jobs.toml");
        let output = solocron(&["check"], &path);
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(0), "{redis}\n{stderr}");
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(
            lines.get(..2),
            Some(
                &[
                    format!("{}: valid, 1 job(s)", path.display()).as_str(),
                    expected
                ][..]
            ),
            "{stdout}"
        );
        assert!(
            !stdout.contains(PLANTED) && !stderr.contains(PLANTED),
            "{stdout}{stderr}"
        );
        // `--quiet` (the unit's `ExecReload=`) keeps to the summary line.
        let quiet = solocron(&["check", "--quiet"], &path);
        assert_eq!(String::from_utf8_lossy(&quiet.stdout).lines().count(), 1);
    }
    // A broken file and a warning do not show it either.
    let path = dir.path().join("jobs.toml");
    for (redis, code) in [
        (
            format!(
                "redlock = [\"redis://u:{PLANTED}@a\", \"redis://u:{PLANTED}@a:6379\"]\nwait_replicas = 1"
            ),
            1,
        ),
        (
            format!(
                "sentinel = {{ master = \"m\", urls = [\"redis://u:{PLANTED}@a\"] }}\nusername = \"u\""
            ),
            0,
        ),
        (
            format!("cluster = [\"redis://u:{PLANTED}@a/#x\"]\npassword = \"{PLANTED}\""),
            1,
        ),
    ] {
        std::fs::write(
            &path,
            format!("[redis]\n{redis}\n\n[jobs.a]\nschedule = \"@daily\"\ncommand = \"true\"\n"),
        )
        .expect("write jobs.toml");
        let output = solocron(&["check"], &path);
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert_eq!(output.status.code(), Some(code), "{all}");
        assert!(all.contains("***") && !all.contains(PLANTED), "{all}");
    }
}

/// The example configs of docs/HA.md load (their secret files are not on
/// this machine: read as `status` reads a file, without them), each in the
/// mode it shows.
#[test]
fn the_ha_example_configs_load_in_their_modes() {
    use solocron::config::RedisMode;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/configs");
    let load = |name: &str| {
        config::load_for_inspection(&dir.join(name)).unwrap_or_else(|err| panic!("{name}: {err}"))
    };
    let sentinel = load("sentinel.toml");
    assert!(
        matches!(&sentinel.redis.mode, RedisMode::Sentinel { master, urls, .. } if master == "solocron" && urls.len() == 3)
    );
    assert_eq!(sentinel.redis.wait_replicas, 1);
    assert_eq!(sentinel.redis.username.as_deref(), Some("solocron"));
    let cluster = load("cluster.toml");
    assert!(matches!(&cluster.redis.mode, RedisMode::Cluster { urls } if urls.len() == 3));
    assert_eq!(cluster.redis.wait_replicas, 1);
    let redlock = load("redlock.toml");
    assert!(matches!(&redlock.redis.mode, RedisMode::Redlock { urls } if urls.len() == 5));
    assert_eq!(redlock.redis.wait_replicas, 0);
    let tags = load("tags.toml");
    let run_on = |name: &str| {
        tags.jobs
            .iter()
            .find(|job| job.name == name)
            .and_then(|job| job.extras.run_on.as_ref().map(ToString::to_string))
    };
    assert_eq!(run_on("nightly-dump").as_deref(), Some("role=db"));
    assert_eq!(run_on("warm-cache").as_deref(), Some("role=web,node=web-*"));
    assert_eq!(run_on("rotate"), None);
}

/// The example of README's "When a job fails" loads: notifiers of every
/// kind, in `[defaults]` and in a job, and retries.
#[test]
fn the_readme_notifier_example_loads() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("read README.md");
    let section = readme
        .split("## When a job fails")
        .nth(1)
        .expect("README has the section");
    let example = section
        .split("```toml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a toml block in the section");
    let text = format!("{example}{REDIS}");
    let config = config::parse(&text, Path::new("README.md"), &|name| {
        Some(format!("value-of-{name}"))
    })
    .unwrap_or_else(|err| panic!("{err}"));
    let job = &config.jobs[0];
    assert_eq!(
        (job.retries, job.extras.retry_backoff),
        (2, Duration::from_secs(300))
    );
    let failure = job.extras.on_failure.as_ref().expect("on_failure");
    assert!(matches!(&failure.action, Action::Command(c) if c.contains("sendmail")));
    assert_eq!(failure.timeout, Duration::from_secs(30), "the default");
    let success = job.extras.on_success.as_ref().expect("on_success");
    assert!(
        matches!(&success.action, Action::Http(h) if h.method == "GET" && h.url.ends_with("value-of-HC_ID"))
    );
}

#[test]
fn notifier_and_retry_mistakes_are_named() {
    let cases = [
        (
            "[jobs.a]\nschedule = \"@hourly\"\ncommand = \"true\"\non_failure = { timeout = \"5s\" }\n",
            "jobs.toml:4:14: [jobs.a] `on_failure`: needs exactly one of `command`, `argv` or `http`, found none",
        ),
        (
            "[jobs.a]\nschedule = \"@hourly\"\ncommand = \"true\"\non_failure = { command = \"x\", argv = [\"y\"] }\n",
            "found more than one",
        ),
        (
            "[jobs.a]\nschedule = \"@hourly\"\ncommand = \"true\"\non_success = { comand = \"x\" }\n",
            "unknown key `comand`",
        ),
        (
            "[jobs.a]\nschedule = \"@hourly\"\ncommand = \"true\"\nretries = -1\n",
            "jobs.toml:4:11: [jobs.a] `retries`: must be between 0 and 10, found -1",
        ),
        (
            "[jobs.a]\nschedule = \"@hourly\"\ncommand = \"true\"\nretry_backoff = \"soon\"\n",
            "`retry_backoff`: invalid duration `soon`",
        ),
        (
            "[jobs.a]\nschedule = \"@hourly\"\ncommand = \"true\"\non_failure = { command = \"x\", timeout = \"0s\" }\n",
            "jobs.toml:4:41: [jobs.a] `on_failure.timeout`: must be at least 1s, found `0s`",
        ),
    ];
    for (text, expected) in cases {
        let (_dir, _path, err) = load_text(text);
        let message = err.to_string();
        assert!(message.contains(expected), "{text}\n{message}");
    }
}
