//! Scenario j, second part: how many claims a coordinator answers per
//! second. No daemon and no job: a load generator in the bench process
//! drives the daemon's own claim path (`solocron::lock::Locker`, the same
//! scripts and pipelines, `WAIT`/`ROLE` included, the same client
//! connections per mode) the way three nodes do for every occurrence:
//! three lockers (`n1..n3`, a coordinator connection each, like three
//! daemons) claim the same occurrence at once, exactly one wins, and the
//! winner releases with a history entry. One occurrence is 3 claims and 1
//! release. Each generator task owns its jobs and claims their occurrences
//! one after the other (newer each time, so the claim script takes each).
//!
//! Two phases per coordinator: [`SERIAL`] (one occurrence in flight: the
//! latency of one claim round, which shows what a `WAIT` adds), then
//! [`IN_FLIGHT`] occurrences in flight for the measured window (the rate
//! it sustains: claims answered per second, the servers' CPU per claim).
//! The generator shares this machine's cores with every server, so the
//! rate is what the whole setup sustains here; the servers' own CPU per
//! claim (`/proc`) is the load-independent part.
//!
//! Failure model: a claim that fails (I/O, timeout, an unacknowledged
//! `WAIT`, no Redlock majority) is retried as the daemon retries it (same
//! token, a jittered pause from 50 ms doubling to 1 s) and given up after
//! 2.5 s; retries and give-ups are counted, never unwrapped, as is a failed
//! release. An occurrence every locker got an answer for that nobody won
//! (a miss) or that two won (a duplicate; must be 0) is counted too. Only
//! the set-up panics (no runtime, a coordinator it cannot connect to,
//! scripts that do not load), which the caller shows as "could not run".

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use serde_json::json;
use solocron::history::Entry;
use solocron::lock::{Claim, Locker, Target, new_token};

use crate::monitor::{self, CmdStat};
use crate::procfs::{self, CpuUse, CpuWindow};
use crate::report::{Report, Stats};
use crate::script_cost;
use crate::topology::{Role, Topology};

/// Occurrences in flight while the rate is measured.
const IN_FLIGHT: usize = 64;

/// How long the one-in-flight phase runs.
const SERIAL: Duration = Duration::from_secs(2);

/// Jobs per generator task (a job's occurrences are claimed in turn).
const JOBS_PER_TASK: usize = 8;

/// Not measured: connections set up, scripts cached, caches warm.
const WARM_UP: Duration = Duration::from_secs(1);

/// As the daemon retries a claim that failed (`src/daemon/occurrence.rs`):
/// the first pause, doubling up to the longest, each plus up to half at
/// random; given up after [`GIVE_UP`] (an every-second job's deadline is
/// the next occurrence, plus the daemon's 1.5 s margin).
const RETRY_FIRST: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_secs(1);
const GIVE_UP: Duration = Duration::from_millis(2500);

/// One occurrence the generator decided.
#[derive(Debug, Clone)]
struct Round {
    /// From the first claim sent to the release answered, or to the last
    /// claim answered when nothing won.
    started: Instant,
    took: Duration,
    /// Claims that got an answer (one per locker, retries not counted).
    claims_answered: u8,
    /// Claims sent again after an error (the daemon's retries).
    retries: u32,
    wins: u8,
    /// Lockers that gave up (errors until [`GIVE_UP`]), and a failed release.
    errors: u8,
    /// What each locker was answered, when nobody won (`taken taken taken`).
    answers: Option<String>,
}

/// One coordinator's claim figures.
pub struct ClaimResult {
    pub name: &'static str,
    pub shown: String,
    window_s: f64,
    /// Occurrence latency with one in flight, ms.
    serial: Stats,
    /// Under load: occurrence latency, ms.
    loaded: Stats,
    occurrences: usize,
    claims: u64,
    retries: u64,
    errors: u64,
    /// Occurrences every locker got an answer for and none won: a miss.
    no_winner: u64,
    /// Occurrences two lockers won: a duplicate (must be 0).
    two_winners: u64,
    /// The answers of the occurrences nobody won, by kind.
    no_winner_answers: BTreeMap<String, u64>,
    /// Masters' commandstats deltas over the window, summed.
    commands: BTreeMap<String, CmdStat>,
    cpu: Vec<CpuUse>,
    /// The role of each process of `cpu`; `None`: the generator.
    roles: Vec<Option<Role>>,
    shards: usize,
}

impl ClaimResult {
    fn claims_per_s(&self) -> f64 {
        self.claims as f64 / self.window_s
    }

    /// CPU µs of the servers of `role` per answered claim.
    fn cpu_us_per_claim(&self, role: Role) -> f64 {
        let seconds: f64 = self
            .cpu
            .iter()
            .zip(&self.roles)
            .filter(|(_, r)| **r == Some(role))
            .map(|(u, _)| u.own_pct / 100.0 * self.window_s)
            .sum();
        seconds * 1e6 / self.claims.max(1) as f64
    }

    fn generator_cpu_pct(&self) -> f64 {
        self.cpu
            .iter()
            .zip(&self.roles)
            .find(|(_, r)| r.is_none())
            .map_or(f64::NAN, |(u, _)| u.own_pct)
    }

    fn masters_cpu_pct(&self) -> f64 {
        self.cpu
            .iter()
            .zip(&self.roles)
            .filter(|(_, r)| **r == Some(Role::Master))
            .map(|(u, _)| u.own_pct)
            .sum()
    }

    /// Commands the masters executed per claim (scripts' inner commands included).
    fn commands_per_claim(&self) -> f64 {
        self.commands.values().map(|s| s.calls).sum::<u64>() as f64 / self.claims.max(1) as f64
    }

    /// Claims per CPU-second spent by every server and the generator: the
    /// whole setup's efficiency, whatever share of the machine it got.
    fn claims_per_cpu_s(&self) -> f64 {
        let seconds: f64 = self
            .cpu
            .iter()
            .map(|u| u.own_pct / 100.0 * self.window_s)
            .sum();
        if seconds > 0.0 {
            self.claims as f64 / seconds
        } else {
            f64::NAN
        }
    }

    /// Claims per second the masters' CPU allows with a core per shard.
    fn projected_per_s(&self) -> f64 {
        let us = self.cpu_us_per_claim(Role::Master);
        if us > 0.0 {
            1e6 / us * self.shards as f64
        } else {
            f64::NAN
        }
    }

    fn json(&self) -> serde_json::Value {
        json!({
            "mode": self.name, "shown": self.shown, "window_s": self.window_s,
            "in_flight": IN_FLIGHT, "serial_ms": self.serial.json(), "loaded_ms": self.loaded.json(),
            "occurrences": self.occurrences, "claims": self.claims, "claims_per_s": self.claims_per_s(),
            "retries": self.retries, "errors": self.errors,
            "no_winner": self.no_winner, "two_winners": self.two_winners,
            "no_winner_answers": self.no_winner_answers,
            "masters_commandstats": self.commands.iter().map(|(k, v)| (k.clone(), json!({"calls": v.calls, "usec": v.usec}))).collect::<serde_json::Map<_, _>>(),
            "commands_per_claim": self.commands_per_claim(),
            "master_cpu_us_per_claim": self.cpu_us_per_claim(Role::Master),
            "replica_cpu_us_per_claim": self.cpu_us_per_claim(Role::Replica),
            "projected_claims_per_s_core_per_shard": self.projected_per_s(),
            "claims_per_cpu_second": self.claims_per_cpu_s(),
            "shards": self.shards, "cpu": procfs::json(&self.cpu),
        })
    }
}

/// Measures `topology` (its daemons stopped): the one-in-flight latency,
/// then the rate for `window`.
pub fn measure(topology: &Topology, window: Duration) -> ClaimResult {
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime for the claim load");
    let lockers = script_cost::three_lockers(&runtime, topology, "claims", 100);
    let lockers = Arc::new(lockers);
    // One in flight.
    let serial = runtime.block_on(generate(&lockers, 1, 0, WARM_UP + SERIAL));
    let serial_from = serial.first().map(|r| r.started + WARM_UP);
    let serial: Vec<f64> = serial
        .iter()
        .filter(|r| serial_from.is_some_and(|from| r.started >= from))
        .map(|r| r.took.as_secs_f64() * 1e3)
        .collect();
    // Many in flight; the window is sampled from this thread meanwhile.
    let masters = topology.masters();
    let mut conns: Vec<redis::Connection> =
        masters.iter().map(|&port| topology.conn(port)).collect();
    let servers = topology.procs();
    let mut procs: Vec<(String, i32)> = servers
        .iter()
        .map(|(name, pid, _)| (name.clone(), *pid))
        .collect();
    procs.push(("generator".to_string(), std::process::id() as i32));
    let mut roles: Vec<Option<Role>> = servers.iter().map(|(_, _, role)| Some(*role)).collect();
    roles.push(None);
    let load = runtime.spawn({
        let lockers = Arc::clone(&lockers);
        async move { generate(&lockers, IN_FLIGHT, 1, WARM_UP + window + WARM_UP).await }
    });
    std::thread::sleep(WARM_UP);
    let from = Instant::now();
    let before: Vec<_> = conns.iter_mut().map(monitor::commandstats_usec).collect();
    let cpu_window = CpuWindow::start(&procs);
    std::thread::sleep(window);
    let to = Instant::now();
    let after: Vec<_> = conns.iter_mut().map(monitor::commandstats_usec).collect();
    let cpu = cpu_window.finish();
    let rounds = runtime
        .block_on(load)
        .expect("the claim load task ran to its end");
    let measured: Vec<&Round> = rounds
        .iter()
        .filter(|r| {
            let end = r.started + r.took;
            end >= from && end < to
        })
        .collect();
    let mut commands: BTreeMap<String, CmdStat> = BTreeMap::new();
    for (before, after) in before.iter().zip(&after) {
        for (name, stat) in monitor::delta_usec(before, after) {
            let into = commands.entry(name).or_default();
            into.calls += stat.calls;
            into.usec += stat.usec;
        }
    }
    ClaimResult {
        name: topology.name(),
        shown: topology.describe(),
        window_s: (to - from).as_secs_f64(),
        serial: Stats::of(&serial),
        loaded: Stats::of(
            &measured
                .iter()
                .map(|r| r.took.as_secs_f64() * 1e3)
                .collect::<Vec<_>>(),
        ),
        occurrences: measured.len(),
        claims: measured.iter().map(|r| u64::from(r.claims_answered)).sum(),
        retries: measured.iter().map(|r| u64::from(r.retries)).sum(),
        errors: measured.iter().map(|r| u64::from(r.errors)).sum(),
        no_winner: measured
            .iter()
            .filter(|r| r.errors == 0 && r.wins == 0)
            .count() as u64,
        two_winners: measured.iter().filter(|r| r.wins > 1).count() as u64,
        no_winner_answers: measured.iter().filter_map(|r| r.answers.clone()).fold(
            BTreeMap::new(),
            |mut counts, answers| {
                *counts.entry(answers).or_insert(0) += 1;
                counts
            },
        ),
        commands,
        cpu,
        roles,
        shards: masters.len(),
    }
}

/// `tasks` generator tasks for `length`; returns every round they decided.
/// `salt` keeps the phases' jobs apart.
async fn generate(
    lockers: &Arc<Vec<Locker>>,
    tasks: usize,
    salt: usize,
    length: Duration,
) -> Vec<Round> {
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let lockers = Arc::clone(lockers);
            let stop = Arc::clone(&stop);
            tokio::spawn(async move { one_task(&lockers, &format!("p{salt}t{task}"), &stop).await })
        })
        .collect();
    tokio::time::sleep(length).await;
    stop.store(true, Ordering::SeqCst);
    let mut rounds = Vec::new();
    for handle in join_all(handles).await {
        // A task that panicked lost its rounds; the others still count.
        rounds.extend(handle.unwrap_or_default());
    }
    rounds
}

/// One task: claims its jobs' occurrences in turn until `stop`.
async fn one_task(lockers: &[Locker], name: &str, stop: &AtomicBool) -> Vec<Round> {
    let jobs: Vec<String> = (0..JOBS_PER_TASK).map(|k| format!("{name}-{k}")).collect();
    let ttl = Duration::from_secs(30);
    let mut rounds = Vec::new();
    let mut round: i64 = 0;
    while !stop.load(Ordering::SeqCst) {
        let job = &jobs[round as usize % jobs.len()];
        // Each job's occurrences one second apart, each newer than the last.
        let at_ms = (round / jobs.len() as i64 + 1) * 1000;
        round += 1;
        let target = Target::Scheduled {
            at: chrono::DateTime::from_timestamp_millis(at_ms).expect("an instant"),
            deadline_ms: i64::MAX,
        };
        let tokens: Vec<String> = lockers.iter().map(|_| new_token()).collect();
        let started = Instant::now();
        let answers = join_all(
            lockers
                .iter()
                .zip(&tokens)
                .map(|(locker, token)| claim_as_the_daemon(locker, job, &target, token, ttl)),
        )
        .await;
        let mut result = Round {
            started,
            took: Duration::ZERO,
            claims_answered: 0,
            retries: 0,
            wins: 0,
            errors: 0,
            answers: None,
        };
        let mut kinds: Vec<&str> = answers
            .iter()
            .map(|(answer, _)| answer.as_ref().map_or("gave-up", kind))
            .collect();
        kinds.sort_unstable();
        let mut won = None;
        for (index, (answer, retries)) in answers.into_iter().enumerate() {
            result.retries += retries;
            match answer {
                Some(Claim::Won(lease)) => {
                    result.claims_answered += 1;
                    result.wins += 1;
                    won = Some((index, lease));
                }
                Some(_) => result.claims_answered += 1,
                None => result.errors += 1,
            }
        }
        if won.is_none() {
            result.answers = Some(kinds.join(" "));
        }
        if let Some((index, lease)) = won {
            let now = chrono::Utc::now();
            let entry = Entry {
                occurrence: target.name().to_string(),
                node: lockers[index].node().to_string(),
                fence: lease.fence,
                outcome: "succeeded".to_string(),
                exit_code: Some(0),
                http_status: None,
                started_at: now,
                finished_at: now,
                duration_ms: Some(0),
                error: None,
                output_tail: None,
                attempt: Some(1),
                retry_at: None,
                by: None,
            };
            if lockers[index].release(&lease, &entry).await.is_err() {
                result.errors += 1;
            }
        }
        result.took = started.elapsed();
        rounds.push(result);
    }
    rounds
}

/// A claim's answer in one word.
fn kind(claim: &Claim) -> &'static str {
    match claim {
        Claim::Won(_) => "won",
        Claim::Taken { .. } => "taken",
        Claim::Busy { .. } => "busy",
        Claim::TooLate => "late",
        Claim::TooEarly { .. } => "early",
        Claim::Superseded { .. } => "superseded",
    }
}

/// Claims until an answer, retrying errors as the daemon does; `None`:
/// given up. Also returns the retries sent.
async fn claim_as_the_daemon(
    locker: &Locker,
    job: &str,
    target: &Target,
    token: &str,
    ttl: Duration,
) -> (Option<Claim>, u32) {
    let give_up = Instant::now() + GIVE_UP;
    let mut pause = RETRY_FIRST;
    let mut retries = 0;
    loop {
        match locker.claim(job, target, token, ttl).await {
            Ok(claim) => return (Some(claim), retries),
            Err(_) if Instant::now() + pause >= give_up => return (None, retries),
            Err(_) => {
                let jitter = pause.mul_f64(rand::random::<f64>() / 2.0);
                tokio::time::sleep(pause + jitter).await;
                pause = (pause * 2).min(RETRY_MAX);
                retries += 1;
            }
        }
    }
}

/// The rows and the side-by-side table of every coordinator measured.
pub fn report(report: &mut Report, results: &[ClaimResult]) {
    for r in results {
        report.info(
            crate::modes::SCENARIO,
            &format!(
                "{}: claims answered per second, {IN_FLIGHT} occurrences in flight (3 claims + 1 release each, the daemon's claim code; load generator in the bench process)",
                r.shown
            ),
            format!(
                "{:.0} claims/s ({} occurrences in {:.1} s; {} claims retried after an error, {} given up; {} occurrences nobody won{}, {} won twice); occurrence latency loaded {}, one in flight {}; masters {:.1} commands and {:.1} µs CPU per claim{}; CPU: {}",
                r.claims_per_s(),
                r.occurrences,
                r.window_s,
                r.retries,
                r.errors,
                r.no_winner,
                if r.no_winner_answers.is_empty() {
                    String::new()
                } else {
                    format!(
                        " (answers: {})",
                        monitor::describe_counts(&r.no_winner_answers)
                    )
                },
                r.two_winners,
                r.loaded.ms(),
                r.serial.ms(),
                r.commands_per_claim(),
                r.cpu_us_per_claim(Role::Master),
                if r.roles.contains(&Some(Role::Replica)) {
                    format!(" (replicas {:.1} µs)", r.cpu_us_per_claim(Role::Replica))
                } else {
                    String::new()
                },
                procfs::describe(&r.cpu)
            ),
        );
    }
    if results.is_empty() {
        return;
    }
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let mut text = format!(
        "\nClaims per second (j): the daemon's claim code driven from the bench process, 3 \
         lockers claiming each occurrence at once (1 wins and releases), {IN_FLIGHT} occurrences \
         in flight; one occurrence = 3 claims + 1 release. Everything shares this machine's \
         {cores} cores: \"sustained\" is what the whole setup did with the share of the \
         machine it got (the CPU columns); claims per CPU-second and the masters' CPU per claim \
         do not depend on that share, and the projection is the masters' cost with one core \
         per shard.\n\n\
         | coordinator | one in flight: occurrence p50 / p99 (ms) | claims/s sustained | loaded occurrence p50 / p99 (ms) | retried / given up | nobody won / won twice | master commands per claim | master CPU µs per claim | masters' CPU | generator CPU | claims per CPU-second (servers + generator) | projected claims/s, masters' CPU, a core per shard |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|\n"
    );
    for r in results {
        text.push_str(&format!(
            "| {} | {:.2} / {:.2} | {:.0} | {:.1} / {:.1} | {} / {} | {} / {} | {:.1} | {:.1} | {:.0} % | {:.0} % | {:.0} | {:.0} |\n",
            r.shown,
            r.serial.p50,
            r.serial.p99,
            r.claims_per_s(),
            r.loaded.p50,
            r.loaded.p99,
            r.retries,
            r.errors,
            r.no_winner,
            r.two_winners,
            r.commands_per_claim(),
            r.cpu_us_per_claim(Role::Master),
            r.masters_cpu_pct(),
            r.generator_cpu_pct(),
            r.claims_per_cpu_s(),
            r.projected_per_s()
        ));
    }
    report.extra.push(text);
    report.raw(
        "j_claims",
        json!(results.iter().map(ClaimResult::json).collect::<Vec<_>>()),
    );
}
