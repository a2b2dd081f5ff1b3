//! Scenario k: claims per second on a Redis Cluster (3 masters + 3
//! replicas, `WAIT 1`) against one `url` server. As scenario d measures
//! throughput: N every-second HTTP-hook jobs (no process to spawn, so the
//! claims are what costs) on 3 nodes, N rising step by step until a step
//! breaks (a miss, a duplicate, or a hook arriving more than 1 s late).
//! Every (job, occurrence) of the window must reach the bench's sink
//! exactly once. Each occurrence is 3 claims (one per node; one wins) and
//! 1 release.
//!
//! All of it shares this machine's cores (daemons, sink, every Redis
//! server, replication), so the rate is what the client side sustains
//! here, not what the servers could. For the server side each step also
//! takes the Redis cost per occurrence on the masters: the time spent in
//! commands (`INFO commandstats` usec, which leaves out a `WAIT`'s
//! blocking) and the processes' CPU time (`/proc`, network I/O included);
//! docs/PERFORMANCE.md projects from those what the shards would sustain
//! on cores of their own.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::TimeDelta;
use serde_json::json;

use crate::common::cluster::{sleep_until, whole_second_after};
use crate::fleet::{self, Action, Daemons, Env, LagResult, analyse, wait_for};
use crate::monitor::{self, CmdStat};
use crate::procfs::{self, CpuWindow};
use crate::report::Report;
use crate::sink::Sink;
use crate::topology::{Role, Topology};

const SCENARIO: &str = "k cluster claims/s";

/// One step's figures.
struct Step {
    jobs: usize,
    window_s: i64,
    result: LagResult,
    /// Masters' `INFO commandstats` deltas over the window, summed.
    masters: BTreeMap<String, CmdStat>,
    /// Own CPU seconds over the window: masters, replicas, each daemon, the sink.
    master_cpu_s: f64,
    replica_cpu_s: f64,
    cpu: Vec<procfs::CpuUse>,
    shards: usize,
}

impl Step {
    fn broken(&self) -> Option<String> {
        let r = &self.result;
        let mut why = Vec::new();
        if r.missed > 0 {
            why.push(format!("{} missed", r.missed));
        }
        if r.duplicated > 0 {
            why.push(format!("{} duplicated", r.duplicated));
        }
        if r.lag.max > 1000.0 {
            why.push(format!("lag max {:.0} ms", r.lag.max));
        }
        (!why.is_empty()).then(|| why.join(", "))
    }

    fn rate(&self) -> f64 {
        self.result.ran as f64 / self.window_s as f64
    }

    /// Occurrences in the commandstats window (one per job and second).
    fn occurrences(&self) -> f64 {
        (self.jobs as i64 * self.window_s) as f64
    }

    /// Microseconds the masters spent in commands, per occurrence.
    fn command_us(&self) -> f64 {
        self.masters.values().map(|s| s.usec).sum::<u64>() as f64 / self.occurrences()
    }

    fn master_cpu_us(&self) -> f64 {
        self.master_cpu_s * 1e6 / self.occurrences()
    }

    fn evalsha_per_occurrence(&self) -> f64 {
        self.masters.get("evalsha").map_or(0, |s| s.calls) as f64 / self.occurrences()
    }

    fn json(&self) -> serde_json::Value {
        json!({
            "jobs": self.jobs, "window_s": self.window_s, "result": self.result.json(),
            "occurrences_per_s": self.rate(), "claims_per_s": 3.0 * self.rate(),
            "masters_commandstats": self.masters.iter().map(|(k, v)| (k.clone(), json!({"calls": v.calls, "usec": v.usec}))).collect::<serde_json::Map<_, _>>(),
            "command_us_per_occurrence": self.command_us(), "master_cpu_us_per_occurrence": self.master_cpu_us(),
            "master_cpu_s": self.master_cpu_s, "replica_cpu_s": self.replica_cpu_s,
            "evalsha_per_occurrence": self.evalsha_per_occurrence(), "shards": self.shards,
            "cpu": procfs::json(&self.cpu),
        })
    }
}

/// The clean best of one mode's series, and where it broke.
struct Series {
    shown: String,
    steps: Vec<Step>,
}

impl Series {
    fn best(&self) -> Option<&Step> {
        self.steps
            .iter()
            .filter(|s| s.broken().is_none())
            .max_by(|a, b| a.rate().total_cmp(&b.rate()))
    }
}

pub fn run(env: &Env, report: &mut Report) {
    let steps: &[usize] = if env.quick {
        &[1000, 2000, 4000]
    } else {
        &[1000, 2000, 3000, 4000, 6000, 9000]
    };
    let sink = Sink::start();
    let mut all = Vec::new();
    let builders: [(&str, fn() -> Topology); 2] =
        [("url", Topology::single), ("cluster", Topology::cluster)];
    for (mode, build) in builders {
        eprintln!("bench: k: {mode} ...");
        let topology = build();
        let series = series(env, report, &topology, steps, &sink);
        drop(topology);
        summary(report, &series, steps);
        all.push(series);
    }
    server_side(report, &all);
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    report.extra.push(format!(
        "\nNote (k): the claim rates measure the client side. On this machine's {cores} cores \
         the 3 daemons, the HTTP sink and every Redis server (6 for the cluster, with their \
         replication) share the CPUs, so a cluster cannot show its servers' extra capacity \
         here; the server-side projection (Redis CPU per occurrence × shards) is in \
         docs/PERFORMANCE.md, \"Coordinator modes\".\n"
    ));
    report.raw(
        "k_cluster_claims",
        json!(all
            .iter()
            .map(|s| json!({"mode": s.shown, "steps": s.steps.iter().map(Step::json).collect::<Vec<_>>()}))
            .collect::<Vec<_>>()),
    );
}

fn series(
    env: &Env,
    report: &mut Report,
    topology: &Topology,
    steps: &[usize],
    sink: &Sink,
) -> Series {
    let shown = topology.describe();
    let mut done = Vec::new();
    for &jobs in steps {
        let step = one_step(env, topology, jobs, sink);
        report.info(
            SCENARIO,
            &format!("{shown}: {jobs} every-second HTTP-hook jobs, 3 nodes"),
            format!(
                "{:.0} occurrences/s = {:.0} claims/s ({} of {}); dup {}, miss {}; lag p50 {:.0} / p99 {:.0} / max {:.0} ms; masters per occurrence: {:.0} µs in commands, {:.0} µs CPU; EVALSHA per occurrence {:.2}; CPU: {}",
                step.rate(),
                3.0 * step.rate(),
                step.result.ran,
                step.result.expected,
                step.result.duplicated,
                step.result.missed,
                step.result.lag.p50,
                step.result.lag.p99,
                step.result.lag.max,
                step.command_us(),
                step.master_cpu_us(),
                step.evalsha_per_occurrence(),
                cpu_summary(&step.cpu)
            ),
        );
        let broken = step.broken().is_some();
        done.push(step);
        if broken {
            break;
        }
    }
    Series { shown, steps: done }
}

fn one_step(env: &Env, topology: &Topology, count: usize, sink: &Sink) -> Step {
    let jobs = fleet::uniform(count, "* * * * * *", &Action::Http(sink.url()));
    let names: Vec<String> = jobs.iter().map(|(n, _, _)| n.clone()).collect();
    // A prefix per step: the last step's keys and registry stay out of the way.
    let redis = topology.redis_section(&format!("k{count}"));
    let mut daemons = Daemons::new(&fleet::config_text_with(env, Some(&redis), &jobs));
    daemons.start_nodes(3);
    let window = env.secs(5, 12) as i64;
    let from = whole_second_after(3, 1);
    let to = from + TimeDelta::seconds(window);
    let half = TimeDelta::milliseconds(500);
    let servers = topology.procs();
    let masters: Vec<u16> = topology.masters();
    let mut conns: Vec<redis::Connection> =
        masters.iter().map(|&port| topology.conn(port)).collect();
    let mut procs: Vec<(String, i32)> = servers
        .iter()
        .map(|(name, pid, _)| (name.clone(), *pid))
        .collect();
    procs.extend(daemons.procs());
    procs.push(("sink".to_string(), sink.pid()));
    sleep_until(from - half);
    let _ = sink.dump();
    let before: Vec<_> = conns.iter_mut().map(monitor::commandstats_usec).collect();
    let cpu_window = CpuWindow::start(&procs);
    sleep_until(to - half);
    let after: Vec<_> = conns.iter_mut().map(monitor::commandstats_usec).collect();
    let cpu = cpu_window.finish();
    let mut hits = Vec::new();
    wait_for(Duration::from_secs(15), || {
        hits.extend(sink.dump());
        hits.iter()
            .filter(|h| fleet::parse_at(&h.occurrence).is_some_and(|at| at >= from && at < to))
            .count()
            >= names.len() * window as usize
    });
    daemons.stop_nodes();
    let arrivals: Vec<_> = hits
        .into_iter()
        .map(|h| (h.job, fleet::parse_at(&h.occurrence), String::new(), h.arrival_ns))
        .collect();
    let mut summed: BTreeMap<String, CmdStat> = BTreeMap::new();
    for (before, after) in before.iter().zip(&after) {
        for (name, stat) in monitor::delta_usec(before, after) {
            let into = summed.entry(name).or_default();
            into.calls += stat.calls;
            into.usec += stat.usec;
        }
    }
    let secs = |role: Role| {
        cpu.iter()
            .zip(&servers)
            .filter(|(_, (_, _, r))| *r == role)
            .map(|(u, _)| u.own_pct / 100.0 * window as f64)
            .sum::<f64>()
    };
    Step {
        jobs: count,
        window_s: window,
        result: analyse(&arrivals, &names, 1, from, to),
        masters: summed,
        master_cpu_s: secs(Role::Master),
        replica_cpu_s: secs(Role::Replica),
        cpu,
        shards: masters.len(),
    }
}

/// `masters 35%, replicas 10%, n1 40%, n2 …, sink 8%`: servers summed by role.
fn cpu_summary(uses: &[procfs::CpuUse]) -> String {
    let mut parts = Vec::new();
    for kind in ["master", "replica"] {
        let mine: Vec<&procfs::CpuUse> = uses
            .iter()
            .filter(|u| u.name.starts_with(kind))
            .collect();
        if !mine.is_empty() {
            let total: f64 = mine.iter().map(|u| u.own_pct).sum();
            parts.push(format!(
                "{} {kind}{} {total:.0}%",
                mine.len(),
                if mine.len() > 1 { "s" } else { "" }
            ));
        }
    }
    parts.extend(
        uses.iter()
            .filter(|u| !u.name.starts_with("master") && !u.name.starts_with("replica"))
            .map(|u| format!("{} {:.0}%", u.name, u.own_pct)),
    );
    parts.join(", ")
}

fn summary(report: &mut Report, series: &Series, steps: &[usize]) {
    let broke = series.steps.iter().find_map(|s| {
        s.broken()
            .map(|why| format!("breaks at {} jobs/s ({why})", s.jobs))
    });
    let broke = broke.unwrap_or_else(|| {
        format!(
            "no break up to {} jobs/s",
            steps.last().copied().unwrap_or(0)
        )
    });
    let text = match series.best() {
        Some(best) => format!(
            "{:.0} claims/s ({:.0} occurrences/s) clean; {broke}",
            3.0 * best.rate(),
            best.rate()
        ),
        None => format!("no clean step; {broke}"),
    };
    report.info(
        SCENARIO,
        &format!(
            "{}: highest sustained claim rate, 0 duplicates and 0 misses (client side: daemons and Redis share the cores)",
            series.shown
        ),
        text,
    );
}

/// One row: Redis cost per occurrence at each mode's best clean step, and
/// what it projects to with a core per shard.
fn server_side(report: &mut Report, all: &[Series]) {
    let parts: Vec<String> = all
        .iter()
        .filter_map(|series| {
            let step = series.best().or(series.steps.first())?;
            // Each occurrence's keys live on one shard, so the masters'
            // cost summed per occurrence is what its shard pays for it.
            let per_core = |us: f64| if us > 0.0 { 1e6 / us } else { f64::NAN };
            let (cpu_us, command_us) = (step.master_cpu_us(), step.command_us());
            Some(format!(
                "{} at {} jobs/s: {command_us:.1} µs in commands, {cpu_us:.1} µs CPU per occurrence on the masters (replicas {:.1} µs CPU) → {:.0} occurrences/s per core by CPU ({:.0} by commands), × {} shard{} = {:.0}",
                series.shown,
                step.jobs,
                step.replica_cpu_s * 1e6 / step.occurrences(),
                per_core(cpu_us),
                per_core(command_us),
                step.shards,
                if step.shards > 1 { "s" } else { "" },
                per_core(cpu_us) * step.shards as f64,
            ))
        })
        .collect();
    report.info(
        SCENARIO,
        "server side, projected: Redis cost per occurrence (3 claims + 1 release) on the masters, and the occurrences/s it allows with one core per shard",
        parts.join("; "),
    );
}
