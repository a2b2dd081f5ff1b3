//! The daemon as a process: SIGTERM drain, failing closed without Redis,
//! and exit codes for a bad config.

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::{
    Node, RedisServer, Workdir, free_port, history, is_alive, read_pid, toml_path, wait_until,
};
use redis::Commands as _;

#[test]
fn sigterm_interrupts_a_long_run_after_the_grace_releases_the_lock_and_exits_0() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    work.write_config(&format!(
        r#"
[daemon]
shutdown_grace = "1s"

[jobs.long]
{}
command = 'echo $$ > {}; exec sleep 60'
"#,
        common::caught_up_at_once(&redis, "long"),
        toml_path(&work.path("pid"))
    ));
    let mut node = Node::start(&work, &redis, "n1", &[]);
    wait_until(Duration::from_secs(10), "the job started", || {
        read_pid(&work, "pid").is_some()
    });
    let pid = read_pid(&work, "pid").expect("pid");
    node.signal("TERM");
    let status = node.wait_exit(Duration::from_secs(15));
    assert!(
        status.success(),
        "exit 0 after a drain, got {status:?}; log:\n{}",
        node.log()
    );
    assert!(!is_alive(pid), "the job was stopped");
    let entries = history(&redis, "long");
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0]["outcome"], "interrupted");
    assert_eq!(entries[0]["node"], "n1");
    let lock: Option<String> = redis.conn().get("{solocron:long}:lock").expect("GET");
    assert_eq!(lock, None, "the lock is released at shutdown");
}

#[test]
fn sigterm_lets_a_run_finish_within_the_grace() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    work.write_config(&format!(
        r#"
[daemon]
shutdown_grace = "20s"

[jobs.short]
{}
command = 'echo $$ > {}; sleep 1'
"#,
        common::caught_up_at_once(&redis, "short"),
        toml_path(&work.path("pid"))
    ));
    let mut node = Node::start(&work, &redis, "n1", &[]);
    wait_until(Duration::from_secs(10), "the job started", || {
        read_pid(&work, "pid").is_some()
    });
    node.signal("TERM");
    let status = node.wait_exit(Duration::from_secs(15));
    assert!(status.success(), "{status:?}");
    assert_eq!(history(&redis, "short")[0]["outcome"], "succeeded");
}

#[test]
fn without_redis_nothing_runs_and_the_node_recovers_when_redis_comes() {
    let port = free_port();
    let work = Workdir::new();
    let runs = toml_path(&work.path("runs"));
    work.write_config(&format!(
        r#"
[jobs.tick]
schedule = "* * * * * *"
starting_deadline = "2s"
command = 'echo "$SOLOCRON_OCCURRENCE $SOLOCRON_NODE $SOLOCRON_FENCE" >> {runs}'
"#
    ));
    let node = Node::start_with_url(&work, &format!("redis://127.0.0.1:{port}/"), "n1", &[]);
    node.wait_for_log(Duration::from_secs(15), "redis unreachable");
    // The outage itself: Redis stays absent for 4 s, so that occurrences
    // come and pass their 2 s deadline (nothing outside the node shows them).
    std::thread::sleep(Duration::from_secs(4));
    assert!(work.lines("runs").is_empty(), "never run without the lock");
    let _redis = RedisServer::start_on(port);
    node.wait_for_log(Duration::from_secs(20), "redis reachable again after");
    let missed: u64 = node
        .log()
        .lines()
        .find(|line| line.contains("redis reachable again after"))
        .and_then(|line| line.split(" missed=").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|count| count.parse().ok())
        .expect("the line counts the missed occurrences");
    assert!(
        missed >= 2,
        "at least two occurrences passed their deadline: {missed}"
    );
    wait_until(
        Duration::from_secs(20),
        "runs resume once redis is back",
        || !work.lines("runs").is_empty(),
    );
}

fn solocron(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_solocron"))
        .args(args)
        .env_remove("SOLOCRON_CONFIG")
        .output()
        .expect("run solocron")
}

#[test]
fn a_broken_config_exits_78_for_run_and_1_for_check_naming_file_line_and_key() {
    let work = Workdir::new();
    let path = work.write_config(
        "[jobs.x]\nschedule = \"* * * * *\"\ncommand = \"true\"\ntimezone = \"Mars/Olympus\"\n",
    );
    let path = path.to_str().expect("utf-8 path");
    let run = solocron(&["run", "--config", path, "--node-id", "n1"]);
    assert_eq!(run.status.code(), Some(78), "{run:?}");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(stderr.contains(&format!("{path}:4:")), "{stderr}");
    assert!(
        stderr.contains("timezone") && stderr.contains("Mars/Olympus"),
        "{stderr}"
    );
    let check = solocron(&["check", "--config", path]);
    assert_eq!(check.status.code(), Some(1), "{check:?}");
    let missing = solocron(&["run", "--config", "/nonexistent/jobs.toml"]);
    assert_eq!(missing.status.code(), Some(78));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/jobs.toml"));
}

#[test]
fn check_prints_the_next_three_occurrences_in_the_zone_and_utc() {
    let work = Workdir::new();
    let path = work.write_config(
        "[jobs.nightly-report]\nschedule = \"0 2 * * *\"\ntimezone = \"Asia/Tashkent\"\ncommand = \"true\"\n",
    );
    let out = solocron(&["check", "--config", path.to_str().expect("utf-8 path")]);
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("nightly-report"), "{stdout}");
    let lines: Vec<&str> = stdout
        .lines()
        .filter(|line| line.contains("02:00:00 +05"))
        .collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    for line in lines {
        assert!(
            line.contains("T21:00:00Z"),
            "local 02:00 in Tashkent is 21:00Z: {line}"
        );
    }
}

#[test]
fn the_example_jobs_toml_passes_check() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/jobs.toml");
    let out = solocron(&["check", "--config", example]);
    assert!(out.status.success(), "{out:?}");
}

/// A node frozen (SIGSTOP) from before an occurrence of a job due every 5 s
/// until 2 s after it. Jobs record `OCCURRENCE NODE FENCE START_EPOCH_SECONDS`.
struct Frozen {
    redis: RedisServer,
    work: Workdir,
    node: Node,
    name: String,
    occurrence: chrono::DateTime<chrono::Utc>,
}

fn freeze_across_an_occurrence(starting_deadline: &str) -> Frozen {
    let redis = RedisServer::start();
    let work = Workdir::new();
    let runs = toml_path(&work.path("runs"));
    work.write_config(&format!(
        r#"
[jobs.five]
schedule = "*/5 * * * * *"
starting_deadline = "{starting_deadline}"
command = 'echo "$SOLOCRON_OCCURRENCE $SOLOCRON_NODE $SOLOCRON_FENCE $(date +%s.%N)" >> {runs}'
"#
    ));
    // The occurrence to freeze across, at least 2 s away; everything before
    // it is marked as decided, so the node's start-up catch-up is refused at
    // once and no run is in progress when the node is frozen.
    let next = (chrono::Utc::now().timestamp() + 2) / 5 * 5 + 5;
    let occurrence = chrono::DateTime::from_timestamp(next, 0).expect("valid instant");
    let _: () = redis::cmd("HSET")
        .arg("{solocron:five}:state")
        .arg("last_occ")
        .arg(occurrence.timestamp_millis() - 1)
        .arg("last_node")
        .arg("seed")
        .query(&mut redis.conn())
        .expect("HSET");
    let node = Node::start(&work, &redis, "n1", &[]);
    // Frozen only once the job is on the timetable: a node frozen before
    // would compute its first occurrence after the fault, not live through it.
    node.wait_for_log(Duration::from_secs(10), "jobs scheduled");
    node.signal("STOP");
    // The fault itself: stay frozen until 2 s past the occurrence.
    common::cluster::sleep_until(occurrence + chrono::TimeDelta::seconds(2));
    node.signal("CONT");
    let name = occurrence.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    node.wait_for_log(Duration::from_secs(5), &format!("occurrence={name}"));
    Frozen {
        redis,
        work,
        node,
        name,
        occurrence,
    }
}

#[test]
fn a_node_that_wakes_late_still_claims_within_starting_deadline() {
    let frozen = freeze_across_an_occurrence("4s");
    let name = &frozen.name;
    frozen.node.wait_for_log(
        Duration::from_secs(5),
        &format!("claim won job=five occurrence={name}"),
    );
    wait_until(Duration::from_secs(5), "the late run is recorded", || {
        frozen
            .work
            .lines("runs")
            .iter()
            .any(|line| line.starts_with(name.as_str()))
    });
    let runs = frozen.work.lines("runs");
    let run = runs
        .iter()
        .find(|line| line.starts_with(name.as_str()))
        .expect("recorded");
    let started: f64 = run
        .split_whitespace()
        .nth(3)
        .and_then(|s| s.parse().ok())
        .expect("start time");
    assert!(
        started >= frozen.occurrence.timestamp() as f64 + 1.9,
        "it ran late, after the freeze: {run}"
    );
}

#[test]
fn a_node_that_wakes_after_starting_deadline_logs_the_occurrence_as_missed() {
    let frozen = freeze_across_an_occurrence("1s");
    let name = &frozen.name;
    let log = frozen.node.log();
    assert!(
        log.lines().any(
            |line| line.contains("occurrence missed: past its claim deadline")
                && line.contains(name.as_str())
        ),
        "{log}"
    );
    assert!(
        !log.contains(&format!("claim won job=five occurrence={name}")),
        "{log}"
    );
    let runs = frozen.work.lines("runs");
    assert!(
        !runs.iter().any(|line| line.starts_with(name.as_str())),
        "{runs:?}"
    );
    // The miss is a decision: recorded once in the history.
    wait_until(Duration::from_secs(5), "the miss is recorded", || {
        history(&frozen.redis, "five")
            .iter()
            .any(|entry| entry["occurrence"] == *name && entry["outcome"] == "missed")
    });
}

#[test]
fn a_node_starting_after_an_unclaimed_occurrence_runs_it_late_once() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    let runs = toml_path(&work.path("runs"));
    work.write_config(&format!(
        r#"
[jobs.minutely]
schedule = "* * * * *"
starting_deadline = "1m"
command = 'echo "$SOLOCRON_OCCURRENCE $SOLOCRON_NODE $SOLOCRON_FENCE" >> {runs}'
"#
    ));
    // Keep clear of a minute boundary while three nodes start and stop.
    wait_until(
        Duration::from_secs(30),
        "not near a minute boundary",
        || chrono::Utc::now().timestamp() % 60 < 35,
    );
    let started = chrono::Utc::now();
    // The job ran before (its state names a decided occurrence, the one
    // before): a catch-up is for a job the fleet already had, not a new one.
    let _: () = redis::cmd("HSET")
        .arg("{solocron:minutely}:state")
        .arg("last_occ")
        .arg((started.timestamp() / 60 * 60 - 60) * 1000)
        .arg("last_node")
        .arg("seed")
        .query(&mut redis.conn())
        .expect("HSET");
    let mut first = Node::start(&work, &redis, "n1", &[]);
    wait_until(Duration::from_secs(10), "the catch-up run", || {
        !work.lines("runs").is_empty()
    });
    let record = common::records(&work.lines("runs"))[0].clone();
    let expected =
        chrono::DateTime::from_timestamp(started.timestamp() / 60 * 60, 0).expect("valid instant");
    assert_eq!(
        record.occurrence,
        expected.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    );
    assert_eq!(record.node, "n1");
    // A second node starting now leaves the catch-up to the backstop (n1);
    // when n1 stops, n2 takes the backstop over, and its catch-up finds the
    // occurrence decided and says by whom.
    let mut second = Node::start(&work, &redis, "n2", &[]);
    second.wait_for_log(Duration::from_secs(10), "nodes in line changed");
    first.signal("TERM");
    first.wait_exit(Duration::from_secs(10));
    second.wait_for_log(Duration::from_secs(5), "catch_up=true");
    wait_until(
        Duration::from_secs(5),
        "n2 found the occurrence decided",
        || {
            second.log().lines().any(|line| {
                line.contains(&format!(
                    "job=minutely occurrence={} node=n2",
                    record.occurrence
                )) && (line.contains("winner=n1") || line.contains("decided_by=n1"))
            })
        },
    );
    let again = common::records(&work.lines("runs"));
    assert_eq!(
        again
            .iter()
            .filter(|r| r.occurrence == record.occurrence)
            .count(),
        1,
        "{again:?}"
    );
    // n1 restarted alone (the backstop again) finds its own decision: it
    // says so, not that it lost the claim to itself.
    second.signal("TERM");
    second.wait_exit(Duration::from_secs(10));
    let restarted = Node::start(&work, &redis, "n1", &[]);
    restarted.wait_for_log(
        Duration::from_secs(5),
        &format!(
            "occurrence already decided by this node before its restart; not claimed again \
             job=minutely occurrence={} node=n1",
            record.occurrence
        ),
    );
    assert!(
        !restarted.log().contains("claim lost"),
        "{}",
        restarted.log()
    );
}

/// One timer serves every job: 60 jobs on three periods, due together or
/// apart, each run exactly at its own occurrences.
#[test]
fn sixty_jobs_on_one_timer_each_run_every_occurrence_once() {
    use chrono::{DateTime, Timelike as _, Utc};
    let redis = RedisServer::start();
    let work = Workdir::new();
    let periods = [1u32, 2, 3];
    let mut config = String::new();
    for i in 0..60 {
        let period = periods[i % 3];
        config.push_str(&format!(
            "[jobs.j{i:02}]\nschedule = \"*/{period} * * * * *\"\nargv = [\"true\"]\n"
        ));
    }
    work.write_config(&config);
    let _node = Node::start(&work, &redis, "n1", &[]);
    let start =
        Utc::now().with_nanosecond(0).expect("whole second") + chrono::TimeDelta::seconds(2);
    let end = start + chrono::TimeDelta::seconds(6);
    let name = |at: DateTime<Utc>| at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let window: Vec<DateTime<Utc>> = (0..=6)
        .map(|s| start + chrono::TimeDelta::seconds(s))
        .collect();
    wait_until(
        Duration::from_secs(20),
        "every job recorded its last occurrence",
        || {
            (0..60).all(|i| {
                let period = periods[i % 3];
                let last = window.iter().rev().find(|at| at.second() % period == 0);
                last.is_none_or(|last| {
                    history(&redis, &format!("j{i:02}"))
                        .iter()
                        .any(|entry| entry.get("occurrence") == Some(&name(*last)))
                })
            })
        },
    );
    for i in 0..60 {
        let period = periods[i % 3];
        let job = format!("j{i:02}");
        let expected: Vec<String> = window
            .iter()
            .filter(|at| at.second() % period == 0)
            .map(|at| name(*at))
            .collect();
        let mut ran: Vec<String> = history(&redis, &job)
            .into_iter()
            .filter(|entry| entry.get("outcome").map(String::as_str) == Some("succeeded"))
            .filter_map(|entry| entry.get("occurrence").cloned())
            .filter(|occurrence| (name(start)..=name(end)).contains(occurrence))
            .collect();
        ran.sort();
        assert_eq!(ran, expected, "{job} (every {period} s)");
    }
}

/// A soft open files limit left low by a shell or an init system (here
/// 16, with a hard limit far above it) made every run of a busy second
/// fail with "Too many open files", recorded `failed`, though the process
/// was allowed more. The daemon raises its soft limit to the hard one,
/// and each job still starts with the 16 it was given.
#[test]
fn a_low_soft_open_files_limit_costs_no_run_and_jobs_keep_it() {
    const JOBS: usize = 30;
    let redis = RedisServer::start();
    let work = Workdir::new();
    let mut toml = String::new();
    for index in 0..JOBS {
        toml.push_str(&format!(
            "[jobs.j{index}]\nschedule = \"* * * * * *\"\ncommand = 'echo \"$(ulimit -Sn) $(ulimit -Hn)\" >> {}'\n",
            work.path("limits").display()
        ));
    }
    let config = work.write_config(&toml);
    let log = std::fs::File::create(work.path("n1.log")).expect("create the log");
    // Stopped by its PID also when an assertion fails first.
    struct Stopped(std::process::Child);
    impl Drop for Stopped {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut daemon = Stopped(
        Command::new("sh")
            .args(["-c", "ulimit -Sn 16 && exec \"$0\" \"$@\""])
            .arg(common::solocron_bin())
            .args(["run", "--node-id", "n1", "--config"])
            .arg(&config)
            .args(["--redis", &redis.url()])
            .env("SOLOCRON_LOG", "info")
            .env_remove("SOLOCRON_LOG_FORMAT")
            .env_remove("JOURNAL_STREAM")
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().expect("clone the log"))
            .stderr(log)
            .spawn()
            .expect("start solocron under sh"),
    );
    let outcomes = |outcome: &str| {
        (0..JOBS)
            .filter(|index| {
                common::history(&redis, &format!("j{index}"))
                    .iter()
                    .any(|entry| entry["outcome"] == outcome)
            })
            .count()
    };
    wait_until(
        Duration::from_secs(30),
        "every job ran at least twice",
        || {
            (0..JOBS).all(|index| {
                common::history(&redis, &format!("j{index}"))
                    .iter()
                    .filter(|entry| entry["outcome"] == "succeeded")
                    .count()
                    >= 2
            })
        },
    );
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(daemon.0.id()).expect("a pid")),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = daemon.0.wait();
    let log = std::fs::read_to_string(work.path("n1.log")).unwrap_or_default();
    assert_eq!(outcomes("failed"), 0, "no run failed:\n{log}");
    let limits = work.lines("limits");
    assert!(limits.len() >= 2 * JOBS, "{limits:?}");
    assert!(
        limits.iter().all(|line| line.starts_with("16 ")),
        "each job starts with the soft limit the daemon was given: {limits:?}"
    );
}

/// Every live node drained: nobody claims, and the occurrences are
/// recorded `missed` as such, each once, by one drained node that logs
/// why; nothing blames Redis. Before, they were recorded only after an
/// undrain, as "redis was unreachable or every node was down or drained".
#[test]
fn a_fully_drained_fleet_records_its_missed_occurrences_as_drained() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    let runs = toml_path(&work.path("runs"));
    let config = work.write_config(&format!(
        "[jobs.tick]\nschedule = \"* * * * * *\"\nstarting_deadline = \"1s\"\n\
         command = 'echo \"$SOLOCRON_OCCURRENCE\" >> {runs}'\n"
    ));
    let nodes = [
        Node::start(&work, &redis, "n1", &[]),
        Node::start(&work, &redis, "n2", &[]),
    ];
    let config = toml_path(&config);
    for node in &nodes {
        let drain = solocron(&[
            "drain",
            "--node",
            &node.id,
            "--config",
            &config,
            "--redis",
            &redis.url(),
        ]);
        assert!(drain.status.success(), "{drain:?}");
        node.wait_for_log(Duration::from_secs(10), "draining:");
    }
    let drained = |entry: &std::collections::HashMap<String, String>| {
        entry.get("outcome").map(String::as_str) == Some("missed")
            && entry
                .get("error")
                .is_some_and(|error| error.contains("every live node is drained"))
    };
    wait_until(
        Duration::from_secs(15),
        "two occurrences recorded missed as drained",
        || {
            history(&redis, "tick")
                .iter()
                .filter(|entry| drained(entry))
                .count()
                >= 2
        },
    );
    let entries = history(&redis, "tick");
    let missed: Vec<&String> = entries
        .iter()
        .filter(|entry| drained(entry))
        .filter_map(|entry| entry.get("occurrence"))
        .collect();
    let mut once = missed.clone();
    once.dedup();
    assert_eq!(once, missed, "each once: {entries:?}");
    let ran = work.lines("runs");
    assert!(
        missed.iter().all(|at| !ran.contains(at)),
        "{ran:?} {missed:?}"
    );
    let logs = format!("{}\n{}", nodes[0].log(), nodes[1].log());
    for at in &missed {
        let told = logs
            .lines()
            .filter(|line| {
                line.contains("occurrence missed: every live node is drained")
                    && line.contains(&format!("occurrence={at}"))
            })
            .count();
        assert_eq!(told, 1, "one line for {at}:\n{logs}");
    }
    assert!(!logs.contains("redis unreachable"), "{logs}");
}
