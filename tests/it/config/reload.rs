//! SIGHUP reloads on a running daemon process: a valid change applies, a
//! broken or missing file changes nothing.

use crate::common;

use std::time::Duration;

use chrono::{DateTime, Utc};
use common::{Node, RedisServer, Workdir, history, toml_path, wait_until};

fn job(name: &str, tag: &str, runs: &str) -> String {
    format!(
        "[jobs.{name}]\nschedule = \"* * * * * *\"\nstarting_deadline = \"2s\"\ncommand = 'echo \"$SOLOCRON_OCCURRENCE {tag}\" >> {runs}'\n"
    )
}

/// Occurrences (as instants) recorded with `tag`.
fn runs_tagged(work: &Workdir, tag: &str) -> Vec<DateTime<Utc>> {
    work.lines("runs")
        .iter()
        .filter_map(|line| line.split_once(' '))
        .filter(|(_, t)| *t == tag)
        .filter_map(|(occ, _)| DateTime::parse_from_rfc3339(occ).ok())
        .map(|at| at.with_timezone(&Utc))
        .collect()
}

#[test]
fn reload_adds_removes_and_changes_jobs_and_lets_a_removed_run_finish() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    let runs = toml_path(&work.path("runs"));
    let long =
        "[jobs.long]\nschedule = \"* * * * *\"\nstarting_deadline = \"1m\"\ncommand = 'sleep 3'\n";
    work.write_config(&format!(
        "{}{}{long}",
        job("a", "a1", &runs),
        job("b", "b", &runs)
    ));
    // `long` ran the minute before (a catch-up at start is for a job the
    // fleet decided before): the node catches this minute's up at start.
    wait_until(Duration::from_secs(5), "not near a minute boundary", || {
        Utc::now().timestamp() % 60 < 57
    });
    let _: () = redis::cmd("HSET")
        .arg("{solocron:long}:state")
        .arg("last_occ")
        .arg((Utc::now().timestamp() / 60 * 60 - 60) * 1000)
        .arg("last_node")
        .arg("seed")
        .query(&mut redis.conn())
        .expect("HSET");
    let node = Node::start(&work, &redis, "n1", &[]);
    wait_until(Duration::from_secs(10), "a and b run", || {
        !runs_tagged(&work, "a1").is_empty() && !runs_tagged(&work, "b").is_empty()
    });
    node.wait_for_log(Duration::from_secs(5), "claim won job=long");
    // a changes, b and long go, c comes.
    work.write_config(&format!(
        "{}{}",
        job("a", "a2", &runs),
        job("c", "c", &runs)
    ));
    node.signal("HUP");
    node.wait_for_log(Duration::from_secs(5), "config reloaded");
    let reloaded = Utc::now();
    let log = node.log();
    let line = log
        .lines()
        .find(|line| line.contains("config reloaded"))
        .expect("summary line");
    assert!(line.contains(r#"added=["c"]"#), "{line}");
    assert!(line.contains(r#"removed=["b", "long"]"#), "{line}");
    assert!(line.contains(r#"changed=["a"]"#), "{line}");
    assert!(line.contains("unchanged=0"), "{line}");
    wait_until(Duration::from_secs(10), "c and the new a run", || {
        runs_tagged(&work, "c").len() >= 3 && runs_tagged(&work, "a2").len() >= 3
    });
    let settled = reloaded + chrono::TimeDelta::seconds(1);
    assert!(
        runs_tagged(&work, "b").iter().all(|at| *at <= settled),
        "b still scheduled after the reload"
    );
    assert!(
        runs_tagged(&work, "a1").iter().all(|at| *at <= settled),
        "old a still scheduled after the reload"
    );
    // The removed long job's run went on to its end.
    wait_until(
        Duration::from_secs(10),
        "the removed job's run finished",
        || !history(&redis, "long").is_empty(),
    );
    assert_eq!(history(&redis, "long")[0]["outcome"], "succeeded");
}

#[test]
fn a_broken_or_missing_file_on_reload_keeps_the_old_schedule_and_names_the_position() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    let runs = toml_path(&work.path("runs"));
    let config = work.write_config(&job("a", "a", &runs));
    let node = Node::start(&work, &redis, "n1", &[]);
    wait_until(Duration::from_secs(10), "a runs", || {
        !runs_tagged(&work, "a").is_empty()
    });
    let rewritten = work.write_config(
        "[jobs.a]\nschedule = \"* * * * * *\"\ncommand = \"true\"\ntimeout = \"soon\"\n",
    );
    assert_eq!(rewritten, config);
    node.signal("HUP");
    node.wait_for_log(Duration::from_secs(5), "reload failed");
    let log = node.log();
    let failure = log
        .lines()
        .find(|line| line.contains("reload failed"))
        .expect("failure line");
    assert!(
        failure.contains(&format!("{}:4:", config.display())),
        "file:line:col: {failure}"
    );
    assert!(failure.contains("timeout"), "{failure}");
    let failed_at = Utc::now();
    wait_until(
        Duration::from_secs(10),
        "the old schedule keeps running",
        || {
            runs_tagged(&work, "a")
                .iter()
                .any(|at| *at > failed_at + chrono::TimeDelta::seconds(1))
        },
    );
    // A file that disappeared is the same: an error, the schedule stays.
    std::fs::remove_file(&config).expect("remove");
    node.signal("HUP");
    wait_until(Duration::from_secs(5), "a second failure is logged", || {
        node.log().matches("reload failed").count() == 2
    });
    let gone_at = Utc::now();
    wait_until(Duration::from_secs(10), "still running", || {
        runs_tagged(&work, "a")
            .iter()
            .any(|at| *at > gone_at + chrono::TimeDelta::seconds(1))
    });
}

#[test]
fn an_empty_or_truncated_file_on_reload_keeps_the_old_schedule() {
    // Issue #9 item 5: an empty file used to load as "0 jobs" and a SIGHUP
    // removed every job (and fell back to 127.0.0.1:6379).
    let redis = RedisServer::start();
    let work = Workdir::new();
    let runs = toml_path(&work.path("runs"));
    let config = work.write_config(&job("a", "a", &runs));
    let node = Node::start(&work, &redis, "n1", &[]);
    wait_until(Duration::from_secs(10), "a runs", || {
        !runs_tagged(&work, "a").is_empty()
    });
    for (attempt, text) in [
        (1, String::new()),
        (2, "[redis]\nurl = \"redis://127.0.0.1:1/\"\n".to_string()),
    ] {
        std::fs::write(&config, text).expect("truncate jobs.toml");
        node.signal("HUP");
        wait_until(Duration::from_secs(5), "the reload is refused", || {
            node.log().matches("reload failed").count() == attempt
        });
        let refused_at = Utc::now();
        wait_until(
            Duration::from_secs(10),
            "the old schedule keeps running",
            || {
                runs_tagged(&work, "a")
                    .iter()
                    .any(|at| *at > refused_at + chrono::TimeDelta::seconds(1))
            },
        );
    }
    let log = node.log();
    assert!(log.contains("the file is empty"), "{log}");
    assert!(
        log.contains("no job: the file defines no `[jobs.NAME]` table"),
        "{log}"
    );
    assert!(!log.contains("config reloaded"), "{log}");
}

#[test]
fn a_reload_reads_the_env_file_again_so_a_new_secret_needs_no_restart() {
    // Issue #9 item 7: the daemon's environment is fixed at start; a
    // rotated or added secret reaches `${VAR}` through `[daemon] env_file`.
    let redis = RedisServer::start();
    let work = Workdir::new();
    let seen = toml_path(&work.path("seen"));
    let env_file = work.path("secrets.env");
    std::fs::write(&env_file, "OLD_SECRET=first\n").expect("write the env file");
    let text = |secret: &str| {
        format!(
            "[daemon]\nenv_file = \"{}\"\n\n[jobs.a]\nschedule = \"* * * * * *\"\ncommand = 'echo \"${{{secret}}} $FROM_FILE\" >> {seen}'\n",
            toml_path(&env_file)
        )
    };
    work.write_config(&text("OLD_SECRET"));
    let node = Node::start(&work, &redis, "n1", &[]);
    wait_until(
        Duration::from_secs(10),
        "a runs with the first secret",
        || {
            work.lines("seen")
                .iter()
                .any(|line| line.starts_with("first"))
        },
    );
    std::fs::write(
        &env_file,
        "OLD_SECRET=first\nNEW_SECRET=second\nFROM_FILE=also-for-the-job\n",
    )
    .expect("rotate the env file");
    work.write_config(&text("NEW_SECRET"));
    node.signal("HUP");
    node.wait_for_log(Duration::from_secs(5), "config reloaded");
    wait_until(
        Duration::from_secs(10),
        "a runs with the new secret",
        || {
            work.lines("seen")
                .iter()
                .any(|line| line == "second also-for-the-job")
        },
    );
    assert!(
        !node.log().contains("second"),
        "the secret's value is never logged"
    );
}

/// A job renamed in `jobs.toml` (`[jobs.slow]` -> `[jobs.slow2]`) while its
/// run goes on: the new name has no decision in Redis yet, so the reload
/// takes no catch-up occurrence of it, and the occurrence the old name is
/// running is not started a second time beside it. The new name first
/// runs at its next occurrence. Before, the reload claimed the current
/// occurrence under the new name ("catch-up") and ran it again, overlapping.
#[test]
fn a_job_renamed_during_its_run_does_not_run_that_occurrence_again() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    let runs = toml_path(&work.path("runs"));
    let slow = |name: &str| {
        format!(
            "[jobs.{name}]\nschedule = \"*/5 * * * * *\"\nstarting_deadline = \"5s\"\n\
             command = 'echo \"$SOLOCRON_OCCURRENCE $SOLOCRON_JOB\" >> {runs}; sleep 2'\n"
        )
    };
    work.write_config(&slow("slow"));
    let node = Node::start(&work, &redis, "n1", &[]);
    // Renamed while a run of `slow` is going on (it runs 2 s).
    wait_until(Duration::from_secs(15), "slow runs", || {
        !work.lines("runs").is_empty()
    });
    let first = work.lines("runs")[0].clone();
    work.write_config(&slow("slow2"));
    node.signal("HUP");
    node.wait_for_log(Duration::from_secs(5), "config reloaded");
    wait_until(Duration::from_secs(15), "slow2 runs", || {
        work.lines("runs")
            .iter()
            .any(|line| line.ends_with(" slow2"))
    });
    let lines = work.lines("runs");
    let occurrence = |line: &str| line.split(' ').next().unwrap_or_default().to_string();
    let renamed: Vec<String> = lines
        .iter()
        .filter(|line| line.ends_with(" slow2"))
        .map(|line| occurrence(line))
        .collect();
    assert!(
        !renamed.contains(&occurrence(&first)),
        "the occurrence `slow` ran was run again as `slow2`: {lines:?}"
    );
    assert!(node.log().contains("no catch-up run"), "{}", node.log());
    assert!(history(&redis, "slow2").len() <= renamed.len() + 1);
}

/// A reload that changes what the daemon set up at start (`[redis]`,
/// `history_max`, `metrics_listen`) keeps the old values and says so,
/// naming each changed key and never a value; the jobs run on as before.
#[test]
fn a_reload_that_changes_restart_only_settings_names_the_keys_and_keeps_the_old_values() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    let runs = toml_path(&work.path("runs"));
    let text = |url: &str, redis_extra: &str, daemon_extra: &str| {
        format!(
            "[redis]\nurl = \"{url}\"\n{redis_extra}\n[daemon]\nclock = \"local\"\n{daemon_extra}\n{}",
            job("a", "a", &runs)
        )
    };
    let config = work.write_config(&text(&redis.url(), "", ""));
    // No `--redis`: the file's `[redis]` is the one in use.
    let node = Node::start_with_args(&work, "n1", &["--config", &toml_path(&config)], &[]);
    wait_until(Duration::from_secs(10), "a runs", || {
        !runs_tagged(&work, "a").is_empty()
    });
    let restart_lines = |node: &Node| -> Vec<String> {
        node.log()
            .lines()
            .filter(|line| line.contains("take effect at the next restart"))
            .map(str::to_string)
            .collect()
    };
    // Only the acknowledgement settings: this used to pass in silence.
    work.write_config(&text(
        &redis.url(),
        "wait_replicas = 1\nwait_timeout = \"500ms\"\n",
        "",
    ));
    node.signal("HUP");
    wait_until(Duration::from_secs(5), "the first reload", || {
        node.log().matches("config reloaded").count() == 1
    });
    let first = restart_lines(&node);
    assert_eq!(first.len(), 1, "{first:?}");
    assert!(
        first[0].contains(r#"keys=["redis.wait_replicas", "redis.wait_timeout"]"#),
        "{}",
        first[0]
    );
    // A password in the URL, and the history cap: named, the password
    // never shown.
    let with_password = redis.url().replace("redis://", "redis://:hunter2@");
    work.write_config(&text(
        &with_password,
        "wait_replicas = 1\nwait_timeout = \"500ms\"\n",
        "history_max = 50\n",
    ));
    node.signal("HUP");
    wait_until(Duration::from_secs(5), "the second reload", || {
        node.log().matches("config reloaded").count() == 2
    });
    let reloaded = Utc::now();
    let second = restart_lines(&node);
    assert_eq!(second.len(), 2, "{second:?}");
    assert!(
        second[1].contains(
            r#"keys=["redis.url", "redis.wait_replicas", "redis.wait_timeout", "daemon.history_max"]"#
        ),
        "{}",
        second[1]
    );
    // The daemon kept its connection (with `wait_replicas = 1` applied, a
    // claim on this replica-less server would never be acknowledged).
    wait_until(
        Duration::from_secs(10),
        "a runs on after the reloads",
        || {
            runs_tagged(&work, "a")
                .iter()
                .any(|at| *at > reloaded + chrono::TimeDelta::seconds(1))
        },
    );
    assert!(!node.log().contains("hunter2"), "a password in the log");
}

/// Edits that change when a job runs, applied by a reload, page nobody: a
/// schedule made denser (`*/4` -> every second) and a job taken out of the
/// file and put back. The occurrences of the new definition before the
/// reload, and those while the job was out of the file, were not due under
/// the config then in force: none is recorded `missed` (the record that
/// sends `on_failure`), none is run late. Before, the next decision
/// recorded each of them `missed` ("no node claimed it: redis was
/// unreachable or every node was down").
#[test]
fn a_denser_schedule_or_a_job_back_in_the_file_records_nothing_missed() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    let runs = toml_path(&work.path("runs"));
    let dense = |schedule: &str| {
        format!(
            "[jobs.dense]\nschedule = \"{schedule}\"\nstarting_deadline = \"10s\"\n\
             command = 'echo \"$SOLOCRON_OCCURRENCE dense\" >> {runs}'\n"
        )
    };
    let blink = job("blink", "blink", &runs);
    work.write_config(&format!("{}{blink}", dense("*/4 * * * * *")));
    let node = Node::start(&work, &redis, "n1", &[]);
    wait_until(Duration::from_secs(15), "dense and blink run", || {
        !runs_tagged(&work, "dense").is_empty() && runs_tagged(&work, "blink").len() >= 2
    });
    // Every second now, and blink out of the file.
    work.write_config(&dense("* * * * * *"));
    node.signal("HUP");
    wait_until(Duration::from_secs(5), "the first reload", || {
        node.log().matches("config reloaded").count() == 1
    });
    let out = Utc::now();
    wait_until(Duration::from_secs(10), "blink stays out for 3 s", || {
        Utc::now() > out + chrono::TimeDelta::seconds(3)
    });
    work.write_config(&format!("{}{blink}", dense("* * * * * *")));
    node.signal("HUP");
    wait_until(Duration::from_secs(5), "the second reload", || {
        node.log().matches("config reloaded").count() == 2
    });
    let back = Utc::now();
    wait_until(Duration::from_secs(15), "both run after it", || {
        runs_tagged(&work, "blink")
            .iter()
            .filter(|at| **at > back)
            .count()
            >= 2
            && runs_tagged(&work, "dense")
                .iter()
                .filter(|at| **at > back)
                .count()
                >= 2
    });
    for job in ["dense", "blink"] {
        let missed: Vec<_> = history(&redis, job)
            .into_iter()
            .filter(|entry| entry["outcome"] == "missed")
            .collect();
        assert!(missed.is_empty(), "{job}: {missed:?}\n{}", node.log());
    }
    // Nothing ran late for an occurrence it was not due at.
    let gone = runs_tagged(&work, "blink")
        .into_iter()
        .filter(|at| *at > out + chrono::TimeDelta::seconds(1) && *at < back)
        .count();
    assert_eq!(
        gone,
        0,
        "blink ran while out of the file: {:?}",
        work.lines("runs")
    );
}
