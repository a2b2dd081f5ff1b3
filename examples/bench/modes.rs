//! Scenario j: the coordinator modes side by side. For `url` (one server),
//! `sentinel` (1 master + 2 replicas, 3 sentinels, the default `WAIT 1`)
//! and `redlock` (5 masters), one after the other and each with the same
//! fleet and window length: 3 nodes, one every-second probe job.
//!
//! In one window per mode the bench measures what scenarios a and b
//! measure for `url`: the fire-to-start lag (the probe's first clock
//! reading minus the occurrence), duplicates and misses; the round trips
//! and commands each node sends per occurrence (a raw `MONITOR` on every
//! data node, attributed by [`crate::trips`]: Redlock per master and in
//! total, Sentinel the data nodes here and the sentinels through counting
//! proxies); and the commands executed (`INFO commandstats` deltas, all
//! masters summed). `MONITOR` runs in every mode, so its small cost is in
//! every lag alike.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::TimeDelta;
use serde_json::json;

use crate::common::cluster::{sleep_until, whole_second_after};
use crate::fleet::{self, Action, Daemons, Env, LagResult, analyse, probe_arrivals};
use crate::monitor::{self, MonLine, Monitor};
use crate::report::{Report, Stats};
use crate::topology::Topology;
use crate::trips::{self, Summary};

const SCENARIO: &str = "j coordinator modes";

/// Commands the data nodes run for the sentinels and the replicas (hellos,
/// acknowledgements, their connection set-up), never sent by a daemon:
/// left out of "executed", and shown apart.
const NOT_THE_DAEMONS: &[&str] = &[
    "publish",
    "replconf",
    "subscribe",
    "client|setname",
    "client|kill",
];

/// One mode's figures.
struct ModeResult {
    mode: &'static str,
    shown: String,
    window_s: i64,
    masters: usize,
    lag: LagResult,
    trips: Summary,
    /// The daemons' non-job commands in the window (registry, clock).
    periodic: BTreeMap<String, u32>,
    /// Commands run inside the job's scripts (`MONITOR` `lua`), all data nodes.
    lua_job: u64,
    /// Sentinel only: what the daemons sent the sentinels, in the window
    /// and since they started.
    sentinel_window: Option<BTreeMap<String, u32>>,
    sentinel_total: BTreeMap<String, u32>,
    executed: BTreeMap<String, u64>,
    left_out: BTreeMap<String, u64>,
}

impl ModeResult {
    fn executed_per_occurrence(&self) -> f64 {
        self.executed.values().sum::<u64>() as f64 / self.window_s as f64
    }

    fn json(&self) -> serde_json::Value {
        json!({
            "mode": self.mode, "window_s": self.window_s, "masters": self.masters,
            "lag": self.lag.json(),
            "round_trips": {
                "occurrences": self.trips.occurrences, "typical": self.trips.typical,
                "winner": {"trips": self.trips.winner.trips, "commands": self.trips.winner.commands},
                "loser": {"trips": self.trips.loser.trips, "commands": self.trips.loser.commands},
                "winner_per_server": self.trips.winner_per_server.iter().map(|m| json!([m.trips, m.commands])).collect::<Vec<_>>(),
                "loser_per_server": self.trips.loser_per_server.iter().map(|m| json!([m.trips, m.commands])).collect::<Vec<_>>(),
                "winner_sequence": self.trips.winner_sequence, "loser_sequence": self.trips.loser_sequence,
            },
            "periodic": self.periodic, "lua_job_commands": self.lua_job,
            "sentinel_side_window": self.sentinel_window, "sentinel_side_since_start": self.sentinel_total,
            "commandstats_delta_masters": self.executed, "left_out": self.left_out,
        })
    }
}

pub fn run(env: &Env, report: &mut Report, startup: &Stats) {
    let window = env.secs(10, 30) as i64;
    let builders: [(&str, fn() -> Topology); 3] = [
        ("url", Topology::single),
        ("sentinel", Topology::sentinel),
        ("redlock", || Topology::redlock(5)),
    ];
    let mut results = Vec::new();
    for (mode, build) in builders {
        eprintln!("bench: j: {mode} ...");
        let topology = build();
        let result = measure(env, &topology, window);
        drop(topology);
        rows(report, &result, startup);
        results.push(result);
    }
    compare(report, &results);
    report.raw(
        "j_coordinator_modes",
        json!(results.iter().map(ModeResult::json).collect::<Vec<_>>()),
    );
}

fn measure(env: &Env, topology: &Topology, window: i64) -> ModeResult {
    let jobs = fleet::uniform(1, "* * * * * *", &Action::Probe);
    let redis = topology.redis_section("solocron");
    let mut daemons = Daemons::new(&fleet::config_text_with(env, Some(&redis), &jobs));
    daemons.start_nodes(3);
    fleet::must(Duration::from_secs(20), "the probe ran once", || {
        !daemons.probe_runs().is_empty()
    });
    let from = whole_second_after(2, 1);
    let to = from + TimeDelta::seconds(window);
    let half = TimeDelta::milliseconds(500);
    let masters = topology.masters();
    let monitors: Vec<(u16, Monitor)> = topology
        .data_ports()
        .into_iter()
        .map(|port| (port, Monitor::start(port)))
        .collect();
    let mut conns: Vec<redis::Connection> =
        masters.iter().map(|&port| topology.conn(port)).collect();
    sleep_until(from - half);
    let before: Vec<_> = conns.iter_mut().map(monitor::commandstats).collect();
    sleep_until(to - half);
    let after: Vec<_> = conns.iter_mut().map(monitor::commandstats).collect();
    let owners = trips::owners(&daemons.procs());
    let servers: Vec<(u16, Vec<MonLine>)> = monitors
        .into_iter()
        .map(|(port, monitor)| (port, monitor.stop()))
        .collect();
    let (lo, hi) = (
        (from - half).timestamp_millis() as f64 / 1e3,
        (to - half).timestamp_millis() as f64 / 1e3,
    );
    sleep_until(to);
    daemons.wait_probe_runs(from, to, window as usize, Duration::from_secs(5));
    let runs = daemons.probe_runs();
    let lag = analyse(&probe_arrivals(&runs), &["j0".to_string()], 1, from, to);
    let mut winners: BTreeMap<i64, (i128, String)> = BTreeMap::new();
    for run in &runs {
        let Some(at) = run.at else { continue };
        let entry = winners
            .entry(at.timestamp())
            .or_insert((run.start_ns, run.node.clone()));
        if run.start_ns < entry.0 {
            *entry = (run.start_ns, run.node.clone());
        }
    }
    let winners = winners.into_iter().map(|(at, (_, node))| (at, node)).collect();
    let counted = trips::count(&servers, &owners, lo, hi);
    let nodes: Vec<String> = daemons.nodes.iter().map(|n| n.id.clone()).collect();
    let summary = trips::summarise(&counted, &nodes, &winners);
    let sentinel_sides = topology.sentinel_sides();
    let by_cmd = |in_window: bool| {
        let mut counts: BTreeMap<String, u32> = BTreeMap::new();
        for line in sentinel_sides.iter().flat_map(|(_, lines)| lines) {
            if !in_window || (line.ts >= lo && line.ts < hi) {
                *counts.entry(line.cmd.clone()).or_insert(0) += 1;
            }
        }
        counts
    };
    let mut executed = BTreeMap::new();
    let mut left_out = BTreeMap::new();
    for (before, after) in before.iter().zip(&after) {
        for (name, calls) in monitor::delta(before, after) {
            let into = if NOT_THE_DAEMONS.contains(&name.as_str()) {
                &mut left_out
            } else {
                &mut executed
            };
            *into.entry(name).or_insert(0) += calls;
        }
    }
    daemons.stop_nodes();
    ModeResult {
        mode: topology.mode(),
        shown: topology.describe(),
        window_s: window,
        masters: masters.len(),
        lag,
        trips: summary,
        periodic: counted.periodic,
        lua_job: counted.lua_job,
        sentinel_window: (!sentinel_sides.is_empty()).then(|| by_cmd(true)),
        sentinel_total: by_cmd(false),
        executed,
        left_out,
    }
}

fn rows(report: &mut Report, result: &ModeResult, startup: &Stats) {
    let shown = &result.shown;
    let lag = &result.lag;
    report.info(
        SCENARIO,
        &format!(
            "{shown}: fire-to-start lag p50 / p99 / max, 3 nodes, 1 every-second probe job; dup / miss"
        ),
        format!(
            "{:.2} / {:.2} / {:.2} ms (probe start-up alone p50 {:.2}); dup {} / miss {} of {}",
            lag.lag.p50,
            lag.lag.p99,
            lag.lag.max,
            startup.p50,
            lag.duplicated,
            lag.missed,
            lag.expected
        ),
    );
    let t = &result.trips;
    let mut text = format!(
        "{:.2} / {:.2} round trips ({:.2} / {:.2} commands sent; winner `{}`, loser `{}`; {} of {} occurrences the same)",
        t.winner.trips,
        t.loser.trips,
        t.winner.commands,
        t.loser.commands,
        t.winner_sequence,
        t.loser_sequence,
        t.typical,
        t.occurrences
    );
    let figure = match result.mode {
        "redlock" => {
            text.push_str(&format!(
                "; per master {}",
                per_server(&t.winner_per_server, &t.loser_per_server)
            ));
            format!(
                "{shown}: client round trips per occurrence, winner / each loser, all {} masters together (MONITOR on each)",
                result.masters
            )
        }
        "sentinel" => {
            text.push_str(&format!(
                "; master, replica, replica: {}",
                per_server(&t.winner_per_server, &t.loser_per_server)
            ));
            let window = result.sentinel_window.clone().unwrap_or_default();
            text.push_str(&format!(
                "; sentinels' side: {} commands in {} s ({}); since the daemons started: {}",
                window.values().sum::<u32>(),
                result.window_s,
                describe_u32(&window),
                describe_u32(&result.sentinel_total)
            ));
            format!(
                "{shown}: client round trips per occurrence, winner / each loser, data nodes (MONITOR); sentinels (counting proxies)"
            )
        }
        _ => format!("{shown}: client round trips per occurrence, winner / each loser (MONITOR)"),
    };
    report.info(SCENARIO, &figure, text);
    let left_out = if result.left_out.is_empty() {
        String::new()
    } else {
        format!(
            "; left out, run for sentinels and replicas: {}",
            monitor::describe_counts(&result.left_out)
        )
    };
    report.info(
        SCENARIO,
        &format!(
            "{shown}: Redis commands executed per occurrence, all masters summed, scripts' inner commands included (commandstats)"
        ),
        format!(
            "{:.1} ({} in {} s: {}){left_out}; periodic from the daemons in the window: {}",
            result.executed_per_occurrence(),
            result.executed.values().sum::<u64>(),
            result.window_s,
            monitor::describe_counts(&result.executed),
            describe_u32(&result.periodic)
        ),
    );
}

/// One row comparing the modes with `url`.
fn compare(report: &mut Report, results: &[ModeResult]) {
    let Some(base) = results.iter().find(|r| r.mode == "url") else {
        return;
    };
    let parts: Vec<String> = results
        .iter()
        .filter(|r| r.mode != "url")
        .map(|r| {
            format!(
                "`{}` lag p50 {:+.2} ms, p99 {:+.2} ms; winner round trips ×{:.1}; commands executed ×{:.1}",
                r.mode,
                r.lag.lag.p50 - base.lag.lag.p50,
                r.lag.lag.p99 - base.lag.lag.p99,
                r.trips.winner.trips / base.trips.winner.trips,
                r.executed_per_occurrence() / base.executed_per_occurrence()
            )
        })
        .collect();
    report.info(
        SCENARIO,
        "each mode against `url` (same fleet, same window length)",
        parts.join("; "),
    );
}

/// `2.00 / 1.00 on each` when every server agrees, else each server's pair.
fn per_server(winner: &[trips::Mean], loser: &[trips::Mean]) -> String {
    let pairs: Vec<String> = winner
        .iter()
        .zip(loser)
        .map(|(w, l)| format!("{:.2} / {:.2}", w.trips, l.trips))
        .collect();
    match pairs.first() {
        Some(first) if pairs.len() > 1 && pairs.iter().all(|p| p == first) => {
            format!("{first} on each of {}", pairs.len())
        }
        _ => pairs.join(", "),
    }
}

/// `SENTINEL 3, PING 1` (largest first), or `none`.
fn describe_u32(counts: &BTreeMap<String, u32>) -> String {
    if counts.is_empty() {
        return "none".to_string();
    }
    let wide: BTreeMap<String, u64> = counts
        .iter()
        .map(|(name, n)| (name.clone(), u64::from(*n)))
        .collect();
    monitor::describe_counts(&wide)
}
