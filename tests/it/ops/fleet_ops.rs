//! The fleet-wide operator commands with real daemons on a real Redis:
//! `pause` / `resume` (each occurrence while paused recorded `paused`
//! exactly once, never run), `pause --for`, `pause --all`, `drain` /
//! `undrain` (a drained node claims nothing, its running job finishes, it
//! stays drained across a restart, misses while every node is drained are
//! recorded once someone is undrained), `trigger --fleet` (exactly one
//! daemon runs it, exit codes 0 / 1 / 3 / 4, a dead runner does not hang
//! the CLI), and clear errors (unknown job, Redis unreachable).

use crate::common;

use std::collections::BTreeSet;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use common::audit::{Decision, Window, history_exactly_once};
use common::cluster::{Cluster, JobSpec, rfc3339};
use common::{Node, RedisServer, Workdir, history, solocron_bin, toml_path, wait_until};
use redis::Commands as _;

/// `solocron ARGS --config jobs.toml --redis URL` as user `tester`.
fn cli(work: &Workdir, url: &str, args: &[&str]) -> Output {
    cli_command(work, url, args).output().expect("run solocron")
}

fn cli_command(work: &Workdir, url: &str, args: &[&str]) -> Command {
    let mut command = Command::new(solocron_bin());
    command
        .args(args)
        .args([
            "--config",
            &toml_path(&work.path("jobs.toml")),
            "--redis",
            url,
        ])
        .env_remove("SOLOCRON_CONFIG")
        .env_remove("SOLOCRON_REDIS_URL")
        .env_remove("SOLOCRON_NODE_ID")
        .env_remove("SOLOCRON_LOG")
        .env("USER", "tester");
    command
}

fn ok(output: &Output) -> String {
    assert!(
        output.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The log lines of `node` containing every one of `needles`.
fn lines_with(node: &Node, needles: &[&str]) -> Vec<String> {
    node.log()
        .lines()
        .filter(|line| needles.iter().all(|needle| line.contains(needle)))
        .map(str::to_string)
        .collect()
}

/// Waits until `node` logged a line with every one of `needles`.
fn wait_for_line(node: &Node, limit: Duration, needles: &[&str]) {
    wait_until(limit, &format!("{} logs {needles:?}", node.id), || {
        !lines_with(node, needles).is_empty()
    });
}

/// The instant at the start of a log line.
fn logged_at(line: &str) -> DateTime<Utc> {
    let stamp = line.split_whitespace().next().unwrap_or_default();
    DateTime::parse_from_rfc3339(stamp)
        .map(|at| at.with_timezone(&Utc))
        .unwrap_or_else(|_| panic!("no timestamp in {line}"))
}

/// The `occurrence=` of a log line.
fn occurrence_of(line: &str) -> Option<DateTime<Utc>> {
    let value = line
        .split("occurrence=")
        .nth(1)?
        .split_whitespace()
        .next()?;
    DateTime::parse_from_rfc3339(value)
        .ok()
        .map(|at| at.with_timezone(&Utc))
}

/// The first whole second after `at`.
fn next_second(at: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp(at.timestamp() + 1, 0).expect("a valid instant")
}

fn occurrence_instant(decision: &Decision) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(&decision.occurrence)
        .ok()
        .map(|at| at.with_timezone(&Utc))
}

/// Waits until the history of each of `jobs` has an entry for `at`.
fn wait_recorded(cluster: &Cluster, jobs: &[&str], at: DateTime<Utc>) {
    wait_until(
        Duration::from_secs(10),
        &format!("{jobs:?} {} recorded", rfc3339(at)),
        || {
            let decisions = cluster.decisions(jobs);
            jobs.iter().all(|job| {
                decisions
                    .iter()
                    .any(|d| d.job == *job && d.occurrence == rfc3339(at))
            })
        },
    );
}

fn status_json(work: &Workdir, url: &str) -> serde_json::Value {
    let output = cli(work, url, &["status", "--json"]);
    serde_json::from_str(&ok(&output)).expect("status --json")
}

fn job_json<'a>(status: &'a serde_json::Value, job: &str) -> &'a serde_json::Value {
    status["jobs"]
        .as_array()
        .and_then(|jobs| jobs.iter().find(|entry| entry["job"] == job))
        .unwrap_or_else(|| panic!("no job {job} in {status:#}"))
}

#[test]
fn a_paused_job_is_recorded_paused_once_per_occurrence_on_three_nodes_and_runs_again_after_resume()
{
    let jobs = [
        JobSpec::new("tick", "* * * * * *", 0.05),
        JobSpec::new("other", "* * * * * *", 0.05),
    ];
    let mut cluster = Cluster::new(RedisServer::start(), "", &jobs);
    for id in ["n1", "n2", "n3"] {
        cluster.start_node(id, &[]);
    }
    let url = cluster.redis.url();
    let first = cluster.wait_for_run(Duration::from_secs(15), "tick runs", |run| {
        run.job == "tick"
    });
    let paused = cli(
        &cluster.work,
        &url,
        &["pause", "tick", "--reason", "db migration"],
    );
    let said = ok(&paused);
    assert!(
        said.contains("paused job `tick` on every node (by tester@")
            && said.contains("db migration"),
        "{said}"
    );
    for node in &cluster.nodes {
        wait_for_line(
            node,
            Duration::from_secs(10),
            &["job paused fleet-wide", "job=tick"],
        );
    }
    let from = next_second(Utc::now());
    // Three occurrences decided while every node knew the pause.
    wait_until(
        Duration::from_secs(15),
        "3 occurrences recorded paused",
        || {
            cluster
                .decisions(&["tick"])
                .iter()
                .filter(|d| d.outcome == "paused" && occurrence_instant(d) >= Some(from))
                .count()
                >= 3
        },
    );
    let text = ok(&cli(&cluster.work, &url, &["status"]));
    let line = text
        .lines()
        .skip_while(|line| !line.starts_with("PAUSED"))
        .find(|line| line.starts_with("tick "))
        .unwrap_or_else(|| panic!("no PAUSED row for tick:\n{text}"));
    assert!(
        line.contains("paused by tester@")
            && line.contains(" since ")
            && line.ends_with(": db migration"),
        "{line}"
    );
    let status = status_json(&cluster.work, &url);
    let pause = &job_json(&status, "tick")["paused"];
    assert!(
        pause["by"]
            .as_str()
            .is_some_and(|by| by.starts_with("tester@")),
        "{pause}"
    );
    assert_eq!(pause["reason"], "db migration");
    assert!(
        pause["until"].is_null() && pause["since"].is_string(),
        "{pause}"
    );
    assert_eq!(pause["all"], false);
    assert!(job_json(&status, "other")["paused"].is_null());

    let resume_sent = Utc::now();
    let resumed = ok(&cli(&cluster.work, &url, &["resume", "tick"]));
    assert!(resumed.contains("resumed job `tick`"), "{resumed}");
    for node in &cluster.nodes {
        wait_for_line(node, Duration::from_secs(10), &["job resumed", "job=tick"]);
    }
    let back = next_second(Utc::now());
    let again = cluster.wait_for_run(Duration::from_secs(15), "tick runs again", |run| {
        run.job == "tick" && run.at() >= Some(back)
    });
    let again_at = again.at().expect("a scheduled run");
    wait_recorded(&cluster, &["tick", "other"], again_at);

    // While paused (every node knew, nobody had been told to resume): no
    // run, and each occurrence recorded `paused` exactly once.
    let paused_until = resume_sent - chrono::TimeDelta::milliseconds(200);
    let ran_while_paused: Vec<String> = cluster
        .runs()
        .iter()
        .filter(|run| {
            run.job == "tick" && run.at().is_some_and(|at| at >= from && at <= paused_until)
        })
        .map(ToString::to_string)
        .collect();
    assert!(
        ran_while_paused.is_empty(),
        "ran while paused: {ran_while_paused:?}"
    );
    let decisions = cluster.decisions(&["tick", "other"]);
    let pause_window = Window::new("tick", "* * * * * *", from, paused_until);
    for at in pause_window.occurrences() {
        let outcomes: Vec<&str> = decisions
            .iter()
            .filter(|d| d.job == "tick" && d.occurrence == rfc3339(at))
            .map(|d| d.outcome.as_str())
            .collect();
        assert_eq!(outcomes, ["paused"], "occurrence {}", rfc3339(at));
    }
    // Before, during and after: every occurrence exactly once, both jobs;
    // `other` was never paused.
    let start = first.at().expect("a scheduled run");
    let whole = [
        Window::new("tick", "* * * * * *", start, again_at),
        Window::new("other", "* * * * * *", start, again_at),
    ];
    let report = history_exactly_once(&decisions, &whole);
    assert!(report.is_exact(), "{report:?}\n{}", cluster.logs());
    assert!(
        decisions
            .iter()
            .all(|d| d.job != "other" || d.outcome != "paused"),
        "{decisions:?}"
    );
    assert!(
        ok(&cli(&cluster.work, &url, &["status"]))
            .lines()
            .all(|l| !l.starts_with("PAUSED"))
    );
}

#[test]
fn pause_for_ends_by_itself_and_pause_all_covers_every_job() {
    let jobs = [
        JobSpec::new("a", "* * * * * *", 0.05),
        JobSpec::new("b", "* * * * * *", 0.05),
    ];
    let mut cluster = Cluster::new(RedisServer::start(), "", &jobs);
    for id in ["n1", "n2"] {
        cluster.start_node(id, &[]);
    }
    let url = cluster.redis.url();
    for job in ["a", "b"] {
        cluster.wait_for_run(Duration::from_secs(15), "both jobs run", |run| {
            run.job == job
        });
    }
    let said = ok(&cli(
        &cluster.work,
        &url,
        &["pause", "--all", "--for", "3s", "--reason", "freeze"],
    ));
    assert!(
        said.contains("paused every job on every node") && said.contains(" until 20"),
        "{said}"
    );
    for node in &cluster.nodes {
        wait_for_line(
            node,
            Duration::from_secs(10),
            &["job paused fleet-wide", "every job (pause --all)"],
        );
    }
    let from = next_second(Utc::now());
    let status = status_json(&cluster.work, &url);
    let until = job_json(&status, "a")["paused"]["until"]
        .as_str()
        .and_then(|until| DateTime::parse_from_rfc3339(until).ok())
        .map(|until| until.with_timezone(&Utc))
        .unwrap_or_else(|| panic!("an end in {status:#}"));
    for job in ["a", "b"] {
        let pause = &job_json(&status, job)["paused"];
        assert_eq!(pause["all"], true, "{pause}");
        assert_eq!(pause["reason"], "freeze");
        assert!(
            pause["by"]
                .as_str()
                .is_some_and(|by| by.starts_with("tester@"))
        );
    }
    let text = ok(&cli(&cluster.work, &url, &["status"]));
    assert!(
        text.lines().any(|line| line.starts_with("a ")
            && line.contains("paused (pause --all) by tester@")
            && line.contains(" until ")
            && line.ends_with(": freeze")),
        "{text}"
    );
    // It ends by itself: both jobs run again from the first occurrence at
    // or after its end, without a `resume`.
    for job in ["a", "b"] {
        cluster.wait_for_run(Duration::from_secs(15), "runs again after --for", |run| {
            run.job == job && run.at() >= Some(until)
        });
    }
    for node in &cluster.nodes {
        wait_for_line(
            node,
            Duration::from_secs(10),
            &["job resumed", "every job (pause --all)"],
        );
    }
    // The end is the second `status` shows: the occurrence due at it runs.
    let at_end = until.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    for job in ["a", "b"] {
        let outcome = || {
            common::history(&cluster.redis, job)
                .iter()
                .find(|entry| entry["occurrence"] == at_end)
                .map(|entry| entry["outcome"].clone())
        };
        wait_until(
            Duration::from_secs(10),
            "the occurrence at the pause's end is recorded",
            || outcome().is_some(),
        );
        let outcome = outcome();
        assert!(
            outcome.as_ref().is_some_and(|outcome| outcome != "paused"),
            "{job} at the pause's end {at_end}: {outcome:?}"
        );
    }
    let resumed_at = cluster
        .runs()
        .iter()
        .filter(|run| run.job == "a" && run.at() >= Some(until))
        .filter_map(|run| run.at())
        .min()
        .expect("a run after the end");
    let last_paused = resumed_at - chrono::TimeDelta::seconds(1);
    wait_recorded(&cluster, &["a", "b"], resumed_at);
    assert!(
        from < until && last_paused >= from,
        "a pause of 3 s covers occurrences"
    );
    let decisions = cluster.decisions(&["a", "b"]);
    for job in ["a", "b"] {
        let window = Window::new(job, "* * * * * *", from, resumed_at);
        let report = history_exactly_once(&decisions, &[window]);
        assert!(report.is_exact(), "{job}: {report:?}");
        for at in Window::new(job, "* * * * * *", from, last_paused).occurrences() {
            assert!(at < until);
            let outcome = decisions
                .iter()
                .find(|d| d.job == job && d.occurrence == rfc3339(at))
                .map(|d| d.outcome.clone());
            assert_eq!(outcome.as_deref(), Some("paused"), "{job} {}", rfc3339(at));
        }
        assert!(
            !cluster
                .runs()
                .iter()
                .any(|run| run.job == job && run.at().is_some_and(|at| at >= from && at < until)),
            "{job} ran while paused"
        );
    }
    let text = ok(&cli(&cluster.work, &url, &["status"]));
    assert!(!text.contains("PAUSED"), "{text}");
    // `resume --all` with nothing paused says so.
    let said = ok(&cli(&cluster.work, &url, &["resume", "--all"]));
    assert!(said.contains("nothing was paused"), "{said}");
}

/// The `claim won` lines of `node` for occurrences due after `after`.
fn claims_after(node: &Node, after: DateTime<Utc>) -> Vec<String> {
    lines_with(node, &["claim won"])
        .into_iter()
        .filter(|line| occurrence_of(line).is_some_and(|at| at > after))
        .collect()
}

#[test]
fn a_drained_node_claims_nothing_finishes_its_run_stays_drained_across_a_restart_and_claims_again_after_undrain()
 {
    let jobs = [
        JobSpec::new("tick", "* * * * * *", 0.05),
        JobSpec::new("long", "*/20 * * * * *", 6.0).with("lock_ttl = \"3s\""),
    ];
    let mut cluster = Cluster::new(RedisServer::start(), "", &jobs);
    let url = cluster.redis.url();
    // n1 alone first, so that it is the one running `long`.
    cluster.start_node("n1", &[]);
    let long = cluster.wait_for_run(Duration::from_secs(30), "n1 runs long", |run| {
        run.job == "long" && run.node == "n1"
    });
    cluster.start_node("n2", &[]);
    cluster.start_node("n3", &[]);
    let said = ok(&cli(
        &cluster.work,
        &url,
        &["drain", "--node", "n1", "--reason", "kernel update"],
    ));
    assert!(said.contains("node `n1` drains"), "{said}");
    wait_for_line(
        cluster.node("n1"),
        Duration::from_secs(10),
        &["draining: this node claims no new occurrences"],
    );
    let drained_line = lines_with(
        cluster.node("n1"),
        &["draining: this node claims no new occurrences"],
    );
    let effective = logged_at(&drained_line[0]);
    // While its long run goes on, status shows it draining, running it.
    wait_until(
        Duration::from_secs(5),
        "status shows n1 draining long",
        || {
            let status = status_json(&cluster.work, &url);
            let drain = status["drains"]
                .as_array()
                .and_then(|drains| drains.iter().find(|drain| drain["node"] == "n1").cloned());
            drain.is_some_and(|drain| {
                drain["state"] == "draining"
                    && drain["running"] == 1
                    && drain["running_jobs"][0] == "long"
                    && drain["reason"] == "kernel update"
            })
        },
    );
    let text = ok(&cli(&cluster.work, &url, &["status"]));
    assert!(
        text.lines().any(|line| line.starts_with("n1 ")
            && line.contains("draining")
            && line.contains("1 (long)")),
        "{text}"
    );
    // The run finishes under its lease and is recorded succeeded.
    let finished = cluster.wait_for_run(Duration::from_secs(15), "long finishes", |run| {
        run.job == "long" && run.occurrence == long.occurrence && run.end_ns.is_some()
    });
    assert_eq!(finished.node, "n1");
    wait_until(Duration::from_secs(10), "long recorded succeeded", || {
        cluster
            .decisions(&["long"])
            .iter()
            .any(|d| d.occurrence == long.occurrence && d.node == "n1" && d.outcome == "succeeded")
    });
    wait_until(Duration::from_secs(5), "status shows n1 drained", || {
        status_json(&cluster.work, &url)["nodes"]
            .as_array()
            .is_some_and(|nodes| {
                nodes
                    .iter()
                    .any(|n| n["node"] == "n1" && n["drain"] == "drained")
            })
    });
    // Others take every occurrence meanwhile.
    let from = next_second(effective);
    let until = from + chrono::TimeDelta::seconds(4);
    cluster.wait_for_run(
        Duration::from_secs(15),
        "others run after the drain",
        |run| run.job == "tick" && run.at() > Some(until),
    );
    wait_recorded(&cluster, &["tick"], until);
    let report = cluster.audit(&[Window::new("tick", "* * * * * *", from, until)]);
    assert!(report.is_clean(), "{report:?}");
    assert!(
        cluster
            .runs()
            .iter()
            .all(|run| run.job != "tick" || run.at() < Some(from) || run.node != "n1"),
        "n1 ran tick while drained"
    );
    assert_eq!(
        claims_after(cluster.node("n1"), effective),
        Vec::<String>::new()
    );

    // A restart keeps it drained.
    cluster.node_mut("n1").signal("TERM");
    assert!(
        cluster
            .node_mut("n1")
            .wait_exit(Duration::from_secs(20))
            .success()
    );
    cluster.nodes.retain(|node| node.id != "n1");
    cluster.start_node("n1", &[]);
    wait_for_line(
        cluster.node("n1"),
        Duration::from_secs(10),
        &["draining: this node claims no new occurrences"],
    );
    let restarted = Utc::now();
    cluster.wait_for_run(
        Duration::from_secs(15),
        "others run after the restart",
        |run| run.job == "tick" && run.at() >= Some(restarted + chrono::TimeDelta::seconds(3)),
    );
    assert_eq!(
        lines_with(cluster.node("n1"), &["claim won"]),
        Vec::<String>::new()
    );

    // Undrained, it claims again: with the other two drained it must.
    ok(&cli(&cluster.work, &url, &["undrain", "--node", "n1"]));
    wait_for_line(
        cluster.node("n1"),
        Duration::from_secs(10),
        &["undrained: this node claims occurrences again"],
    );
    for id in ["n2", "n3"] {
        ok(&cli(&cluster.work, &url, &["drain", "--node", id]));
        wait_for_line(
            cluster.node(id),
            Duration::from_secs(10),
            &["draining: this node claims no new occurrences"],
        );
    }
    wait_for_line(
        cluster.node("n1"),
        Duration::from_secs(10),
        &["claim won", "job=tick"],
    );

    // Every node drained: nobody decides; once one is undrained, the
    // occurrences nobody decided are recorded `missed`, each once.
    ok(&cli(&cluster.work, &url, &["drain", "--node", "n1"]));
    wait_until(Duration::from_secs(10), "n1 drained again", || {
        lines_with(
            cluster.node("n1"),
            &["draining: this node claims no new occurrences"],
        )
        .len()
            >= 2
    });
    let all_drained = Utc::now();
    let gap_from = next_second(all_drained);
    wait_until(
        Duration::from_secs(10),
        "3 s with every node drained",
        || Utc::now() > gap_from + chrono::TimeDelta::seconds(3),
    );
    ok(&cli(&cluster.work, &url, &["undrain", "--node", "n2"]));
    let resumed = cluster.wait_for_run(Duration::from_secs(15), "n2 runs again", |run| {
        run.job == "tick" && run.node == "n2" && run.at() > Some(gap_from)
    });
    let resumed_at = resumed.at().expect("scheduled");
    let gap_to = resumed_at - chrono::TimeDelta::seconds(1);
    wait_recorded(&cluster, &["tick"], resumed_at);
    wait_until(
        Duration::from_secs(10),
        "the gap is recorded missed",
        || {
            cluster
                .decisions(&["tick"])
                .iter()
                .any(|d| d.occurrence == rfc3339(gap_from) && d.outcome == "missed")
        },
    );
    let decisions = cluster.decisions(&["tick"]);
    let report = history_exactly_once(
        &decisions,
        &[Window::new("tick", "* * * * * *", gap_from, resumed_at)],
    );
    assert!(report.is_exact(), "{report:?}");
    for at in Window::new("tick", "* * * * * *", gap_from, gap_to).occurrences() {
        let outcomes: BTreeSet<&str> = decisions
            .iter()
            .filter(|d| d.occurrence == rfc3339(at))
            .map(|d| d.outcome.as_str())
            .collect();
        assert_eq!(outcomes, BTreeSet::from(["missed"]), "{}", rfc3339(at));
    }
    assert!(
        cluster
            .runs()
            .iter()
            .all(|run| run.job != "tick"
                || !run.at().is_some_and(|at| at >= gap_from && at <= gap_to)),
        "a run while every node was drained"
    );
}

/// A work dir whose jobs print, fail, or sleep; none is ever due.
fn manual_jobs(work: &Workdir) {
    let runs = toml_path(&work.path("runs"));
    work.write_config(&format!(
        "[jobs.hello]\nschedule = \"0 0 1 1 *\"\n\
         command = 'echo \"hello $SOLOCRON_OCCURRENCE on $SOLOCRON_NODE fence $SOLOCRON_FENCE\"; echo \"$SOLOCRON_OCCURRENCE $SOLOCRON_NODE $SOLOCRON_FENCE\" >> {runs}'\n\
         [jobs.fails]\nschedule = \"0 0 1 1 *\"\ncommand = 'echo \"bad thing\" >&2; exit 7'\n\
         [jobs.slow]\nschedule = \"0 0 1 1 *\"\ncommand = 'sleep 4'\n\
         [jobs.hang]\nschedule = \"0 0 1 1 *\"\ntimeout = \"5m\"\ncommand = 'sleep 120'\n"
    ));
}

/// Which node ran each manual run, from every node's log.
fn taken_by(nodes: &[Node]) -> Vec<String> {
    nodes
        .iter()
        .flat_map(|node| {
            lines_with(node, &["trigger request taken"])
                .into_iter()
                .map(move |_| node.id.clone())
        })
        .collect()
}

#[test]
fn trigger_fleet_runs_on_exactly_one_daemon_and_reports_its_node_outcome_and_output() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    manual_jobs(&work);
    let url = redis.url();
    let nodes: Vec<Node> = ["n1", "n2", "n3"]
        .iter()
        .map(|id| Node::start(&work, &redis, id, &[]))
        .collect();
    let done = cli(&work, &url, &["trigger", "hello", "--fleet"]);
    assert_eq!(done.status.code(), Some(0), "{}", stderr(&done));
    let (out, err) = (String::from_utf8_lossy(&done.stdout), stderr(&done));
    let entries = history(&redis, "hello");
    assert_eq!(entries.len(), 1, "exactly one run: {entries:?}");
    let entry = &entries[0];
    assert!(entry["occurrence"].starts_with("manual-"), "{entry:?}");
    assert_eq!(entry["outcome"], "succeeded");
    let node = entry["node"].clone();
    assert_eq!(taken_by(&nodes), std::slice::from_ref(&node));
    assert_eq!(work.lines("runs").len(), 1, "{:?}", work.lines("runs"));
    assert!(err.contains(&format!("taken by node `{node}`")), "{err}");
    assert!(
        err.contains("job `hello` succeeded (exit 0)")
            && err.contains(&format!("on node `{node}` as manual-")),
        "{err}"
    );
    assert!(
        err.contains(&format!("(fence {})", entry["fence"])),
        "{err}"
    );
    assert!(
        out.contains(&format!(
            "hello {} on {node} fence {}",
            entry["occurrence"], entry["fence"]
        )),
        "the output tail: {out}"
    );

    // A failing job: exit 1, with its output.
    let failed = cli(&work, &url, &["trigger", "fails", "--fleet"]);
    assert_eq!(failed.status.code(), Some(1), "{}", stderr(&failed));
    assert!(String::from_utf8_lossy(&failed.stdout).contains("bad thing"));
    assert!(
        stderr(&failed).contains("failed (exit 7)"),
        "{}",
        stderr(&failed)
    );
    assert_eq!(history(&redis, "fails").len(), 1);

    // The lock held by a run in progress: exit 3, nothing started.
    let mut local = Command::new(solocron_bin())
        .args([
            "trigger",
            "slow",
            "--node-id",
            "cli",
            "--config",
            &toml_path(&work.path("jobs.toml")),
            "--redis",
            &url,
        ])
        .env_remove("SOLOCRON_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start a local trigger");
    let mut conn = redis.conn();
    wait_until(
        Duration::from_secs(10),
        "the local run holds the lock",
        || {
            conn.get::<_, Option<String>>("{solocron:slow}:lock")
                .ok()
                .flatten()
                .is_some_and(|value| value.ends_with(" cli"))
        },
    );
    let busy = cli(&work, &url, &["trigger", "slow", "--fleet"]);
    assert_eq!(busy.status.code(), Some(3), "{}", stderr(&busy));
    assert!(
        stderr(&busy).contains("is running on `cli`"),
        "{}",
        stderr(&busy)
    );
    assert!(local.wait().expect("local trigger").success());
    assert_eq!(history(&redis, "slow").len(), 1, "only the local run");

    // Drained nodes take nothing: with two drained, the third runs it.
    for id in ["n1", "n2"] {
        ok(&cli(&work, &url, &["drain", "--node", id]));
    }
    for node in &nodes[..2] {
        wait_for_line(
            node,
            Duration::from_secs(10),
            &["draining: this node claims no new occurrences"],
        );
    }
    let before = taken_by(&nodes).len();
    let third = cli(&work, &url, &["trigger", "hello", "--fleet"]);
    assert_eq!(third.status.code(), Some(0), "{}", stderr(&third));
    assert!(
        stderr(&third).contains("taken by node `n3`"),
        "{}",
        stderr(&third)
    );
    assert_eq!(taken_by(&nodes).len(), before + 1);
    assert_eq!(history(&redis, "hello").len(), 2);
}

#[test]
fn trigger_fleet_exits_4_when_no_daemon_takes_it_and_1_when_its_node_dies_mid_run() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    manual_jobs(&work);
    let url = redis.url();
    let sent = Instant::now();
    let nobody = cli(&work, &url, &["trigger", "hello", "--fleet"]);
    let waited = sent.elapsed();
    assert_eq!(nobody.status.code(), Some(4), "{}", stderr(&nobody));
    assert!(
        waited >= Duration::from_millis(9500) && waited < Duration::from_secs(14),
        "waited {waited:?}"
    );
    assert!(
        stderr(&nobody).contains("no daemon took the request within 10s"),
        "{}",
        stderr(&nobody)
    );
    let waiting: i64 = redis.conn().llen("{solocron}:requests").expect("LLEN");
    assert_eq!(waiting, 0, "the request was withdrawn");
    // A daemon started now never runs the withdrawn request; it does run
    // the next one, which is then the only run.
    let mut node = Node::start(&work, &redis, "n1", &[]);
    let done = cli(&work, &url, &["trigger", "hello", "--fleet"]);
    assert_eq!(done.status.code(), Some(0), "{}", stderr(&done));
    assert_eq!(history(&redis, "hello").len(), 1);
    assert_eq!(work.lines("runs").len(), 1);

    // Its node dies mid-run: the CLI says so within the request's TTL.
    let hang = cli_command(&work, &url, &["trigger", "hang", "--fleet"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start trigger --fleet");
    node.wait_for_log(Duration::from_secs(15), "trigger request taken");
    wait_until(Duration::from_secs(10), "the run holds the lock", || {
        redis
            .conn()
            .get::<_, Option<String>>("{solocron:hang}:lock")
            .ok()
            .flatten()
            .is_some()
    });
    let killed = Instant::now();
    node.kill9();
    let output = hang.wait_with_output().expect("trigger --fleet");
    assert!(
        killed.elapsed() < Duration::from_secs(30),
        "waited {:?}",
        killed.elapsed()
    );
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("stopped reporting on the run"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn the_commands_refuse_unknown_jobs_with_a_suggestion_and_fail_clearly_without_redis() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    manual_jobs(&work);
    let url = redis.url();
    for args in [
        &["pause", "helo"][..],
        &["resume", "helo"],
        &["trigger", "helo", "--fleet"],
    ] {
        let output = cli(&work, &url, args);
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        let err = stderr(&output);
        assert!(
            err.contains("unknown job `helo`") && err.contains("did you mean `hello`?"),
            "{args:?}: {err}"
        );
    }
    let pauses: Option<String> = redis
        .conn()
        .hget("{solocron}:pauses", "helo")
        .expect("HGET");
    assert_eq!(pauses, None, "nothing written");
    // Usage errors are clap's: exit 2.
    for args in [
        &["pause"][..],
        &["pause", "hello", "--all"],
        &["pause", "hello", "--for", "soon"],
    ] {
        assert_eq!(cli(&work, &url, args).status.code(), Some(2), "{args:?}");
    }
    // Redis unreachable: exit 1 within seconds, naming the URL.
    let down = format!("redis://127.0.0.1:{}/", common::free_port());
    for args in [
        &["pause", "hello"][..],
        &["resume", "hello"],
        &["drain", "--node", "n1"],
        &["undrain", "--node", "n1"],
        &["trigger", "hello", "--fleet"],
    ] {
        let sent = Instant::now();
        let output = cli(&work, &down, args);
        assert_eq!(
            output.status.code(),
            Some(1),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(sent.elapsed() < Duration::from_secs(8), "{args:?}");
        let err = stderr(&output);
        assert!(
            err.contains("cannot reach redis at `redis://127.0.0.1:"),
            "{args:?}: {err}"
        );
    }
}

/// `drain --node web-9` (no such node) and a bare `drain` on a machine
/// that runs no daemon under its host name are refused with exit 2,
/// naming the live nodes and the closest id, and write nothing; `--force`
/// drains a node ahead, and a node drained before can be undrained even
/// while it is down. Before, both printed success and exited 0 while the
/// real node kept claiming.
#[test]
fn drain_refuses_a_node_that_is_not_live_and_was_never_drained() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    manual_jobs(&work);
    let url = redis.url();
    let _web1 = Node::start(&work, &redis, "web-1", &[]);
    wait_until(Duration::from_secs(10), "web-1 is live", || {
        status_json(&work, &url)["nodes"]
            .as_array()
            .is_some_and(|nodes| nodes.iter().any(|node| node["node"] == "web-1"))
    });
    let drains = || -> Vec<String> {
        let fields: Vec<String> = redis.conn().hkeys("{solocron}:drains").expect("HKEYS");
        fields.into_iter().filter(|f| f != "~version").collect()
    };
    let typo = cli(&work, &url, &["drain", "--node", "web-9"]);
    assert_eq!(typo.status.code(), Some(2), "{typo:?}");
    let err = stderr(&typo);
    for needle in [
        "node `web-9` is not live",
        "has never been drained",
        "the live nodes: web-1",
        "did you mean `--node web-1`?",
        "`--force`",
    ] {
        assert!(err.contains(needle), "{needle}: {err}");
    }
    assert!(typo.stdout.is_empty(), "{typo:?}");
    let bare = cli(&work, &url, &["drain"]);
    assert_eq!(bare.status.code(), Some(2), "{bare:?}");
    let err = stderr(&bare);
    assert!(
        err.contains("this host's node id: `--node` was not given") && err.contains("web-1"),
        "{err}"
    );
    let undrain = cli(&work, &url, &["undrain", "--node", "web-9"]);
    assert_eq!(undrain.status.code(), Some(2), "{undrain:?}");
    assert!(
        stderr(&undrain).contains("node `web-9` is not live"),
        "{undrain:?}"
    );
    assert!(!stderr(&undrain).contains("--force"), "{undrain:?}");
    assert_eq!(drains(), Vec::<String>::new(), "nothing written");
    // Ahead of its start, with `--force`; then known: undrain needs no force.
    let ahead = cli(&work, &url, &["drain", "--node", "web-9", "--force"]);
    assert!(ok(&ahead).contains("node `web-9` drains"), "{ahead:?}");
    assert!(stderr(&ahead).contains("it starts drained"), "{ahead:?}");
    assert_eq!(drains(), ["web-9"]);
    ok(&cli(&work, &url, &["undrain", "--node", "web-9"]));
    // A live node needs no `--force`.
    assert!(ok(&cli(&work, &url, &["drain", "--node", "web-1"])).contains("node `web-1` drains"));
}

/// A pause replacing one in force says on stderr whose pause it replaced
/// (who, since, until, why) and that the job now runs sooner; `resume
/// JOB` while `pause --all` holds says the job stays paused and how to
/// lift it. Before, the first went by in a parenthesis on stdout and the
/// second said "every node runs its occurrences again".
#[test]
fn a_replaced_pause_is_named_and_resume_under_pause_all_says_the_job_stays_paused() {
    let redis = RedisServer::start();
    let work = Workdir::new();
    manual_jobs(&work);
    let url = redis.url();
    let first = cli_command(&work, &url, &["pause", "hello", "--reason", "db migration"])
        .env("USER", "alice")
        .output()
        .expect("run solocron");
    ok(&first);
    assert!(!stderr(&first).contains("replaced"), "{first:?}");
    let second = cli(
        &work,
        &url,
        &["pause", "hello", "--for", "10m", "--reason", "quick look"],
    );
    ok(&second);
    let err = stderr(&second);
    for needle in [
        "warning: this replaced the pause of job `hello` that was in force (by alice@",
        ": db migration);",
        "that one lasted until `solocron resume`, this one ends at 20",
    ] {
        assert!(err.contains(needle), "{needle}: {err}");
    }
    let status = status_json(&work, &url);
    assert_eq!(job_json(&status, "hello")["paused"]["reason"], "quick look");

    ok(&cli(&work, &url, &["pause", "--all", "--reason", "freeze"]));
    let resumed = cli(&work, &url, &["resume", "hello"]);
    let said = ok(&resumed);
    assert!(!said.contains("runs its occurrences again"), "{said}");
    assert!(
        said.contains("ended the pause of job `hello`")
            && said.contains("it stays paused: `pause --all` holds"),
        "{said}"
    );
    assert!(
        stderr(&resumed).contains("until `solocron resume --all` ends it"),
        "{resumed:?}"
    );
    let said = ok(&cli(&work, &url, &["resume", "fails"]));
    assert!(
        said.contains("job `fails` had no pause of its own; it stays paused"),
        "{said}"
    );
    let status = status_json(&work, &url);
    assert_eq!(
        job_json(&status, "hello")["paused"]["all"],
        true,
        "{status:#}"
    );
    let said = ok(&cli(&work, &url, &["resume", "--all"]));
    assert!(said.contains("resumed every job (pause --all)"), "{said}");
}

/// A paused job while every node is stopped (a maintenance routine: pause,
/// then stop the fleet): the occurrences nobody decided meanwhile are
/// recorded `paused`, not `missed`, once each, and no `on_failure` runs
/// for them. Before, the first decision after the restart recorded them
/// `missed` ("every node was down") and paged for each one.
#[test]
fn occurrences_of_a_paused_job_while_every_node_is_down_are_recorded_paused_not_missed() {
    let alerts = Workdir::new();
    let alerted = toml_path(&alerts.path("alerts"));
    let jobs = [JobSpec::new("tick", "* * * * * *", 0.05).with(&format!(
        "on_failure = {{ command = 'echo $SOLOCRON_OUTCOME $SOLOCRON_OCCURRENCE >> {alerted}' }}"
    ))];
    let mut cluster = Cluster::new(RedisServer::start(), "", &jobs);
    let url = cluster.redis.url();
    cluster.start_node("n1", &[]);
    cluster.start_node("n2", &[]);
    cluster.wait_for_run(Duration::from_secs(20), "tick runs", |run| {
        run.job == "tick"
    });
    ok(&cli(
        &cluster.work,
        &url,
        &["pause", "tick", "--reason", "upgrade"],
    ));
    // A `paused` record shows that the nodes see the pause.
    wait_until(Duration::from_secs(10), "a paused record", || {
        cluster
            .decisions(&["tick"])
            .iter()
            .any(|d| d.outcome == "paused")
    });
    for id in ["n1", "n2"] {
        let node = cluster.node_mut(id);
        node.signal("TERM");
        assert!(node.wait_exit(Duration::from_secs(20)).success());
    }
    let stopped = Utc::now();
    // Three occurrences pass with no node up.
    wait_until(Duration::from_secs(10), "occurrences pass", || {
        Utc::now() > stopped + chrono::TimeDelta::milliseconds(3500)
    });
    cluster.start_node("n1", &[]);
    cluster.start_node("n2", &[]);
    let restarted = Utc::now();
    wait_until(
        Duration::from_secs(20),
        "decisions after the restart",
        || {
            cluster.decisions(&["tick"]).iter().any(|d| {
                d.outcome == "paused"
                    && DateTime::parse_from_rfc3339(&d.occurrence)
                        .is_ok_and(|at| at > restarted + chrono::TimeDelta::seconds(1))
            })
        },
    );
    let decisions = cluster.decisions(&["tick"]);
    let window = Window::new(
        "tick",
        "* * * * * *",
        stopped - chrono::TimeDelta::seconds(1),
        restarted,
    );
    let report = history_exactly_once(&decisions, &[window]);
    assert!(report.is_exact(), "{report:?}\n{decisions:?}");
    let while_down: Vec<&Decision> = decisions
        .iter()
        .filter(|d| {
            DateTime::parse_from_rfc3339(&d.occurrence)
                .is_ok_and(|at| at > stopped && at < restarted)
        })
        .collect();
    assert!(while_down.len() >= 3, "{decisions:?}");
    assert!(
        while_down.iter().all(|d| d.outcome == "paused"),
        "{while_down:?}"
    );
    assert!(
        alerts.lines("alerts").is_empty(),
        "no alert for a paused job: {:?}",
        alerts.lines("alerts")
    );
    let entries = history(&cluster.redis, "tick");
    assert!(
        entries.iter().all(
            |entry| entry.get("outcome").map(String::as_str) != Some("paused")
                || entry
                    .get("error")
                    .is_some_and(|error| error.contains("upgrade"))
        ),
        "each paused entry says who paused it and why: {entries:?}"
    );
}
