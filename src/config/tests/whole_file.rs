//! Unit tests of what concerns a file as a whole: a `[redis]` and a job
//! are required, every error is reported, `[daemon] env_file`, loading for
//! the read-only commands, and warnings.

use std::path::{Path, PathBuf};

use super::*;

/// Guarantee 7 (docs/guarantees.md): an empty or truncated file must not
/// quietly stop a node.
#[test]
fn an_empty_or_truncated_file_is_refused() {
    let first = |text: &str| {
        let err = parse(text, Path::new(PATH), &env).expect_err("refused");
        assert_eq!(err.errors().len(), 1, "{err}");
        err.to_string()
            .lines()
            .next()
            .unwrap_or_default()
            .to_string()
    };
    for empty in ["", "\n\n", "# only a comment\n"] {
        assert_eq!(
            first(empty),
            "/etc/solocron/jobs.toml:1:1: the file is empty: it may be truncated; restore it, \
             or write `[redis]` with `url = \"redis://10.0.0.5:6379\"` and at least one `[jobs.NAME]` table"
        );
    }
    assert!(
        first("[daemon]\nhistory_max = 10\n")
            .ends_with(":1:1: the file has no `[redis]` section and no job: it may be truncated; restore it, \
                        or write `[redis]` with `url = \"redis://10.0.0.5:6379\"` and at least one `[jobs.NAME]` table")
    );
    assert_eq!(
        first("[redis]\nurl = \"redis://db\"\n\n"),
        "/etc/solocron/jobs.toml:2:19: no job: the file defines no `[jobs.NAME]` table, so this node \
         would run nothing; add a job, or restore the file if it was truncated"
    );
    assert!(
        first("[redis]\nurl = \"redis://db\"\n[jobs]\n")
            .starts_with("/etc/solocron/jobs.toml:3:1: no job:")
    );
    assert_eq!(
        first("[jobs.a]\nschedule = \"@daily\"\ncommand = \"true\"\n"),
        "/etc/solocron/jobs.toml:1:1: no `[redis]` section: add `[redis]` with \
         `url = \"redis://10.0.0.5:6379\"` naming this fleet's Redis (the file may be truncated)"
    );
    assert!(
        first("[redis]\nkey_prefix = \"x\"\n[jobs.a]\nschedule = \"@daily\"\ncommand = \"true\"\n")
            .ends_with(
                ":1:1: [redis]: no Redis server: set one of `url`, `sentinel`, `cluster` or \
                 `redlock`, like `url = \"redis://10.0.0.5:6379\"` (if the file used to have it, \
                 it may have been truncated)"
            )
    );
    // `[redis]` that is not a table, `jobs` that is not one: one error each.
    assert!(
        first("redis = 1\n[jobs.a]\nschedule = \"@daily\"\ncommand = \"true\"\n")
            .contains("expected a [redis] table")
    );
    assert!(first("jobs = 1\n[redis]\nurl = \"redis://db\"\n").contains("expected a [jobs] table"));
}

/// Guarantee 7 (docs/guarantees.md): every error of a file, each with its line,
/// in file order.
#[test]
fn every_error_of_the_file_is_reported() {
    let text = "\
[redis]
url = \"redis://db\"

[jobs.one]
schedule = \"0 25 * * *\"
command = \"true\"

[jobs.two]
schedule = \"@daily\"
command = \"true\"
timeout = \"soon\"
lock_ttl = \"1ms\"

[jobs.fine]
schedule = \"@daily\"
command = \"true\"

[jobs.three]
schedule = \"@daily\"
command = \"true\"
timezone = \"Mars/Olympus\"
";
    let err = parse(text, Path::new(PATH), &env).expect_err("four errors");
    let heads: Vec<String> = err
        .errors()
        .iter()
        .map(|err| {
            err.to_string()
                .lines()
                .next()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    assert_eq!(
        heads,
        [
            "/etc/solocron/jobs.toml:5:12: [jobs.one] `schedule`: invalid cron expression `0 25 * * *`: \
             hour `25` is out of range 0–23",
            "/etc/solocron/jobs.toml:11:11: [jobs.two] `timeout`: invalid duration `soon`; \
             write it like `500ms`, `30s`, `5m` or `1h30m`",
            "/etc/solocron/jobs.toml:12:12: [jobs.two] `lock_ttl`: must be at least 1s, found `1ms`",
            "/etc/solocron/jobs.toml:21:12: [jobs.three] `timezone`: unknown time zone `Mars/Olympus`; \
             use an IANA name such as `Europe/Berlin`",
        ]
    );
    let shown = err.to_string();
    assert!(shown.starts_with(&heads[0]), "{shown}");
    assert!(shown.contains("\n12 | lock_ttl = \"1ms\"\n"), "{shown}");
    assert!(
        shown.ends_with("\n\n4 errors in /etc/solocron/jobs.toml"),
        "{shown}"
    );
    assert_eq!(err.position(), Some((5, 12)));
    // Within one table every key is checked, unknown ones too; the checks
    // of the job as a whole wait until its keys are fine.
    let err = error("[jobs.x]\nschedul = \"@daily\"\ncommand = \"\"\ntimeout = 5\n");
    assert!(
        err.ends_with("unknown key `schedul` in [jobs.x], did you mean `schedule`?"),
        "{err}"
    );
    let all = parse(
        &complete("[jobs.x]\nschedul = \"@daily\"\ncommand = \"\"\ntimeout = 5\n"),
        Path::new(PATH),
        &env,
    )
    .expect_err("three errors");
    assert_eq!(all.errors().len(), 3, "{all}");
    assert!(!all.to_string().contains("is required"), "{all}");
    // A syntax error stops there.
    let syntax = parse("[jobs.x\nschedule = 5\n", Path::new(PATH), &env).expect_err("syntax");
    assert!(matches!(syntax, ConfigError::Syntax { .. }), "{syntax}");
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write");
    path
}

#[test]
fn env_file_fills_variables_before_the_process_environment() {
    let dir = tempfile::tempdir().expect("temp dir");
    write(
        dir.path(),
        "secrets.env",
        "# rotated\nWARM_TOKEN=rotated-in-file\nONLY_FILE='a b'\n",
    );
    let text = complete(
        "[daemon]\nenv_file = \"secrets.env\"\n[jobs.x]\nschedule = \"@daily\"\n\
         command = \"use ${WARM_TOKEN} ${ONLY_FILE} ${HOST}\"\n",
    );
    // `env` has a stale WARM_TOKEN (the value the daemon started with).
    let config =
        parse(&text, &dir.path().join("jobs.toml"), &env).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        matches!(&config.jobs[0].action, Action::Command(c) if c == "use rotated-in-file a b hooks.internal")
    );
    assert_eq!(config.daemon.env_file, Some(dir.path().join("secrets.env")));
    let pairs: Vec<String> = config.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    assert_eq!(pairs, ["ONLY_FILE=a b", "WARM_TOKEN=rotated-in-file"]);
    let debug = format!("{config:?}");
    assert!(
        !debug.contains("rotated-in-file") && debug.contains("WARM_TOKEN"),
        "{debug}"
    );
    // An absolute path is taken as written, and the file is read again at
    // every load.
    let absolute = dir.path().join("secrets.env");
    let text = text.replace(
        "\"secrets.env\"",
        &format!("{:?}", absolute.display().to_string()),
    );
    write(
        dir.path(),
        "secrets.env",
        "WARM_TOKEN=rotated-again\nONLY_FILE=x\n",
    );
    let config = parse(&text, Path::new(PATH), &env).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        matches!(&config.jobs[0].action, Action::Command(c) if c == "use rotated-again x hooks.internal")
    );
    assert_eq!(config.daemon.env_file, Some(absolute));
}

#[test]
fn env_file_errors_name_the_file_and_line_never_a_value() {
    let dir = tempfile::tempdir().expect("temp dir");
    let jobs = dir.path().join("jobs.toml");
    let text = complete("[daemon]\nhistory_max = 5\nenv_file = \"app.env\"\n");
    let err = parse(&text, &jobs, &env)
        .expect_err("missing env file")
        .to_string();
    let env_path = dir.path().join("app.env");
    assert!(
        err.starts_with(&format!(
            "{}:3:12: [daemon] `env_file`: cannot read env file `{}`: No such file or directory",
            jobs.display(),
            env_path.display()
        )),
        "{err}"
    );
    write(
        dir.path(),
        "app.env",
        "A=1\nTOKEN=s3cret value\nSOLOCRON_JOB=x\n",
    );
    let err = parse(&text, &jobs, &env).expect_err("bad lines");
    let heads: Vec<String> = err
        .errors()
        .iter()
        .map(|err| {
            err.to_string()
                .lines()
                .next()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    let head = format!(
        "{}:3:12: [daemon] `env_file`: `{}`",
        jobs.display(),
        env_path.display()
    );
    assert_eq!(
        heads,
        [
            format!(
                "{head} line 2: not a `NAME=value` line (quote a value that has blanks: `NAME=\"a b\"`)"
            ),
            format!(
                "{head} line 3: `SOLOCRON_JOB`: `SOLOCRON_` variables are solocron's own; the env file is \
                 for the values of `${{VAR}}`"
            ),
        ]
    );
    assert!(!err.to_string().contains("s3cret"), "{err}");
    assert!(
        error("[daemon]\nenv_file = \"\"\n").ends_with("[daemon] `env_file`: must not be empty")
    );
}

/// `status` and `history` work without the jobs' secrets (docs/operations.md).
#[test]
fn inspection_needs_no_secrets() {
    let text = complete(
        "[daemon]\nenv_file = \"/nonexistent/secrets.env\"\n\
         [jobs.a]\nschedule = \"@daily\"\ncommand = \"curl -H 'T: ${NOPE}' x\"\n\
         [jobs.b]\nschedule = \"@hourly\"\nhttp = { url = \"https://${NOPE_HOST}/x\", headers = { A = \"${NOPE}\" } }\n\
         [jobs.c]\nschedule = \"@daily\"\ncommand = \"${NOPE}\"\nenv = { T = \"${NOPE}\" }\n",
    );
    let refused = parse(&text, Path::new(PATH), &env).expect_err("load refuses");
    assert_eq!(refused.errors().len(), 6, "{refused}");
    let config =
        parse_for_inspection(&text, Path::new(PATH), &env).unwrap_or_else(|e| panic!("{e}"));
    let names: Vec<&str> = config.jobs.iter().map(|job| job.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "c"]);
    assert!(matches!(&config.jobs[0].action, Action::Command(c) if c == "curl -H 'T: ${NOPE}' x"));
    assert!(matches!(&config.jobs[1].action, Action::Http(h) if h.url == "https://${NOPE_HOST}/x"));
    assert!(config.env.is_empty() && config.warnings.is_empty());
    // Everything else is still checked.
    let job = |lines: &str| complete(&format!("[jobs.a]\nschedule = \"@daily\"\n{lines}\n"));
    for bad in [
        complete("[jobs.a]\nschedule = \"0 25 * * *\"\ncommand = \"${NOPE}\"\n"),
        job("command = \"${NOPE\""),
        job("command = \"${SOLOCRON_JOB}\""),
        job("http = { url = \"ftp://h/\" }"),
        job("command = \"x\"\nfrobnicate = 1"),
        "[redis]\nurl = \"redis://db\"\n".to_string(),
        "[jobs.a]\nschedule = \"@daily\"\ncommand = \"x\"\n".to_string(),
    ] {
        assert!(
            parse_for_inspection(&bad, Path::new(PATH), &env).is_err(),
            "{bad}"
        );
    }
}

#[test]
fn warnings_point_at_their_key_and_never_fail() {
    let text = complete(
        "[defaults]\nworking_dir = \"/nonexistent/solocron-wd\"\n\
         [jobs.a]\nschedule = \"@daily\"\nargv = [\"/nonexistent/bin/tool\", \"x\"]\n\
         [jobs.b]\nschedule = \"@daily\"\nargv = [\"surely-not-on-path-solocron\"]\nenv = { PATH = \"/nonexistent:${WARM_TOKEN}\" }\n\
         [jobs.c]\nschedule = \"@daily\"\nhttp = { url = \"http://h/\", method = \"purge\" }\nworking_dir = \"/\"\n\
         [jobs.d]\nschedule = \"@daily\"\nargv = [\"sh\", \"-c\", \"true\"]\n\
         [jobs.e]\nschedule = \"0 2 * * *\"\ntimezone = \"EST\"\ncommand = \"true\"\n",
    );
    let config = parse(&text, Path::new(PATH), &env).unwrap_or_else(|e| panic!("{e}"));
    let shown: Vec<String> = config.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(
        shown,
        [
            "/etc/solocron/jobs.toml:2:15: [defaults] `working_dir`: `/nonexistent/solocron-wd` does not \
             exist on this machine; the job cannot start here",
            "/etc/solocron/jobs.toml:5:8: [jobs.a] `argv`: `/nonexistent/bin/tool` does not exist on this \
             machine; the job cannot start here",
            "/etc/solocron/jobs.toml:8:8: [jobs.b] `argv`: `surely-not-on-path-solocron` is not found in the job's \
             PATH on this machine; the job cannot start here: give its full path, or set `PATH` in `env`",
            "/etc/solocron/jobs.toml:12:38: [jobs.c] `http.method`: `PURGE` is an unusual HTTP method \
             (expected one of GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS); check the spelling",
            "/etc/solocron/jobs.toml:19:12: [jobs.e] `timezone`: `EST` is a fixed offset from UTC with no \
             daylight saving time; for the local time of a place use its IANA name, e.g. `America/New_York`",
        ]
    );
    assert_eq!(config.warnings[2].key, "jobs.b.argv");
    // Not even an interpolated PATH is shown.
    assert!(shown.iter().all(|warning| !warning.contains(SECRET)));
    assert_eq!(
        (config.warnings[0].line, config.warnings[0].column),
        (2, 15)
    );
}

/// Retries that can never start (the first backoff is not shorter than
/// the time to the next occurrence) are a warning at the key that set the
/// backoff, else at `retries`, naming the job when that is `[defaults]`.
#[test]
fn retries_that_cannot_happen_are_a_warning_at_the_key_that_set_them() {
    let text = complete(
        "[defaults]\nretries = 3\nretry_backoff = \"5m\"\n\
         [jobs.fast]\nschedule = \"*/2 * * * *\"\ncommand = \"true\"\n\
         [jobs.fixme]\nschedule = \"*/5 * * * * *\"\ncommand = \"true\"\nretries = 2\nretry_backoff = \"10s\"\n\
         [jobs.hourly]\nschedule = \"@hourly\"\ncommand = \"true\"\n\
         [jobs.never]\nschedule = \"*/2 * * * *\"\ncommand = \"true\"\nretries = 0\n\
         [jobs.pulse]\nschedule = \"* * * * * *\"\ncommand = \"true\"\nretries = 1\n",
    );
    let config = parse(&text, Path::new(PATH), &env).unwrap_or_else(|e| panic!("{e}"));
    let shown: Vec<String> = config.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(
        shown,
        [
            "/etc/solocron/jobs.toml:3:17: [defaults] `retry_backoff`: for [jobs.fast], 5m is not \
             shorter than the 2m between its occurrences (`*/2 * * * *`), and a retry never starts \
             once the next occurrence is due: none of its 3 retries can ever happen; give \
             [jobs.fast] a `retry_backoff` shorter than 2m (17s or less for all 3 to fit), or \
             `retries = 0` if it is not to be retried",
            "/etc/solocron/jobs.toml:11:17: [jobs.fixme] `retry_backoff`: 10s is not shorter than \
             the 5s between its occurrences (`*/5 * * * * *`), and a retry never starts once the \
             next occurrence is due: none of its 2 retries can ever happen; make `retry_backoff` \
             shorter than 5s (1s 666ms or less for both to fit), or set `retries = 0` if the job \
             is not to be retried",
            "/etc/solocron/jobs.toml:22:11: [jobs.pulse] `retries`: `retry_backoff` from \
             [defaults] (5m) is not shorter than the 1s between its occurrences (`* * * * * *`), \
             and a retry never starts once the next occurrence is due: its retry can never \
             happen; no `retry_backoff` is shorter (it is at least 1s): set `retries = 0`, or run \
             the job less often",
        ]
    );
    assert_eq!(config.warnings[1].key, "jobs.fixme.retry_backoff");
    assert_eq!(config.warnings[2].key, "jobs.pulse.retries");

    // The built-in backoff (30 s), named as such at the job's `retries`;
    // an irregular schedule, whose longer intervals leave room for some.
    let text = complete(
        "[jobs.x]\nschedule = \"*/20 * * * * *\"\ncommand = \"true\"\nretries = 1\n\
         [jobs.twice]\nschedule = \"0 9,10 * * *\"\ncommand = \"true\"\nretries = 3\nretry_backoff = \"2h\"\n",
    );
    let config = parse(&text, Path::new(PATH), &env).unwrap_or_else(|e| panic!("{e}"));
    let shown: Vec<String> = config.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(shown.len(), 2, "{shown:?}");
    assert!(
        shown[0].starts_with(
            "/etc/solocron/jobs.toml:4:11: [jobs.x] `retries`: the default `retry_backoff` (30s) \
             is not shorter than the 20s between its occurrences"
        ),
        "{}",
        shown[0]
    );
    assert!(
        shown[1].contains(
            "[jobs.twice] `retry_backoff`: 2h is not shorter than the shortest interval between \
             its occurrences (1h, `0 9,10 * * *`), and a retry never starts once the next \
             occurrence is due: no retry can happen after an occurrence that the next one follows \
             1h later (after the longest interval, 23h, all 3 can)"
        ),
        "{}",
        shown[1]
    );

    // Backoffs that fit say nothing; inspection computes no warning.
    let fits = complete(
        "[defaults]\nretries = 3\n\
         [jobs.a]\nschedule = \"*/20 * * * * *\"\ncommand = \"true\"\nretry_backoff = \"4s\"\n\
         [jobs.b]\nschedule = \"@hourly\"\ncommand = \"true\"\n",
    );
    let config = parse(&fits, Path::new(PATH), &env).unwrap_or_else(|e| panic!("{e}"));
    assert!(config.warnings.is_empty(), "{:?}", config.warnings);
    let config =
        parse_for_inspection(&text, Path::new(PATH), &env).unwrap_or_else(|e| panic!("{e}"));
    assert!(config.warnings.is_empty(), "{:?}", config.warnings);
}
