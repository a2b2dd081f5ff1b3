//! Unit tests for the config loader: every rule of docs/configuration.md, with
//! inline TOML, and the exact text of the errors people will read. `whole_file`
//! has what concerns a file as a whole: required sections, every error
//! reported, `env_file`, loading for inspection, warnings.

use std::path::Path;
use std::time::Duration;

use super::*;

pub(super) const PATH: &str = "/etc/solocron/jobs.toml";
pub(super) const SECRET: &str = "t0ken-s3cret";

pub(super) fn env(name: &str) -> Option<String> {
    match name {
        "WARM_TOKEN" => Some(SECRET.to_string()),
        "HOST" => Some("hooks.internal".to_string()),
        "EMPTY" => Some(String::new()),
        _ => None,
    }
}

/// `text` with what every file needs and the test is not about, appended
/// so that its lines stay where they are: a `[redis]` naming a server (when
/// `text` has no `[redis]`) and a job (when it has none).
pub(super) fn complete(text: &str) -> String {
    let mut out = text.to_string();
    let has_redis = text.lines().any(|line| {
        let line = line.trim_start();
        line.starts_with("[redis]") || line.starts_with("redis ")
    });
    if !has_redis {
        out.push_str("\n[redis]\nurl = \"redis://127.0.0.1:6379\"\n");
    }
    if !text.contains("[jobs.") {
        out.push_str("\n[jobs.added-by-test]\nschedule = \"@daily\"\ncommand = \"true\"\n");
    }
    out
}

pub(super) fn config(text: &str) -> Config {
    parse(&complete(text), Path::new(PATH), &env).unwrap_or_else(|err| panic!("{err}"))
}

pub(super) fn job(text: &str) -> Arc<Job> {
    let mut jobs = config(text).jobs;
    assert_eq!(jobs.len(), 1);
    jobs.remove(0)
}

/// The first line of the error (the snippet follows on the next lines).
pub(super) fn error(text: &str) -> String {
    let err = parse(&complete(text), Path::new(PATH), &env).expect_err("config must be refused");
    let full = err.to_string();
    assert!(!full.contains(SECRET), "secret leaked: {full}");
    full.lines().next().unwrap_or_default().to_string()
}

#[test]
fn minimal_job_gets_every_default() {
    let config = config("[jobs.a]\nschedule = \"@daily\"\ncommand = \"true\"\n");
    assert_eq!(config.redis.url, "redis://127.0.0.1:6379");
    assert_eq!(config.redis.key_prefix, "solocron");
    assert_eq!(config.redis.password, None);
    assert_eq!(config.daemon.shutdown_grace, Duration::from_secs(30));
    assert_eq!(config.daemon.history_max, 10_000);
    assert_eq!(config.daemon.metrics_listen, None);
    let job = &config.jobs[0];
    assert_eq!(job.name, "a");
    assert_eq!(job.schedule.timezone(), chrono_tz::Tz::UTC);
    assert_eq!(job.lock_ttl, Duration::from_secs(30));
    assert_eq!(job.timeout, Some(Duration::from_secs(3600)));
    assert_eq!(job.starting_deadline, Duration::from_secs(60));
    assert_eq!(job.on_lock_lost, OnLockLost::Kill);
    assert_eq!(job.overlap, Overlap::Skip);
    assert!(matches!(&job.action, Action::Command(c) if c == "true"));
    assert!(job.extras.env.is_empty() && job.extras.working_dir.is_none());
}

#[test]
fn jobs_keep_file_order_and_zero_jobs_is_fine() {
    let text = "[jobs.zeta]\nschedule = \"@daily\"\ncommand = \"z\"\n\
                [jobs.alpha]\nschedule = \"@daily\"\ncommand = \"a\"\n\
                [jobs.mid]\nschedule = \"@daily\"\ncommand = \"m\"\n";
    let names: Vec<_> = config(text).jobs.iter().map(|j| j.name.clone()).collect();
    assert_eq!(names, ["zeta", "alpha", "mid"]);
}

#[test]
fn defaults_apply_and_the_job_wins() {
    let text = r#"
[defaults]
timezone = "Asia/Tashkent"
lock_ttl = "10s"
timeout = "5m"
starting_deadline = "30s"
on_lock_lost = "continue"
env = { A = "from-defaults", B = "from-defaults" }
working_dir = "/srv"

[jobs.x]
schedule = "0 2 * * *"
command = "true"
lock_ttl = "1m"
env = { B = "from-job", C = "job-only" }
"#;
    let job = job(text);
    assert_eq!(job.schedule.timezone(), chrono_tz::Asia::Tashkent);
    assert_eq!(job.lock_ttl, Duration::from_secs(60));
    assert_eq!(job.timeout, Some(Duration::from_secs(300)));
    assert_eq!(job.starting_deadline, Duration::from_secs(30));
    assert_eq!(job.on_lock_lost, OnLockLost::Continue);
    let env: Vec<_> = job
        .extras
        .env
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    assert_eq!(env, ["A=from-defaults", "B=from-job", "C=job-only"]);
    assert_eq!(job.extras.working_dir.as_deref(), Some(Path::new("/srv")));
}

#[test]
fn the_whole_message_has_position_key_and_snippet() {
    let text = "[jobs.nightly-report]\nschedule = \"0 2 * * *\"\ncommand = \"true\"\ntimezone = \"Asia/Tashkentt\"\n";
    let err = parse(&complete(text), Path::new(PATH), &env).expect_err("bad zone");
    assert_eq!(
        err.to_string(),
        "/etc/solocron/jobs.toml:4:12: [jobs.nightly-report] `timezone`: unknown time zone \
         `Asia/Tashkentt`; did you mean `Asia/Tashkent`?\n  |\n4 | timezone = \"Asia/Tashkentt\"\n  \
         |            ^^^^^^^^^^^^^^^^"
    );
    assert_eq!(err.position(), Some((4, 12)));
    assert!(
        matches!(&err, ConfigError::Invalid { key, .. } if key == "jobs.nightly-report.timezone")
    );
    let far =
        error("[jobs.a]\nschedule = \"@daily\"\ncommand = \"x\"\ntimezone = \"Mars/Olympus\"\n");
    assert_eq!(
        far,
        "/etc/solocron/jobs.toml:4:12: [jobs.a] `timezone`: unknown time zone `Mars/Olympus`; \
         use an IANA name such as `Europe/Berlin`"
    );
}

#[test]
fn toml_syntax_errors_get_the_same_prefix() {
    let err = error("[jobs.a]\nschedule = \"@daily\ncommand = \"x\"\n");
    assert!(err.starts_with("/etc/solocron/jobs.toml:2:"), "{err}");
    let err = error("[jobs.a]\nschedule = \"@daily\"\nschedule = \"@hourly\"\n");
    assert_eq!(
        err,
        "/etc/solocron/jobs.toml:3:1: duplicate key: `schedule` is defined twice, first defined at line 2; keep one"
    );
}

/// toml names only the second `[jobs.x]`; the message points at the first
/// one too, with both lines shown.
#[test]
fn a_duplicated_job_names_both_definitions() {
    let text = "[redis]\nurl = \"redis://db\"\n\n[jobs.x]\nschedule = \"@daily\"\ncommand = \"true\"\n\n\
                [jobs.y]\nschedule = \"@daily\"\ncommand = \"true\"\n\n[jobs.x]\ntimeout = \"5m\"\n";
    let err = parse(text, Path::new(PATH), &env).expect_err("duplicate job");
    assert_eq!(
        err.to_string(),
        "/etc/solocron/jobs.toml:12:7: duplicate key: job `x` is defined twice, first defined at line 4; \
         merge the two tables or rename one\n   |\n12 | [jobs.x]\n   |       ^\n  |\n4 | [jobs.x]\n  \
         | ^^^^^^^^ first defined here"
    );
    // Another table, and a key inside a job.
    let other = error("[daemon]\nhistory_max = 5\n[ daemon ]\n");
    assert!(
        other.contains("table `[daemon]` is defined twice, first defined at line 1"),
        "{other}"
    );
    let key = error("[jobs.x]\nschedule = \"@daily\"\ncommand = \"a\"\n\n  command = \"b\"\n");
    assert!(
        key.ends_with("`command` is defined twice, first defined at line 3; keep one"),
        "{key}"
    );
    // A key of another table with the same name is not "the first".
    let inline = error(
        "[jobs.x]\nschedule = \"@daily\"\n[jobs.y]\nschedule = \"@daily\"\nschedule = \"@daily\"\n",
    );
    assert!(
        inline.ends_with("first defined at line 4; keep one"),
        "{inline}"
    );
}

#[test]
fn unknown_keys_name_their_table_and_suggest() {
    let job = |extra: &str| format!("[jobs.x]\nschedule = \"@daily\"\ncommand = \"x\"\n{extra}\n");
    assert_eq!(
        error("[jobs.x]\nschedul = \"@daily\"\ncommand = \"x\"\n"),
        "/etc/solocron/jobs.toml:2:1: unknown key `schedul` in [jobs.x], did you mean `schedule`?"
    );
    assert_eq!(
        error(&job("frobnicate = 1")),
        "/etc/solocron/jobs.toml:4:1: unknown key `frobnicate` in [jobs.x]"
    );
    assert_eq!(
        error(&job("http = { url = \"http://h/\", metod = \"GET\" }"))
            .split(": ")
            .nth(1),
        Some("unknown key `metod` in jobs.x.http, did you mean `method`?")
    );
    assert_eq!(
        error("[redis]\nurll = \"redis://h\"\n"),
        "/etc/solocron/jobs.toml:2:1: unknown key `urll` in [redis], did you mean `url`?"
    );
    assert_eq!(
        error("[daemon]\nhistory_maxx = 3\n"),
        "/etc/solocron/jobs.toml:2:1: unknown key `history_maxx` in [daemon], did you mean `history_max`?"
    );
    assert_eq!(
        error("[defaults]\ntimezon = \"UTC\"\n"),
        "/etc/solocron/jobs.toml:2:1: unknown key `timezon` in [defaults], did you mean `timezone`?"
    );
    assert_eq!(
        error("[job.x]\nschedule = \"@daily\"\n"),
        "/etc/solocron/jobs.toml:1:2: unknown key `job` in the top level, did you mean `jobs`?"
    );
}

#[test]
fn job_names_are_checked() {
    let named = |name: &str| format!("[jobs.{name}]\nschedule = \"@daily\"\ncommand = \"x\"\n");
    assert_eq!(
        error(&named("\"has space\"")),
        "/etc/solocron/jobs.toml:1:7: invalid job name `has space` in [jobs.\"has space\"]: \
         use 1 to 64 of `A-Z a-z 0-9 _ . -`"
    );
    assert!(error(&named(&"a".repeat(65))).contains("invalid job name"));
    assert_eq!(job(&named(&"a".repeat(64))).name.len(), 64);
    assert_eq!(job(&named("\"v1.2_x-y\"")).name, "v1.2_x-y");
    let err = error("[jobs.\"a.b\"]\nschedule = \"@daily\"\n");
    assert_eq!(
        err,
        "/etc/solocron/jobs.toml:1:1: [jobs.\"a.b\"]: no action: set one of `command`, `argv` or `http`"
    );
}

#[test]
fn exactly_one_action_per_job() {
    assert_eq!(
        error("[jobs.x]\nschedule = \"@daily\"\ncommand = \"x\"\nargv = [\"y\"]\n"),
        "/etc/solocron/jobs.toml:1:1: [jobs.x]: a job has exactly one of `command`, `argv` or `http`; \
         found `command` and `argv`"
    );
    let text = "[defaults]\ncommand = \"x\"\n[jobs.x]\nschedule = \"@daily\"\nhttp = { url = \"http://h/\" }\n";
    assert!(error(text).ends_with("found `command` (from [defaults]) and `http`"));
    let text = "[defaults]\nargv = [\"/bin/true\"]\n[jobs.x]\nschedule = \"@daily\"\n";
    assert!(matches!(&job(text).action, Action::Argv(argv) if argv == &["/bin/true"]));
    assert_eq!(
        error("[jobs.x]\nschedule = \"@daily\"\nargv = []\n"),
        "/etc/solocron/jobs.toml:3:8: [jobs.x] `argv`: must name a program; it is empty"
    );
    assert_eq!(
        error("[jobs.x]\nschedule = \"@daily\"\nargv = [\"a\", 2]\n"),
        "/etc/solocron/jobs.toml:3:14: [jobs.x] `argv`: expected a string, found integer"
    );
    assert_eq!(
        error("[jobs.x]\nschedule = \"@daily\"\ncommand = \"  \"\n"),
        "/etc/solocron/jobs.toml:3:11: [jobs.x] `command`: must not be empty"
    );
}

#[test]
fn schedules_are_required_and_checked() {
    let with = |schedule: &str| format!("[jobs.x]\nschedule = \"{schedule}\"\ncommand = \"x\"\n");
    assert_eq!(
        error("[jobs.x]\ncommand = \"x\"\n"),
        "/etc/solocron/jobs.toml:1:1: [jobs.x]: `schedule` is required"
    );
    for ok in [
        "*/5 * * * *",
        "*/30 * * * * *",
        "@hourly",
        "@daily",
        "@weekly",
        "@monthly",
        "@yearly",
    ] {
        assert_eq!(job(&with(ok)).schedule.expression(), ok);
    }
    assert_eq!(
        error(&with("0 0 30 2 *")),
        "/etc/solocron/jobs.toml:2:12: [jobs.x] `schedule`: `0 0 30 2 *` never fires: no date matches it"
    );
    assert_eq!(
        error(&with("0 0 0 1 1 * 2027")),
        "/etc/solocron/jobs.toml:2:12: [jobs.x] `schedule`: invalid cron expression `0 0 0 1 1 * 2027`: \
         expected 5 fields (minute first) or 6 (seconds first), found 7"
    );
    assert!(error(&with("every day")).contains("invalid cron expression `every day`"));
    assert_eq!(
        error("[jobs.x]\nschedule = 5\ncommand = \"x\"\n"),
        "/etc/solocron/jobs.toml:2:12: [jobs.x] `schedule`: expected a string, found integer"
    );
}

#[test]
fn durations_and_their_limits() {
    let with = |line: &str| format!("[jobs.x]\nschedule = \"@daily\"\ncommand = \"x\"\n{line}\n");
    assert_eq!(
        job(&with("timeout = \"1h30m\"")).timeout,
        Some(Duration::from_secs(5400))
    );
    assert_eq!(
        job(&with("lock_ttl = \"1s\"")).lock_ttl,
        Duration::from_secs(1)
    );
    assert_eq!(
        error(&with("timeout = \"15 minutess\"")),
        "/etc/solocron/jobs.toml:4:11: [jobs.x] `timeout`: invalid duration `15 minutess`; \
         write it like `500ms`, `30s`, `5m` or `1h30m`"
    );
    assert_eq!(
        error(&with("lock_ttl = \"500ms\"")),
        "/etc/solocron/jobs.toml:4:12: [jobs.x] `lock_ttl`: must be at least 1s, found `500ms`"
    );
    assert!(
        error(&with("timeout = \"0s\"")).ends_with("`timeout`: must be at least 1s, found `0s`")
    );
    assert!(error(&with("starting_deadline = \"0s\"")).contains("must be at least 1ms"));
    // So large that `now - starting_deadline` would overflow: refused, not
    // a panic in the daemon's job loop.
    assert_eq!(
        error(&with("starting_deadline = \"300000y\"")),
        "/etc/solocron/jobs.toml:4:21: [jobs.x] `starting_deadline`: must be at most 100years, found `300000y`"
    );
    assert_eq!(
        job(&with("starting_deadline = \"100y\"")).starting_deadline,
        Duration::from_secs(100 * 31_557_600)
    );
    assert_eq!(
        error(&with("lock_ttl = 30")),
        "/etc/solocron/jobs.toml:4:12: [jobs.x] `lock_ttl`: expected a duration string like `30s`, found integer"
    );
    assert!(
        error("[defaults]\ntimeout = \"soon\"\n")
            .contains("[defaults] `timeout`: invalid duration `soon`")
    );
}

#[test]
fn lock_loss_and_overlap_policies() {
    let with = |line: &str| format!("[jobs.x]\nschedule = \"@daily\"\ncommand = \"x\"\n{line}\n");
    assert_eq!(
        job(&with("on_lock_lost = \"continue\"")).on_lock_lost,
        OnLockLost::Continue
    );
    assert_eq!(
        error(&with("on_lock_lost = \"ignore\"")),
        "/etc/solocron/jobs.toml:4:16: [jobs.x] `on_lock_lost`: expected `kill` or `continue`, found `ignore`"
    );
    assert_eq!(
        error(&with("overlap = \"queue\"")),
        "/etc/solocron/jobs.toml:4:11: [jobs.x] `overlap`: the only policy is `skip`, found `queue`"
    );
}

#[test]
fn interpolation_in_the_allowed_keys_only() {
    let text = r#"
[jobs.x]
schedule = "@daily"
command = "curl -H 'X: ${WARM_TOKEN}' $${NOT_A_VAR} $HOME"
env = { TOKEN = "${WARM_TOKEN}" }
working_dir = "/srv/${HOST}"
"#;
    let job = job(text);
    let Action::Command(command) = &job.action else {
        panic!("a command");
    };
    assert_eq!(
        command,
        &format!("curl -H 'X: {SECRET}' ${{NOT_A_VAR}} $HOME")
    );
    assert_eq!(job.extras.env["TOKEN"], SECRET);
    assert_eq!(
        job.extras.working_dir.as_deref(),
        Some(Path::new("/srv/${HOST}"))
    );
    let argv = self::job("[jobs.a]\nschedule = \"@daily\"\nargv = [\"echo\", \"${WARM_TOKEN}\"]\n");
    assert!(matches!(&argv.action, Action::Argv(a) if a[1] == "${WARM_TOKEN}"));
}

#[test]
fn a_missing_variable_names_variable_job_and_key() {
    let with = |line: &str| format!("[jobs.x]\nschedule = \"@daily\"\n{line}\n");
    assert_eq!(
        error(&with("command = \"echo ${NOPE}\"")),
        "/etc/solocron/jobs.toml:3:11: [jobs.x] `command`: environment variable `NOPE` is not set \
         (write `$${` for a literal `${`)"
    );
    let header = "http = { url = \"http://h/\", headers = { Authorization = \"Bearer ${WARM_TOKEN}${NOPE}\" } }";
    assert!(
        error(&with(header)).contains(
            "[jobs.x] `http.headers.Authorization`: environment variable `NOPE` is not set"
        )
    );
    let url = "http = { url = \"http://h/?t=${WARM_TOKEN}&u=${NOPE}\" }";
    assert!(error(&with(url)).contains("[jobs.x] `http.url`: environment variable `NOPE`"));
    let body = "http = { url = \"http://h/\", body = \"${NOPE}\" }";
    assert!(error(&with(body)).contains("[jobs.x] `http.body`: environment variable `NOPE`"));
    let env = "command = \"x\"\nenv = { TOKEN = \"${NOPE}\" }";
    assert!(
        error(&with(env)).contains("[jobs.x] `env.TOKEN`: environment variable `NOPE` is not set")
    );
    assert!(error(&with("command = \"${oops\"")).contains("`${` without a closing `}`"));
    // Found by tests/it/config/prop_config.rs: a command that is only a variable set
    // to "" loaded, and `sh -c ""` then "succeeded" at every occurrence.
    assert_eq!(
        error(&with("command = \" ${EMPTY} \"")),
        "/etc/solocron/jobs.toml:3:11: [jobs.x] `command`: ` ${EMPTY} ` is empty once its variables are filled in"
    );
}

#[test]
fn env_names_are_checked() {
    let with = |env: &str| {
        format!("[jobs.x]\nschedule = \"@daily\"\ncommand = \"x\"\nenv = {{ {env} }}\n")
    };
    assert_eq!(
        error(&with("SOLOCRON_JOB = \"x\"")),
        "/etc/solocron/jobs.toml:4:9: [jobs.x] `env.SOLOCRON_JOB`: `SOLOCRON_` variables are set by solocron for each run"
    );
    assert!(error(&with("\"1BAD\" = \"x\"")).contains("`env.1BAD`: not a variable name"));
    assert!(error(&with("A = 1")).ends_with("`env.A`: expected a string, found integer"));
    assert!(
        error("[jobs.x]\nschedule = \"@daily\"\ncommand = \"x\"\nenv = \"A=1\"\n")
            .ends_with("[jobs.x] `env`: expected a table, found string")
    );
}

#[test]
fn load_reads_files_and_names_unreadable_ones() {
    let err = load(Path::new("/nonexistent/jobs.toml")).expect_err("no such file");
    assert_eq!(
        err.to_string(),
        "cannot read `/nonexistent/jobs.toml`: No such file or directory (os error 2)"
    );
    assert_eq!(default_path(), Path::new("/etc/solocron/jobs.toml"));
}

#[test]
fn run_time_variables_say_what_to_write() {
    let with = |line: &str| format!("[jobs.x]\nschedule = \"@daily\"\n{line}\n");
    assert_eq!(
        error(&with("command = \"report --at ${SOLOCRON_OCCURRENCE}\"")),
        "/etc/solocron/jobs.toml:3:11: [jobs.x] `command`: `${SOLOCRON_OCCURRENCE}` is set for each run, \
         not when the file loads (`${...}` is filled in at load time): write `$${SOLOCRON_OCCURRENCE}` \
         so that the shell expands it when the job runs"
    );
    let header = "http = { url = \"http://h/\", headers = { X-Job = \"${SOLOCRON_JOB}\" } }";
    assert!(
        error(&with(header))
            .ends_with("every request already carries it in the `Solocron-Job` header")
    );
    let written = job(&with("command = \"report --at $${SOLOCRON_OCCURRENCE}\""));
    assert!(
        matches!(&written.action, Action::Command(c) if c == "report --at ${SOLOCRON_OCCURRENCE}")
    );
}

#[test]
fn output_log_max_takes_sizes() {
    let with = |value: &str| {
        format!("[jobs.x]\nschedule = \"@daily\"\ncommand = \"x\"\noutput_log_max = {value}\n")
    };
    assert_eq!(
        job(&with("\"1s\"").replace("output_log_max = \"1s\"\n", "")).output_log_max,
        DEFAULT_OUTPUT_LOG_MAX
    );
    for (written, bytes) in [
        ("64KiB", 65_536),
        ("1MiB", 1_048_576),
        ("500B", 500),
        ("65536", 65_536),
        ("0", 0),
        ("64 KiB", 65_536),
        ("2kb", 2_000),
    ] {
        assert_eq!(
            job(&with(&format!("\"{written}\""))).output_log_max,
            bytes,
            "{written}"
        );
    }
    for bad in ["lots", "-1", "", "1e3", "KiB", "1.2.3MiB", "64KiBB"] {
        assert_eq!(
            error(&with(&format!("\"{bad}\""))),
            format!(
                "/etc/solocron/jobs.toml:4:18: [jobs.x] `output_log_max`: invalid size `{bad}`; write it like \
                 `64KiB`, `1MiB`, `500B` or `0` (KiB and MiB count in 1024s, KB and MB in 1000s)"
            ),
            "{bad}"
        );
    }
    assert!(error(&with("65536")).ends_with("expected a size string like `64KiB`, found integer"));
    let text = "[defaults]\noutput_log_max = \"1KiB\"\n[jobs.a]\nschedule = \"@daily\"\ncommand = \"x\"\n\
                [jobs.b]\nschedule = \"@daily\"\ncommand = \"x\"\noutput_log_max = \"0\"\n";
    let sizes: Vec<u64> = config(text)
        .jobs
        .iter()
        .map(|job| job.output_log_max)
        .collect();
    assert_eq!(sizes, [1024, 0]);
}

#[test]
fn max_silence_is_a_duration_from_the_job_or_the_defaults() {
    let with = |value: &str| {
        format!("[jobs.x]\nschedule = \"@daily\"\ncommand = \"x\"\nmax_silence = {value}\n")
    };
    assert_eq!(
        job("[jobs.x]\nschedule = \"@daily\"\ncommand = \"x\"\n")
            .extras
            .max_silence,
        None
    );
    assert_eq!(
        job(&with("\"3d\"")).extras.max_silence,
        Some(Duration::from_secs(3 * 86_400))
    );
    assert_eq!(
        error(&with("\"500ms\"")),
        "/etc/solocron/jobs.toml:4:15: [jobs.x] `max_silence`: must be at least 1s, found `500ms`"
    );
    let text = "[defaults]\nmax_silence = \"2h\"\n[jobs.a]\nschedule = \"@daily\"\ncommand = \"x\"\n\
                [jobs.b]\nschedule = \"@daily\"\ncommand = \"x\"\nmax_silence = \"1w\"\n";
    let silences: Vec<Option<Duration>> = config(text)
        .jobs
        .iter()
        .map(|job| job.extras.max_silence)
        .collect();
    assert_eq!(
        silences,
        [
            Some(Duration::from_secs(7200)),
            Some(Duration::from_secs(7 * 86_400))
        ]
    );
}

mod redis_section;
mod whole_file;

#[test]
fn jobs_that_set_no_rare_setting_share_one_and_the_others_keep_theirs() {
    let text = "[jobs.a]\nschedule = \"@daily\"\ncommand = \"x\"\n\
                [jobs.b]\nschedule = \"@hourly\"\nargv = [\"y\"]\n\
                [jobs.c]\nschedule = \"@daily\"\ncommand = \"x\"\nsplay = \"10s\"\n\
                [jobs.d]\nschedule = \"@daily\"\ncommand = \"x\"\nretries = 1\nretry_backoff = \"5s\"\n";
    let jobs = config(text).jobs;
    assert!(
        std::sync::Arc::ptr_eq(&jobs[0].extras, &jobs[1].extras),
        "all defaults: one shared"
    );
    assert!(!std::sync::Arc::ptr_eq(&jobs[0].extras, &jobs[2].extras));
    assert_eq!(jobs[2].extras.splay, Duration::from_secs(10));
    assert_eq!(jobs[0].extras.splay, Duration::ZERO);
    assert_eq!(jobs[3].extras.retry_backoff, Duration::from_secs(5));
    assert_eq!(jobs[0].extras.retry_backoff, DEFAULT_RETRY_BACKOFF);
}

/// A splayed job's schedule goes on from the first occurrence that has not
/// fired yet, which can be one whose instant has passed: starting at the
/// first instant after "now" instead skipped the occurrences between the
/// catch-up and it (every start and reload of an every-second job with
/// `splay = "30s"` lost up to 30 of them).
#[test]
fn a_splayed_job_goes_on_from_the_first_occurrence_not_yet_fired() {
    use chrono::{DateTime, TimeDelta, Utc};
    let splayed = job("[jobs.a]\nschedule = \"* * * * * *\"\ncommand = \"x\"\nsplay = \"30s\"\n");
    let offset = TimeDelta::from_std(splayed.splay_offset).expect("a small offset");
    assert!(
        offset > TimeDelta::seconds(1),
        "{offset}: this test needs more than a period"
    );
    let now = DateTime::parse_from_rfc3339("2026-12-04T15:23:23.388Z")
        .expect("an instant")
        .with_timezone(&Utc);
    let next = splayed
        .next_to_fire(now)
        .expect("an every-second job fires");
    assert!(splayed.fires_at(next) > now, "{next} fired already");
    let before = next - TimeDelta::seconds(1);
    assert!(
        splayed.fires_at(before) <= now,
        "{before} has not fired by {now} either: {next} is not the first"
    );
    assert!(
        next < now,
        "the instant of {next} has passed: it is still to fire"
    );
    assert_eq!(splayed.unsplayed(now), now - offset);
    let plain = job("[jobs.b]\nschedule = \"* * * * * *\"\ncommand = \"x\"\n");
    assert_eq!(plain.next_to_fire(now), plain.schedule.next_after(now));
}

#[test]
fn the_retry_backoff_doubles_is_capped_and_counts_what_fits() {
    let base = Duration::from_secs(30);
    assert_eq!(retry_backoff(base, 1), base);
    assert_eq!(retry_backoff(base, 2), Duration::from_secs(60));
    assert_eq!(retry_backoff(base, 3), Duration::from_secs(120));
    assert_eq!(retry_backoff(base, 40), RETRY_BACKOFF_CAP);
    let long = Duration::from_secs(7200);
    assert_eq!(retry_backoff(long, 3), long);
    // 30 s, then 60 (90 in all), then 120 (210): before a 2-minute
    // interval only the first two start; one as long as the interval none.
    assert_eq!(retries_within(base, 3, Duration::from_secs(120)), 2);
    assert_eq!(retries_within(base, 3, Duration::from_secs(211)), 3);
    assert_eq!(retries_within(base, 3, Duration::from_secs(30)), 0);
    assert_eq!(retries_within(base, 0, Duration::from_secs(3600)), 0);
}

#[test]
fn run_on_is_read_checked_and_part_of_the_definition() {
    let db = job(
        "[jobs.a]\nschedule = \"@daily\"\ncommand = \"x\"\nrun_on = [\"role=db\", \"zone=eu-*\"]\n",
    );
    let run_on = db.extras.run_on.as_ref().expect("run_on");
    assert_eq!(run_on.to_string(), "role=db,zone=eu-*");
    let tags = |text: &str| crate::tags::Tags::parse(text, "n1").expect("tags");
    assert!(db.runs_on(&tags("role=db,zone=eu-west")));
    assert!(!db.runs_on(&tags("role=web,zone=eu-west")));
    let every = job("[jobs.a]\nschedule = \"@daily\"\ncommand = \"x\"\n");
    assert!(every.runs_on(&tags("")));
    assert_ne!(
        db.fingerprint(),
        every.fingerprint(),
        "run_on is part of the job's definition"
    );
    let from_defaults = config(
        "[defaults]\nrun_on = [\"role=db\"]\n[jobs.a]\nschedule = \"@daily\"\ncommand = \"x\"\n",
    );
    assert!(from_defaults.jobs[0].extras.run_on.is_some());
    for (value, says) in [
        ("\"role=db\"", "expected an array of tags"),
        ("[\"role\"]", "`role` is not `key=value`"),
        ("[\"role=d b\"]", "a value is"),
        ("[]", "lists no tag"),
        ("[1]", "expected a string"),
    ] {
        let err = error(&format!(
            "[jobs.a]\nschedule = \"@daily\"\ncommand = \"x\"\nrun_on = {value}\n"
        ));
        assert!(
            err.contains("jobs.toml:") && err.contains("run_on") && err.contains(says),
            "{value}: {err}"
        );
    }
}

#[test]
fn groups_are_read_shared_by_their_jobs_and_part_of_the_definition() {
    let text = |max: u32| {
        format!(
            "[groups.db]\nmax_running = {max}\nmax_starts = \"30/1m\"\nwhen_full = \"wait\"\n\
             [groups.idle]\nmax_running = 1\n\
             [defaults]\ngroup = \"db\"\n\
             [jobs.a]\nschedule = \"@daily\"\ncommand = \"x\"\n\
             [jobs.b]\nschedule = \"@daily\"\ncommand = \"x\"\n"
        )
    };
    let loaded = config(&text(2));
    let group = loaded.jobs[0]
        .extras
        .group
        .as_ref()
        .expect("group from [defaults]");
    assert_eq!(group.name, "db");
    assert_eq!(group.max_running, Some(2));
    assert_eq!(
        group.max_starts,
        Some(MaxStarts {
            count: 30,
            window: Duration::from_secs(60)
        })
    );
    assert_eq!(group.when_full, WhenFull::Wait);
    assert_eq!(loaded.groups.len(), 2);
    assert!(
        loaded
            .warnings
            .iter()
            .any(|warning| warning.message.contains("no job has `group = \"idle\"`")),
        "{:?}",
        loaded.warnings
    );
    assert_ne!(
        loaded.jobs[0].fingerprint(),
        config(&text(3)).jobs[0].fingerprint(),
        "a group's limit is part of each of its jobs' definition"
    );
}

#[test]
fn calendars_exclude_in_the_jobs_zone_across_dst_changes() {
    let loaded = config(
        "[calendars.maint]\nweekly = [\"Sun 02:00-04:00\"]\ndates = [\"2026-12-25\"]\n\
         [jobs.a]\nschedule = \"*/30 * * * *\"\ntimezone = \"Europe/Berlin\"\ncommand = \"x\"\n\
         skip_during = [\"maint\"]\n",
    );
    let job = &loaded.jobs[0];
    let utc = |text: &str| {
        chrono::DateTime::parse_from_rfc3339(text)
            .map(|at| at.with_timezone(&chrono::Utc))
            .unwrap_or_default()
    };
    let excluded = |text: &str| job.excluded_by(utc(text)).is_some();
    // 2026-03-29, spring forward in Berlin: 02:00 CET is 03:00 CEST.
    assert!(!excluded("2026-03-29T00:30:00Z"), "01:30 CET");
    assert!(
        excluded("2026-03-29T01:00:00Z"),
        "03:00 CEST, inside 02:00-04:00"
    );
    assert!(excluded("2026-03-29T01:30:00Z"), "03:30 CEST");
    assert!(!excluded("2026-03-29T02:00:00Z"), "04:00 CEST");
    // 2026-10-25, fall back: 02:30 comes twice, both inside.
    assert!(excluded("2026-10-25T00:30:00Z"), "02:30 CEST");
    assert!(excluded("2026-10-25T01:30:00Z"), "02:30 CET");
    assert!(!excluded("2026-10-25T03:00:00Z"), "04:00 CET");
    // Christmas in Berlin begins at 23:00 UTC the day before.
    assert!(excluded("2026-12-24T23:00:00Z"));
    assert!(!excluded("2026-12-24T22:59:00Z"));
    let why = job
        .excluded_by(utc("2026-12-24T23:00:00Z"))
        .unwrap_or_default();
    assert!(why.contains("calendar `maint` (skip_during)"), "{why}");
    // only_during: outside every one of them.
    let night = config(
        "[calendars.night]\nweekly = [\"Mon-Sun 22:00-06:00\"]\n\
         [jobs.a]\nschedule = \"0 * * * *\"\ncommand = \"x\"\nonly_during = [\"night\"]\n",
    );
    let job = &night.jobs[0];
    assert!(job.excluded_by(utc("2026-12-07T12:00:00Z")).is_some());
    assert!(job.excluded_by(utc("2026-12-07T23:00:00Z")).is_none());
    assert!(job.excluded_by(utc("2026-12-08T05:00:00Z")).is_none());
    let err = error(
        "[jobs.a]\nschedule = \"@daily\"\ncommand = \"x\"\nskip_during = [\"holidayz\"]\n\
         [calendars.holidays]\ndates = [\"2026-12-25\"]\n",
    );
    assert!(
        err.contains("no calendar `holidayz` is defined; did you mean `holidays`?"),
        "{err}"
    );
}
