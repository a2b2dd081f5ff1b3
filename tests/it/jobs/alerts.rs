//! Notifications and retries (docs/configuration.md), on real daemons sharing one Redis.
//!
//! - A failing job on 3 nodes: `on_failure` ran exactly once per failed
//!   occurrence, on the node that ran it, with the run's variables
//!   (`SOLOCRON_OUTCOME`, `_EXIT_CODE`, `_OUTPUT_TAIL`, fence, attempt);
//!   `on_success` likewise for a job that succeeds.
//! - `kill -9` of the runner: the run is recorded `abandoned` by a survivor,
//!   which sends `on_failure` once (the other survivor sends nothing).
//! - A hanging notifier is stopped at its own timeout and changes nothing
//!   else: every occurrence still runs and is recorded `failed`.
//! - Retries on 3 nodes: a job failing twice then succeeding has attempts
//!   1, 2, 3 in the history and one `on_success` (attempt 3); a job broken
//!   on one node is retried on another; a job whose backoff reaches the
//!   next occurrence stops retrying there and sends one `on_failure`.
//! - A reload of 2 nodes between attempts: a removed job and one whose
//!   `retries` went to 0 make no further attempt, one lowered to 1 stops
//!   after attempt 2, a fixed command runs as the pending retry; each
//!   occurrence is notified once, about its last attempt.
//! - A `pause`, or every node drained, while a retry is pending: no further
//!   attempt, and one `on_failure` about attempt 1 by the node that ran it.

use crate::common;

use std::collections::HashMap;
use std::fs;
use std::time::Duration;

use common::cluster::{Cluster, JobSpec, wait_gone};
use common::{Node, RedisServer, Workdir, faketime_env, history, is_alive, toml_path, wait_until};

/// Appends one `|`-separated line per notifier run to `notified`.
const NOTIFY_SCRIPT: &str = r#"#!/bin/sh
tail=$(printf '%s' "$SOLOCRON_OUTPUT_TAIL" | tr '\n' ' ')
echo "$1|$SOLOCRON_JOB|$SOLOCRON_OCCURRENCE|$SOLOCRON_OUTCOME|$SOLOCRON_EXIT_CODE|$SOLOCRON_NODE|$SOLOCRON_FENCE|$SOLOCRON_ATTEMPT|$tail" >> "$2"
"#;

/// One line of `notified`.
#[derive(Debug, Clone)]
struct Notified {
    kind: String,
    job: String,
    occurrence: String,
    outcome: String,
    exit_code: String,
    node: String,
    fence: String,
    attempt: String,
    tail: String,
}

fn notified(work: &Workdir) -> Vec<Notified> {
    work.lines("notified")
        .iter()
        .map(|line| {
            let f: Vec<&str> = line.splitn(9, '|').collect();
            assert_eq!(f.len(), 9, "{line}");
            Notified {
                kind: f[0].into(),
                job: f[1].into(),
                occurrence: f[2].into(),
                outcome: f[3].into(),
                exit_code: f[4].into(),
                node: f[5].into(),
                fence: f[6].into(),
                attempt: f[7].into(),
                tail: f[8].into(),
            }
        })
        .collect()
}

/// `on_failure = …` and `on_success = …` lines running the notify script.
fn notifiers(work: &Workdir) -> String {
    let script = work.path("notify.sh");
    if !script.exists() {
        fs::write(&script, NOTIFY_SCRIPT).expect("write notify.sh");
    }
    let (script, log) = (toml_path(&script), toml_path(&work.path("notified")));
    format!(
        "on_failure = {{ argv = [\"/bin/sh\", \"{script}\", \"on_failure\", \"{log}\"] }}\n\
         on_success = {{ argv = [\"/bin/sh\", \"{script}\", \"on_success\", \"{log}\"] }}\n"
    )
}

/// Stops every node with SIGTERM and waits for it to exit (its notifiers
/// are done by then).
fn stop_all(nodes: &mut [Node]) {
    for node in nodes.iter() {
        node.signal("TERM");
    }
    for node in nodes.iter_mut() {
        let status = node.wait_exit(Duration::from_secs(40));
        assert!(status.success(), "{} exited with {status}", node.id);
    }
}

fn entries(redis: &RedisServer, job: &str, outcome: &str) -> Vec<HashMap<String, String>> {
    history(redis, job)
        .into_iter()
        .filter(|entry| entry.get("outcome").map(String::as_str) == Some(outcome))
        .collect()
}

#[test]
fn a_failing_job_on_three_nodes_is_notified_once_per_occurrence_with_its_variables() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    let notify = notifiers(&work);
    work.write_config(&format!(
        "[jobs.fails]\nschedule = \"*/2 * * * * *\"\nlock_ttl = \"3s\"\n\
         command = \"echo boom-$SOLOCRON_OCCURRENCE; exit 3\"\n{notify}\n\
         [jobs.works]\nschedule = \"*/2 * * * * *\"\nlock_ttl = \"3s\"\ncommand = \"true\"\n{notify}"
    ));
    let mut nodes: Vec<Node> = ["n1", "n2", "n3"]
        .iter()
        .map(|id| Node::start(&work, &redis, id, &[]))
        .collect();
    wait_until(
        Duration::from_secs(30),
        "4 failed and 4 succeeded runs",
        || {
            entries(&redis, "fails", "failed").len() >= 4
                && entries(&redis, "works", "succeeded").len() >= 4
        },
    );
    stop_all(&mut nodes);

    let lines = notified(&work);
    for (job, outcome, kind) in [
        ("fails", "failed", "on_failure"),
        ("works", "succeeded", "on_success"),
    ] {
        let recorded = entries(&redis, job, outcome);
        let sent: Vec<&Notified> = lines.iter().filter(|n| n.job == job).collect();
        assert!(
            sent.iter().all(|n| n.kind == kind && n.outcome == outcome),
            "{job}: only {kind} about {outcome}: {sent:?}"
        );
        assert_eq!(
            sent.len(),
            recorded.len(),
            "{job}: one notifier per recorded run: {sent:?} {recorded:?}"
        );
        for entry in &recorded {
            let about: Vec<&&Notified> = sent
                .iter()
                .filter(|n| n.occurrence == entry["occurrence"])
                .collect();
            assert_eq!(about.len(), 1, "{job} {}: {about:?}", entry["occurrence"]);
            let n = about[0];
            assert_eq!(n.node, entry["node"], "sent by the runner: {n:?} {entry:?}");
            assert_eq!(n.fence, entry["fence"], "{n:?}");
            assert_eq!(n.attempt, "1", "{n:?}");
            if job == "fails" {
                assert_eq!(n.exit_code, "3", "{n:?}");
                assert!(
                    n.tail.contains(&format!("boom-{}", entry["occurrence"])),
                    "{n:?}"
                );
            } else {
                assert_eq!(n.exit_code, "0", "{n:?}");
            }
        }
    }
}

#[test]
fn kill_9_of_the_runner_is_notified_abandoned_once_by_the_survivor_that_recorded_it() {
    let work_notify = Workdir::new();
    let notify = notifiers(&work_notify);
    let mut long = JobSpec::new("long", "*/30 * * * * *", 20.0).with("lock_ttl = \"2s\"");
    for line in notify.lines() {
        long = long.with(line);
    }
    let mut cluster = Cluster::new(RedisServer::start(), "", std::slice::from_ref(&long));
    for id in ["n1", "n2", "n3"] {
        cluster.start_node(id, &[]);
    }
    let victim = cluster.wait_for_run(Duration::from_secs(40), "a run of the long job", |_| true);
    cluster.node_mut(&victim.node).kill9();
    wait_gone(victim.pid, Duration::from_secs(2));
    wait_until(
        Duration::from_secs(14),
        "on_failure about the abandoned run",
        || {
            notified(&work_notify)
                .iter()
                .any(|n| n.outcome == "abandoned" && n.occurrence == victim.occurrence)
        },
    );
    // Both survivors watch the lock; let the next occurrence be decided,
    // then only one of them may have sent anything about the dead run.
    // The first occurrence after the dead lock expired (the victim may be
    // a catch-up run started just before its job's next occurrence, which
    // is then skipped behind the dead lock).
    let noticed = chrono::Utc::now().timestamp();
    let next = common::cluster::rfc3339(
        chrono::DateTime::from_timestamp((noticed / 30 + 1) * 30, 0).expect("a valid instant"),
    );
    // Claimed by a survivor (its run takes 20 s: the history has it only
    // at its end).
    let claimed = format!("claim won job=long occurrence={next}");
    let limit = std::time::Instant::now() + Duration::from_secs(45);
    while !cluster.logs().contains(&claimed) {
        assert!(
            std::time::Instant::now() < limit,
            "the next occurrence {next} was not claimed within 45 s; history {:?}\n{}",
            history(&cluster.redis, "long"),
            cluster.logs()
        );
        std::thread::sleep(common::POLL);
    }
    let survivors: Vec<Node> = std::mem::take(&mut cluster.nodes)
        .into_iter()
        .filter(|node| node.id != victim.node)
        .collect();
    let mut survivors = survivors;
    stop_all(&mut survivors);
    let about: Vec<Notified> = notified(&work_notify)
        .into_iter()
        .filter(|n| n.occurrence == victim.occurrence)
        .collect();
    assert_eq!(about.len(), 1, "{about:?}");
    let n = &about[0];
    assert_eq!(
        (n.kind.as_str(), n.outcome.as_str()),
        ("on_failure", "abandoned")
    );
    assert_eq!(n.fence, victim.fence.to_string(), "the dead run's fence");
    let entry = history(&cluster.redis, "long")
        .into_iter()
        .find(|e| e["occurrence"] == victim.occurrence)
        .expect("the abandoned entry");
    assert_eq!(entry["outcome"], "abandoned");
    assert!(
        entry["error"].contains(&format!("recorded by {}", n.node)),
        "sent by the node that recorded it: {n:?} {entry:?}"
    );
}

#[test]
fn a_hanging_notifier_is_stopped_at_its_timeout_and_changes_nothing_else() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    let pids = toml_path(&work.path("notifier-pids"));
    work.write_config(&format!(
        "[jobs.fails]\nschedule = \"* * * * * *\"\nlock_ttl = \"2s\"\ncommand = \"exit 1\"\n\
         on_failure = {{ command = \"echo $$ >> {pids}; exec sleep 30\", timeout = \"3s\" }}\n"
    ));
    let mut node = Node::start(&work, &redis, "n1", &[]);
    node.wait_for_log(Duration::from_secs(15), "notifier failed");
    let log = node.log();
    let line = log
        .lines()
        .find(|l| l.contains("notifier failed"))
        .expect("logged");
    assert!(line.contains("result=timed_out"), "{line}");
    // Meanwhile each occurrence ran and was recorded failed, on time, while
    // up to three notifiers hung.
    wait_until(Duration::from_secs(20), "10 failed runs", || {
        entries(&redis, "fails", "failed").len() >= 10
    });
    // The first second may hold a catch-up run at start, which the first
    // scheduled occurrence can find still running (skipped): not ours.
    let mut all = history(&redis, "fails");
    all.sort_by(|a, b| a["occurrence"].cmp(&b["occurrence"]));
    let all: Vec<HashMap<String, String>> = all.into_iter().skip(2).collect();
    assert!(
        all.iter().all(|e| e["outcome"] == "failed"),
        "nothing skipped or missed behind a hanging notifier: {all:?}"
    );
    let mut seconds: Vec<i64> = all
        .iter()
        .map(|e| {
            chrono::DateTime::parse_from_rfc3339(&e["occurrence"])
                .expect("occurrence")
                .timestamp()
        })
        .collect();
    seconds.sort_unstable();
    assert!(
        seconds.windows(2).all(|w| w[1] - w[0] == 1),
        "one run every second: {seconds:?}"
    );
    node.signal("TERM");
    node.wait_exit(Duration::from_secs(30));
    let started: Vec<i32> = work
        .lines("notifier-pids")
        .iter()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    assert!(started.len() >= 3, "{started:?}");
    for pid in started {
        assert!(!is_alive(pid), "notifier {pid} outlived its timeout");
    }
}

#[test]
fn retries_on_three_nodes_run_each_attempt_once_and_notify_after_the_last() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    let notify = notifiers(&work);
    let runs = toml_path(&work.path("runs"));
    let record = format!(
        "echo \\\"$SOLOCRON_JOB $SOLOCRON_OCCURRENCE $SOLOCRON_ATTEMPT $SOLOCRON_NODE\\\" >> {runs}"
    );
    work.write_config(&format!(
        "[daemon]\nclock = \"local\"\n[defaults]\nlock_ttl = \"3s\"\n\
         [jobs.flaky]\nschedule = \"*/20 * * * * *\"\nretries = 2\nretry_backoff = \"1s\"\n\
         command = \"{record}; [ $SOLOCRON_ATTEMPT -ge 3 ]\"\n{notify}\n\
         [jobs.broken-on-a]\nschedule = \"10-59/20 * * * * *\"\nretries = 2\nretry_backoff = \"4s\"\n\
         command = \"{record}; [ $SOLOCRON_NODE != a ]\"\n{notify}\n\
         [jobs.gives-up]\nschedule = \"*/6 * * * * *\"\nretries = 5\nretry_backoff = \"2s\"\n\
         command = \"{record}; exit 7\"\n{notify}"
    ));
    // b and c see every instant 0.4 s after a (`clock = "local"`: by
    // their own clocks): a wins each first attempt, and b or c (not
    // deferring) the retry of a's failure.
    let behind = faketime_env("-0.4");
    let behind: Vec<(&str, &str)> = behind
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let mut nodes = vec![Node::start(&work, &redis, "a", &[])];
    nodes.push(Node::start(&work, &redis, "b", &behind));
    nodes.push(Node::start(&work, &redis, "c", &behind));
    let runs_of = |job: &str, occurrence: &str| -> Vec<(String, String)> {
        work.lines("runs")
            .iter()
            .filter_map(|line| {
                let f: Vec<&str> = line.split_whitespace().collect();
                (f.len() == 4 && f[0] == job && f[1] == occurrence)
                    .then(|| (f[2].to_string(), f[3].to_string()))
            })
            .collect()
    };
    let broken_retried = || {
        notified(&work).iter().any(|n| {
            n.job == "broken-on-a"
                && n.kind == "on_success"
                && runs_of("broken-on-a", &n.occurrence)
                    .first()
                    .map(|r| r.1.as_str())
                    == Some("a")
        })
    };
    wait_until(
        Duration::from_secs(60),
        "each job's occurrence fully tried",
        || {
            let n = notified(&work);
            n.iter().any(|n| n.job == "flaky" && n.kind == "on_success")
                && n.iter()
                    .any(|n| n.job == "gives-up" && n.kind == "on_failure" && n.attempt == "2")
                && broken_retried()
        },
    );
    stop_all(&mut nodes);
    let sent = notified(&work);

    // flaky: attempts 1, 2, 3 once each; failed, failed, succeeded; one on_success.
    let ok = sent
        .iter()
        .find(|n| n.job == "flaky" && n.kind == "on_success")
        .expect("sent");
    let mut attempts: Vec<String> = runs_of("flaky", &ok.occurrence)
        .into_iter()
        .map(|r| r.0)
        .collect();
    attempts.sort();
    assert_eq!(attempts, ["1", "2", "3"], "each attempt ran once");
    assert_eq!(ok.attempt, "3", "{ok:?}");
    let flaky: Vec<HashMap<String, String>> = history(&redis, "flaky")
        .into_iter()
        .filter(|e| e["occurrence"] == ok.occurrence)
        .collect();
    let shape: Vec<(&str, &str, bool)> = flaky
        .iter()
        .map(|e| {
            (
                e["attempt"].as_str(),
                e["outcome"].as_str(),
                e.contains_key("retry_at"),
            )
        })
        .collect();
    assert_eq!(
        shape,
        [
            ("1", "failed", true),
            ("2", "failed", true),
            ("3", "succeeded", false)
        ],
        "{flaky:?}"
    );
    assert!(
        !sent
            .iter()
            .any(|n| n.job == "flaky" && n.occurrence == ok.occurrence && n.kind == "on_failure"),
        "no on_failure before the last attempt: {sent:?}"
    );

    // broken-on-a: a's failure was retried by b or c, which succeeded.
    for n in sent
        .iter()
        .filter(|n| n.job == "broken-on-a" && n.kind == "on_success")
    {
        let tried = runs_of("broken-on-a", &n.occurrence);
        if tried.first().map(|r| r.1.as_str()) == Some("a") {
            assert_eq!(tried.len(), 2, "{tried:?}");
            assert_eq!(tried[1].0, "2");
            assert_ne!(
                tried[1].1, "a",
                "the retry went to a healthy node: {tried:?}"
            );
            assert_eq!(n.node, tried[1].1, "{n:?}");
        }
    }

    // gives-up: the second retry would be due after the next occurrence:
    // two attempts, then one on_failure about attempt 2. (A catch-up run
    // at start is already late: its first retry would be, so it has one.)
    let failed = sent
        .iter()
        .find(|n| n.job == "gives-up" && n.kind == "on_failure" && n.attempt == "2")
        .expect("sent");
    let tried = runs_of("gives-up", &failed.occurrence);
    assert_eq!(tried.len(), 2, "{tried:?}");
    assert_eq!(failed.exit_code, "7", "{failed:?}");
    for n in sent.iter().filter(|n| n.job == "gives-up") {
        let about: Vec<&Notified> = sent
            .iter()
            .filter(|m| m.job == "gives-up" && m.occurrence == n.occurrence)
            .collect();
        assert_eq!(about.len(), 1, "one on_failure per occurrence: {about:?}");
        assert_eq!(n.kind, "on_failure", "{n:?}");
        let tried = runs_of("gives-up", &n.occurrence);
        assert_eq!(
            n.attempt,
            tried.len().to_string(),
            "about its last attempt: {n:?} {tried:?}"
        );
    }
}

/// A job printing binary output (a NUL byte) still gets its `on_failure`:
/// an environment value cannot hold a NUL, so `SOLOCRON_OUTPUT_TAIL` has
/// U+FFFD in its place (the notifier used to fail to start: "an argument or
/// environment value contains a NUL byte").
#[test]
fn a_job_printing_a_nul_byte_is_still_notified_with_the_byte_replaced() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    let out = toml_path(&work.path("tail"));
    work.write_config(&format!(
        "[jobs.nf-nul]\n{}\ncommand = '''printf 'a\\000b\\n'; exit 1'''\n\
         on_failure = {{ command = '''printf '%s|%s' \"$SOLOCRON_OUTCOME\" \"$SOLOCRON_OUTPUT_TAIL\" > {out}''' }}\n",
        common::caught_up_at_once(&redis, "nf-nul")
    ));
    let node = Node::start(&work, &redis, "n1", &[]);
    wait_until(
        Duration::from_secs(20),
        "the notifier wrote the tail",
        || {
            fs::read(work.path("tail")).is_ok_and(|tail| !tail.is_empty())
                || node.log().contains("notifier failed")
        },
    );
    let tail = fs::read_to_string(work.path("tail")).unwrap_or_else(|err| {
        panic!("no alert ({err}); log:\n{}", node.log());
    });
    assert_eq!(tail, "failed|a\u{fffd}b\n");
    assert!(!node.log().contains("notifier failed"), "{}", node.log());
}

/// A notifier runs with the daemon's environment, not the job's `env`, and
/// in the daemon's working directory, not the job's `working_dir`: a job
/// that fails because its directory is missing (a lost mount), with a
/// `PATH` of its own, is still notified, and the notifier finds `date`.
/// Its output is logged as `notifier output`, not as the job's.
#[test]
fn a_notifier_runs_without_the_jobs_env_and_working_dir() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    let out = toml_path(&work.path("notified"));
    work.write_config(&format!(
        "[jobs.nf-env]\n{}\nworking_dir = \"/nonexistent/dir\"\n\
         env = {{ PATH = \"/opt/mytools/bin\", JOB_ONLY = \"the job's own\" }}\n\
         command = \"true\"\n\
         on_failure = {{ command = \"date +%s > /dev/null && echo \\\"$SOLOCRON_OUTCOME|$(pwd)|[$JOB_ONLY]\\\" >> {out}; echo said-by-the-notifier\" }}\n",
        common::caught_up_at_once(&redis, "nf-env")
    ));
    let node = Node::start(&work, &redis, "n1", &[]);
    wait_until(Duration::from_secs(20), "the notifier ran", || {
        node.log().contains("notifier ran") || node.log().contains("notifier failed")
    });
    let here = std::env::current_dir().expect("the daemon's working directory");
    assert_eq!(
        work.lines("notified"),
        [format!("failed|{}|[]", here.display())],
        "log:\n{}",
        node.log()
    );
    let entry = entries(&redis, "nf-env", "failed");
    assert!(
        entry[0]["error"].contains("cannot enter working directory `/nonexistent/dir`"),
        "{entry:?}"
    );
    let log = node.log();
    let said: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("said-by-the-notifier"))
        .collect();
    assert_eq!(said.len(), 1, "{log}");
    assert!(
        said[0].contains("notifier output") && said[0].contains("job=nf-env"),
        "told apart from the job's own output: {}",
        said[0]
    );
    assert!(!said[0].contains("job output"), "{}", said[0]);
}

/// `kill -9` of the node running attempt 2 of an occurrence: the run is
/// recorded `abandoned` as attempt 2, and `on_failure` is told
/// `SOLOCRON_ATTEMPT=2` (it used to be `attempt` unset and 1).
#[test]
fn an_abandoned_retry_is_recorded_and_notified_with_its_attempt() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    let runs = toml_path(&work.path("runs"));
    let out = toml_path(&work.path("notified"));
    work.write_config(&format!(
        "[jobs.retried]\nschedule = \"*/20 * * * * *\"\nlock_ttl = \"2s\"\nretries = 2\nretry_backoff = \"1s\"\n\
         command = \"echo \\\"$SOLOCRON_ATTEMPT $SOLOCRON_NODE $SOLOCRON_OCCURRENCE\\\" >> {runs}; \
         if [ $SOLOCRON_ATTEMPT -ge 2 ]; then exec sleep 60; fi; exit 1\"\n\
         on_failure = {{ command = \"echo \\\"$SOLOCRON_OUTCOME $SOLOCRON_ATTEMPT $SOLOCRON_OCCURRENCE\\\" >> {out}\" }}\n"
    ));
    let mut nodes: Vec<Node> = ["n1", "n2"]
        .iter()
        .map(|id| Node::start(&work, &redis, id, &[]))
        .collect();
    let mut second: Option<(String, String)> = None;
    wait_until(Duration::from_secs(45), "an attempt 2 started", || {
        second = work.lines("runs").iter().find_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            (f.len() == 3 && f[0] == "2").then(|| (f[1].to_string(), f[2].to_string()))
        });
        second.is_some()
    });
    let (runner, occurrence) = second.expect("found");
    let victim = nodes
        .iter_mut()
        .find(|node| node.id == runner)
        .expect("the runner");
    victim.kill9();
    let survivor = nodes
        .iter()
        .find(|node| node.id != runner)
        .expect("the other node");
    wait_until(
        Duration::from_secs(40),
        "on_failure about the abandoned attempt",
        || {
            work.lines("notified")
                .iter()
                .any(|line| line.starts_with("abandoned "))
        },
    );
    assert_eq!(
        work.lines("notified")
            .into_iter()
            .filter(|line| line.contains(&occurrence))
            .collect::<Vec<_>>(),
        [format!("abandoned 2 {occurrence}")],
        "log:\n{}",
        survivor.log()
    );
    let abandoned = entries(&redis, "retried", "abandoned");
    assert_eq!(abandoned.len(), 1, "{abandoned:?}");
    assert_eq!(abandoned[0]["occurrence"], occurrence);
    assert_eq!(abandoned[0]["node"], runner);
    assert_eq!(
        abandoned[0].get("attempt").map(String::as_str),
        Some("2"),
        "{abandoned:?}"
    );
}

/// A reload between two attempts: the pending retry follows the job's
/// definition in the reloaded file, on every node. A removed job and one
/// whose `retries` went to 0 get no further attempt; one lowered to 1 gets
/// attempt 2 and no 3rd; one whose command was fixed runs the new command
/// as attempt 2. Each occurrence is notified once, about its last attempt.
#[test]
fn a_reload_between_attempts_drops_or_changes_the_pending_retries_on_every_node() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    let notify = notifiers(&work);
    let runs = toml_path(&work.path("runs"));
    let job = |name: &str, retries: u32, tag: &str, exit: u32| {
        format!(
            "[jobs.{name}]\nschedule = \"*/20 * * * * *\"\nretries = {retries}\n\
             command = \"echo \\\"$SOLOCRON_JOB $SOLOCRON_OCCURRENCE $SOLOCRON_ATTEMPT $SOLOCRON_NODE {tag}\\\" >> {runs}; exit {exit}\"\n{notify}\n"
        )
    };
    let head = "[daemon]\nclock = \"local\"\n[defaults]\nlock_ttl = \"3s\"\nstarting_deadline = \"1s\"\nretry_backoff = \"5s\"\n";
    work.write_config(&format!(
        "{head}{}{}{}{}",
        job("removed", 3, "old", 5),
        job("zeroed", 3, "old", 5),
        job("lowered", 3, "old", 5),
        job("fixed", 3, "old", 5),
    ));
    let mut nodes = vec![
        Node::start(&work, &redis, "a", &[]),
        Node::start(&work, &redis, "b", &[]),
    ];
    let jobs = ["removed", "zeroed", "lowered", "fixed"];
    // Whether `node` took part in `occurrence` of every job (won or lost
    // its claim), so that it follows the retries.
    let took_part = |node: &Node, occurrence: &str| {
        let log = node.log();
        jobs.iter().all(|job| {
            log.lines().any(|line| {
                (line.contains("claim won") || line.contains("claim lost"))
                    && line.contains(&format!("job={job} occurrence={occurrence} "))
            })
        })
    };
    // An occurrence whose first attempts all failed, seen at least 3 s
    // before their retries are due (time to reload both nodes), that both
    // nodes took part in.
    let mut occurrence = None;
    wait_until(
        Duration::from_secs(60),
        "first attempts failed well before their retries",
        || {
            let now = chrono::Utc::now().timestamp_millis();
            let firsts: Vec<HashMap<String, String>> = jobs
                .iter()
                .filter_map(|job| {
                    entries(&redis, job, "failed")
                        .into_iter()
                        .rfind(|e| e["attempt"] == "1" && e.contains_key("retry_at"))
                })
                .collect();
            let found = firsts.len() == jobs.len()
                && firsts
                    .iter()
                    .all(|e| e["occurrence"] == firsts[0]["occurrence"])
                && firsts.iter().all(|e| {
                    e["retry_at"]
                        .parse::<i64>()
                        .is_ok_and(|at| at - now >= 3000)
                })
                && nodes
                    .iter()
                    .all(|node| took_part(node, &firsts[0]["occurrence"]));
            if found {
                occurrence = Some(firsts[0]["occurrence"].clone());
            }
            found
        },
    );
    let occurrence = occurrence.expect("found");
    work.write_config(&format!(
        "{head}{}{}{}",
        job("zeroed", 0, "old", 5),
        job("lowered", 1, "old", 5),
        job("fixed", 3, "new", 0),
    ));
    for node in &nodes {
        node.signal("HUP");
    }
    for node in &nodes {
        node.wait_for_log(Duration::from_secs(3), "config reloaded");
    }
    let log = nodes[0].log();
    let reloaded = log
        .lines()
        .find(|line| line.contains("config reloaded"))
        .expect("summary");
    assert!(
        reloaded.contains(r#"removed=["removed"]"#)
            && reloaded.contains(r#"changed=["zeroed", "lowered", "fixed"]"#),
        "{reloaded}"
    );
    let retry_due = history(&redis, "removed")
        .iter()
        .find(|e| e["occurrence"] == occurrence)
        .and_then(|e| e["retry_at"].parse::<i64>().ok())
        .expect("retry_at");
    assert!(
        chrono::Utc::now().timestamp_millis() < retry_due,
        "both nodes reloaded before the retries were due"
    );
    // Every retry of the occurrence is over once the next one has run.
    let next = chrono::DateTime::parse_from_rfc3339(&occurrence).expect("occurrence")
        + chrono::TimeDelta::seconds(20);
    let next = common::cluster::rfc3339(next.with_timezone(&chrono::Utc));
    wait_until(Duration::from_secs(40), "the next occurrence ran", || {
        work.lines("runs")
            .iter()
            .any(|line| line.starts_with(&format!("fixed {next} 1 ")))
    });
    stop_all(&mut nodes);

    let tried = |job: &str| -> Vec<(String, String)> {
        let mut tried: Vec<(String, String)> = work
            .lines("runs")
            .iter()
            .filter_map(|line| {
                let f: Vec<&str> = line.split_whitespace().collect();
                (f.len() == 5 && f[0] == job && f[1] == occurrence)
                    .then(|| (f[2].to_string(), f[4].to_string()))
            })
            .collect();
        tried.sort();
        tried
    };
    let old = |attempt: &str| (attempt.to_string(), "old".to_string());
    assert_eq!(tried("removed"), [old("1")], "no retry of a removed job");
    assert_eq!(tried("zeroed"), [old("1")], "no retry with retries = 0");
    assert_eq!(tried("lowered"), [old("1"), old("2")], "retries = 1");
    assert_eq!(
        tried("fixed"),
        [old("1"), ("2".to_string(), "new".to_string())],
        "the pending retry ran the fixed command"
    );
    let lowered_last = history(&redis, "lowered")
        .into_iter()
        .find(|e| e["occurrence"] == occurrence && e["attempt"] == "2")
        .expect("attempt 2 recorded");
    assert!(
        !lowered_last.contains_key("retry_at"),
        "attempt 2 is the last: {lowered_last:?}"
    );
    // One notifier per occurrence, about its last attempt, from the node
    // that ran it.
    let sent = notified(&work);
    for (job, kind, attempt) in [
        ("removed", "on_failure", "1"),
        ("zeroed", "on_failure", "1"),
        ("lowered", "on_failure", "2"),
        ("fixed", "on_success", "2"),
    ] {
        let about: Vec<&Notified> = sent
            .iter()
            .filter(|n| n.job == job && n.occurrence == occurrence)
            .collect();
        assert_eq!(about.len(), 1, "{job}: {about:?}");
        assert_eq!(
            (about[0].kind.as_str(), about[0].attempt.as_str()),
            (kind, attempt),
            "{job}: {about:?}"
        );
        let ran = history(&redis, job)
            .into_iter()
            .find(|e| e["occurrence"] == occurrence && e["attempt"] == attempt)
            .expect("the last attempt's entry");
        assert_eq!(about[0].node, ran["node"], "{job}: sent by its runner");
    }
    // Both nodes let the dropped retries go, and said so.
    for node in &nodes {
        let log = node.log();
        for job in ["removed", "zeroed"] {
            assert!(
                log.lines().any(|line| line.contains("retry dropped")
                    && line.contains(&format!("job={job} "))
                    && line.contains(&format!("occurrence={occurrence}"))),
                "{}: {job}\n{log}",
                node.id
            );
        }
    }
}

/// `solocron ARGS --config jobs.toml --redis URL`, which must succeed.
fn cli_ok(work: &Workdir, redis: &RedisServer, args: &[&str]) {
    let output = std::process::Command::new(common::solocron_bin())
        .args(args)
        .args(["--config", &toml_path(&work.path("jobs.toml"))])
        .args(["--redis", &redis.url()])
        .env("USER", "tester")
        .output()
        .expect("run solocron");
    assert!(output.status.success(), "{args:?}: {output:?}");
}

/// A failing job with retries on two nodes; after its first attempt of
/// some occurrence failed, `act` runs (a `pause`, a `drain` of every
/// node). The occurrence must then get no further attempt, and
/// `on_failure` must run exactly once for it, about attempt 1, by the
/// node that ran it: `told once when a job fails`.
fn retry_stopped_by(act: impl Fn(&Workdir, &RedisServer)) {
    let redis = RedisServer::start();
    let work = Workdir::new();
    let runs = toml_path(&work.path("runs"));
    work.write_config(&format!(
        "[jobs.hammer]\nschedule = \"*/10 * * * * *\"\nretries = 3\nretry_backoff = \"4s\"\n\
         starting_deadline = \"1s\"\nlock_ttl = \"3s\"\n\
         command = 'echo \"$SOLOCRON_OCCURRENCE $SOLOCRON_ATTEMPT $SOLOCRON_NODE\" >> {runs}; exit 5'\n{}",
        notifiers(&work)
    ));
    let mut nodes = vec![
        Node::start(&work, &redis, "a", &[]),
        Node::start(&work, &redis, "b", &[]),
    ];
    // A first attempt that failed with its retry at least 2 s away.
    let mut failed = None;
    wait_until(Duration::from_secs(30), "a first attempt failed", || {
        let now = chrono::Utc::now().timestamp_millis();
        failed = entries(&redis, "hammer", "failed").into_iter().rfind(|e| {
            e["attempt"] == "1"
                && e.get("retry_at")
                    .and_then(|at| at.parse::<i64>().ok())
                    .is_some_and(|at| at - now >= 2000)
        });
        failed.is_some()
    });
    let failed = failed.expect("found");
    let occurrence = failed["occurrence"].clone();
    act(&work, &redis);
    // The retry would have started 4 s after the failure; the occurrence
    // is over once the next one is due (10 s after it).
    let over = chrono::DateTime::parse_from_rfc3339(&occurrence).expect("occurrence")
        + chrono::TimeDelta::seconds(11);
    wait_until(Duration::from_secs(20), "the occurrence is over", || {
        chrono::Utc::now() > over
    });
    wait_until(Duration::from_secs(10), "its notifier ran", || {
        notified(&work).iter().any(|n| n.occurrence == occurrence)
    });
    stop_all(&mut nodes);
    let attempts: Vec<String> = work
        .lines("runs")
        .into_iter()
        .filter(|line| line.starts_with(&occurrence))
        .collect();
    assert_eq!(
        attempts.len(),
        1,
        "no attempt after attempt 1: {attempts:?}"
    );
    let told: Vec<Notified> = notified(&work)
        .into_iter()
        .filter(|n| n.occurrence == occurrence)
        .collect();
    assert_eq!(told.len(), 1, "notified once: {told:?}");
    assert_eq!(
        (told[0].kind.as_str(), told[0].outcome.as_str()),
        ("on_failure", "failed")
    );
    assert_eq!(told[0].attempt, "1");
    assert_eq!(told[0].node, failed["node"]);
}

/// A pause stops the pending retries of a failing job too (pausing it is
/// how an operator stops it hammering a service); its failure is still
/// told once. Before, every retry ran after the pause.
#[test]
fn a_pause_stops_a_failing_jobs_pending_retries_and_it_is_told_once() {
    retry_stopped_by(|work, redis| cli_ok(work, redis, &["pause", "hammer"]));
}

/// Every node drained while a retry is pending: nobody claims it, and the
/// node whose attempt failed still tells `on_failure` once the next
/// occurrence is due. Before, the drained node stopped following the
/// retry and the failure was told to nobody.
#[test]
fn every_node_drained_with_a_retry_pending_still_tells_the_failure_once() {
    retry_stopped_by(|work, redis| {
        cli_ok(work, redis, &["drain", "--node", "a"]);
        cli_ok(work, redis, &["drain", "--node", "b"]);
    });
}

/// A hook that times out while Redis is away is notified at once, not
/// once Redis answers: the `on_failure` waited for the outcome's record,
/// which waits as long as Redis is away (and was never sent if the node
/// stopped meanwhile). Its outcome is still recorded, and notified only
/// once, when Redis is back.
#[test]
fn a_failure_during_a_redis_outage_is_notified_before_redis_is_back() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    let hook = common::http::HttpServer::start(None);
    let pager = common::http::HttpServer::start(Some(200));
    work.write_config(&format!(
        "[jobs.report]\n{}\nlock_ttl = \"20s\"\n\
         http = {{ url = \"{}\", timeout = \"2s\" }}\n\
         on_failure = {{ http = {{ url = \"{}\" }}, timeout = \"5s\" }}\n",
        common::caught_up_at_once(&redis, "report"),
        hook.url("/hooks/report"),
        pager.url("/page"),
    ));
    let mut node = Node::start(&work, &redis, "n1", &[]);
    node.wait_for_log(Duration::from_secs(20), "claim won");
    redis.pause();
    let page = pager.received_within(Duration::from_secs(10));
    redis.resume();
    let page = page.expect("on_failure sent while redis was away");
    assert_eq!(page.header("solocron-outcome"), Some("timed_out"));
    wait_until(Duration::from_secs(20), "the outcome recorded", || {
        !entries(&redis, "report", "timed_out").is_empty()
    });
    assert!(
        pager.received_within(Duration::from_secs(1)).is_none(),
        "notified twice"
    );
    node.signal("TERM");
    node.wait_exit(Duration::from_secs(20));
}
