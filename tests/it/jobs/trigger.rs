//! `solocron trigger JOB`: a manual run under the lock, exit codes, and no
//! effect on the schedule.

use crate::common;

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{Node, RedisServer, Workdir, history, records, toml_path, wait_until};
use redis::Commands as _;

fn trigger(work: &Workdir, redis: &RedisServer, job: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_solocron"));
    command
        .arg("trigger")
        .arg(job)
        .arg("--config")
        .arg(work.path("jobs.toml"))
        .args(["--node-id", "cli", "--redis", &redis.url()])
        .env_remove("SOLOCRON_LOG");
    command
}

fn output(command: &mut Command) -> Output {
    command.output().expect("run solocron trigger")
}

#[test]
fn trigger_runs_under_the_lock_shows_output_and_returns_3_while_held() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    work.write_config(
        "[jobs.slow]\nschedule = \"0 0 1 1 *\"\ncommand = 'echo \"started $SOLOCRON_OCCURRENCE fence $SOLOCRON_FENCE\"; sleep 2; echo done'\n\
         [jobs.fails]\nschedule = \"0 0 1 1 *\"\ncommand = 'echo bad >&2; exit 4'\n",
    );
    let first = trigger(&work, &redis, "slow")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start trigger");
    let mut conn = redis.conn();
    wait_until(
        Duration::from_secs(10),
        "the manual run holds the lock",
        || {
            conn.get::<_, Option<String>>("{solocron:slow}:lock")
                .ok()
                .flatten()
                .is_some_and(|value| value.ends_with(" cli"))
        },
    );
    let busy = output(&mut trigger(&work, &redis, "slow"));
    assert_eq!(busy.status.code(), Some(3), "{busy:?}");
    assert!(
        String::from_utf8_lossy(&busy.stderr).contains("is running on `cli`"),
        "{busy:?}"
    );
    let done = first.wait_with_output().expect("first trigger");
    assert_eq!(done.status.code(), Some(0), "{done:?}");
    let stdout = String::from_utf8_lossy(&done.stdout);
    assert!(
        stdout.contains("started manual-") && stdout.contains("done"),
        "job output on the terminal: {stdout}"
    );
    assert!(
        String::from_utf8_lossy(&done.stderr).contains("succeeded (exit 0)"),
        "{done:?}"
    );
    let entries = history(&redis, "slow");
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert!(entries[0]["occurrence"].starts_with("manual-"));
    assert_eq!(entries[0]["node"], "cli");
    let lock: Option<String> = conn.get("{solocron:slow}:lock").expect("GET");
    assert_eq!(lock, None, "released");
    // A failing job exits 1; an unknown job exits 1 naming the jobs there are.
    let failed = output(&mut trigger(&work, &redis, "fails"));
    assert_eq!(failed.status.code(), Some(1), "{failed:?}");
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert_eq!(
        stderr.matches("bad").count(),
        1,
        "the job's stderr line on the terminal once, not also as a log line: {stderr}"
    );
    assert!(stderr.lines().any(|line| line == "bad"), "{stderr}");
    let unknown = output(&mut trigger(&work, &redis, "nope"));
    assert_eq!(unknown.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&unknown.stderr);
    assert!(
        stderr.contains("unknown job `nope`") && stderr.contains("slow, fails"),
        "{stderr}"
    );
}

/// A typo in the job's name gets the closest name, as every command that
/// takes a JOB does; nothing runs and no lock is taken.
#[test]
fn an_unknown_job_is_refused_with_the_closest_name() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    work.write_config(
        "[jobs.nightly-report]\nschedule = \"0 0 1 1 *\"\ncommand = 'true'\n\
         [jobs.warm-cache]\nschedule = \"0 0 1 1 *\"\ncommand = 'true'\n",
    );
    let typo = output(&mut trigger(&work, &redis, "nightly-reprot"));
    assert_eq!(typo.status.code(), Some(1), "{typo:?}");
    let stderr = String::from_utf8_lossy(&typo.stderr);
    assert!(
        stderr.contains("unknown job `nightly-reprot`")
            && stderr.contains("did you mean `nightly-report`?"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("warm-cache"),
        "one suggestion, not the list: {stderr}"
    );
    let keys: Vec<String> = redis.conn().keys("*").expect("KEYS");
    assert!(keys.is_empty(), "nothing written: {keys:?}");
}

#[test]
fn trigger_does_not_suppress_the_next_scheduled_occurrence() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    let runs = toml_path(&work.path("runs"));
    work.write_config(&format!(
        "[jobs.tick]\nschedule = \"*/2 * * * * *\"\nstarting_deadline = \"1s\"\ncommand = 'echo \"$SOLOCRON_OCCURRENCE $SOLOCRON_NODE $SOLOCRON_FENCE\" >> {runs}'\n"
    ));
    let _node = Node::start(&work, &redis, "n1", &[]);
    wait_until(Duration::from_secs(10), "a scheduled run", || {
        !work.lines("runs").is_empty()
    });
    let manual = output(&mut trigger(&work, &redis, "tick"));
    assert_eq!(manual.status.code(), Some(0), "{manual:?}");
    let after_manual = records(&work.lines("runs"));
    let manual_run = after_manual
        .iter()
        .find(|r| r.occurrence.starts_with("manual-"))
        .expect("the manual run is recorded")
        .clone();
    assert_eq!(manual_run.node, "cli");
    let scheduled_before = after_manual.iter().filter(|r| r.node == "n1").count();
    wait_until(
        Duration::from_secs(10),
        "the next scheduled occurrences run",
        || {
            records(&work.lines("runs"))
                .iter()
                .filter(|r| r.node == "n1")
                .count()
                >= scheduled_before + 2
        },
    );
    let all = records(&work.lines("runs"));
    let next = all
        .iter()
        .find(|r| r.node == "n1" && r.fence > manual_run.fence)
        .expect("a scheduled run after the manual one");
    assert!(!next.occurrence.starts_with("manual-"));
    let skipped = history(&redis, "tick")
        .iter()
        .filter(|e| e["outcome"] == "skipped")
        .count();
    assert_eq!(skipped, 0, "the manual run consumed or blocked nothing");
}

/// A local `trigger` gives the job the environment the daemon would: the
/// variables of `[daemon] env_file` (over its own environment's), then the
/// job's `env`, not only the `${VAR}` filled in when the file was read.
#[test]
fn a_local_trigger_gives_the_job_the_env_file_variables_as_the_daemon_does() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    std::fs::write(
        work.path("tok.env"),
        "TOKEN=fromfile\nSHARED=fromfile\nONLY_FILE=fromfile\n",
    )
    .expect("write tok.env");
    // Written to a file: what the job prints shows the env file's values
    // masked.
    let seen = work.path("seen");
    work.write_config(&format!(
        "[daemon]\nenv_file = \"tok.env\"\n\n\
         [jobs.show]\nschedule = \"0 0 1 1 *\"\n\
         command = 'echo \"interp=${{TOKEN}} runtime=$TOKEN shared=$SHARED file=$ONLY_FILE\" > {}'\n\
         env = {{ SHARED = \"fromjob\" }}\n",
        common::toml_path(&seen)
    ));
    let run = output(
        trigger(&work, &redis, "show")
            .env("TOKEN", "fromshell")
            .env_remove("ONLY_FILE"),
    );
    assert_eq!(run.status.code(), Some(0), "{run:?}");
    let seen = std::fs::read_to_string(&seen).expect("the job wrote its environment");
    assert!(
        seen.contains("interp=fromfile runtime=fromfile shared=fromjob file=fromfile"),
        "the job's environment: {seen}"
    );
}

/// Runs `solocron ARGS --config jobs.toml --redis URL` (pause, trigger --fleet...).
fn cli(work: &Workdir, redis: &RedisServer, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_solocron"))
        .args(args)
        .arg("--config")
        .arg(work.path("jobs.toml"))
        .args(["--redis", &redis.url()])
        .env_remove("SOLOCRON_LOG")
        .env_remove("SOLOCRON_LOG_FORMAT")
        .env("USER", "tester")
        .output()
        .expect("run solocron")
}

#[test]
fn trigger_of_a_paused_job_runs_it_and_says_its_occurrences_stay_paused() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    let runs = toml_path(&work.path("runs"));
    work.write_config(&format!(
        "[jobs.tick]\nschedule = \"* * * * * *\"\nstarting_deadline = \"1s\"\ncommand = 'echo \"$SOLOCRON_OCCURRENCE $SOLOCRON_NODE $SOLOCRON_FENCE\" >> {runs}'\n"
    ));
    let node = Node::start(&work, &redis, "n1", &[]);
    let paused = cli(
        &work,
        &redis,
        &["pause", "tick", "--reason", "db\nmigration \u{1b}[31mnow"],
    );
    assert!(paused.status.success(), "{paused:?}");
    node.wait_for_log(Duration::from_secs(10), "job paused fleet-wide");
    let paused_entries = || {
        history(&redis, "tick")
            .iter()
            .filter(|entry| entry["outcome"] == "paused")
            .count()
    };
    wait_until(
        Duration::from_secs(10),
        "an occurrence recorded paused",
        || paused_entries() >= 1,
    );
    let note = |output: &Output| {
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(
            stderr.contains("note: job `tick` is paused by tester@")
                && stderr.contains(": db migration  [31mnow; this manual run goes ahead")
                && stderr.contains("scheduled occurrences stay paused")
                && stderr.contains("until `solocron resume tick`")
                && !stderr.contains('\u{1b}'),
            "{stderr}"
        );
    };
    let local = output(&mut trigger(&work, &redis, "tick"));
    assert_eq!(local.status.code(), Some(0), "{local:?}");
    note(&local);
    let fleet = cli(&work, &redis, &["trigger", "tick", "--fleet"]);
    assert_eq!(fleet.status.code(), Some(0), "{fleet:?}");
    note(&fleet);
    let manual: Vec<_> = records(&work.lines("runs"))
        .into_iter()
        .filter(|run| run.occurrence.starts_with("manual-"))
        .collect();
    assert_eq!(manual.len(), 2, "both manual runs ran: {manual:?}");
    // The scheduled occurrences stay paused: more are recorded so, and
    // none from the first paused one on ran.
    let before = paused_entries();
    wait_until(
        Duration::from_secs(10),
        "another occurrence recorded paused",
        || paused_entries() > before,
    );
    let first_paused = history(&redis, "tick")
        .into_iter()
        .find(|entry| entry["outcome"] == "paused")
        .map(|entry| entry["occurrence"].clone())
        .expect("a paused entry");
    assert!(
        records(&work.lines("runs"))
            .iter()
            .filter(|run| !run.occurrence.starts_with("manual-"))
            .all(|run| run.occurrence < first_paused),
        "scheduled runs from {first_paused} on: {:?}",
        work.lines("runs")
    );
}

#[test]
fn trigger_with_log_format_json_writes_only_json_to_stderr() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    work.write_config(
        "[jobs.fails]\nschedule = \"0 0 1 1 *\"\ncommand = 'echo out; printf \"bad \\033[31mred\\rX\\n\" >&2; exit 4'\n",
    );
    let failed = output(trigger(&work, &redis, "fails").args(["--log-format", "json"]));
    assert_eq!(failed.status.code(), Some(1), "{failed:?}");
    assert_eq!(String::from_utf8_lossy(&failed.stdout), "out\n");
    let stderr = String::from_utf8_lossy(&failed.stderr);
    let events: Vec<serde_json::Value> = stderr
        .lines()
        .map(|line| {
            serde_json::from_str(line)
                .unwrap_or_else(|err| panic!("not JSON ({err}): {line:?}\n{stderr}"))
        })
        .collect();
    let with = |message: &str| {
        events
            .iter()
            .filter(|event| {
                event["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with(message))
            })
            .collect::<Vec<_>>()
    };
    let running = with("running job `fails`");
    assert_eq!(running.len(), 1, "{stderr}");
    assert!(running[0]["fence"].is_u64(), "{stderr}");
    let output_lines = with("job output");
    assert_eq!(
        output_lines.len(),
        1,
        "echoed once, not also logged: {stderr}"
    );
    assert_eq!(output_lines[0]["line"], "bad \u{1b}[31mred\rX");
    assert_eq!(output_lines[0]["stream"], "stderr");
    let outcome = with("job `fails` failed (exit 4)");
    assert_eq!(outcome.len(), 1, "{stderr}");
    assert_eq!(outcome[0]["outcome"], "failed");
    assert_eq!(outcome[0]["exit_code"], 4);
    // A busy lock is said in JSON too.
    let mut conn = redis.conn();
    let _: () = conn
        .set("{solocron:fails}:lock", "some-token other")
        .expect("SET a foreign lock");
    let busy = output(trigger(&work, &redis, "fails").args(["--log-format", "json"]));
    assert_eq!(busy.status.code(), Some(3), "{busy:?}");
    for line in String::from_utf8_lossy(&busy.stderr).lines() {
        let event: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|err| panic!("not JSON ({err}): {line:?}"));
        assert_eq!(event["level"], "WARN", "{line}");
    }
}

#[test]
fn debug_logging_leaves_third_party_lines_and_a_hooks_host_out_unless_named() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    work.write_config(
        "[jobs.hook]\nschedule = \"0 0 1 1 *\"\ntimeout = \"3s\"\nhttp = { url = \"http://${HOOK_SECRET}.invalid:1/\" }\n",
    );
    let run = |filter: &str| {
        let out = output(
            trigger(&work, &redis, "hook")
                .env("HOOK_SECRET", "s3cr3t-c0ffee")
                .env("SOLOCRON_LOG", filter),
        );
        assert_eq!(out.status.code(), Some(1), "the hook fails: {out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    for filter in ["debug", "trace"] {
        let said = run(filter);
        assert!(!said.contains("s3cr3t"), "SOLOCRON_LOG={filter}:\n{said}");
        assert!(!said.contains("starting new connection"), "{said}");
        assert!(said.contains("run finished"), "{said}");
    }
    // Asked for by name, the client's debug lines are there.
    let named = run("debug,reqwest=debug");
    assert!(named.contains("starting new connection"), "{named}");
}

/// `trigger JOB --occurrence T`: a make-up run sees the
/// occurrence it makes up (`SOLOCRON_OCCURRENCE`, the attempt after the
/// occurrence's last), is recorded as an attempt of it with `by`, and is
/// refused (exit 2, saying why) for an instant that is not an occurrence,
/// for the future, and for an occurrence that succeeded unless `--force`;
/// `--since/--until` makes up each one that did not succeed, oldest first.
/// Breaks if a make-up run were named `manual-…`, counted attempts wrong,
/// or ran what it must refuse.
#[test]
fn a_make_up_run_runs_as_its_occurrence_and_refuses_what_it_must() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    let seen = toml_path(&work.path("seen"));
    work.write_config(&format!(
        "[jobs.five]\nschedule = \"*/5 * * * * *\"\n\
         command = 'echo \"$SOLOCRON_OCCURRENCE $SOLOCRON_ATTEMPT\" >> {seen}'\n"
    ));
    let now = chrono::Utc::now().timestamp();
    let t = now - 30 - now.rem_euclid(5);
    let name = |secs: i64| {
        chrono::DateTime::from_timestamp(secs, 0)
            .expect("valid")
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    };
    let make_up = |args: &[&str]| output(trigger(&work, &redis, "five").args(args));
    let first = make_up(&["--occurrence", &name(t)]);
    assert_eq!(first.status.code(), Some(0), "{first:?}");
    assert_eq!(work.lines("seen"), vec![format!("{} 1", name(t))]);
    let again = make_up(&["--occurrence", &name(t)]);
    assert_eq!(again.status.code(), Some(2), "{again:?}");
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("already succeeded; add --force"),
        "{again:?}"
    );
    let forced = make_up(&["--occurrence", &name(t), "--force"]);
    assert_eq!(forced.status.code(), Some(0), "{forced:?}");
    assert_eq!(work.lines("seen").last(), Some(&format!("{} 2", name(t))));
    let off = make_up(&["--occurrence", &name(t + 1)]);
    assert_eq!(off.status.code(), Some(2), "{off:?}");
    assert!(
        String::from_utf8_lossy(&off.stderr).contains("is not an occurrence of job `five`"),
        "{off:?}"
    );
    let future = make_up(&["--occurrence", &name(now + 60 - now.rem_euclid(5))]);
    assert_eq!(future.status.code(), Some(2), "{future:?}");
    assert!(
        String::from_utf8_lossy(&future.stderr).contains("is in the future"),
        "{future:?}"
    );
    // The range: t-10 and t-5 run, oldest first; t succeeded: skipped.
    let range = make_up(&["--since", &name(t - 10), "--until", &name(t)]);
    assert_eq!(range.status.code(), Some(0), "{range:?}");
    let lines = work.lines("seen");
    assert_eq!(
        lines[2..],
        [format!("{} 1", name(t - 10)), format!("{} 1", name(t - 5))],
        "{lines:?}"
    );
    // Recorded as attempts of their occurrences, with who ran them.
    let entries = history(&redis, "five");
    let of_t: Vec<_> = entries
        .iter()
        .filter(|entry| entry.get("occurrence") == Some(&name(t)))
        .collect();
    assert_eq!(of_t.len(), 2, "{entries:?}");
    assert!(
        of_t.iter()
            .all(|entry| entry.get("by").is_some_and(|by| by.contains('@'))
                && entry.get("outcome").map(String::as_str) == Some("succeeded")),
        "{of_t:?}"
    );
}

/// `trigger JOB --occurrence T --fleet`: the command checks the
/// occurrence (refusing the future, exit 2), and a running daemon makes
/// it up as T, attempt 1, recorded with `by`. Breaks if the daemon ran it
/// as `manual-…` or another attempt.
#[test]
fn a_fleet_make_up_run_is_checked_here_and_run_by_a_daemon_as_its_occurrence() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    let seen = toml_path(&work.path("seen"));
    work.write_config(&format!(
        "[jobs.yearly]\nschedule = \"0 0 1 * *\"\n\
         command = 'echo \"$SOLOCRON_OCCURRENCE $SOLOCRON_ATTEMPT $SOLOCRON_NODE\" >> {seen}'\n"
    ));
    let _node = Node::start(&work, &redis, "d1", &[]);
    let fleet = |args: &[&str]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_solocron"));
        command
            .args(["trigger", "yearly", "--fleet", "--config"])
            .arg(work.path("jobs.toml"))
            .args(["--redis", &redis.url()])
            .args(args);
        output(&mut command)
    };
    let future = fleet(&["--occurrence", "2099-01-01T00:00:00Z"]);
    assert_eq!(future.status.code(), Some(2), "{future:?}");
    let made_up = fleet(&["--occurrence", "2026-11-01T00:00:00Z"]);
    assert_eq!(made_up.status.code(), Some(0), "{made_up:?}");
    assert_eq!(
        work.lines("seen"),
        vec!["2026-11-01T00:00:00Z 1 d1".to_string()]
    );
    let entries = history(&redis, "yearly");
    let entry = entries
        .iter()
        .find(|entry| entry.get("occurrence").map(String::as_str) == Some("2026-11-01T00:00:00Z"))
        .unwrap_or_else(|| panic!("{entries:?}"));
    assert_eq!(
        entry.get("attempt").map(String::as_str),
        Some("1"),
        "{entry:?}"
    );
    assert!(
        entry.get("by").is_some_and(|by| by.contains('@')),
        "{entry:?}"
    );
}
