//! A solocron fleet for one scenario: a fresh `redis-server`, a `jobs.toml`
//! built from (name, schedule, action) triples, N real `solocron run`
//! processes (release binary) sharing `BENCH_OUT`, and the analysis of what
//! the probe recorded: lag from the occurrence instant, duplicates, misses.

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

/// The `jobs.toml` for `jobs`.
pub fn config_text(env: &Env, jobs: &[(String, String, Action)]) -> String {
    let mut text = String::with_capacity(jobs.len() * 96 + 256);
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
        let config = toml_path(&self.config_path());
        let url = self.redis.url();
        let out = toml_path(&self.out());
        for i in 1..=count {
            let id = format!("n{i}");
            let node = Node::start_with_args(
                &self.work,
                &id,
                &["--config", &config, "--redis", &url],
                &[("BENCH_OUT", &out)],
            );
            self.nodes.push(node);
        }
    }

    /// (name, pid) of redis and every node, for CPU sampling.
    pub fn procs(&self) -> Vec<(String, i32)> {
        let mut procs = vec![("redis".to_string(), self.redis.pid())];
        procs.extend(self.nodes.iter().map(|n| (n.id.clone(), n.pid())));
        procs
    }

    /// Stops the nodes (SIGTERM, then waits; SIGKILL after 10 s).
    pub fn stop_nodes(&mut self) {
        for node in &self.nodes {
            node.signal("TERM");
        }
        for node in &mut self.nodes {
            let pid = node.pid();
            let gone = std::time::Instant::now() + Duration::from_secs(10);
            while crate::common::is_alive(pid) && std::time::Instant::now() < gone {
                std::thread::sleep(Duration::from_millis(20));
            }
            node.kill9();
        }
        self.nodes.clear();
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
        let deadline = std::time::Instant::now() + limit;
        while std::time::Instant::now() < deadline {
            let seen = self
                .probe_runs()
                .iter()
                .filter(|r| r.at.is_some_and(|at| at >= from && at < to))
                .count();
            if seen >= count {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.stop_nodes();
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
