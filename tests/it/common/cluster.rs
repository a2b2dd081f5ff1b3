//! A cluster for fault tests: one `redis-server`, K `solocron run`
//! processes, and jobs that record every run to one file for the audit
//! ([`super::audit`]). Everything it starts is killed when it is dropped,
//! also when a test panics (the nodes' jobs die with them: parent-death
//! signal).
//!
//! Every job runs `exec /bin/sh job.sh RECORDS SECONDS [ignore-term]`,
//! one process from START to END: the script appends a START line, sleeps
//! with `perl` (which it `exec`s, keeping the pid), then `exec`s itself
//! again to append END. A single process matters: the parent-death signal
//! and `kill -9` tests reach exactly the job's own process (a `sleep`
//! grandchild would outlive the daemon, a documented limit). Timestamps come
//! from `date` run without libfaketime, so a node with a faked clock still
//! records real time.

use std::fs;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use super::audit::{self, Decision, Report, Run, Window};
use super::{Node, RedisServer, Workdir, history, toml_path};

/// The record-keeping job script; see the module doc.
pub const JOB_SCRIPT: &str = r#"#!/bin/sh
records=$1
seconds=$2
record() {
  now=$(env -u LD_PRELOAD -u FAKETIME -u FAKETIME_NO_CACHE -u FAKETIME_DONT_FAKE_MONOTONIC date +%s%N)
  echo "$1 $SOLOCRON_JOB $SOLOCRON_OCCURRENCE $SOLOCRON_NODE $SOLOCRON_FENCE $$ $now" >> "$records"
}
if [ "$3" = end ]; then
  record END
  exit 0
fi
record START
if [ "$3" = ignore-term ]; then
  trap '' TERM
fi
exec perl -e 'select(undef, undef, undef, shift); exec @ARGV or die' "$seconds" /bin/sh "$0" "$records" "$seconds" end
"#;

/// One job of the cluster's `jobs.toml`.
#[derive(Debug, Clone)]
pub struct JobSpec {
    pub name: String,
    /// Cron expression (UTC).
    pub schedule: String,
    /// How long a run works between START and END.
    pub seconds: f64,
    /// Whether the run ignores SIGTERM (only SIGKILL stops it).
    pub ignore_term: bool,
    /// Extra `key = value` lines for the job's table.
    pub extra: Vec<String>,
}

impl JobSpec {
    /// A job on `schedule` working `seconds` per run.
    pub fn new(name: &str, schedule: &str, seconds: f64) -> JobSpec {
        JobSpec {
            name: name.to_string(),
            schedule: schedule.to_string(),
            seconds,
            ignore_term: false,
            extra: Vec::new(),
        }
    }

    /// Adds a `key = value` line (e.g. `lock_ttl = "2s"`).
    pub fn with(mut self, line: &str) -> JobSpec {
        self.extra.push(line.to_string());
        self
    }

    /// Makes the run ignore SIGTERM.
    pub fn ignoring_term(mut self) -> JobSpec {
        self.ignore_term = true;
        self
    }

    /// The audit window of this job over `[from, to]`.
    pub fn window(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> Window {
        Window::new(&self.name, &self.schedule, from, to)
    }
}

/// Redis, nodes and the records file; see the module doc.
pub struct Cluster {
    pub work: Workdir,
    pub nodes: Vec<Node>,
    pub redis: RedisServer,
    daemon: String,
}

impl Cluster {
    /// A cluster on `redis` with `[daemon]` lines `daemon` and `jobs`;
    /// no node runs yet.
    pub fn new(redis: RedisServer, daemon: &str, jobs: &[JobSpec]) -> Cluster {
        let work = Workdir::new();
        fs::write(work.path("job.sh"), JOB_SCRIPT).expect("write job.sh");
        let cluster = Cluster {
            work,
            nodes: Vec::new(),
            redis,
            daemon: daemon.to_string(),
        };
        cluster.write_jobs(jobs);
        cluster
    }

    /// `solocron ARGS --config … --redis …` against the cluster's file and
    /// Redis (no daemon: a command an operator types).
    pub fn cli(&self, args: &[&str]) -> std::process::Output {
        let config = toml_path(&self.work.path("jobs.toml"));
        std::process::Command::new(super::solocron_bin())
            .args(args)
            .args(["--config", &config, "--redis", &self.redis.url()])
            .env_remove("SOLOCRON_CONFIG")
            .env_remove("SOLOCRON_REDIS_URL")
            .output()
            .expect("run solocron")
    }

    /// Replaces the `[daemon]` lines (and any tables after them, like
    /// `[groups.NAME]`) for the next [`Cluster::write_jobs`].
    pub fn set_daemon(&mut self, daemon: &str) {
        self.daemon = daemon.to_string();
    }

    /// The `jobs.toml` text for `jobs` (the daemon section stays).
    pub fn config_text(&self, jobs: &[JobSpec]) -> String {
        let script = toml_path(&self.work.path("job.sh"));
        let records = toml_path(&self.records_path());
        let mut text = format!("[daemon]\n{}\n", self.daemon);
        for job in jobs {
            let ignore = if job.ignore_term { " ignore-term" } else { "" };
            text.push_str(&format!(
                "\n[jobs.{}]\nschedule = \"{}\"\ncommand = \"exec /bin/sh {script} {records} {}{ignore}\"\n",
                job.name, job.schedule, job.seconds
            ));
            for line in &job.extra {
                text.push_str(line);
                text.push('\n');
            }
        }
        text
    }

    /// (Re)writes `jobs.toml` for `jobs`; nodes see it at start or SIGHUP.
    pub fn write_jobs(&self, jobs: &[JobSpec]) -> PathBuf {
        self.work.write_config(&self.config_text(jobs))
    }

    /// Where the jobs append their START / END lines.
    pub fn records_path(&self) -> PathBuf {
        self.work.path("records")
    }

    /// Starts node `id` against the cluster's Redis, with extra environment
    /// (e.g. [`super::faketime_env`]); returns its index in `nodes`.
    pub fn start_node(&mut self, id: &str, env: &[(String, String)]) -> usize {
        let url = self.redis.url();
        self.start_node_with_url(id, &url, env)
    }

    /// Like [`Cluster::start_node`], through another URL (e.g. a proxy).
    pub fn start_node_with_url(&mut self, id: &str, url: &str, env: &[(String, String)]) -> usize {
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        self.nodes
            .push(Node::start_with_url(&self.work, url, id, &env));
        self.nodes.len() - 1
    }

    /// The node called `id`.
    pub fn node(&self, id: &str) -> &Node {
        self.nodes
            .iter()
            .find(|node| node.id == id)
            .unwrap_or_else(|| panic!("no node `{id}`"))
    }

    /// The node called `id`, mutably (to kill or wait for it).
    pub fn node_mut(&mut self, id: &str) -> &mut Node {
        self.nodes
            .iter_mut()
            .find(|node| node.id == id)
            .unwrap_or_else(|| panic!("no node `{id}`"))
    }

    /// Every run recorded so far, in START order.
    pub fn runs(&self) -> Vec<Run> {
        audit::parse_runs(&self.work.lines("records"))
    }

    /// Waits until a recorded run matches `pred`; returns the first one.
    pub fn wait_for_run(&self, limit: Duration, what: &str, pred: impl Fn(&Run) -> bool) -> Run {
        audit::wait_for_run(&self.work, limit, what, pred, || {
            let runs: String = self.runs().iter().map(|run| format!("  {run}\n")).collect();
            format!("; runs:\n{runs}")
        })
    }

    /// Waits until every node logged a decision on `job`'s occurrence `at`
    /// (won, lost, skipped, missed), so nothing about it is still in flight.
    pub fn wait_decided(&self, limit: Duration, job: &str, at: DateTime<Utc>) {
        let needle = format!("job={job} occurrence={}", rfc3339(at));
        for node in &self.nodes {
            node.wait_for_log(limit, &needle);
        }
    }

    /// The history of `jobs` as decisions (Redis must be up).
    pub fn decisions(&self, jobs: &[&str]) -> Vec<Decision> {
        jobs.iter()
            .flat_map(|job| {
                history(&self.redis, job).into_iter().map(move |entry| {
                    let field = |key: &str| entry.get(key).cloned().unwrap_or_default();
                    Decision {
                        job: job.to_string(),
                        occurrence: field("occurrence"),
                        node: field("node"),
                        fence: field("fence").parse().unwrap_or(0),
                        outcome: field("outcome"),
                    }
                })
            })
            .collect()
    }

    /// Audits the recorded runs against `windows` with Redis's history.
    pub fn audit(&self, windows: &[Window]) -> Report {
        let jobs: Vec<&str> = windows.iter().map(|w| w.job.as_str()).collect();
        audit::audit(&self.runs(), &self.decisions(&jobs), windows)
    }

    /// All node logs, for failure messages.
    pub fn logs(&self) -> String {
        self.nodes
            .iter()
            .map(|node| format!("===== {} =====\n{}", node.id, node.log()))
            .collect()
    }
}

/// An occurrence's name (RFC 3339 UTC, whole seconds).
pub fn rfc3339(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// The first whole second at least `secs` seconds from now that is a
/// multiple of `step` seconds: a window start clear of node start-up.
pub fn whole_second_after(secs: i64, step: i64) -> DateTime<Utc> {
    let at = (Utc::now().timestamp() + secs + step - 1) / step * step;
    DateTime::from_timestamp(at, 0).expect("a valid instant")
}

/// Sleeps until the real clock reaches `at` (the harness is never faked):
/// for a fault that begins or ends at a given instant of the timetable.
pub fn sleep_until(at: DateTime<Utc>) {
    if let Ok(left) = (at - Utc::now()).to_std() {
        // Time itself is the input here: the timetable has no event to wait on.
        std::thread::sleep(left);
    }
}

/// Whether faults should run their long variants (`SOLOCRON_FAULTS_LONG=1`).
pub fn long_variant() -> bool {
    std::env::var("SOLOCRON_FAULTS_LONG").is_ok_and(|value| value == "1")
}

/// `short`, or `long` with `SOLOCRON_FAULTS_LONG=1`: a window length in seconds.
pub fn window_secs(short: i64, long: i64) -> i64 {
    if long_variant() { long } else { short }
}

/// Polls until `pid` is gone; returns the real instant (ns) it was first
/// seen gone. Panics after `limit`.
pub fn wait_gone(pid: i32, limit: Duration) -> i128 {
    let deadline = Instant::now() + limit;
    loop {
        if !super::is_alive(pid) {
            return audit::now_ns();
        }
        assert!(
            Instant::now() < deadline,
            "process {pid} still alive after {limit:?} ({})",
            super::process_state(pid)
        );
        // Finer than POLL: callers compare the instant it is seen gone.
        std::thread::sleep(Duration::from_millis(5));
    }
}
