//! Scenarios e–h, the cost of having many jobs loaded: an idle daemon with
//! 10,000 jobs none of which is due (RSS, CPU, every Redis command it
//! sends), start-up to READY=1 on a notify socket, `solocron check` wall
//! time and peak RSS (wait4), and the release binary's size.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use chrono::{Datelike as _, Utc};
use serde_json::json;

use crate::common::notify::NotifySocket;
use crate::common::{solocron_bin, toml_path};
use crate::fleet::{self, Env, Fleet};
use crate::monitor::Monitor;
use crate::procfs::{self, CpuWindow};
use crate::report::{Report, Stats};

const JOBS: usize = 10_000;

/// Distinct expressions in the typical 10,000-job file (a fleet's jobs
/// share a few schedules); the worst case gives every job its own.
const TYPICAL_DISTINCT: usize = 100;

/// Issue #12 item 2's "RSS ≤ 20 MB": 20 × 10⁶ bytes (19.07 MiB; the
/// figures are shown in MiB).
const RSS_TARGET_BYTES: f64 = 20e6;

/// 10,000 jobs, none due for months: each fires once a year, in the month
/// six months from now, at varied seconds, minutes, hours and days, with
/// `distinct` different expressions in all (job i uses expression i mod
/// `distinct`).
pub fn idle_config(distinct: usize) -> String {
    let month = (Utc::now().month0() + 6) % 12 + 1;
    let mut text = String::from("[daemon]\nshutdown_grace = \"2s\"\n");
    for job in 0..JOBS {
        let i = job % distinct.max(1);
        let (s, m, h, d) = (i % 60, (i / 60) % 60, (i * 7) % 24, 1 + (i * 13) % 28);
        text.push_str(&format!(
            "\n[jobs.idle{job}]\nschedule = \"{s} {m} {h} {d} {month} *\"\nargv = [\"/bin/true\"]\n"
        ));
    }
    text
}

/// e. Idle daemon: RSS, CPU, Redis commands over a window.
pub fn idle(env: &Env, report: &mut Report) {
    let scenario = "e idle 10,000 jobs";
    let window = env.secs(30, 60);
    let one = idle_window(1, window, TYPICAL_DISTINCT);
    let mib = |kib: u64| kib as f64 / 1024.0;
    let n1 = &one.cpu[1];
    report.check(
        scenario,
        &format!(
            "RSS of one idle daemon with 10,000 jobs, {TYPICAL_DISTINCT} distinct expressions (VmRSS / VmHWM)"
        ),
        "≤ 20 MB",
        format!("{:.1} / {:.1} MiB", mib(n1.rss_kib), mib(n1.hwm_kib)),
        n1.rss_kib as f64 * 1024.0 <= RSS_TARGET_BYTES,
    );
    let worst = idle_window(1, env.secs(10, 10), JOBS);
    let w1 = &worst.cpu[1];
    report.check(
        scenario,
        "RSS with 10,000 distinct expressions, worst case (VmRSS / VmHWM)",
        "≤ 20 MB",
        format!("{:.1} / {:.1} MiB", mib(w1.rss_kib), mib(w1.hwm_kib)),
        w1.rss_kib as f64 * 1024.0 <= RSS_TARGET_BYTES,
    );
    report.check(
        scenario,
        &format!("CPU of one idle daemon over {window} s"),
        "≤ 0.1 % of a core",
        format!("{:.3} % (redis {:.3} %)", n1.own_pct, one.cpu[0].own_pct),
        n1.own_pct <= 0.1,
    );
    report.check(
        scenario,
        &format!("Redis commands of one idle daemon in {window} s (MONITOR)"),
        "no job commands; periodic registry / TIME only",
        one.describe(),
        one.only_health,
    );
    let mut raw = json!({"one_node": one.json(), "one_node_distinct": worst.json()});
    if !env.quick {
        let three = idle_window(3, window / 2, TYPICAL_DISTINCT);
        let nodes = &three.cpu[1..];
        report.info(
            scenario,
            &format!("3 idle daemons, totals over {} s", window / 2),
            format!(
                "RSS {:.1} MiB, CPU {:.3} % of a core; Redis: {}",
                mib(nodes.iter().map(|c| c.rss_kib).sum()),
                nodes.iter().map(|c| c.own_pct).sum::<f64>(),
                three.describe()
            ),
        );
        raw["three_nodes"] = three.json();
    }
    report.raw("e_idle", raw);
}

struct Idle {
    window_s: u64,
    cpu: Vec<procfs::CpuUse>,
    /// Client commands by name (job-key ones marked), and inner script commands.
    client: BTreeMap<String, u64>,
    lua: BTreeMap<String, u64>,
    only_health: bool,
}

impl Idle {
    fn describe(&self) -> String {
        let list = |m: &BTreeMap<String, u64>| {
            if m.is_empty() {
                "none".to_string()
            } else {
                m.iter()
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        };
        format!(
            "sent: {}; inside scripts: {}",
            list(&self.client),
            list(&self.lua)
        )
    }

    fn json(&self) -> serde_json::Value {
        json!({"window_s": self.window_s, "cpu": procfs::json(&self.cpu), "client_commands": self.client, "lua_commands": self.lua, "only_health_checks": self.only_health})
    }
}

fn idle_window(nodes: usize, window: u64, distinct: usize) -> Idle {
    let mut fleet = Fleet::new(&idle_config(distinct));
    fleet.start_nodes(nodes);
    let mut conn = fleet.redis.conn();
    // Every node published itself to the registry (start-up work done).
    fleet::must(
        Duration::from_secs(20),
        "the nodes are in the registry",
        || {
            redis::cmd("ZCARD")
                .arg("{solocron}:nodes")
                .query::<usize>(&mut conn)
                .unwrap_or(0)
                >= nodes
        },
    );
    // Settle: start-up allocations and the first clock check are behind.
    std::thread::sleep(Duration::from_secs(3));
    let monitor = Monitor::start(fleet.redis.port);
    let cpu_window = CpuWindow::start(&fleet.procs());
    std::thread::sleep(Duration::from_secs(window));
    let cpu = cpu_window.finish();
    let lines = monitor.stop();
    let mut client = BTreeMap::new();
    let mut lua = BTreeMap::new();
    let mut only_health = true;
    for line in &lines {
        if line.is_lua() {
            *lua.entry(line.cmd.clone()).or_insert(0) += 1;
            continue;
        }
        let name = if line.job_key().is_some() {
            only_health = false;
            format!("{} (job key)", line.cmd)
        } else {
            // No job key: the registry (publish, drift read) or a clock check.
            line.cmd.clone()
        };
        *client.entry(name).or_insert(0) += 1;
    }
    Idle {
        window_s: window,
        cpu,
        client,
        lua,
        only_health,
    }
}

/// f. Spawn → READY=1 with 10,000 jobs, each its own expression (the
/// worst case: every one is parsed), 5 runs.
pub fn startup(report: &mut Report) {
    let scenario = "f start-up";
    let fleet = Fleet::new(&idle_config(JOBS));
    let config = toml_path(&fleet.config_path());
    let mut times = Vec::new();
    for i in 0..5 {
        let socket = NotifySocket::bind();
        let started = Instant::now();
        let mut child = Command::new(solocron_bin())
            .args(["run", "--config", &config, "--redis", &fleet.redis.url()])
            .args(["--node-id", &format!("f{i}")])
            .env("NOTIFY_SOCKET", socket.env_value())
            .env("SOLOCRON_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start solocron");
        socket.recv_until("READY=1", Duration::from_secs(20));
        times.push(started.elapsed().as_secs_f64() * 1e3);
        crate::common::signal(child.id() as i32, "TERM");
        let _ = child.wait();
    }
    let stats = Stats::of(&times);
    report.check(
        scenario,
        "spawn → READY=1 with 10,000 jobs (10,000 distinct expressions), median / max of 5",
        "≤ 200 ms",
        format!("{:.0} / {:.0} ms", stats.p50, stats.max),
        stats.p50 <= 200.0,
    );
    report.raw("f_startup", json!({"ms": times}));
}

/// g. `solocron check` on the 10,000-job file, each job its own expression,
/// 5 runs.
pub fn check(report: &mut Report) {
    let scenario = "g check";
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("jobs.toml");
    // `check` needs the `[redis]` that `write_config` adds for the daemons.
    let text = format!(
        "[redis]\nurl = \"redis://127.0.0.1:6379\"\n\n{}",
        idle_config(JOBS)
    );
    std::fs::write(&path, text).expect("write jobs.toml");
    let mut times = Vec::new();
    let mut peak = 0;
    for _ in 0..5 {
        let mut command = Command::new(solocron_bin());
        command
            .args(["check", "--config", &toml_path(&path)])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let (elapsed, status, maxrss) = run_with_rusage(command);
        assert_eq!(status, 0, "solocron check failed on the generated file");
        times.push(elapsed.as_secs_f64() * 1e3);
        peak = peak.max(maxrss);
    }
    let stats = Stats::of(&times);
    report.check(
        scenario,
        "`solocron check` on 10,000 jobs (10,000 distinct expressions), median / max of 5 (output to /dev/null)",
        "≤ 300 ms",
        format!(
            "{:.0} / {:.0} ms, peak RSS {:.1} MiB",
            stats.p50,
            stats.max,
            peak as f64 / 1024.0
        ),
        stats.p50 <= 300.0,
    );
    report.raw("g_check", json!({"ms": times, "maxrss_kib": peak}));
}

/// Runs `command` to completion: wall time, exit code, ru_maxrss (KiB).
/// The child is reaped by `wait4` itself (std's `wait` would lose the rusage).
#[allow(clippy::zombie_processes, unsafe_code)]
fn run_with_rusage(mut command: Command) -> (Duration, i32, i64) {
    let started = Instant::now();
    let child = command.spawn().expect("spawn");
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 writes into it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child, with valid pointers.
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    let elapsed = started.elapsed();
    assert!(pid > 0, "wait4 failed");
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    (elapsed, code, usage.ru_maxrss)
}

/// h. Release binary size.
pub fn binary(report: &mut Report) {
    let path = solocron_bin();
    let bytes = std::fs::read(&path).expect("read the solocron binary");
    let has = |needle: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
    let symbols = has(b".symtab\0");
    let debug = has(b".debug_info\0");
    report.info(
        "h binary",
        "release binary size (target/release/solocron)",
        format!(
            "{} bytes ({:.1} MiB), {}{}",
            bytes.len(),
            bytes.len() as f64 / 1048576.0,
            if symbols {
                "not stripped (has .symtab)"
            } else {
                "stripped"
            },
            if debug { ", with debug info" } else { "" }
        ),
    );
    report.raw(
        "h_binary",
        json!({"bytes": bytes.len(), "symtab": symbols, "debug_info": debug, "path": path}),
    );
}
