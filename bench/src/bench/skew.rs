//! Scenario t, issue #12 item 1: firing by the cluster's clock. 3 nodes on
//! one Redis, one with its wall clock 450 ms ahead and one 450 ms behind
//! (libfaketime, `FAKETIME_DONT_FAKE_MONOTONIC=1`, as `tests/it/fault/clock.rs`
//! does), three every-second probe jobs (so that a 60 s window has 180
//! runs: a p99 of 60 would be the single worst run). The probe runs with `LD_PRELOAD`
//! emptied (the job's `env`), so its first clock reading is the true
//! clock, as is the bench's: the lag of each run from the true instant,
//! the runs started before it, and the wins per node. Measured with
//! `clock = "redis"` (the default; the targets) and then `clock = "local"`
//! (to show the difference). In the `redis` window the bench's minimal
//! spawner (scenario c's: the daemon's spawning code, no Redis, no daemon)
//! also starts three probes at each second + 500 ms, so the lag this
//! machine itself gives one timed start is measured beside solocron's.
//!
//! Failure model: without libfaketime the scenario cannot run (a row says
//! so); a node that does not start panics the scenario the same way.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::TimeDelta;
use serde_json::json;

use crate::common::cluster::{sleep_until, whole_second_after};
use crate::common::{Node, RedisServer, Workdir, faketime_env, toml_path};
use crate::fleet::{self, Env};
use crate::machine::Minimal;
use crate::report::{Report, Stats};

const NODES: [(&str, &str); 3] = [("ahead", "+0.45"), ("right", ""), ("behind", "-0.45")];
const P99_MS: f64 = 10.0;
/// Every-second probe jobs (`tick0`…).
const JOBS: usize = 3;

struct Window {
    lag: Stats,
    /// The minimal spawner's lag in the same window and its failed spawns
    /// (`redis` only).
    machine: Option<(Stats, usize)>,
    early: usize,
    expected: usize,
    duplicated: usize,
    missed: usize,
    wins: BTreeMap<String, usize>,
}

impl Window {
    fn wins_text(&self) -> String {
        NODES
            .iter()
            .map(|(id, _)| format!("{id} {}", self.wins.get(*id).copied().unwrap_or(0)))
            .collect::<Vec<_>>()
            .join(" / ")
    }

    fn json(&self) -> serde_json::Value {
        json!({"lag_ms": self.lag.json(), "machine_lag_ms": self.machine.as_ref().map(|(lag, _)| lag.json()),
            "machine_failed": self.machine.as_ref().map(|(_, failed)| failed),
            "early": self.early, "expected": self.expected,
            "duplicated": self.duplicated, "missed": self.missed, "wins": self.wins})
    }
}

pub fn run(env: &Env, report: &mut Report) {
    let scenario = "t clock skew";
    let redis = window(env, "redis", env.secs(20, 60));
    let local = window(env, "local", env.secs(10, 20));
    let n = redis.expected;
    report.check(
        scenario,
        "issue #12 item 1: 3 nodes at +450 ms / 0 / −450 ms, `clock = \"redis\"`: lag from the true instant, p50 / p99 / max",
        &format!("p99 ≤ {P99_MS} ms"),
        redis.lag.ms(),
        redis.lag.count > 0 && redis.lag.p99 <= P99_MS,
    );
    if let Some((machine, failed)) = &redis.machine {
        report.info(
            scenario,
            "the same window: this machine's own timed start (the minimal spawner, no Redis, 3 probes at each second + 500 ms), p50 / p99 / max",
            format!("{}; {failed} spawns failed", machine.ms()),
        );
    }
    report.check(
        scenario,
        "`clock = \"redis\"`: runs started before the true instant; duplicates / misses",
        "0; 0 / 0",
        format!(
            "{} of {}; {} / {}",
            redis.early, redis.lag.count, redis.duplicated, redis.missed
        ),
        redis.early == 0 && redis.duplicated == 0 && redis.missed == 0 && redis.lag.count > 0,
    );
    let fair = NODES
        .iter()
        .all(|(id, _)| redis.wins.get(*id).copied().unwrap_or(0) * 6 >= n);
    report.check(
        scenario,
        "`clock = \"redis\"`: wins per node (ahead / right / behind)",
        "about a third each (each ≥ 1/6)",
        format!("{} of {n}", redis.wins_text()),
        fair && n > 0,
    );
    report.info(
        scenario,
        "the same with `clock = \"local\"`: lag p50 / p99 / max; started early; wins (ahead / right / behind)",
        format!(
            "{}; {} of {} early; {} of {}; dup / miss {} / {}",
            local.lag.ms(),
            local.early,
            local.lag.count,
            local.wins_text(),
            local.expected,
            local.duplicated,
            local.missed
        ),
    );
    report.raw(
        "t_clock_skew",
        json!({"redis": redis.json(), "local": local.json()}),
    );
}

/// One window of `secs` seconds with `clock = CLOCK`.
fn window(env: &Env, clock: &str, secs: u64) -> Window {
    let redis = RedisServer::start();
    let work = Workdir::new();
    let probe = toml_path(&env.probe);
    let jobs: String = (0..JOBS)
        .map(|i| {
            format!(
                "[jobs.tick{i}]\nschedule = \"* * * * * *\"\nargv = [\"{probe}\"]\nlock_ttl = \"5s\"\n\
                 # the probe reads the true clock: no libfaketime in the job\n\
                 env = {{ LD_PRELOAD = \"\" }}\n\n"
            )
        })
        .collect();
    work.write_config(&format!(
        "[daemon]\nshutdown_grace = \"2s\"\nclock = \"{clock}\"\n\n{jobs}"
    ));
    let config = toml_path(&work.path("jobs.toml"));
    let out = toml_path(&work.path("runs"));
    let url = redis.url();
    let args = ["--config", config.as_str(), "--redis", url.as_str()];
    let mut nodes: Vec<Node> = Vec::new();
    for (id, offset) in NODES {
        let mut vars = vec![("BENCH_OUT".to_string(), out.clone())];
        if !offset.is_empty() {
            vars.extend(faketime_env(offset));
        }
        let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        nodes.push(Node::start_with_args(&work, id, &args, &vars));
    }
    if clock == "redis" {
        for node in nodes.iter().filter(|n| n.id != "right") {
            node.wait_for_log(
                Duration::from_secs(10),
                "firing occurrences by redis's clock",
            );
        }
    }
    fleet::wait_for_live_set(&mut redis.conn(), nodes.len());
    let from = whole_second_after(3, 1);
    let to = from + TimeDelta::seconds(secs as i64);
    let machine_out = work.path("machine-runs");
    let machine = (clock == "redis").then(|| {
        let minimal = Minimal::start();
        let half = TimeDelta::milliseconds(500);
        let half_ns = i128::from(half.num_nanoseconds().unwrap_or(0));
        let mut failed = 0;
        let mut second = from;
        while second < to {
            failed += minimal.probes(&env.probe, second, second + half, JOBS, &machine_out);
            second += TimeDelta::seconds(1);
        }
        minimal.stop();
        let lags: Vec<f64> = fleet::parse_probe(&machine_out)
            .iter()
            .filter_map(|run| Some((run.start_ns - fleet::at_ns(run.at?) - half_ns) as f64 / 1e6))
            .collect();
        (Stats::of(&lags), failed)
    });
    sleep_until(to + TimeDelta::seconds(1));
    fleet::wait_for(Duration::from_secs(10), || {
        fleet::parse_probe(&work.path("runs"))
            .iter()
            .filter(|r| r.at.is_some_and(|at| at >= from && at < to))
            .count()
            >= secs as usize * JOBS
    });
    for node in &nodes {
        node.signal("TERM");
    }
    for node in &mut nodes {
        node.wait_exit(Duration::from_secs(10));
    }
    let runs = fleet::parse_probe(&work.path("runs"));
    let mut per: BTreeMap<(String, i64), Vec<(i128, String)>> = BTreeMap::new();
    for run in runs {
        if let Some(at) = run.at.filter(|at| *at >= from && *at < to) {
            per.entry((run.job.clone(), at.timestamp()))
                .or_default()
                .push((run.start_ns - fleet::at_ns(at), run.node));
        }
    }
    let mut wins = BTreeMap::new();
    let mut lags = Vec::new();
    for list in per.values() {
        if let Some((lag, node)) = list.iter().min() {
            lags.push(*lag as f64 / 1e6);
            *wins.entry(node.clone()).or_insert(0) += 1;
        }
    }
    Window {
        machine,
        early: lags.iter().filter(|lag| **lag < 0.0).count(),
        lag: Stats::of(&lags),
        expected: secs as usize * JOBS,
        duplicated: per.values().filter(|l| l.len() > 1).count(),
        missed: (secs as usize * JOBS).saturating_sub(per.len()),
        wins,
    }
}
