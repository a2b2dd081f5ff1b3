//! The soak: 5 nodes on one coordinator for a configurable time, with
//! random faults, one at a time, then the occurrence-by-occurrence audit
//! of the runs and of the history.
//!
//! `scripts/soak [--backend url|sentinel|cluster|redlock] [MINUTES]`
//! (default `url`, 10 minutes). Every 10–20 s it picks one fault:
//!
//! - `kill -9` of a random node, restarted 3 s later, every other restart
//!   with its log pipe closed after the first line (`solocron run | head
//!   -1`: every later log write fails);
//! - a double SIGTERM to a random node (0.5 s apart), restarted once it
//!   exited;
//! - a fault of the coordinator (`backend.rs`): with `url`, Redis paused
//!   for twice the lock TTL; with `sentinel`, a graceful failover or the
//!   master killed and restarted as a replica; with `cluster`, a master
//!   killed and restarted as a replica, or paused; with `redlock`, 1 or 2
//!   of the 5 masters killed (restarted with or without their data) or
//!   paused. Each is waited out with the harness's settle/heal function
//!   before the next fault.
//!
//! The jobs (`jobs.rs`): 55 with `url` (20 every second taking 5 ms, 10
//! every second taking 0.4 s, 10 + 10 every 5 s taking 5 ms and 3 s, 5 that
//! ignore SIGTERM and outlive their 2 s timeout by 9.5 s with a 1 s lock),
//! 20 of the same kinds with `sentinel` and `redlock`, 21 with `cluster`
//! (7 on each shard). The nodes run on the coordinator through their
//! `jobs.toml` `[redis]` section (`common::fleet::Fleet`); the history is
//! read back with `solocron history --json`, which merges the Redlock
//! masters.
//!
//! What must hold however the faults fall: no occurrence runs twice, no
//! two runs of a job overlap, fences grow in start order, every occurrence
//! due outside a fault's reach runs (`faults.rs` says which occurrences a
//! fault excuses), and every occurrence of the window is in the history
//! exactly once (run, skipped, missed or abandoned). A skip (the lock still
//! held by an earlier run) is allowed anywhere (guarantee 3,
//! docs/guarantees.md); a run whose end
//! is unknown (no END line, no bound from a fault or its own history
//! entry) fails the soak, since the overlap check cannot cover it. Exit
//! status 0 only if all of that holds; the last lines are a summary. Not
//! part of `scripts/test`; it uses the test harness (`tests/it/common`): real
//! `redis-server`s, real `solocron run` processes, jobs that record START /
//! END lines. With `SOLOCRON_SOAK_KEEP=1` (and whenever it fails) the
//! nodes' logs, the records, the history (`history.json`) and the Redis
//! servers' logs are kept.

#[path = "../../tests/it/common/mod.rs"]
#[allow(unused_imports)]
mod common;

#[path = "soak/backend.rs"]
mod backend;
#[path = "soak/faults.rs"]
mod faults;
#[path = "soak/jobs.rs"]
mod jobs;

use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use common::audit::{self, HistoryReport, Report, now_ns};
use common::cluster::JobSpec;
use common::fleet::{Fleet, decision_of};

use backend::{Backend, Kind};
use faults::Fault;

const NODES: usize = 5;

/// What the command line asks for.
struct Args {
    backend: Kind,
    minutes: f64,
}

const USAGE: &str = "usage: soak [--backend url|sentinel|cluster|redlock] [MINUTES]";

impl Args {
    /// `[--backend B | --backend=B] [MINUTES]`; `Err` is the message.
    fn parse(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
        let mut parsed = Args {
            backend: Kind::Url,
            minutes: 10.0,
        };
        while let Some(arg) = args.next() {
            if let Some(name) = arg.strip_prefix("--backend=") {
                parsed.backend = name.parse()?;
            } else if arg == "--backend" {
                let name = args.next().ok_or("`--backend` needs a value")?;
                parsed.backend = name.parse()?;
            } else {
                parsed.minutes = arg
                    .parse()
                    .ok()
                    .filter(|minutes: &f64| *minutes > 0.0)
                    .ok_or_else(|| format!("`{arg}` is not a number of minutes"))?;
            }
        }
        Ok(parsed)
    }
}

fn main() {
    let args = match Args::parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(message) => {
            eprintln!("soak: {message}\n{USAGE}");
            std::process::exit(2);
        }
    };
    let mut backend = Backend::start(args.backend);
    let jobs = backend.jobs();
    let mut fleet = Fleet::new(&backend.redis_section(), "shutdown_grace = \"5s\"", &jobs);
    let ids: Vec<String> = (1..=NODES).map(|i| format!("n{i}")).collect();
    for id in &ids {
        fleet.start_node(id);
    }
    let started = Utc::now();
    println!(
        "soak: {NODES} nodes, {} jobs, {} min, records in {}\n  {}",
        jobs.len(),
        args.minutes,
        fleet.work.path("records").display(),
        backend.describe()
    );
    let end = Instant::now() + Duration::from_secs_f64(args.minutes * 60.0);
    let mut faults = Vec::new();
    while Instant::now() + Duration::from_secs(25) < end {
        std::thread::sleep(Duration::from_secs(10 + rand::random_range(0..10)));
        let node = ids[rand::random_range(0..ids.len())].clone();
        let fault = match rand::random_range(0..backend.fault_dice()) {
            dice @ (0 | 1) => kill(&mut fleet, &node, dice == 1),
            2 => double_term(&mut fleet, &node),
            _ => Fault::Coordinator(backend.inject()),
        };
        faults.push(fault);
    }
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(200));
    }
    let window_to = Utc::now() - TimeDelta::seconds(8);
    // Let the last long runs finish and every node decide the window's end.
    std::thread::sleep(Duration::from_secs(6));
    let window_from = started + TimeDelta::seconds(10);
    let names: Vec<&str> = jobs.iter().map(|job| job.name.as_str()).collect();
    let entries = fleet.history(&names);
    let (report, history) = audit(&fleet, &entries, &jobs, &faults, window_from, window_to);
    print!("{report}");
    print_history(&history);
    // An unfinished run (no END, no bound on its end) would escape the
    // overlap check.
    let ok = report.duplicates.is_empty()
        && report.overlaps.is_empty()
        && report.fence_inversions.is_empty()
        && report.misses.is_empty()
        && report.unfinished.is_empty()
        && history.is_exact();
    let counts: Vec<String> = faults::counts(&faults)
        .iter()
        .map(|(kind, count)| format!("{count} × {kind}"))
        .collect();
    println!(
        "summary: --backend {} {} min, audited {} .. {} UTC\n  faults ({}): {}",
        args.backend.name(),
        args.minutes,
        window_from.format("%Y-%m-%d %H:%M:%S"),
        window_to.format("%H:%M:%S"),
        faults.len(),
        counts.join(", ")
    );
    println!(
        "  {} occurrences, {} runs, {} duplicates, {} overlaps, {} fence inversions, {} misses, {} skipped, {} excused, {} unfinished",
        report.expected,
        report.runs,
        report.duplicates.len(),
        report.overlaps.len(),
        report.fence_inversions.len(),
        report.misses.len(),
        report.skipped.len(),
        report.excused.len(),
        report.unfinished.len()
    );
    println!(
        "  history: {} absent, {} recorded more than once",
        history.absent.len(),
        history.repeated.len()
    );
    println!("soak {}", if ok { "PASSED" } else { "FAILED" });
    let keep = !ok || std::env::var("SOLOCRON_SOAK_KEEP").is_ok_and(|value| value == "1");
    if keep {
        let text = serde_json::to_string_pretty(&entries).unwrap_or_default();
        if let Err(err) = std::fs::write(fleet.work.path("history.json"), text) {
            eprintln!("soak: cannot keep the history: {err}");
        }
        backend.keep_logs(fleet.work.dir.path());
    }
    // `exit` skips destructors: stop the nodes and the coordinator first.
    let kept = fleet.stop(keep);
    drop(backend);
    if let Some(dir) = kept {
        println!("node logs and records kept in {}", dir.display());
    }
    std::process::exit(if ok { 0 } else { 1 });
}

/// `kill -9` of `node`, restarted 3 s later (with a closed log pipe if
/// `closed_log`).
fn kill(fleet: &mut Fleet, node: &str, closed_log: bool) -> Fault {
    let (at, at_ns) = (Utc::now(), now_ns());
    fleet.node_mut(node).kill9();
    std::thread::sleep(Duration::from_secs(3));
    println!(
        "{} kill -9 {node}{}",
        at.format("%H:%M:%S"),
        if closed_log {
            ", restarted with a closed log pipe"
        } else {
            ""
        }
    );
    fleet.restart_node(node, closed_log);
    Fault::Kill {
        node: node.to_string(),
        at,
        at_ns,
        closed_log,
    }
}

/// Two SIGTERMs to `node` half a second apart; restarted once it exited.
fn double_term(fleet: &mut Fleet, node: &str) -> Fault {
    let at = Utc::now();
    let victim = fleet.node_mut(node);
    victim.signal("TERM");
    std::thread::sleep(Duration::from_millis(500));
    victim.signal("TERM");
    let status = victim.wait_exit(Duration::from_secs(30));
    let exited_ns = now_ns();
    println!(
        "{} double SIGTERM to {node}: exit {:?} after {} ms",
        at.format("%H:%M:%S"),
        status.code(),
        (Utc::now() - at).num_milliseconds()
    );
    fleet.restart_node(node, false);
    Fault::DoubleTerm {
        node: node.to_string(),
        at,
        exited_ns,
    }
}

/// The audit of the runs (with the faults' excuses and the ends of cut
/// runs) and of the history (every occurrence exactly once), both over
/// `[from, to]`.
fn audit(
    fleet: &Fleet,
    entries: &[serde_json::Value],
    jobs: &[JobSpec],
    faults: &[Fault],
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> (Report, HistoryReport) {
    let decisions: Vec<_> = entries.iter().map(decision_of).collect();
    let windows: Vec<_> = jobs
        .iter()
        .map(|job| {
            let mut window = job.window(from, to);
            window.may_miss = faults::excused(faults, &window, &decisions);
            window
        })
        .collect();
    let mut runs = fleet.runs();
    faults::close_cut_runs(&mut runs, faults, &faults::ends(entries));
    let report = audit::audit(&runs, &decisions, &windows);
    let plain: Vec<_> = jobs.iter().map(|job| job.window(from, to)).collect();
    (report, audit::history_exactly_once(&decisions, &plain))
}

/// Every occurrence absent from the history or recorded more than once.
fn print_history(history: &HistoryReport) {
    for (job, at) in &history.absent {
        println!("  absent from the history: {job} {}", at.to_rfc3339());
    }
    for (job, at, outcomes) in &history.repeated {
        println!(
            "  recorded {} times: {job} {} {outcomes:?}",
            outcomes.len(),
            at.to_rfc3339()
        );
    }
}
