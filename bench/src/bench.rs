//! The benchmark (`scripts/bench [--quick] [--only a,b,...]`):
//! real `redis-server`s on free loopback ports, real release `solocron run`
//! processes, the `probe` program as the measured job. Runs the scenarios,
//! prints one markdown table at the end and writes it with the raw figures
//! to `target/bench/results.{md,json}`. Exits non-zero only if a scenario
//! could not run; a missed target is a "no" in the table.
//!
//! Scenarios: a round trips, b lag, c 1,000 jobs on one second, d sustained
//! throughput, e idle daemon with 10,000 jobs, f start-up to READY, g
//! `solocron check`, h binary size, i peers (node-cron+redlock, BullMQ),
//! j the coordinator modes (`url`, `url` + `WAIT`, `sentinel`, `cluster`,
//! `redlock`: lag, round trips, commands, claims per second), n fleet size
//! (Redis cost per occurrence on 3, 10, 30 nodes), r Redis cost per
//! occurrence beside the peers (CPU, commandstats time, commands, round
//! trips); c also against a minimal spawner (the machine's own
//! limit), s `splay` on a 1,000-job burst, t 3 nodes with skewed clocks; a
//! round-two table gathers those figures and e/f/g's with 10,000 distinct
//! expressions; p the status page's load time with 1,000 jobs.

#[path = "../../tests/it/common/mod.rs"]
#[allow(unused_imports)]
mod common;

#[path = "bench/claims.rs"]
mod claims;
#[path = "bench/cost.rs"]
mod cost;
#[path = "bench/counting_proxy.rs"]
mod counting_proxy;
#[path = "bench/fleet.rs"]
mod fleet;
#[path = "bench/fleet_size.rs"]
mod fleet_size;
#[path = "bench/footprint.rs"]
mod footprint;
#[path = "bench/latency.rs"]
mod latency;
#[path = "bench/limits.rs"]
mod limits;
#[path = "bench/machine.rs"]
mod machine;
#[path = "bench/modes.rs"]
mod modes;
#[path = "bench/monitor.rs"]
mod monitor;
#[path = "bench/peers.rs"]
mod peers;
#[path = "bench/procfs.rs"]
mod procfs;
#[path = "bench/redis_cost.rs"]
mod redis_cost;
#[path = "bench/report.rs"]
mod report;
#[path = "bench/round_two.rs"]
mod round_two;
#[path = "bench/script_cost.rs"]
mod script_cost;
#[path = "bench/script_floor.rs"]
mod script_floor;
#[path = "bench/sink.rs"]
mod sink;
#[path = "bench/skew.rs"]
mod skew;
#[path = "bench/splay.rs"]
mod splay;
#[path = "bench/status_page.rs"]
mod status_page;
#[path = "bench/throughput.rs"]
mod throughput;
#[path = "bench/topology.rs"]
mod topology;
#[path = "bench/trips.rs"]
mod trips;

use std::path::PathBuf;
use std::time::Instant;

use fleet::Env;
use report::Report;

const ALL: &[&str] = &[
    "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "l", "n", "p", "r", "s", "t",
];

struct Options {
    quick: bool,
    only: Vec<String>,
    out: PathBuf,
}

fn options() -> Options {
    let mut options = Options {
        quick: false,
        only: ALL.iter().map(|s| s.to_string()).collect(),
        out: PathBuf::from("target/bench"),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => options.quick = true,
            "--only" => {
                let list = args.next().unwrap_or_default();
                options.only = list
                    .split(',')
                    .map(|s| {
                        s.trim()
                            .chars()
                            .next()
                            .map(|c| c.to_ascii_lowercase().to_string())
                            .unwrap_or_default()
                    })
                    .filter(|s| ALL.contains(&s.as_str()))
                    .collect();
                if options.only.is_empty() {
                    usage(&format!("--only: no known scenario in `{list}`"));
                }
            }
            "--out" => options.out = PathBuf::from(args.next().unwrap_or_default()),
            "-h" | "--help" => {
                println!("{}", help());
                std::process::exit(0);
            }
            other => usage(&format!("unknown argument `{other}`")),
        }
    }
    options
}

fn help() -> &'static str {
    "usage: bench [--quick] [--only a,b,c,d,e,f,g,h,i,j,l,n,p,r,s,t] [--out DIR]\n\
     a round trips, b lag, c 1,000 same second (and a minimal spawner), d throughput,\n\
     e idle 10,000 jobs, f start-up to READY, g check, h binary size, i peers,\n\
     j coordinator modes (url, url+WAIT, sentinel, cluster, redlock; claims/s),\n\
     n fleet size (3, 10, 30 nodes), r Redis cost per occurrence beside the peers,\n\
     p the status page with 1,000 jobs, s splay on a 1,000-job burst,\n\
     t 3 nodes with clocks ±450 ms"
}

fn usage(message: &str) -> ! {
    eprintln!("bench: {message}\n{}", help());
    std::process::exit(2);
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("__sink") {
        sink::serve();
        return;
    }
    let options = options();
    let exe = std::env::current_exe().expect("current executable");
    let dir = exe.parent().expect("bench directory").to_path_buf();
    let env = Env {
        probe: dir.join("probe"),
        quick: options.quick,
        root: std::env::current_dir().expect("current directory"),
    };
    assert!(
        env.probe.exists(),
        "build the probe first: cargo build --release -p solocron-bench --bin probe"
    );
    let solocron = common::solocron_bin();
    assert!(
        solocron.exists(),
        "no solocron binary at {}",
        solocron.display()
    );
    let mut report = Report::default();
    let began = Instant::now();
    eprintln!(
        "bench: {} run of {}; solocron {}",
        if env.quick { "quick" } else { "full" },
        options.only.join(","),
        solocron.display()
    );
    let wants = |s: &str| options.only.iter().any(|o| o == s);
    let mut startup = None;
    if wants("a") || wants("b") || wants("c") || wants("i") || wants("j") {
        startup = timed(&mut report, "probe", |r| latency::probe_startup(&env, r));
    }
    let startup = startup.unwrap_or_default();
    if wants("a") {
        timed(&mut report, "a", |r| latency::round_trips(&env, r));
    }
    if wants("b") {
        timed(&mut report, "b", |r| latency::lag(&env, r, &startup));
    }
    if wants("c") {
        timed(&mut report, "c", |r| latency::burst(&env, r, &startup));
        timed(&mut report, "c machine limit", |r| {
            machine::compare(&env, r, 1000)
        });
    }
    if wants("d") {
        timed(&mut report, "d", |r| throughput::run(&env, r));
    }
    if wants("e") {
        timed(&mut report, "e", |r| footprint::idle(&env, r));
    }
    if wants("f") {
        timed(&mut report, "f", footprint::startup);
    }
    if wants("g") {
        timed(&mut report, "g", footprint::check);
    }
    if wants("h") {
        timed(&mut report, "h", footprint::binary);
    }
    if wants("i") {
        timed(&mut report, "i", |r| peers::run(&env, r, &startup));
    }
    if wants("j") {
        timed(&mut report, "j", |r| modes::run(&env, r, &startup));
    }
    if wants("l") {
        timed(&mut report, "l", |r| limits::run(&env, r));
    }
    if wants("n") {
        timed(&mut report, "n", |r| fleet_size::run(&env, r));
    }
    if wants("p") {
        timed(&mut report, "p", |r| status_page::run(r, env.quick));
    }
    if wants("r") {
        timed(&mut report, "r", |r| cost::run(&env, r));
    }
    if wants("s") {
        timed(&mut report, "s", |r| splay::run(&env, r));
    }
    if wants("t") {
        timed(&mut report, "t", |r| skew::run(&env, r));
    }
    let round_two = round_two::summary(&report);
    report.extra.push(round_two);
    let header = format!(
        "solocron benchmark ({}), {} UTC, {} cores, {:.0} s; command: scripts/bench{}{}",
        if env.quick { "--quick" } else { "full" },
        chrono::Utc::now().format("%Y-%m-%d %H:%M"),
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        began.elapsed().as_secs_f64(),
        if env.quick { " --quick" } else { "" },
        if options.only.len() < ALL.len() {
            format!(" --only {}", options.only.join(","))
        } else {
            String::new()
        },
    );
    if let Err(err) = report.write(&options.out, &header) {
        eprintln!("bench: cannot write {}: {err}", options.out.display());
    }
    println!("\n{header}\n\n{}", report.markdown());
    println!(
        "(also in {} and results.json)",
        options.out.join("results.md").display()
    );
    if report.could_not_run() {
        eprintln!("bench: some scenarios could not run (see the table)");
        std::process::exit(1);
    }
}

/// Runs one scenario and notes its wall time. A scenario that panics
/// (could not run) gets a row saying so; the others still run, and the
/// bench exits 1 at the end.
fn timed<T>(report: &mut Report, name: &str, scenario: impl FnOnce(&mut Report) -> T) -> Option<T> {
    eprintln!("bench: scenario {name} ...");
    let started = Instant::now();
    let value = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| scenario(report)));
    let secs = started.elapsed().as_secs_f64();
    eprintln!("bench: scenario {name} took {secs:.1} s");
    report.timings.push((name.to_string(), secs));
    match value {
        Ok(value) => Some(value),
        Err(panic) => {
            let text = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panicked".to_string());
            report.failed(name, &text);
            None
        }
    }
}
