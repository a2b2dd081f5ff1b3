//! Issue #12 item 5, the burst against the machine's own limit: a minimal
//! spawner in the bench process starts 1,000 processes at one common
//! instant with the daemon's own spawning code and no Redis, interleaved
//! with the bursts of a real fleet (3 `solocron run` nodes, 1,000 probe
//! jobs on `*/10 * * * * *`): the fleet's burst at second 0 of each 10,
//! the minimal spawner's `/bin/true` burst at second 4 and its probe burst
//! at second 7, so both sides see the same load on this shared machine.
//! Reported: each p99, the ratio solocron / minimal (target ≤ 1.3), and the
//! scripts Redis ran per occurrence (3 claims and 1 release; more means
//! claims were sent again after a reply timeout).
//!
//! Faithful by construction: the daemon's `src/exec/launch.rs` (clone with
//! `CLONE_VM | CLONE_VFORK`, parent-death signal, own process group, stdin
//! on `/dev/null`, stdout / stderr pipes), `spawner.rs` (the same number of
//! spawning threads as `Executor::new`) and `child.rs` (exit watched by a
//! pidfd) are compiled into the bench as they are; as in `process.rs`, each
//! run builds its environment and `Launch` when it fires, reads both pipes
//! to EOF on the runtime and waits for the exit. What is left out is all
//! the daemon adds: timetable, claims, release, history, logging.
//!
//! Two programs are started: `/bin/true` (start = the run's task got the
//! child back from the spawning thread, past `execve`) and the probe
//! (start = its own first clock reading, the measure of scenario c); the
//! ratio uses the probe, so both sides start the same program and measure
//! it the same way. A spawn that fails is counted and shown, never a panic.

#[path = "../../../src/exec/child.rs"]
#[allow(dead_code)]
mod child;
#[path = "../../../src/exec/launch.rs"]
#[allow(dead_code)]
mod launch;
#[path = "../../../src/exec/spawner.rs"]
#[allow(dead_code)]
mod spawner;

use std::ffi::OsString;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::json;
use tokio::io::AsyncReadExt as _;

use crate::common::cluster::{sleep_until, whole_second_after};
use crate::fleet::{self, Action, Env, Fleet};
use crate::monitor;
use crate::report::{Report, Stats};

/// The ratio target of issue #12 item 5.
const RATIO_TARGET: f64 = 1.3;

/// One burst of the minimal spawner.
struct Burst {
    /// Start latency of each run from the common instant, ms.
    starts_ms: Vec<f64>,
    failed: usize,
    first_error: Option<String>,
}

/// `rounds` rounds of: the fleet's burst of `count` probe jobs, the
/// minimal spawner's `count` `/bin/true`, its `count` probes.
pub fn compare(env: &Env, report: &mut Report, count: usize) {
    let scenario = "c machine limit";
    let rounds = env.secs(2, 3) as i64;
    let Minimal {
        runtime,
        spawner,
        threads,
    } = Minimal::start();
    let names: Vec<String> = (0..count).map(|i| format!("j{i}")).collect();
    let jobs = fleet::uniform(count, "*/10 * * * * *", &Action::Probe);
    let mut fleet = Fleet::new(&fleet::config_text(env, &jobs));
    fleet.start_nodes(3);
    let mut conn = fleet.redis.conn();
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("runs");
    // Clear of the catch-up claims the nodes make at start (of the
    // occurrence before it), which are not part of the bursts.
    let first = whole_second_after(6, 10);
    sleep_until(first - TimeDelta::milliseconds(1500));
    let stats0 = monitor::commandstats(&mut conn);
    let mut truth = Vec::new();
    let mut failed = 0;
    let mut first_error = None;
    for round in 0..rounds {
        // The fleet fires by itself at `first + 10 s × round`.
        let at = first + TimeDelta::seconds(10 * round);
        for (offset, program) in [(4, Path::new("/bin/true")), (7, env.probe.as_path())] {
            let fire_at = at + TimeDelta::seconds(offset);
            let burst = burst(&runtime, &spawner, program, fire_at, fire_at, count, &out);
            failed += burst.failed;
            first_error = first_error.or(burst.first_error);
            if offset == 4 {
                truth.extend(burst.starts_ms);
            }
        }
    }
    let to = first + TimeDelta::seconds(10 * rounds);
    fleet.wait_probe_runs(first, to, count * rounds as usize, Duration::from_secs(10));
    let stats1 = monitor::commandstats(&mut conn);
    // Claims whose reply timed out (each one logged as an outage).
    let timeouts: usize = fleet
        .nodes
        .iter()
        .map(|node| {
            node.log()
                .lines()
                .filter(|line| line.contains("redis unreachable") && line.contains("timed out"))
                .count()
        })
        .sum();
    let solocron = fleet::analyse(
        &fleet::probe_arrivals(&fleet.probe_runs()),
        &names,
        10,
        first,
        to,
    );
    fleet.stop_nodes();
    let scripts = ["evalsha", "eval"]
        .iter()
        .map(|name| stats1.get(*name).unwrap_or(&0) - stats0.get(*name).unwrap_or(&0))
        .sum::<u64>();
    // The probe's own clock readings, against the instant it was given.
    let probe: Vec<f64> = fleet::parse_probe(&out)
        .iter()
        .filter_map(|run| Some((run.start_ns - fleet::at_ns(run.at?)) as f64 / 1e6))
        .collect();
    drop(spawner);
    runtime.shutdown_timeout(Duration::from_secs(5));
    let truth = Stats::of(&truth);
    let probe = Stats::of(&probe);
    let errors = match &first_error {
        Some(error) => format!("; {failed} spawns failed, the first: {error}"),
        None => String::new(),
    };
    let expected = rounds as usize * count;
    report.info(
        scenario,
        &format!(
            "solocron, 3 nodes, {count} probe jobs due at once (interleaved with the minimal spawner), p50 / p99 / max; dup / miss"
        ),
        format!(
            "{:.1} / {:.1} / {:.1} ms ({} runs in {rounds} bursts); {} / {}",
            solocron.lag.p50,
            solocron.lag.p99,
            solocron.lag.max,
            solocron.ran,
            solocron.duplicated,
            solocron.missed
        ),
    );
    report.info(
        scenario,
        &format!(
            "minimal spawner (the daemon's launch.rs + spawner.rs, no Redis): {count} `/bin/true` from one instant, execve reached, p50 / p99 / max"
        ),
        format!(
            "{:.1} / {:.1} / {:.1} ms ({} starts in {rounds} bursts){errors}",
            truth.p50, truth.p99, truth.max, truth.count
        ),
    );
    report.info(
        scenario,
        &format!(
            "same minimal spawner, {count} probes, probe's first clock reading, p50 / p99 / max"
        ),
        format!(
            "{:.1} / {:.1} / {:.1} ms ({} starts in {rounds} bursts)",
            probe.p50, probe.p99, probe.max, probe.count
        ),
    );
    let (measured, met) = if probe.count == expected && solocron.ran == expected && probe.p99 > 0.0
    {
        let ratio = solocron.lag.p99 / probe.p99;
        (
            format!(
                "{ratio:.2} (solocron p99 {:.1} ms / minimal p99 {:.1} ms)",
                solocron.lag.p99, probe.p99
            ),
            ratio <= RATIO_TARGET,
        )
    } else {
        (
            format!(
                "not measured: solocron ran {} and the minimal spawner started {} of {expected}{errors}",
                solocron.ran, probe.count
            ),
            false,
        )
    };
    report.check(
        scenario,
        "issue #12 item 5: 1,000-job burst p99, solocron (3 nodes) / minimal spawner (probe), same rounds",
        &format!("≤ {RATIO_TARGET}"),
        measured,
        met,
    );
    let per_occurrence = scripts as f64 / expected as f64;
    report.check(
        scenario,
        "scripts Redis ran per occurrence during those bursts (commandstats EVALSHA, 3 nodes; heartbeats included)",
        "≤ 4.1 (3 claims + 1 release; more: claims sent again after a reply timeout)",
        format!(
            "{per_occurrence:.2} ({scripts} for {expected} occurrences); outages logged for a timed-out claim: {timeouts}"
        ),
        per_occurrence <= 4.1,
    );
    report.raw(
        "c_machine_limit",
        json!({
            "count": count, "rounds": rounds, "spawning_threads": threads,
            "solocron": solocron.json(), "true_execve_ms": truth.json(), "probe_ms": probe.json(),
            "failed": failed, "first_error": first_error, "scripts": scripts,
            "timeouts_logged": timeouts,
        }),
    );
}

/// The minimal spawner: a runtime and the daemon's spawning threads (as
/// many as `Executor::new` starts).
pub struct Minimal {
    runtime: tokio::runtime::Runtime,
    spawner: spawner::Spawner,
    threads: usize,
}

impl Minimal {
    pub fn start() -> Minimal {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime for the minimal spawner");
        let threads = std::thread::available_parallelism()
            .map_or(2, usize::from)
            .clamp(2, 4);
        let spawner = {
            let _entered = runtime.enter();
            spawner::Spawner::start(threads).expect("start the spawning threads")
        };
        Minimal {
            runtime,
            spawner,
            threads,
        }
    }

    /// At `fire_at`, `count` probes whose occurrence is named `named`
    /// (whole seconds: the probe writes the name, and its lag from
    /// `fire_at` is its start minus `named` minus the difference); answers
    /// how many failed to spawn.
    pub fn probes(
        &self,
        probe: &Path,
        named: DateTime<Utc>,
        fire_at: DateTime<Utc>,
        count: usize,
        out: &Path,
    ) -> usize {
        burst(
            &self.runtime,
            &self.spawner,
            probe,
            named,
            fire_at,
            count,
            out,
        )
        .failed
    }

    pub fn stop(self) {
        drop(self.spawner);
        self.runtime.shutdown_timeout(Duration::from_secs(5));
    }
}

/// One burst: at `fire_at`, `count` runs of `program` for the occurrence
/// named `named`, each as `process.rs` runs a job (environment and
/// `Launch` built at fire time, the spawn on a spawning thread, both pipes
/// read to EOF, the exit awaited by pidfd).
fn burst(
    runtime: &tokio::runtime::Runtime,
    spawner: &spawner::Spawner,
    program: &Path,
    named: DateTime<Utc>,
    fire_at: DateTime<Utc>,
    count: usize,
    out: &Path,
) -> Burst {
    let occurrence = fleet::rfc3339(named);
    let at_ns = fleet::at_ns(fire_at);
    let starts = Arc::new(Mutex::new(Vec::with_capacity(count)));
    let errors = Arc::new(Mutex::new(Vec::new()));
    sleep_until(fire_at);
    let tasks: Vec<_> = (0..count)
        .map(|i| {
            let spawner = spawner.clone();
            let program = program.display().to_string();
            let occurrence = occurrence.clone();
            let out = out.as_os_str().to_os_string();
            let starts = Arc::clone(&starts);
            let errors = Arc::clone(&errors);
            runtime.spawn(async move {
                match run_one(&spawner, &program, &format!("m{i}"), &occurrence, out).await {
                    Ok(execve_ns) => lock(&starts).push((execve_ns - at_ns) as f64 / 1e6),
                    Err(error) => lock(&errors).push(error),
                }
            })
        })
        .collect();
    runtime.block_on(async {
        for task in tasks {
            let _ = task.await;
        }
    });
    // The last probe lines are written before their processes exit, and
    // every exit was awaited: nothing is left to wait for.
    sleep_until(Utc::now() + TimeDelta::milliseconds(200));
    let errors = std::mem::take(&mut *lock(&errors));
    Burst {
        starts_ms: std::mem::take(&mut *lock(&starts)),
        failed: errors.len(),
        first_error: errors.into_iter().next(),
    }
}

/// One run; returns when the spawning thread had the child past `execve`
/// (CLOCK_REALTIME ns).
async fn run_one(
    spawner: &spawner::Spawner,
    program: &str,
    job: &str,
    occurrence: &str,
    out: OsString,
) -> Result<i128, String> {
    let mut env: std::collections::BTreeMap<OsString, OsString> = std::env::vars_os().collect();
    for (name, value) in [
        ("SOLOCRON_JOB", job),
        ("SOLOCRON_OCCURRENCE", occurrence),
        ("SOLOCRON_FENCE", "1"),
        ("SOLOCRON_NODE", "minimal"),
        ("SOLOCRON_ATTEMPT", "1"),
    ] {
        env.insert(name.into(), value.into());
    }
    env.insert("BENCH_OUT".into(), out);
    let env: Vec<(OsString, OsString)> = env.into_iter().collect();
    let launch =
        launch::Launch::new(program, &[], &env, None).map_err(|err| format!("{program}: {err}"))?;
    let launched = spawner
        .spawn(launch)
        .await
        .map_err(|err| format!("{program}: {err}"))?;
    let execve_ns = crate::common::audit::now_ns();
    let mut child = child::Child::watch(launched.pid).map_err(|err| format!("pidfd: {err}"))?;
    let mut stdout = tokio::net::unix::pipe::Receiver::from_owned_fd(launched.stdout)
        .map_err(|err| format!("stdout pipe: {err}"))?;
    let mut stderr = tokio::net::unix::pipe::Receiver::from_owned_fd(launched.stderr)
        .map_err(|err| format!("stderr pipe: {err}"))?;
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let (read_out, read_err, status) = tokio::join!(
        stdout.read_to_end(&mut a),
        stderr.read_to_end(&mut b),
        child.wait()
    );
    read_out.map_err(|err| format!("stdout: {err}"))?;
    read_err.map_err(|err| format!("stderr: {err}"))?;
    match status {
        Ok(status) if status.success() => Ok(execve_ns),
        Ok(status) => Err(format!(
            "{program} ended with {status}: {}",
            String::from_utf8_lossy(&b).trim()
        )),
        Err(err) => Err(format!("wait: {err}")),
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
