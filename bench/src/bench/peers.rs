//! Scenario i: the same workload on solocron and on what users pick
//! instead (bench/peers/node: node-cron + redlock, BullMQ job schedulers),
//! each on its own fresh `redis-server` with the same settings: 3 nodes, 10
//! every-second jobs `j0..j9` running the probe. One run measures lag,
//! duplicates, Redis commands executed per run (commandstats), client round
//! trips per run (MONITOR), RSS and CPU per node; a second run shifts one
//! node's wall clock by +300 ms (libfaketime) and counts duplicate runs.
//! Peers follow the contract in the module `PeerProc`: env REDIS_URL,
//! NODE_ID, JOBS, SCHEDULE, PROBE, LOCK_TTL_MS, BENCH_OUT; `ready` on
//! stdout; exit on SIGTERM.

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use chrono::TimeDelta;
use serde_json::json;

use crate::common::cluster::{sleep_until, whole_second_after};
use crate::common::{Node, RedisServer, Workdir, faketime_env, toml_path};
use crate::fleet::{self, Action, Env, analyse, probe_arrivals};
use crate::monitor::{self, Monitor};
use crate::procfs::{self, CpuWindow};
use crate::report::Report;

pub const JOBS: usize = 10;
const SYSTEMS: &[&str] = &["solocron", "cron-redlock", "bullmq"];

/// A peer runner process (`node RUNNER.js`), stopped on drop.
pub struct PeerProc {
    child: Child,
}

impl PeerProc {
    pub fn start(
        script: &Path,
        redis: &RedisServer,
        id: &str,
        out: &Path,
        extra: &[(String, String)],
    ) -> Result<PeerProc, String> {
        let mut command = Command::new("node");
        command
            .arg(script)
            .env("REDIS_URL", redis.url())
            .env("NODE_ID", id)
            .env("JOBS", JOBS.to_string())
            .env("SCHEDULE", "* * * * * *")
            .env("PROBE", "")
            .env("LOCK_TTL_MS", lock_ttl_ms().to_string())
            .env("BENCH_OUT", out)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(
                std::fs::File::create(out.with_file_name(format!("{id}.stderr")))
                    .map_err(|e| e.to_string())?,
            ));
        let probe = std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(|dir| dir.join("probe")))
            .ok_or("no probe")?;
        command.env("PROBE", probe);
        for (key, value) in extra {
            command.env(key, value);
        }
        let mut child = command
            .spawn()
            .map_err(|e| format!("cannot start node: {e}"))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if line.trim() == "ready" {
                    let _ = tx.send(());
                }
            }
        });
        let mut peer = PeerProc { child };
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(()) => Ok(peer),
            Err(_) => {
                peer.stop();
                let err = std::fs::read_to_string(out.with_file_name(format!("{id}.stderr")))
                    .unwrap_or_default();
                Err(format!(
                    "{} {id} printed no `ready` within 30 s: {}",
                    script.display(),
                    err.lines().rev().take(3).collect::<Vec<_>>().join(" / ")
                ))
            }
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    fn stop(&mut self) {
        crate::common::signal(self.pid(), "TERM");
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for PeerProc {
    fn drop(&mut self) {
        self.stop();
    }
}

fn lock_ttl_ms() -> u64 {
    std::env::var("BENCH_PEER_LOCK_TTL_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30_000)
}

/// A running node of any system.
enum AnyNode {
    Solocron(Node),
    Peer(PeerProc),
}

impl AnyNode {
    fn pid(&self) -> i32 {
        match self {
            AnyNode::Solocron(node) => node.pid(),
            AnyNode::Peer(peer) => peer.pid(),
        }
    }
}

impl Drop for AnyNode {
    fn drop(&mut self) {
        if let AnyNode::Solocron(node) = self {
            node.signal("TERM");
            let pid = node.pid();
            fleet::wait_for(Duration::from_secs(10), || !crate::common::is_alive(pid));
        }
    }
}

/// One system's figures.
#[derive(Debug, Default, Clone)]
struct Figures {
    lag_p50: f64,
    lag_p99: f64,
    duplicates: usize,
    misses: usize,
    runs: usize,
    commands_per_run: f64,
    round_trips_per_run: f64,
    rss_mib: f64,
    cpu_pct: f64,
    skew_duplicates: usize,
    skew_misses: usize,
    skew_runs: usize,
    commands: BTreeMap<String, u64>,
}

pub fn run(env: &Env, report: &mut Report, _startup: &crate::report::Stats) {
    let scenario = "i peers";
    let dir = std::env::var_os("BENCH_PEERS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| env.root.join("bench/peers/node"));
    let skip = std::env::var("BENCH_PEERS_SKIP")
        .ok()
        .filter(|s| !s.is_empty());
    let mut results: BTreeMap<&str, Result<Figures, String>> = BTreeMap::new();
    for &system in SYSTEMS {
        let result = if system == "solocron" {
            Ok(measure(env, system, None))
        } else if let Some(reason) = &skip {
            Err(format!("not run: {reason}"))
        } else {
            let script = dir.join(format!("{system}.js"));
            if !script.exists() {
                Err(format!("not run: {} is missing", script.display()))
            } else if Command::new("node")
                .arg("--version")
                .stdout(Stdio::null())
                .status()
                .map(|s| !s.success())
                .unwrap_or(true)
            {
                Err("not run: `node` is not installed".to_string())
            } else {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    measure(env, system, Some(&script))
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
        };
        if let Err(reason) = &result {
            eprintln!("  [{scenario}] {system}: {reason}");
        }
        results.insert(system, result);
    }
    let solo = results["solocron"].clone().expect("solocron always runs");
    let window = env.secs(10, 30);
    type Get = fn(&Figures) -> f64;
    let metrics: [(&str, Get, &str); 9] = [
        ("fire-to-start lag p50 (ms)", |f| f.lag_p50, "{:.2}"),
        ("fire-to-start lag p99 (ms)", |f| f.lag_p99, "{:.2}"),
        ("duplicates / misses, no skew", |f| f.duplicates as f64, ""),
        (
            "duplicate runs, one node's clock +300 ms",
            |f| f.skew_duplicates as f64,
            "",
        ),
        (
            "Redis commands executed per run (commandstats)",
            |f| f.commands_per_run,
            "{:.1}",
        ),
        (
            "client round trips per run (MONITOR, periodic included)",
            |f| f.round_trips_per_run,
            "{:.1}",
        ),
        ("RSS per node (MiB)", |f| f.rss_mib, "{:.1}"),
        ("CPU per node (% of a core)", |f| f.cpu_pct, "{:.2}"),
        ("runs in the window (no skew / skew)", |f| f.runs as f64, ""),
    ];
    let mut side = format!(
        "\nPeers, side by side ({JOBS} every-second probe jobs, 3 nodes, {window} s per run; ratio = peer / solocron):\n\n| figure | {} |\n|---|{}\n",
        SYSTEMS.join(" | "),
        "---|".repeat(SYSTEMS.len())
    );
    for (name, get, _) in &metrics {
        let mut cells = Vec::new();
        for &system in SYSTEMS {
            let cell = match &results[system] {
                Err(reason) => reason.clone(),
                Ok(figures) => {
                    let text = cell_text(name, figures);
                    if system == "solocron" {
                        text
                    } else {
                        let (a, b) = (get(figures), get(&solo));
                        if b > 0.0 && !name.starts_with("runs") {
                            format!("{text} (×{:.1})", a / b)
                        } else {
                            text
                        }
                    }
                }
            };
            cells.push(cell);
        }
        side.push_str(&format!("| {name} | {} |\n", cells.join(" | ")));
        let measured = SYSTEMS
            .iter()
            .zip(&cells)
            .map(|(s, c)| format!("{s} {c}"))
            .collect::<Vec<_>>()
            .join("; ");
        if name.starts_with("duplicate runs") {
            report.check(
                scenario,
                name,
                "solocron 0",
                measured,
                solo.skew_duplicates == 0,
            );
        } else {
            report.info(scenario, name, measured);
        }
    }
    report.extra.push(side);
    report.raw(
        "i_peers",
        json!(results.iter().map(|(s, r)| (s.to_string(), match r {
            Ok(f) => json!({
                "lag_p50_ms": f.lag_p50, "lag_p99_ms": f.lag_p99, "duplicates": f.duplicates, "misses": f.misses,
                "runs": f.runs, "commands_per_run": f.commands_per_run, "round_trips_per_run": f.round_trips_per_run,
                "rss_mib_per_node": f.rss_mib, "cpu_pct_per_node": f.cpu_pct, "skew_duplicates": f.skew_duplicates,
                "skew_misses": f.skew_misses, "skew_runs": f.skew_runs, "commandstats": f.commands,
                "lock_ttl_ms": lock_ttl_ms(),
            }),
            Err(e) => json!(e),
        })).collect::<serde_json::Map<_, _>>()),
    );
}

fn cell_text(name: &str, f: &Figures) -> String {
    if name.starts_with("duplicates / misses") {
        format!("{} / {}", f.duplicates, f.misses)
    } else if name.starts_with("duplicate runs") {
        format!("{} (misses {})", f.skew_duplicates, f.skew_misses)
    } else if name.starts_with("runs") {
        format!("{} / {}", f.runs, f.skew_runs)
    } else if name.contains("lag") {
        format!(
            "{:.2}",
            if name.contains("p50") {
                f.lag_p50
            } else {
                f.lag_p99
            }
        )
    } else if name.starts_with("Redis") {
        format!("{:.1}", f.commands_per_run)
    } else if name.starts_with("client") {
        format!("{:.1}", f.round_trips_per_run)
    } else if name.starts_with("RSS") {
        format!("{:.1}", f.rss_mib)
    } else {
        format!("{:.2}", f.cpu_pct)
    }
}

/// Both runs of one system on its own Redis.
fn measure(env: &Env, system: &str, script: Option<&Path>) -> Figures {
    let redis = RedisServer::start();
    let window = env.secs(10, 30) as i64;
    let names: Vec<String> = (0..JOBS).map(|i| format!("j{i}")).collect();
    let mut figures = Figures::default();
    for skewed in [false, true] {
        let work = Workdir::new();
        work.write_config(&fleet::config_text(
            env,
            &fleet::uniform(JOBS, "* * * * * *", &Action::Probe),
        ));
        let out = work.path("runs");
        let mut nodes = Vec::new();
        for i in 1..=3 {
            let id = format!("n{i}");
            let extra = if skewed && i == 3 {
                faketime_env("+0.3")
            } else {
                Vec::new()
            };
            nodes.push(match script {
                None => {
                    let mut env_pairs: Vec<(&str, &str)> = extra
                        .iter()
                        .map(|(k, v)| (k.as_str(), v.as_str()))
                        .collect();
                    let out_text = toml_path(&out);
                    env_pairs.push(("BENCH_OUT", &out_text));
                    let config = toml_path(&work.path("jobs.toml"));
                    AnyNode::Solocron(Node::start_with_args(
                        &work,
                        &id,
                        &["--config", &config, "--redis", &redis.url()],
                        &env_pairs,
                    ))
                }
                Some(script) => AnyNode::Peer(
                    PeerProc::start(script, &redis, &id, &out, &extra)
                        .unwrap_or_else(|e| panic!("{e}")),
                ),
            });
        }
        fleet::must(
            Duration::from_secs(20),
            &format!("{system}: the probe ran"),
            || !fleet::parse_probe(&out).is_empty(),
        );
        let from = whole_second_after(2, 1);
        let to = from + TimeDelta::seconds(window);
        let half = TimeDelta::milliseconds(500);
        let mut conn = redis.conn();
        let monitor = (!skewed).then(|| Monitor::start(redis.port));
        sleep_until(from - half);
        let stats0 = monitor::commandstats(&mut conn);
        let procs: Vec<(String, i32)> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (format!("n{}", i + 1), n.pid()))
            .collect();
        let cpu_window = CpuWindow::start(&procs);
        sleep_until(to - half);
        let stats1 = monitor::commandstats(&mut conn);
        let cpu = cpu_window.finish();
        let lines = monitor.map(Monitor::stop).unwrap_or_default();
        sleep_until(to);
        let expected = JOBS * window as usize;
        let wait_out = out.clone();
        fleet::wait_for(Duration::from_secs(5), || {
            fleet::parse_probe(&wait_out)
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
        drop(nodes);
        if skewed {
            figures.skew_duplicates = result.extra_runs;
            figures.skew_misses = result.missed;
            figures.skew_runs = result.ran + result.extra_runs;
        } else {
            let executed = monitor::delta(&stats0, &stats1);
            let runs = (result.ran + result.extra_runs).max(1) as f64;
            let (lo, hi) = (
                (from - half).timestamp_millis() as f64 / 1e3,
                (to - half).timestamp_millis() as f64 / 1e3,
            );
            let trips = lines
                .iter()
                .filter(|l| l.ts >= lo && l.ts < hi && !l.is_lua())
                .filter(|l| !matches!(l.cmd.as_str(), "INFO" | "MONITOR"))
                .count();
            figures.lag_p50 = result.lag.p50;
            figures.lag_p99 = result.lag.p99;
            figures.duplicates = result.extra_runs;
            figures.misses = result.missed;
            figures.runs = result.ran + result.extra_runs;
            figures.commands_per_run = executed.values().sum::<u64>() as f64 / runs;
            figures.round_trips_per_run = trips as f64 / runs;
            figures.rss_mib =
                cpu.iter().map(|c| c.rss_kib as f64).sum::<f64>() / cpu.len() as f64 / 1024.0;
            figures.cpu_pct = cpu.iter().map(|c| c.own_pct).sum::<f64>() / cpu.len() as f64;
            figures.commands = executed;
            eprintln!(
                "  [i peers] {system}: lag p50 {:.2} p99 {:.2} ms, {:.1} commands/run, {:.1} round trips/run, CPU {}",
                figures.lag_p50,
                figures.lag_p99,
                figures.commands_per_run,
                figures.round_trips_per_run,
                procfs::describe(&cpu)
            );
        }
        let _: () = redis::cmd("FLUSHALL").query(&mut conn).expect("FLUSHALL");
    }
    figures
}
