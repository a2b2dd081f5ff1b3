//! Scenario n: how the Redis cost of an occurrence grows with the fleet.
//! 100 every-second probe jobs on 3, 10 and 30 real `solocron run` nodes
//! (`BENCH_N_NODES=3,10` for others), one fresh `redis-server` each time;
//! per occurrence the server's CPU (idle subtracted; and the occurrences'
//! own, as the difference between the due and the quiet seconds of the
//! same nodes running the jobs every other second), the commandstats
//! time of the commands sent, commands executed and round trips
//! (`redis_cost.rs`), and what the increase per added node is. The round
//! trips are split: those on a job's keys are the occurrences' own traffic
//! (guarantee 12: flat in the node count, checked within 15 % of the
//! smallest fleet), those on the fleet's keys each node's background
//! (liveness, controls, registry), reported a node and a second. 30 daemons on this 2-core machine are
//! heavy: short windows (CPU 15 s, `MONITOR` 3 s; `--quick` 5 s and 2 s),
//! each after the server's CPU a second settled (the nodes' start-up
//! done), and the load average and the nodes' CPU are printed beside the
//! figures.
//!
//! Failure model: set-up and Redis errors panic (the scenario could not
//! run); misses and duplicates are counted from the probe's lines.

use std::time::Duration;

use chrono::TimeDelta;
use serde_json::json;

use crate::common::cluster::{sleep_until, whole_second_after};
use crate::fleet::{self, Action, Env, Fleet, analyse, probe_arrivals};
use crate::procfs::CpuWindow;
use crate::redis_cost::{self, Cost};
use crate::report::Report;

const JOBS: usize = 100;

/// One fleet size's figures.
pub(crate) struct Size {
    pub(crate) nodes: usize,
    pub(crate) cost: Cost,
    pub(crate) runs: usize,
    pub(crate) duplicates: usize,
    pub(crate) misses: usize,
    pub(crate) lag_p99: f64,
    /// Mean CPU of a node, % of a core.
    pub(crate) node_cpu_pct: f64,
    /// The server's CPU over the window, % of a core.
    pub(crate) redis_pct: f64,
    pub(crate) load: (f64, f64),
    /// `EVALSHA` calls per occurrence (claims, renewals, releases, periodic).
    pub(crate) scripts: f64,
    /// The same nodes' Redis CPU in due and quiet seconds, interleaved.
    pub(crate) interleaved: Interleaved,
}

impl Size {
    /// Redis CPU µs per occurrence less the nodes' background: the due
    /// seconds less the quiet ones ([`interleaved_cpu`]).
    pub(crate) fn occurrence_cpu_us(&self) -> f64 {
        self.interleaved.occurrence_us
    }

    /// The nodes' background Redis CPU, µs a node and a second.
    fn background_cpu_us(&self) -> f64 {
        self.interleaved.background_us_per_s / self.nodes.max(1) as f64
    }
}

/// The fleet's `jobs.toml`: [`JOBS`] probe jobs on `schedule`, with
/// `splay` from `BENCH_N_SPLAY` (e.g. `500ms`) if set: each job then fires
/// at its own offset in the second, so no node's claims of one instant go
/// out together, whatever the fleet's size (without it, 3 nodes send a
/// third of the 100 claims each and redis-rs writes them together, 100
/// nodes one each).
/// With `group` (the lines of a `[groups.bench]` table), every job is in
/// that group (scenario l).
fn config(env: &Env, schedule: &str, group: Option<&str>) -> String {
    let mut text = fleet::config_text(env, &fleet::uniform(JOBS, schedule, &Action::Probe));
    if let Some(lines) = group {
        text = text.replacen("[defaults]\n", "[defaults]\ngroup = \"bench\"\n", 1);
        text.push_str(&format!("\n[groups.bench]\n{lines}\n"));
    }
    match splay() {
        Some(splay) => text.replacen(
            "[defaults]\n",
            &format!("[defaults]\nsplay = \"{splay}\"\n"),
            1,
        ),
        None => text,
    }
}

fn splay() -> Option<String> {
    std::env::var("BENCH_N_SPLAY")
        .ok()
        .filter(|s| !s.trim().is_empty())
}

fn sizes() -> Vec<usize> {
    fleet::node_counts("BENCH_N_NODES", &[3, 10, 30])
}

pub fn run(env: &Env, report: &mut Report) {
    let scenario = "n fleet size";
    let (cpu_s, monitor_s) = (env.secs(5, 15) as i64, env.secs(2, 3) as i64);
    let mut measured = Vec::new();
    for nodes in sizes() {
        let size = measure(env, nodes, cpu_s, monitor_s);
        eprintln!(
            "  [{scenario}] {nodes} nodes: Redis CPU {:.1} µs/occurrence, commandstats {:.1} µs, {:.1} commands, {:.2} round trips; redis {:.0}% of a core, a node {:.1}%, load {:.1} → {:.1}; runs {} dup {} miss {}",
            size.cost.cpu_us(),
            size.cost.commandstats_us(),
            size.cost.commands(),
            size.cost.round_trips(),
            size.redis_pct,
            size.node_cpu_pct,
            size.load.0,
            size.load.1,
            size.runs,
            size.duplicates,
            size.misses
        );
        measured.push(size);
    }
    let mut text = format!(
        "\nFleet size ({JOBS} every-second probe jobs{}; {cpu_s} s CPU window, then {monitor_s} s MONITOR; per occurrence, all nodes together):\n\n| nodes | Redis CPU µs (idle subtracted) | the occurrences' own (due less quiet seconds) | commandstats µs | commands executed | commands on job keys | round trips | round trips on job keys | background: Redis CPU µs / round trips a node a second | script calls | redis CPU (% of a core) | a node's CPU (%) | load average | runs / dup / miss | lag p99 (ms) |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        splay()
            .map(|s| format!(
                ", splay {s}: the lag counts from the occurrence, not the splayed instant"
            ))
            .unwrap_or_default()
    );
    for s in &measured {
        text.push_str(&format!(
            "| {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} | {:.2} | {:.1} / {:.2} | {:.2} | {:.1} | {:.1} | {:.1} → {:.1} | {} / {} / {} | {:.1} |\n",
            s.nodes,
            s.cost.cpu_us(),
            s.occurrence_cpu_us(),
            s.cost.commandstats_us(),
            s.cost.commands(),
            s.cost.job_commands(),
            s.cost.round_trips(),
            s.cost.job_round_trips(),
            s.background_cpu_us(),
            background(s),
            s.scripts,
            s.redis_pct,
            s.node_cpu_pct,
            s.load.0,
            s.load.1,
            s.runs,
            s.duplicates,
            s.misses,
            s.lag_p99
        ));
    }
    if let (Some(first), Some(last)) = (measured.first(), measured.last())
        && last.nodes > first.nodes
    {
        let added = (last.nodes - first.nodes) as f64;
        let per = |f: fn(&Size) -> f64| (f(last) - f(first)) / added;
        text.push_str(&format!(
            "\nPer node added ({} → {}), per occurrence: Redis CPU +{:.2} µs, commandstats +{:.2} µs, +{:.2} commands, +{:.2} round trips.\n",
            first.nodes,
            last.nodes,
            per(|s| s.cost.cpu_us()),
            per(|s| s.cost.commandstats_us()),
            per(|s| s.cost.commands()),
            per(|s| s.cost.round_trips()),
        ));
    }
    text.push_str("\nTop-level commands per occurrence, by kind (MONITOR window):\n\n");
    for s in &measured {
        text.push_str(&format!(
            "- {} nodes: {}\n",
            s.nodes,
            redis_cost::describe_kinds(&redis_cost::kinds_per_occurrence(&s.cost))
        ));
    }
    for s in &measured {
        report.info(
            scenario,
            &format!("{} nodes, per occurrence", s.nodes),
            format!(
                "Redis CPU {:.1} µs (commandstats {:.1} µs), {:.1} commands, {:.2} round trips; redis {:.0}% of a core; load {:.1} → {:.1}; {} runs, {} duplicates, {} misses",
                s.cost.cpu_us(),
                s.cost.commandstats_us(),
                s.cost.commands(),
                s.cost.round_trips(),
                s.redis_pct,
                s.load.0,
                s.load.1,
                s.runs,
                s.duplicates,
                s.misses
            ),
        );
    }
    // Guarantee 12: the occurrences' own cost (Redis CPU less the nodes'
    // background, commands on a job's keys) within 15 % of the smallest
    // fleet's at every size.
    if let Some(base) = measured.first() {
        let figures: [(&str, Figure); 3] = [
            (
                "Redis CPU µs per occurrence less the background",
                Size::occurrence_cpu_us,
            ),
            ("commands on job keys per occurrence", |s| {
                s.cost.job_commands()
            }),
            ("round trips on job keys per occurrence", |s| {
                s.cost.job_round_trips()
            }),
        ];
        for (name, figure) in figures {
            report.check(
                scenario,
                &format!("{name}, against the smallest fleet"),
                "within 15 %",
                measured
                    .iter()
                    .map(|s| format!("{} nodes {:.2}", s.nodes, figure(s)))
                    .collect::<Vec<_>>()
                    .join(", "),
                measured.iter().all(|s| figure(s) <= figure(base) * 1.15),
            );
        }
        report.info(
            scenario,
            "background Redis CPU µs a node a second (liveness, controls, registry)",
            measured
                .iter()
                .map(|s| format!("{} nodes {:.1}", s.nodes, s.background_cpu_us()))
                .collect::<Vec<_>>()
                .join(", "),
        );
        report.info(
            scenario,
            "background round trips a node a second (liveness, controls, registry)",
            measured
                .iter()
                .map(|s| format!("{} nodes {:.2}", s.nodes, background(s)))
                .collect::<Vec<_>>()
                .join(", "),
        );
    }
    let clean = measured.iter().all(|s| s.duplicates == 0);
    report.check(
        scenario,
        "duplicate runs at every fleet size",
        "0",
        measured
            .iter()
            .map(|s| format!("{} nodes {}", s.nodes, s.duplicates))
            .collect::<Vec<_>>()
            .join(", "),
        clean,
    );
    report.extra.push(text);
    report.raw(
        "n_fleet_size",
        json!(measured.iter().map(|s| json!({
            "nodes": s.nodes, "cost": s.cost.json(), "runs": s.runs, "duplicates": s.duplicates,
            "misses": s.misses, "lag_p99_ms": s.lag_p99, "node_cpu_pct": s.node_cpu_pct,
            "redis_cpu_pct": s.redis_pct, "load_before": s.load.0, "load_after": s.load.1,
            "script_calls_per_occurrence": s.scripts,
            "background_redis_cpu_us_per_node_s": s.background_cpu_us(),
            "occurrence_redis_cpu_us_per_period": s.interleaved.periods,
            "occurrence_redis_cpu_us": s.occurrence_cpu_us(),
        })).collect::<Vec<_>>()),
    );
}

/// One figure of a fleet size, for the guarantee-12 checks.
type Figure = fn(&Size) -> f64;

/// Round trips on the fleet's keys a node and a second.
fn background(s: &Size) -> f64 {
    s.cost.fleet_round_trips_per_s() / s.nodes.max(1) as f64
}

/// What the same fleet costs Redis in the seconds with occurrences due
/// and in those without, interleaved.
#[derive(Debug, Clone, Default)]
pub(crate) struct Interleaved {
    /// Redis CPU µs per occurrence: the due seconds less the quiet ones.
    occurrence_us: f64,
    /// Redis CPU µs a second in the quiet seconds, the server's idle
    /// subtracted: the nodes' background.
    background_us_per_s: f64,
    /// Each period's due less quiet CPU, µs per occurrence.
    periods: Vec<f64>,
}

/// The Redis CPU of `nodes` nodes running [`JOBS`] jobs due every other
/// second (`*/2`), sampled at each second's edge for `periods` periods of
/// two seconds: a due second `[T − 0.1 s, T + 0.9 s)` holds every look,
/// claim and release of the occurrences at T (their lag is far below
/// 0.9 s); the quiet second after it holds the same background (beats,
/// controls, registry), so the difference is the occurrences' own cost,
/// with no background measured elsewhere and subtracted.
fn interleaved_cpu(env: &Env, nodes: usize, periods: usize, group: Option<&str>) -> Interleaved {
    let mut fleet = Fleet::new(&config(env, "*/2 * * * * *", group));
    let mut conn = fleet.redis.conn();
    let idle = redis_cost::idle_rate(&mut conn, Duration::from_secs(3));
    fleet.start_nodes(nodes);
    let out = fleet.out();
    fleet::must(Duration::from_secs(20), "the probe ran", || {
        !fleet::parse_probe(&out).is_empty()
    });
    fleet::wait_for_live_set(&mut conn, nodes);
    redis_cost::settle(&mut conn);
    let first = whole_second_after(2, 2);
    let edge = |k: usize| first + TimeDelta::milliseconds(1000 * k as i64 - 100);
    let mut samples = Vec::with_capacity(2 * periods + 1);
    for k in 0..=2 * periods {
        sleep_until(edge(k));
        samples.push(redis_cost::used_cpu_us(&mut conn));
    }
    fleet.stop_nodes();
    let (mut due, mut quiet) = (0.0, 0.0);
    let mut each = Vec::with_capacity(periods);
    for p in 0..periods {
        let d = samples[2 * p + 1] - samples[2 * p];
        let q = samples[2 * p + 2] - samples[2 * p + 1];
        due += d;
        quiet += q;
        each.push((d - q) / JOBS as f64);
    }
    let periods_f = periods.max(1) as f64;
    Interleaved {
        occurrence_us: ((due - quiet) / (JOBS as f64 * periods_f)).max(0.0),
        background_us_per_s: (quiet / periods_f - idle).max(0.0),
        periods: each,
    }
}

fn measure(env: &Env, nodes: usize, cpu_s: i64, monitor_s: i64) -> Size {
    measure_with(env, nodes, cpu_s, monitor_s, None)
}

/// [`measure`] with every job in a group with `group`'s limits.
pub(crate) fn measure_with(
    env: &Env,
    nodes: usize,
    cpu_s: i64,
    monitor_s: i64,
    group: Option<&str>,
) -> Size {
    let interleaved = interleaved_cpu(env, nodes, env.secs(4, 10) as usize, group);
    eprintln!(
        "  [n fleet size] {nodes} nodes, due less quiet seconds: {:.1} µs per occurrence (periods: {}); background {:.0} µs/s",
        interleaved.occurrence_us,
        interleaved
            .periods
            .iter()
            .map(|p| format!("{p:.1}"))
            .collect::<Vec<_>>()
            .join(", "),
        interleaved.background_us_per_s
    );
    let mut fleet = Fleet::new(&config(env, "* * * * * *", group));
    let mut conn = fleet.redis.conn();
    let idle = redis_cost::idle_rate(&mut conn, Duration::from_secs(3));
    let load_before = redis_cost::load_average();
    fleet.start_nodes(nodes);
    let out = fleet.out();
    fleet::must(Duration::from_secs(20), "the probe ran", || {
        !fleet::parse_probe(&out).is_empty()
    });
    fleet::wait_for_live_set(&mut conn, nodes);
    redis_cost::settle(&mut conn);
    let node_procs: Vec<(String, i32)> = fleet
        .nodes
        .iter()
        .map(|n| (n.id.clone(), n.pid()))
        .collect();
    let from = whole_second_after(2, 1);
    let to = from + TimeDelta::seconds(cpu_s);
    let cpu_window = CpuWindow::start(&node_procs);
    let cost = redis_cost::measure(
        fleet.redis.port,
        &mut conn,
        idle,
        JOBS,
        from,
        cpu_s,
        monitor_s,
    );
    let node_cpu = cpu_window.finish();
    let load_after = redis_cost::load_average();
    let names: Vec<String> = (0..JOBS).map(|i| format!("j{i}")).collect();
    fleet.wait_probe_runs(from, to, JOBS * cpu_s as usize, Duration::from_secs(5));
    let result = analyse(&probe_arrivals(&fleet.probe_runs()), &names, 1, from, to);
    fleet.stop_nodes();
    let scripts = cost
        .commandstats
        .iter()
        .filter(|(name, _)| matches!(name.as_str(), "evalsha" | "eval"))
        .map(|(_, s)| s.calls)
        .sum::<u64>() as f64
        / cost.occurrences.max(1) as f64;
    Size {
        nodes,
        redis_pct: cost.cpu_raw_us / 1e6 / cost.window_s.max(1e-9) * 100.0,
        cost,
        runs: result.ran + result.extra_runs,
        duplicates: result.extra_runs,
        misses: result.missed,
        lag_p99: result.lag.p99,
        node_cpu_pct: node_cpu.iter().map(|c| c.own_pct).sum::<f64>()
            / node_cpu.len().max(1) as f64,
        load: (load_before, load_after),
        scripts,
        interleaved,
    }
}
