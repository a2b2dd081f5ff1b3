//! A solocron fleet for one scenario: a fresh `redis-server`, a `jobs.toml`
//! built from (name, schedule, action) triples, N real `solocron run`
//! processes (release binary) sharing `BENCH_OUT`, and the analysis of what
//! the probe recorded: lag from the occurrence instant, duplicates, misses.
//! [`Daemons`] is the same fleet without a server of its own: its
//! `jobs.toml` names the coordinator (`[redis]` in any mode).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::common::{Node, RedisServer, Workdir, toml_path, wait_until};
use crate::report::Stats;

/// What a job does.
#[derive(Debug, Clone)]
pub enum Action {
    /// `argv = [PROBE]`.
    Probe,
    /// `argv = ["/bin/true"]`.
    True,
    /// `http = { url = URL }`.
    Http(String),
}

/// Paths and options shared by every scenario.
pub struct Env {
    pub probe: PathBuf,
    pub quick: bool,
    pub root: PathBuf,
}

impl Env {
    /// `quick` or `full` seconds.
    pub fn secs(&self, quick: u64, full: u64) -> u64 {
        if self.quick { quick } else { full }
    }
}

/// The `jobs.toml` for `jobs` (the server comes from `--redis`).
pub fn config_text(env: &Env, jobs: &[(String, String, Action)]) -> String {
    config_text_with(env, None, jobs)
}

/// The `jobs.toml` for `jobs`, with `redis` as the body of its `[redis]`
/// section if given.
pub fn config_text_with(
    env: &Env,
    redis: Option<&str>,
    jobs: &[(String, String, Action)],
) -> String {
    let mut text = String::with_capacity(jobs.len() * 96 + 256);
    if let Some(redis) = redis {
        text.push_str(&format!("[redis]\n{redis}\n\n"));
    }
    text.push_str("[daemon]\nshutdown_grace = \"2s\"\n\n[defaults]\nlock_ttl = \"30s\"\nstarting_deadline = \"30s\"\n");
    let probe = toml_path(&env.probe);
    for (name, schedule, action) in jobs {
        text.push_str(&format!("\n[jobs.{name}]\nschedule = \"{schedule}\"\n"));
        match action {
            Action::Probe => text.push_str(&format!("argv = [\"{probe}\"]\n")),
            Action::True => text.push_str("argv = [\"/bin/true\"]\n"),
            Action::Http(url) => text.push_str(&format!(
                "http = {{ url = \"{url}\", timeout = \"10s\" }}\n"
            )),
        }
    }
    text
}

/// The fleet sizes in environment variable `var` (`3,10,30`), or
/// `default` if it is unset or lists none.
pub fn node_counts(var: &str, default: &[usize]) -> Vec<usize> {
    std::env::var(var)
        .ok()
        .map(|list| {
            list.split(',')
                .filter_map(|s| s.trim().parse().ok())
                .filter(|n| *n > 0)
                .collect::<Vec<usize>>()
        })
        .filter(|list| !list.is_empty())
        .unwrap_or_else(|| default.to_vec())
}

/// `count` jobs `j0..` on one schedule with one action.
pub fn uniform(count: usize, schedule: &str, action: &Action) -> Vec<(String, String, Action)> {
    (0..count)
        .map(|i| (format!("j{i}"), schedule.to_string(), action.clone()))
        .collect()
}

/// Redis, a work directory with `jobs.toml`, and the nodes.
pub struct Fleet {
    pub work: Workdir,
    pub redis: RedisServer,
    pub nodes: Vec<Node>,
}

impl Fleet {
    pub fn new(config: &str) -> Fleet {
        let work = Workdir::new();
        work.write_config(config);
        Fleet {
            work,
            redis: RedisServer::start(),
            nodes: Vec::new(),
        }
    }

    /// Where the probe appends its lines.
    pub fn out(&self) -> PathBuf {
        self.work.path("runs")
    }

    pub fn config_path(&self) -> PathBuf {
        self.work.path("jobs.toml")
    }

    /// Starts nodes `n1..=nN` and waits until each logged its start.
    pub fn start_nodes(&mut self, count: usize) {
        let url = self.redis.url();
        self.nodes = start_daemons(&self.work, count, Some(&url));
    }

    /// (name, pid) of redis and every node, for CPU sampling.
    pub fn procs(&self) -> Vec<(String, i32)> {
        let mut procs = vec![("redis".to_string(), self.redis.pid())];
        procs.extend(self.nodes.iter().map(|n| (n.id.clone(), n.pid())));
        procs
    }

    /// Stops the nodes (SIGTERM, then waits; SIGKILL after 10 s).
    pub fn stop_nodes(&mut self) {
        stop_daemons(&mut self.nodes);
    }

    /// The probe's lines so far.
    pub fn probe_runs(&self) -> Vec<ProbeRun> {
        parse_probe(&self.out())
    }

    /// Waits until the probe recorded at least `count` runs whose
    /// occurrence is in `[from, to)` (or `limit` passes: misses are counted later).
    pub fn wait_probe_runs(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        count: usize,
        limit: Duration,
    ) {
        wait_probe_lines(&self.out(), from, to, count, limit);
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.stop_nodes();
    }
}

/// A work directory with a `jobs.toml` that names its coordinator, and the
/// nodes; the Redis side belongs to the caller.
pub struct Daemons {
    pub work: Workdir,
    pub nodes: Vec<Node>,
}

impl Daemons {
    /// Writes `config` (which must have its `[redis]` section); no node runs yet.
    pub fn new(config: &str) -> Daemons {
        assert!(
            config.lines().any(|line| line.trim() == "[redis]"),
            "a `jobs.toml` for `Daemons` names its coordinator"
        );
        let work = Workdir::new();
        work.write_config(config);
        Daemons {
            work,
            nodes: Vec::new(),
        }
    }

    /// Where the probe appends its lines.
    pub fn out(&self) -> PathBuf {
        self.work.path("runs")
    }

    /// Starts nodes `n1..=nN` on the file's coordinator.
    pub fn start_nodes(&mut self, count: usize) {
        self.nodes = start_daemons(&self.work, count, None);
    }

    /// (name, pid) of every node.
    pub fn procs(&self) -> Vec<(String, i32)> {
        self.nodes.iter().map(|n| (n.id.clone(), n.pid())).collect()
    }

    pub fn stop_nodes(&mut self) {
        stop_daemons(&mut self.nodes);
    }

    pub fn probe_runs(&self) -> Vec<ProbeRun> {
        parse_probe(&self.out())
    }

    /// As [`Fleet::wait_probe_runs`].
    pub fn wait_probe_runs(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        count: usize,
        limit: Duration,
    ) {
        wait_probe_lines(&self.out(), from, to, count, limit);
    }
}

impl Drop for Daemons {
    fn drop(&mut self) {
        self.stop_nodes();
    }
}

/// Starts `solocron run` as `n1..=nN` with `work`'s `jobs.toml` (and
/// `--redis URL` if given), `BENCH_OUT` in `work`; waits until each logged
/// its start.
fn start_daemons(work: &Workdir, count: usize, url: Option<&str>) -> Vec<Node> {
    let config = toml_path(&work.path("jobs.toml"));
    let out = toml_path(&work.path("runs"));
    let mut args = vec!["--config", config.as_str()];
    if let Some(url) = url {
        args.extend(["--redis", url]);
    }
    (1..=count)
        .map(|i| Node::start_with_args(work, &format!("n{i}"), &args, &[("BENCH_OUT", &out)]))
        .collect()
}

/// SIGTERM to every node, then waits for each (SIGKILL after 10 s).
fn stop_daemons(nodes: &mut Vec<Node>) {
    for node in nodes.iter() {
        node.signal("TERM");
    }
    for node in nodes.iter_mut() {
        let pid = node.pid();
        let gone = std::time::Instant::now() + Duration::from_secs(10);
        while crate::common::is_alive(pid) && std::time::Instant::now() < gone {
            std::thread::sleep(Duration::from_millis(20));
        }
        node.kill9();
    }
    nodes.clear();
}

/// Waits until the probe file `out` has at least `count` runs whose
/// occurrence is in `[from, to)`, or `limit` passes.
fn wait_probe_lines(
    out: &Path,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    count: usize,
    limit: Duration,
) {
    let deadline = std::time::Instant::now() + limit;
    while std::time::Instant::now() < deadline {
        let seen = parse_probe(out)
            .iter()
            .filter(|r| r.at.is_some_and(|at| at >= from && at < to))
            .count();
        if seen >= count {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One line of the probe.
#[derive(Debug, Clone)]
pub struct ProbeRun {
    pub job: String,
    pub occurrence: String,
    pub at: Option<DateTime<Utc>>,
    pub node: String,
    pub start_ns: i128,
}

/// Parses `JOB OCCURRENCE NODE FENCE START_NS` lines.
pub fn parse_probe(path: &Path) -> Vec<ProbeRun> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let parts: Vec<&str> = line.split(' ').collect();
            let [job, occurrence, node, _fence, ns] = parts[..] else {
                return None;
            };
            Some(ProbeRun {
                job: job.to_string(),
                occurrence: occurrence.to_string(),
                at: parse_at(occurrence),
                node: node.to_string(),
                start_ns: ns.parse().ok()?,
            })
        })
        .collect()
}

pub fn parse_at(text: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|at| at.with_timezone(&Utc))
}

/// An occurrence's name (RFC 3339 UTC, whole seconds).
pub fn rfc3339(at: DateTime<Utc>) -> String {
    crate::common::cluster::rfc3339(at)
}

/// The occurrence instant in ns since the epoch.
pub fn at_ns(at: DateTime<Utc>) -> i128 {
    i128::from(at.timestamp()) * 1_000_000_000
}

/// Lag, duplicates and misses of runs against the expected occurrences.
#[derive(Debug, Clone, Default)]
pub struct LagResult {
    /// Lag of each occurrence's first run, ms.
    pub lag: Stats,
    pub expected: usize,
    pub ran: usize,
    /// Occurrences run more than once (and the extra runs).
    pub duplicated: usize,
    pub extra_runs: usize,
    pub missed: usize,
    /// Runs per node.
    pub per_node: BTreeMap<String, usize>,
}

impl LagResult {
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "lag_ms": self.lag.json(), "expected": self.expected, "ran": self.ran,
            "duplicated_occurrences": self.duplicated, "extra_runs": self.extra_runs,
            "missed": self.missed, "runs_per_node": self.per_node,
        })
    }
}

/// Checks `(job, at_ns)` arrivals against `jobs` × every `step_s`-second
/// occurrence in `[from, to)`; the lag of each is `arrival - occurrence`.
pub fn analyse(
    arrivals: &[(String, Option<DateTime<Utc>>, String, i128)],
    jobs: &[String],
    step_s: i64,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> LagResult {
    let wanted: BTreeSet<&str> = jobs.iter().map(String::as_str).collect();
    let mut seen: BTreeMap<(String, DateTime<Utc>), Vec<i128>> = BTreeMap::new();
    let mut per_node = BTreeMap::new();
    for (job, at, node, ns) in arrivals {
        let Some(at) = *at else { continue };
        if at < from || at >= to || !wanted.contains(job.as_str()) {
            continue;
        }
        seen.entry((job.clone(), at)).or_default().push(*ns);
        *per_node.entry(node.clone()).or_insert(0) += 1;
    }
    let mut expected = 0;
    let mut missed = 0;
    let mut t = from.timestamp();
    while t < to.timestamp() {
        if t % step_s == 0 {
            for job in jobs {
                expected += 1;
                let at = DateTime::from_timestamp(t, 0).expect("instant");
                if !seen.contains_key(&(job.clone(), at)) {
                    missed += 1;
                }
            }
        }
        t += 1;
    }
    let lags: Vec<f64> = seen
        .iter()
        .map(|((_, at), list)| (list.iter().min().copied().unwrap_or(0) - at_ns(*at)) as f64 / 1e6)
        .collect();
    LagResult {
        lag: Stats::of(&lags),
        expected,
        ran: seen.len(),
        duplicated: seen.values().filter(|l| l.len() > 1).count(),
        extra_runs: seen.values().map(|l| l.len().saturating_sub(1)).sum(),
        missed,
        per_node,
    }
}

/// Probe runs as arrivals for [`analyse`].
pub fn probe_arrivals(runs: &[ProbeRun]) -> Vec<(String, Option<DateTime<Utc>>, String, i128)> {
    runs.iter()
        .map(|r| (r.job.clone(), r.at, r.node.clone(), r.start_ns))
        .collect()
}

/// Waits (up to `limit`) for `condition`, without panicking; returns whether it held.
pub fn wait_for(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if condition() {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Panicking variant, for conditions without which the scenario cannot run.
pub fn must(limit: Duration, what: &str, condition: impl FnMut() -> bool) {
    wait_until(limit, what, condition);
}

/// Waits until every one of `count` nodes knows the others, so that each
/// occurrence has one node first in line (README, "How it works"): the
/// registry lists `count` nodes, then one registry refresh period (10 s)
/// passes, in which every node reads the list again.
pub fn wait_for_live_set(conn: &mut redis::Connection, count: usize) {
    must(
        Duration::from_secs(30),
        "every node is in the registry",
        || {
            redis::cmd("ZCARD")
                .arg("{solocron}:nodes")
                .query::<usize>(conn)
                .unwrap_or(0)
                >= count
        },
    );
    std::thread::sleep(Duration::from_secs(11));
}
