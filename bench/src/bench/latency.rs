//! Scenarios a–c and the probe's own start-up: Redis round trips per
//! occurrence (MONITOR + commandstats), fire-to-start lag of an
//! every-second job on 3 nodes, and 1,000 jobs due on the same second
//! (probe vs. HTTP hook, whose difference is the cost of spawning).

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::Duration;

use chrono::{TimeDelta, Utc};
use serde_json::json;

use crate::common::cluster::{sleep_until, whole_second_after};
use crate::fleet::{self, Action, Env, Fleet, analyse, probe_arrivals, wait_for};
use crate::monitor::{self, Monitor};
use crate::report::{Report, Stats};
use crate::sink::Sink;

/// Spawns the probe `runs` times (std `Command`, waiting for each) with the
/// parent's CLOCK_REALTIME read just before the spawn; the probe's own
/// reading minus it is the probe's start-up, in ms.
pub fn probe_startup(env: &Env, report: &mut Report) -> Stats {
    let runs = if env.quick { 200 } else { 500 };
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("startup");
    let mut parents = Vec::with_capacity(runs);
    for i in 0..runs {
        let mut command = Command::new(&env.probe);
        command
            .env("BENCH_OUT", &out)
            .env("SOLOCRON_JOB", "startup")
            .env("SOLOCRON_OCCURRENCE", i.to_string())
            .stdin(Stdio::null());
        let before = crate::common::audit::now_ns();
        let mut child = command.spawn().expect("spawn the probe");
        parents.push(before);
        let _ = child.wait();
    }
    let lines = fleet::parse_probe(&out);
    let values: Vec<f64> = lines
        .iter()
        .filter_map(|run| {
            let i: usize = run.occurrence.parse().ok()?;
            Some((run.start_ns - parents.get(i)?) as f64 / 1e6)
        })
        .collect();
    let stats = Stats::of(&values);
    report.info(
        "probe",
        "probe start-up (spawn → its first clock reading), measured alone",
        stats.ms(),
    );
    report.raw("probe_startup", json!({"runs": runs, "ms": stats.json()}));
    stats
}

/// a. Round trips and executed commands per occurrence.
pub fn round_trips(env: &Env, report: &mut Report) {
    let scenario = "a round trips";
    let jobs = fleet::uniform(1, "* * * * * *", &Action::True);
    let mut fleet = Fleet::new(&fleet::config_text(env, &jobs));
    fleet.start_nodes(3);
    let mut conn = fleet.redis.conn();
    // The first occurrence ran: every node is scheduling.
    fleet::must(Duration::from_secs(15), "the first run is recorded", || {
        redis::cmd("XLEN")
            .arg("{solocron:j0}:history")
            .query::<u64>(&mut conn)
            .unwrap_or(0)
            > 0
    });
    let window = env.secs(6, 10) as i64;
    let from = whole_second_after(2, 1);
    let to = from + TimeDelta::seconds(window);
    let half = TimeDelta::milliseconds(500);
    let monitor = Monitor::start(fleet.redis.port);
    sleep_until(from - half);
    let stats0 = monitor::commandstats(&mut conn);
    sleep_until(to - half);
    let stats1 = monitor::commandstats(&mut conn);
    let lines = monitor.stop();
    let executed = monitor::delta(&stats0, &stats1);
    let (lo, hi) = (
        (from - half).timestamp_millis() as f64 / 1e3,
        (to - half).timestamp_millis() as f64 / 1e3,
    );
    let lines: Vec<_> = lines
        .into_iter()
        .filter(|l| l.ts >= lo && l.ts < hi)
        .collect();
    // Job commands sent by clients, per occurrence second and client.
    let mut per_occ: BTreeMap<i64, BTreeMap<String, u32>> = BTreeMap::new();
    let mut periodic: BTreeMap<String, u32> = BTreeMap::new();
    let mut lua_job = 0u64;
    let mut lua_other = 0u64;
    // The last command of each client: a node that is not first in line
    // reads with the pipeline `[HMGET, PTTL]` (one round trip).
    let mut last_cmd: BTreeMap<String, String> = BTreeMap::new();
    for line in &lines {
        if line.is_lua() {
            if line.job_key().is_some() || line.cmd == "TIME" {
                lua_job += 1;
            } else {
                lua_other += 1;
            }
            continue;
        }
        if matches!(line.cmd.as_str(), "INFO" | "MONITOR" | "XLEN") {
            continue;
        }
        let previous = last_cmd.insert(line.client.clone(), line.cmd.clone());
        if line.cmd == "PTTL" && previous.as_deref() == Some("HMGET") {
            continue;
        }
        if line.job_key().is_some() {
            let occ = (line.ts + 0.5).floor() as i64;
            *per_occ
                .entry(occ)
                .or_default()
                .entry(line.client.clone())
                .or_insert(0) += 1;
        } else {
            *periodic.entry(line.cmd.clone()).or_insert(0) += 1;
        }
    }
    let mut winners = Vec::new();
    let mut losers = Vec::new();
    let mut clean = 0;
    for clients in per_occ.values() {
        let max = clients.values().copied().max().unwrap_or(0);
        let mut counts: Vec<u32> = clients.values().copied().collect();
        counts.sort_unstable();
        if let Some(pos) = counts.iter().position(|&c| c == max) {
            counts.remove(pos);
        }
        winners.push(f64::from(max));
        losers.extend(counts.iter().map(|&c| f64::from(c)));
        if max == 2 && counts.len() == 2 && counts.iter().all(|&c| c == 1) {
            clean += 1;
        }
    }
    let occurrences = per_occ.len().max(1);
    let mean = |v: &[f64]| {
        if v.is_empty() {
            f64::NAN
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    };
    let (winner, loser) = (mean(&winners), mean(&losers));
    report.check(
        scenario,
        "client round trips per occurrence, winner / each loser (MONITOR, 3 nodes, `/bin/true`)",
        "2 / 1",
        format!(
            "{winner:.2} / {loser:.2} ({clean} of {} occurrences exactly 2/1/1)",
            per_occ.len()
        ),
        clean == per_occ.len() && per_occ.len() as i64 >= window - 1,
    );
    let periodic_text = if periodic.is_empty() {
        format!("none in {window} s")
    } else {
        format!(
            "{} in {window} s, 3 nodes ({})",
            periodic.values().sum::<u32>(),
            periodic
                .iter()
                .map(|(c, n)| format!("{c} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    report.info(
        scenario,
        "periodic non-job round trips (registry publish, TIME)",
        periodic_text,
    );
    let total: u64 = executed.values().sum();
    let per_occurrence = total as f64 / window as f64;
    report.info(
        scenario,
        "commands executed per occurrence, all 3 nodes, scripts' inner commands included (commandstats; BullMQ ~64)",
        format!(
            "{per_occurrence:.1} ({total} in {window} s: {}); inside job scripts per occurrence (MONITOR `lua`): {:.1}",
            monitor::describe_counts(&executed),
            lua_job as f64 / occurrences as f64
        ),
    );
    report.raw(
        "a_round_trips",
        json!({
            "window_s": window, "occurrences": per_occ.len(), "winner_mean": winner, "loser_mean": loser,
            "clean_occurrences": clean, "periodic": periodic, "commandstats_delta": executed,
            "lua_job_commands": lua_job, "lua_other_commands": lua_other,
            "per_occurrence": per_occ.iter().map(|(k, v)| (k.to_string(), v.clone())).collect::<BTreeMap<_, _>>(),
        }),
    );
}

/// b. Fire-to-start lag of one every-second probe job on 3 nodes.
pub fn lag(env: &Env, report: &mut Report, startup: &Stats) {
    let scenario = "b lag";
    let jobs = fleet::uniform(1, "* * * * * *", &Action::Probe);
    let mut fleet = Fleet::new(&fleet::config_text(env, &jobs));
    fleet.start_nodes(3);
    fleet::must(Duration::from_secs(15), "the probe ran once", || {
        !fleet.probe_runs().is_empty()
    });
    let window = env.secs(10, 30) as i64;
    let from = whole_second_after(2, 1);
    let to = from + TimeDelta::seconds(window);
    sleep_until(to);
    fleet.wait_probe_runs(from, to, window as usize, Duration::from_secs(5));
    let names = vec!["j0".to_string()];
    let result = analyse(&probe_arrivals(&fleet.probe_runs()), &names, 1, from, to);
    report.check(
        scenario,
        "fire-to-start lag p50, 3 nodes, 1 every-second job (probe)",
        "≤ 2 ms",
        format!(
            "{:.2} ms (probe start-up alone p50 {:.2} ms)",
            result.lag.p50, startup.p50
        ),
        result.lag.p50 <= 2.0 && result.lag.count > 0,
    );
    report.check(
        scenario,
        "fire-to-start lag p99 / max",
        "p99 ≤ 5 ms",
        format!(
            "{:.2} / {:.2} ms (probe start-up alone p99 {:.2} ms)",
            result.lag.p99, result.lag.max, startup.p99
        ),
        result.lag.p99 <= 5.0 && result.lag.count > 0,
    );
    report.check(
        scenario,
        "duplicates / misses",
        "0 / 0",
        format!(
            "{} / {} of {} occurrences (runs per node {:?})",
            result.duplicated, result.missed, result.expected, result.per_node
        ),
        result.duplicated == 0 && result.missed == 0,
    );
    report.raw(
        "b_lag",
        json!({"window": [from.to_rfc3339(), to.to_rfc3339()], "result": result.json()}),
    );
}

/// c. 1,000 jobs due on the same second, 3 nodes: probe, then HTTP hooks.
pub fn burst(env: &Env, report: &mut Report, startup: &Stats) {
    let scenario = "c 1,000 same second";
    let count = 1000;
    let rounds = env.secs(2, 3) as i64;
    let names: Vec<String> = (0..count).map(|i| format!("j{i}")).collect();
    let run = |action: Action, sink: Option<&Sink>| {
        let jobs = fleet::uniform(count, "*/10 * * * * *", &action);
        let mut fleet = Fleet::new(&fleet::config_text(env, &jobs));
        fleet.start_nodes(3);
        let from = whole_second_after(3, 10);
        let to = from + TimeDelta::seconds(10 * rounds);
        let window = crate::procfs::CpuWindow::start(&fleet.procs());
        sleep_until(to - TimeDelta::seconds(5));
        let cpu = window.finish();
        sleep_until(to);
        let arrivals = match sink {
            None => {
                fleet.wait_probe_runs(from, to, count * rounds as usize, Duration::from_secs(20));
                probe_arrivals(&fleet.probe_runs())
            }
            Some(sink) => {
                let mut hits = Vec::new();
                wait_for(Duration::from_secs(20), || {
                    hits.extend(sink.dump());
                    hits.iter()
                        .filter(|h| {
                            fleet::parse_at(&h.occurrence).is_some_and(|at| at >= from && at < to)
                        })
                        .count()
                        >= count * rounds as usize
                });
                hits.into_iter()
                    .map(|h| {
                        (
                            h.job,
                            fleet::parse_at(&h.occurrence),
                            String::new(),
                            h.arrival_ns,
                        )
                    })
                    .collect()
            }
        };
        (analyse(&arrivals, &names, 10, from, to), cpu)
    };
    let (spawned, spawned_cpu) = run(Action::Probe, None);
    let sink = Sink::start();
    let (hooked, _) = run(Action::Http(sink.url()), Some(&sink));
    drop(sink);
    report.check(
        scenario,
        "lag of 1,000 probe jobs due the same second, 3 nodes, p50 / p99 / max",
        "p99 ≤ 250 ms",
        format!(
            "{:.1} / {:.1} / {:.1} ms ({} runs in {rounds} rounds)",
            spawned.lag.p50, spawned.lag.p99, spawned.lag.max, spawned.ran
        ),
        spawned.lag.p99 <= 250.0 && spawned.lag.count > 0,
    );
    report.check(
        scenario,
        "duplicates / misses (probe)",
        "0 / 0",
        format!(
            "{} / {} of {}",
            spawned.duplicated, spawned.missed, spawned.expected
        ),
        spawned.duplicated == 0 && spawned.missed == 0,
    );
    report.check(
        scenario,
        "same 1,000 jobs as HTTP hooks to a local sink (arrival), p50 / p99 / max; dup / miss",
        "0 dup",
        format!(
            "{:.1} / {:.1} / {:.1} ms; {} / {} of {}",
            hooked.lag.p50,
            hooked.lag.p99,
            hooked.lag.max,
            hooked.duplicated,
            hooked.missed,
            hooked.expected
        ),
        hooked.duplicated == 0 && hooked.missed == 0,
    );
    report.info(
        scenario,
        "share of the lag that is process spawning (probe − hook)",
        format!(
            "p50 {:+.1} ms, p99 {:+.1} ms (probe start-up alone p50 {:.2} ms); node CPU during the probe rounds: {}",
            spawned.lag.p50 - hooked.lag.p50,
            spawned.lag.p99 - hooked.lag.p99,
            startup.p50,
            crate::procfs::describe(&spawned_cpu)
        ),
    );
    report.raw(
        "c_burst",
        json!({"probe": spawned.json(), "http": hooked.json(), "probe_round_cpu": crate::procfs::json(&spawned_cpu), "rounds": rounds}),
    );
    let _ = Utc::now();
}
