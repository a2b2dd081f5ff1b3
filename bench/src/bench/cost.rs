//! Scenario r: the Redis cost of one occurrence, solocron beside its peers
//! (bench/peers/node: node-cron + redlock, BullMQ job schedulers), in one
//! run and with the same jobs: 3 and 30 nodes (`BENCH_R_NODES=3,30`), 10
//! every-second probe jobs, each
//! system on its own fresh `redis-server`, all three at the same time and
//! measured over the same windows (so the machine's load is the same for
//! each). Per occurrence: the server's CPU
//! (`used_cpu_sys + used_cpu_user`, its idle cost subtracted), the time of
//! the commands the clients sent (`INFO commandstats`), commands executed
//! and client round trips (`redis_cost.rs` says how). The target is
//! solocron's Redis CPU per occurrence being the lowest of all, while it
//! still records every occurrence and its history entry (checked: one
//! history entry per occurrence of the window). Then solocron's calls one
//! by one (`script_cost.rs`) and what its nodes send besides the claims
//! (registry heartbeats, drift checks, control reads).
//!
//! Failure model: a peer that cannot run (no `node`, no runner file, a
//! failed install, a runner that never says `ready`) is "not run" in its
//! column, with the reason; solocron's own failures panic (the scenario
//! could not run).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use chrono::TimeDelta;
use serde_json::json;

use crate::common::cluster::whole_second_after;
use crate::common::{Node, RedisServer, Workdir, toml_path};
use crate::fleet::{self, Action, Env, analyse, probe_arrivals};
use crate::peers::{JOBS, PeerProc};
use crate::redis_cost::{self, Cost};
use crate::report::Report;
use crate::{script_cost, script_floor};

/// Seconds from the start to the common window: every system's idle
/// measurement, nodes started and the probe seen running (and one more
/// a node).
const SETUP_S: i64 = 40;

fn sizes() -> Vec<usize> {
    fleet::node_counts("BENCH_R_NODES", &[3, 30])
}

const SYSTEMS: &[(&str, &str)] = &[
    ("solocron", "solocron"),
    ("cron-redlock", "node-cron + redlock"),
    ("bullmq", "BullMQ"),
];

/// One system's run.
#[derive(Debug, Clone)]
struct Measured {
    cost: Cost,
    runs: usize,
    duplicates: usize,
    misses: usize,
    /// solocron: history entries written in the CPU window.
    history: Option<usize>,
}

pub fn run(env: &Env, report: &mut Report) {
    let mut raw = serde_json::Map::new();
    for nodes in sizes() {
        raw.insert(nodes.to_string(), side_by_side(env, report, nodes));
    }
    let calls = script_cost::measure();
    let floor = script_floor::measure();
    let scenario = "r Redis cost";
    report.info(
        scenario,
        "commandstats µs per occurrence on one idle server, 3 nodes, median of 3 turns: node-cron + redlock's scripts; the least that records an occurrence (a Lua claim with a decision and a counted fence, a read per other node, a Lua release with the history entry), the same without the reads; solocron's calls",
        floor.describe(),
    );
    let (calls_text, calls_raw) = script_cost::table(&calls);
    let mut text = calls_text;
    text.push_str(&format!(
        "\nThe floor under the commandstats figure (one idle server, calls one at a time, `INFO commandstats` around each; µs per occurrence, median of the turns): {}. Turns: {}.\n",
        floor.describe(),
        floor
            .turns
            .iter()
            .map(|(system, turns)| format!(
                "{system} {}",
                turns.iter().map(|t| format!("{t:.1}")).collect::<Vec<_>>().join(" / ")
            ))
            .collect::<Vec<_>>()
            .join("; ")
    ));
    report.extra.push(text);
    report.raw(
        "r_redis_cost",
        json!({"by_nodes": raw, "solocron_calls": calls_raw, "floor": floor.json()}),
    );
}

/// Every system at once with `nodes` nodes each: the table, the checks,
/// and the raw figures.
fn side_by_side(env: &Env, report: &mut Report, nodes: usize) -> serde_json::Value {
    let scenario = "r Redis cost";
    let load_before = redis_cost::load_average();
    let dir = std::env::var_os("BENCH_PEERS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| env.root.join("bench/peers/node"));
    let skip = std::env::var("BENCH_PEERS_SKIP")
        .ok()
        .filter(|s| !s.is_empty());
    // All systems at once, each on its own server, measured over the same
    // windows: they share whatever load the machine has.
    let from = whole_second_after(SETUP_S + nodes as i64, 1);
    let threads: Vec<(&str, Result<Measured, String>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = SYSTEMS
            .iter()
            .map(|&(system, _)| {
                let (dir, skip) = (&dir, &skip);
                (
                    system,
                    scope.spawn(move || one_system(env, system, dir, skip.as_deref(), from, nodes)),
                )
            })
            .collect();
        handles
            .into_iter()
            .map(|(system, handle)| {
                (
                    system,
                    handle
                        .join()
                        .unwrap_or_else(|_| Err("not run: its thread panicked".to_string())),
                )
            })
            .collect()
    });
    let mut results: BTreeMap<&str, Result<Measured, String>> = BTreeMap::new();
    for (system, result) in threads {
        if system == "solocron"
            && let Err(reason) = &result
        {
            panic!("solocron could not be measured: {reason}");
        }
        results.insert(system, result);
    }
    for (system, result) in &results {
        match result {
            Ok(m) => eprintln!(
                "  [{scenario}] {nodes} nodes, {system}: Redis CPU {:.1} µs/occurrence (idle incl. {:.1}), commandstats {:.1} µs, {:.1} commands, {:.2} round trips; runs {} dup {} miss {}",
                m.cost.cpu_us(),
                m.cost.cpu_raw_per_occ(),
                m.cost.commandstats_us(),
                m.cost.commands(),
                m.cost.round_trips(),
                m.runs,
                m.duplicates,
                m.misses
            ),
            Err(reason) => eprintln!("  [{scenario}] {nodes} nodes, {system}: {reason}"),
        }
    }
    let load_after = redis_cost::load_average();
    let solo = results["solocron"].clone().expect("solocron always runs");

    // Only the server's CPU (`used_cpu_sys + used_cpu_user`, socket I/O
    // included: what a capacity plan pays) carries the target; time inside
    // the commands (`INFO commandstats`) is a diagnostic column.
    type Get = fn(&Measured) -> f64;
    let rows: [(&str, Get, bool); 5] = [
        (
            "Redis CPU µs (used_cpu_sys+user, idle subtracted)",
            |m| m.cost.cpu_us(),
            true,
        ),
        (
            "Redis CPU µs, commandstats (commands sent; a script's inner commands inside it)",
            |m| m.cost.commandstats_us(),
            false,
        ),
        (
            "commands executed (inner included)",
            |m| m.cost.commands(),
            false,
        ),
        ("client round trips", |m| m.cost.round_trips(), false),
        (
            "Redis CPU µs, idle included",
            |m| m.cost.cpu_raw_per_occ(),
            false,
        ),
    ];
    let window = solo.cost.occurrences / JOBS;
    let mut side = format!(
        "\nRedis cost per occurrence ({JOBS} every-second probe jobs, {nodes} nodes, one fresh redis-server per system, all systems at once; {window} s CPU window without MONITOR, then a MONITOR window; load average {load_before:.2} → {load_after:.2}):\n\n| per occurrence | {} |\n|---|{}\n",
        SYSTEMS
            .iter()
            .map(|(_, shown)| *shown)
            .collect::<Vec<_>>()
            .join(" | "),
        "---|".repeat(SYSTEMS.len())
    );
    for (name, get, target) in &rows {
        let cells: Vec<String> = SYSTEMS
            .iter()
            .map(|(system, _)| match &results[system] {
                Ok(m) if *system == "solocron" => format!("{:.1}", get(m)),
                Ok(m) => {
                    let base = get(&solo);
                    if base > 0.0 {
                        format!("{:.1} (×{:.2})", get(m), get(m) / base)
                    } else {
                        format!("{:.1}", get(m))
                    }
                }
                Err(reason) => reason.clone(),
            })
            .collect();
        side.push_str(&format!("| {name} | {} |\n", cells.join(" | ")));
        let measured = SYSTEMS
            .iter()
            .zip(&cells)
            .map(|((_, shown), cell)| format!("{shown} {cell}"))
            .collect::<Vec<_>>()
            .join("; ");
        let figure = format!("{name} per occurrence, {nodes} nodes");
        if *target {
            let peers: Vec<f64> = results
                .iter()
                .filter(|(system, _)| **system != "solocron")
                .filter_map(|(_, r)| r.as_ref().ok().map(get))
                .collect();
            let lowest = !peers.is_empty() && peers.iter().all(|p| get(&solo) < *p);
            report.check(
                scenario,
                &figure,
                "solocron lowest of all peers",
                if peers.is_empty() {
                    format!("{measured} (no peer ran: not comparable)")
                } else {
                    measured
                },
                lowest,
            );
        } else {
            report.info(scenario, &figure, measured);
        }
    }
    let runs_cells: Vec<String> = SYSTEMS
        .iter()
        .map(|(system, _)| match &results[system] {
            Ok(m) => format!("{} / {} / {}", m.runs, m.duplicates, m.misses),
            Err(reason) => reason.clone(),
        })
        .collect();
    side.push_str(&format!(
        "| runs / duplicates / misses in the window | {} |\n",
        runs_cells.join(" | ")
    ));
    side.push_str(&format!(
        "| what Redis keeps of an occurrence | the decision in the job's state hash and a history entry ({} entries for {} occurrences) | nothing (the lock is deleted) | the BullMQ job (the last 1,000 completed kept) |\n",
        solo.history.unwrap_or(0),
        solo.cost.occurrences
    ));
    let history_ok = solo.history == Some(solo.cost.occurrences);
    report.check(
        scenario,
        &format!(
            "solocron records every occurrence of the window once in the history, {nodes} nodes"
        ),
        "one entry per occurrence",
        format!(
            "{} entries for {} occurrences",
            solo.history.unwrap_or(0),
            solo.cost.occurrences
        ),
        history_ok,
    );
    side.push_str(&periodic(&solo.cost));
    report.extra.push(side);
    json!({
        "load_average_before": load_before, "load_average_after": load_after,
        "systems": results.iter().map(|(s, r)| (s.to_string(), match r {
            Ok(m) => json!({"cost": m.cost.json(), "runs": m.runs, "duplicates": m.duplicates,
                            "misses": m.misses, "history_entries": m.history}),
            Err(e) => json!(e),
        })).collect::<serde_json::Map<_, _>>(),
    })
}

/// One system's measurement, or why it did not run (a panic of a peer's
/// run is its "not run" reason; solocron's is the caller's to report).
fn one_system(
    env: &Env,
    system: &str,
    dir: &Path,
    skip: Option<&str>,
    from: chrono::DateTime<chrono::Utc>,
    nodes: usize,
) -> Result<Measured, String> {
    let script = (system != "solocron").then(|| dir.join(format!("{system}.js")));
    if let Some(script) = &script {
        if let Some(reason) = skip {
            return Err(format!("not run: {reason}"));
        }
        runnable(script)?;
    }
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        measure(env, script.as_deref(), from, nodes)
    }))
    .map_err(|panic| {
        let text = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        format!("not run: {}", text.lines().next().unwrap_or("failed"))
    })
}

/// Whether `node` and the runner exist; the reason to skip otherwise.
fn runnable(script: &Path) -> Result<(), String> {
    if !script.exists() {
        return Err(format!("not run: {} is missing", script.display()));
    }
    let node = Command::new("node")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    match node {
        Ok(status) if status.success() => Ok(()),
        _ => Err("not run: `node` is not installed".to_string()),
    }
}

/// One system on its own Redis: idle cost, `nodes` nodes, the two windows
/// from `from` on.
fn measure(
    env: &Env,
    script: Option<&Path>,
    from: chrono::DateTime<chrono::Utc>,
    nodes: usize,
) -> Measured {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    let idle = redis_cost::idle_rate(&mut conn, Duration::from_secs(env.secs(3, 5)));
    let work = Workdir::new();
    work.write_config(&fleet::config_text(
        env,
        &fleet::uniform(JOBS, "* * * * * *", &Action::Probe),
    ));
    let out = work.path("runs");
    let out_text = toml_path(&out);
    let config = toml_path(&work.path("jobs.toml"));
    let mut solocron_nodes = Vec::new();
    let mut peer_nodes = Vec::new();
    for i in 1..=nodes {
        let id = format!("n{i}");
        match script {
            None => solocron_nodes.push(Node::start_with_args(
                &work,
                &id,
                &["--config", &config, "--redis", &redis.url()],
                &[("BENCH_OUT", &out_text)],
            )),
            Some(script) => peer_nodes.push(
                PeerProc::start(script, &redis, &id, &out, &[]).unwrap_or_else(|e| panic!("{e}")),
            ),
        }
    }
    fleet::must(Duration::from_secs(20), "the probe ran", || {
        !fleet::parse_probe(&out).is_empty()
    });
    let (cpu_s, monitor_s) = (env.secs(10, 20) as i64, env.secs(5, 10) as i64);
    assert!(
        chrono::Utc::now() < from - TimeDelta::seconds(1),
        "the set-up took longer than {} s",
        SETUP_S + nodes as i64
    );
    let to = from + TimeDelta::seconds(cpu_s);
    let cost = redis_cost::measure(redis.port, &mut conn, idle, JOBS, from, cpu_s, monitor_s);
    let names: Vec<String> = (0..JOBS).map(|i| format!("j{i}")).collect();
    let expected = JOBS * cpu_s as usize;
    fleet::wait_for(Duration::from_secs(5), || {
        fleet::parse_probe(&out)
            .iter()
            .filter(|r| r.at.is_some_and(|at| at >= from && at < to))
            .count()
            >= expected
    });
    let result = analyse(
        &probe_arrivals(&fleet::parse_probe(&out)),
        &names,
        1,
        from,
        to,
    );
    let history = script
        .is_none()
        .then(|| history_entries(&mut conn, from, to));
    for node in &solocron_nodes {
        node.signal("TERM");
    }
    for node in &solocron_nodes {
        let pid = node.pid();
        fleet::wait_for(Duration::from_secs(10), || !crate::common::is_alive(pid));
    }
    drop(solocron_nodes);
    drop(peer_nodes);
    Measured {
        cost,
        runs: result.ran + result.extra_runs,
        duplicates: result.extra_runs,
        misses: result.missed,
        history,
    }
}

/// History entries (any job) whose occurrence is in `[from, to)`.
fn history_entries(
    conn: &mut redis::Connection,
    from: chrono::DateTime<chrono::Utc>,
    to: chrono::DateTime<chrono::Utc>,
) -> usize {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*:history")
        .query(conn)
        .expect("KEYS *:history");
    let mut count = 0;
    for key in keys {
        let entries: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
            .arg(&key)
            .arg("-")
            .arg("+")
            .query(conn)
            .expect("XRANGE history");
        count += entries
            .iter()
            .filter_map(|(_, fields)| {
                fields
                    .iter()
                    .find(|(name, _)| name == "occurrence")
                    .and_then(|(_, value)| fleet::parse_at(value))
            })
            .filter(|at| *at >= from && *at < to)
            .count();
    }
    count
}

/// What solocron's nodes sent in the MONITOR window, per occurrence by
/// kind (claims, releases, registry, controls, clock).
fn periodic(cost: &Cost) -> String {
    format!(
        "\nsolocron's top-level commands per occurrence in the MONITOR window, by kind: {}.\n\n",
        redis_cost::describe_kinds(&redis_cost::kinds_per_occurrence(cost))
    )
}
