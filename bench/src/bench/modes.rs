//! Scenario j: the coordinator modes side by side. For `url` (one server),
//! `url` with `wait_replicas = 1` (1 replica), `sentinel` (1 master + 2
//! replicas, 3 sentinels, `WAIT 1`), `cluster` (3 masters + 3 replicas,
//! `WAIT 1`) and `redlock` (5 masters), one after the other and each with
//! the same fleet and window: 3 `solocron run` nodes, [`JOBS`]
//! every-second probe jobs.
//!
//! In one window per mode: the fire-to-start lag (the probe's first clock
//! reading minus the occurrence), duplicates and misses; the round trips
//! and commands the nodes send per occurrence (a raw `MONITOR` on every
//! data node, attributed to daemon and occurrence by [`crate::trips`];
//! Sentinel's sentinels through counting proxies); the commands executed
//! for the jobs (those sent plus those the scripts ran, `MONITOR` `lua`),
//! and `INFO commandstats` deltas of all masters (periodic traffic
//! included). `MONITOR` runs in every mode, so its small cost is in every
//! lag alike. Then the claim rates ([`crate::claims`]).
//!
//! Failure model: a mode whose servers do not come up, or whose fleet never
//! runs the probe, panics inside [`measure`]; that mode gets a "could not
//! run" row (the bench exits 1) and the other modes still run.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::TimeDelta;
use serde_json::json;

use crate::common::cluster::{sleep_until, whole_second_after};
use crate::fleet::{self, Action, Daemons, Env, LagResult, analyse, probe_arrivals};
use crate::monitor::{self, MonLine, Monitor};
use crate::report::{Report, Stats};
use crate::topology::Topology;
use crate::trips::{self, Occurrence, Summary};

pub const SCENARIO: &str = "j coordinator modes";

/// Starts one mode's servers.
type Build = fn() -> Topology;

/// Every-second probe jobs per mode.
const JOBS: usize = 6;

/// The `key_prefix` of the fleet.
const PREFIX: &str = "solocron";

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
    name: &'static str,
    shown: String,
    window_s: i64,
    masters: usize,
    lag: LagResult,
    trips: Summary,
    /// The daemons' non-job commands in the window (registry, clock).
    periodic: BTreeMap<String, u32>,
    /// Commands run inside the jobs' scripts (`MONITOR` `lua`), all data nodes.
    lua_job: u64,
    /// Sentinel only: what the daemons sent the sentinels, in the window
    /// and since they started.
    sentinel_window: Option<BTreeMap<String, u32>>,
    sentinel_total: BTreeMap<String, u32>,
    executed: BTreeMap<String, u64>,
    left_out: BTreeMap<String, u64>,
    /// Cluster only: jobs per shard (master port).
    shards: BTreeMap<u16, usize>,
    /// Each missed occurrence by what the nodes logged about it
    /// (`claim lost, claim lost, claim lost`).
    misses: BTreeMap<String, usize>,
}

impl ModeResult {
    fn occurrences(&self) -> f64 {
        (JOBS as i64 * self.window_s) as f64
    }

    /// `INFO commandstats` deltas of the masters per occurrence.
    fn commandstats_per_occurrence(&self) -> f64 {
        self.executed.values().sum::<u64>() as f64 / self.occurrences()
    }

    /// The jobs' commands sent plus those their scripts ran, per occurrence.
    fn job_commands_per_occurrence(&self) -> f64 {
        let counted = self.trips.occurrences.max(1) as f64;
        self.trips.all.commands + self.lua_job as f64 / counted
    }

    /// Occurrences for which some node sent a claim again (more round trips
    /// than 3 claims and a release on each of the servers a claim goes to).
    fn retried(&self) -> usize {
        let per_claim = if self.name == "redlock" {
            self.masters
        } else {
            1
        };
        let plain = 4 * per_claim as u32;
        self.trips.all_trips.iter().filter(|&&n| n > plain).count()
    }

    fn json(&self) -> serde_json::Value {
        let t = &self.trips;
        json!({
            "mode": self.name, "shown": self.shown, "jobs": JOBS, "window_s": self.window_s,
            "masters": self.masters, "lag": self.lag.json(),
            "round_trips": {
                "occurrences": t.occurrences, "typical": t.typical,
                "all_nodes": {"trips": t.all.trips, "commands": t.all.commands},
                "winner": {"trips": t.winner.trips, "commands": t.winner.commands},
                "loser": {"trips": t.loser.trips, "commands": t.loser.commands},
                "winner_per_server": t.winner_per_server.iter().map(|m| json!([m.trips, m.commands])).collect::<Vec<_>>(),
                "loser_per_server": t.loser_per_server.iter().map(|m| json!([m.trips, m.commands])).collect::<Vec<_>>(),
                "winner_sequence": t.winner_sequence, "loser_sequence": t.loser_sequence,
            },
            "occurrences_with_a_claim_sent_again": self.retried(),
            "job_commands_per_occurrence": self.job_commands_per_occurrence(),
            "commandstats_per_occurrence": self.commandstats_per_occurrence(),
            "periodic": self.periodic, "lua_job_commands": self.lua_job,
            "sentinel_side_window": self.sentinel_window, "sentinel_side_since_start": self.sentinel_total,
            "commandstats_delta_masters": self.executed, "left_out": self.left_out,
            "jobs_per_shard": self.shards, "misses_by_logged_decisions": self.misses,
        })
    }
}

pub fn run(env: &Env, report: &mut Report, startup: &Stats) {
    let window = env.secs(10, 20) as i64;
    let builders: [(&str, Build); 5] = [
        ("url", Topology::single),
        ("url+wait", Topology::single_wait),
        ("sentinel", Topology::sentinel),
        ("cluster", Topology::cluster),
        ("redlock", || Topology::redlock(5)),
    ];
    let claim_window = Duration::from_secs(env.secs(3, 5));
    // BENCH_J_MODES=url,cluster-bare: only these (for working on one mode).
    let only: Option<Vec<String>> = std::env::var("BENCH_J_MODES")
        .ok()
        .map(|list| list.split(',').map(|s| s.trim().to_string()).collect());
    let wanted = |name: &str| {
        only.as_ref()
            .is_none_or(|list| list.iter().any(|n| n == name))
    };
    let load_before = load_average();
    let mut results = Vec::new();
    let mut claim_results = Vec::new();
    for (name, build) in builders {
        if !wanted(name) {
            continue;
        }
        eprintln!("bench: j: {name} ...");
        // The fleet first, then (its daemons stopped) the claim load on the
        // same servers; a failure costs only its own part.
        let measured = catch(|| {
            let topology = build();
            let fleet = catch(|| measure(env, &topology, window));
            let claims = catch(|| crate::claims::measure(&topology, claim_window));
            (fleet, claims)
        });
        let (fleet, claims) = match measured {
            Ok(both) => both,
            Err(why) => (Err(why.clone()), Err(why)),
        };
        match fleet {
            Ok(result) => {
                rows(report, &result, startup);
                results.push(result);
            }
            Err(why) => report.failed(&format!("{SCENARIO} ({name} fleet)"), &why),
        }
        match claims {
            Ok(result) => claim_results.push(result),
            Err(why) => report.failed(&format!("{SCENARIO} ({name} claims)"), &why),
        }
    }
    // Shards alone: a cluster without replicas, so without `WAIT`.
    let bare = if wanted("cluster-bare") {
        eprintln!("bench: j: cluster without replicas (claims only) ...");
        Some(catch(|| {
            crate::claims::measure(&Topology::cluster_bare(), claim_window)
        }))
    } else {
        None
    };
    match bare {
        None => {}
        Some(Ok(result)) => {
            // Beside the cluster with replicas.
            let at = claim_results
                .iter()
                .position(|r| r.name == "cluster")
                .map_or(claim_results.len(), |i| i + 1);
            claim_results.insert(at, result);
        }
        Some(Err(why)) => report.failed(&format!("{SCENARIO} (cluster-bare claims)"), &why),
    }
    let load = format!(
        "load average (1 min) {} at the start, {} at the end",
        load_before,
        load_average()
    );
    table(report, &results, startup, &load);
    report.raw(
        "j_coordinator_modes",
        json!(results.iter().map(ModeResult::json).collect::<Vec<_>>()),
    );
    crate::claims::report(report, &claim_results);
}

/// The 1-minute load average (`/proc/loadavg`), or `?`.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| text.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".to_string())
}

/// Runs `part`; a panic becomes its message.
fn catch<T>(part: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(part)).map_err(|panic| {
        panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "panicked".to_string())
    })
}

fn measure(env: &Env, topology: &Topology, window: i64) -> ModeResult {
    let jobs = fleet::uniform(JOBS, "* * * * * *", &Action::Probe);
    let names: Vec<String> = jobs.iter().map(|(name, _, _)| name.clone()).collect();
    let redis = topology.redis_section(PREFIX);
    let mut daemons = Daemons::new(&fleet::config_text_with(env, Some(&redis), &jobs));
    daemons.start_nodes(3);
    fleet::must(
        Duration::from_secs(30),
        "every job's probe ran once",
        || {
            let runs = daemons.probe_runs();
            names.iter().all(|name| runs.iter().any(|r| &r.job == name))
        },
    );
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
    daemons.wait_probe_runs(from, to, JOBS * window as usize, Duration::from_secs(5));
    let runs = daemons.probe_runs();
    let lag = analyse(&probe_arrivals(&runs), &names, 1, from, to);
    // The node whose probe started first ran the occurrence.
    let mut winners: BTreeMap<Occurrence, (i128, String)> = BTreeMap::new();
    for run in &runs {
        let Some(at) = run.at else { continue };
        let entry = winners
            .entry((format!("{PREFIX}:{}", run.job), at.timestamp()))
            .or_insert((run.start_ns, run.node.clone()));
        if run.start_ns < entry.0 {
            *entry = (run.start_ns, run.node.clone());
        }
    }
    let winners = winners
        .into_iter()
        .map(|(occ, (_, node))| (occ, node))
        .collect();
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
    let shards = match topology {
        Topology::Cluster(cluster) => {
            let mut shards: BTreeMap<u16, usize> = BTreeMap::new();
            for name in &names {
                let slot =
                    crate::common::ha::RedisCluster::slot_of(&format!("{{{PREFIX}:{name}}}"));
                *shards.entry(cluster.master_of_slot(slot)).or_insert(0) += 1;
            }
            shards
        }
        _ => BTreeMap::new(),
    };
    let misses = explain_misses(&daemons, &names, &runs, from, to);
    daemons.stop_nodes();
    ModeResult {
        name: topology.name(),
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
        shards,
        misses,
    }
}

/// What the nodes logged about each occurrence in `[from, to)` that no
/// probe ran: per missed occurrence, its nodes' decision lines (`claim
/// lost`, `occurrence missed`, …) sorted and joined, counted.
fn explain_misses(
    daemons: &Daemons,
    names: &[String],
    runs: &[fleet::ProbeRun],
    from: chrono::DateTime<chrono::Utc>,
    to: chrono::DateTime<chrono::Utc>,
) -> BTreeMap<String, usize> {
    const DECISIONS: &[&str] = &[
        "claim won",
        "claim lost",
        "occurrence already decided by another node",
        "occurrence skipped",
        "occurrence not run here",
        "occurrence missed",
        "claim failed",
    ];
    let logs: Vec<String> = daemons.nodes.iter().map(|node| node.log()).collect();
    let mut misses = BTreeMap::new();
    let mut at = from;
    while at < to {
        for name in names {
            if runs.iter().any(|r| r.job == *name && r.at == Some(at)) {
                continue;
            }
            let (job, occurrence) = (
                format!("job={name} "),
                format!("occurrence={}", fleet::rfc3339(at)),
            );
            let mut said: Vec<&str> = logs
                .iter()
                .flat_map(|log| log.lines())
                .filter(|line| line.contains(&job) && line.contains(&occurrence))
                .filter_map(|line| DECISIONS.iter().copied().find(|d| line.contains(d)))
                .collect();
            said.sort_unstable();
            let key = if said.is_empty() {
                "nothing logged".to_string()
            } else {
                said.join(", ")
            };
            *misses.entry(key).or_insert(0) += 1;
        }
        at += TimeDelta::seconds(1);
    }
    misses
}

/// The detail rows of one mode (the table has the headline figures).
fn rows(report: &mut Report, result: &ModeResult, startup: &Stats) {
    let shown = &result.shown;
    let lag = &result.lag;
    let misses = if result.misses.is_empty() {
        String::new()
    } else {
        let each: Vec<String> = result
            .misses
            .iter()
            .map(|(said, n)| format!("{n} × {said}"))
            .collect();
        format!(
            "; the nodes logged about the missed ones: {}",
            each.join("; ")
        )
    };
    report.info(
        SCENARIO,
        &format!(
            "{shown}: fire-to-start lag p50 / p99 / max, 3 nodes, {JOBS} every-second probe jobs; dup / miss"
        ),
        format!(
            "{:.2} / {:.2} / {:.2} ms (probe start-up alone p50 {:.2}); dup {} / miss {} of {}{misses}",
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
        "all nodes {:.2} round trips, {:.2} commands sent ({} occurrences with a claim sent again); winner {:.2} / each loser {:.2} round trips ({:.2} / {:.2} commands; winner `{}`, loser `{}`; {} of {} occurrences the same)",
        t.all.trips,
        t.all.commands,
        result.retried(),
        t.winner.trips,
        t.loser.trips,
        t.winner.commands,
        t.loser.commands,
        t.winner_sequence,
        t.loser_sequence,
        t.typical,
        t.occurrences
    );
    match result.name {
        "redlock" => text.push_str(&format!(
            "; per master {}",
            per_server(&t.winner_per_server, &t.loser_per_server)
        )),
        "sentinel" | "url+wait" => text.push_str(&format!(
            "; master, replicas: {}",
            per_server(&t.winner_per_server, &t.loser_per_server)
        )),
        "cluster" => text.push_str(&format!(
            "; jobs per shard (master port: jobs): {}",
            result
                .shards
                .iter()
                .map(|(port, n)| format!("{port}: {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        )),
        _ => {}
    }
    if let Some(window) = &result.sentinel_window {
        text.push_str(&format!(
            "; to the sentinels (counting proxies): {} commands in the window ({}); since the daemons started: {}",
            window.values().sum::<u32>(),
            describe_u32(window),
            describe_u32(&result.sentinel_total)
        ));
    }
    report.info(
        SCENARIO,
        &format!("{shown}: client round trips and commands sent per occurrence (MONITOR on every data node)"),
        text,
    );
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
            "{shown}: Redis commands executed per occurrence, scripts' inner commands included"
        ),
        format!(
            "{:.1} for the jobs (sent + inside scripts, MONITOR); {:.1} with the periodic ones (commandstats of the masters: {} in {} s: {}){left_out}; periodic from the daemons in the window: {}",
            result.job_commands_per_occurrence(),
            result.commandstats_per_occurrence(),
            result.executed.values().sum::<u64>(),
            result.window_s,
            monitor::describe_counts(&result.executed),
            describe_u32(&result.periodic)
        ),
    );
}

/// The modes side by side, as markdown after the main table.
fn table(report: &mut Report, results: &[ModeResult], startup: &Stats, load: &str) {
    let Some(first) = results.first() else {
        return;
    };
    let mut text = format!(
        "\nCoordinator modes (j): 3 nodes, {JOBS} every-second probe jobs, {} s per mode \
         ({} occurrences); lag includes the probe's own start-up (p50 {:.2} ms); round trips \
         and commands per occurrence are all 3 nodes together (the winner's claim and release, \
         each loser's claim); {load}.\n\n\
         | mode | lag p50 / p99 / max (ms) | dup / miss | round trips | commands sent | occurrences with a claim sent again | commands executed (jobs) | commandstats (masters, periodic incl.) |\n\
         |---|---|---|---|---|---|---|---|\n",
        first.window_s,
        JOBS as i64 * first.window_s,
        startup.p50
    );
    for r in results {
        text.push_str(&format!(
            "| {} | {:.2} / {:.2} / {:.2} | {} / {} | {:.2} | {:.2} | {} of {} | {:.1} | {:.1} |\n",
            r.shown,
            r.lag.lag.p50,
            r.lag.lag.p99,
            r.lag.lag.max,
            r.lag.duplicated,
            r.lag.missed,
            r.trips.all.trips,
            r.trips.all.commands,
            r.retried(),
            r.trips.occurrences,
            r.job_commands_per_occurrence(),
            r.commandstats_per_occurrence()
        ));
    }
    report.extra.push(text);
}

/// `2.00 / 1.00 on each of 5` when every server agrees, else each server's pair.
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
