//! What a window of cron traffic costs one `redis-server`, per occurrence:
//! the server's own CPU (`INFO cpu` `used_cpu_sys` + `used_cpu_user`, its
//! idle cost over the same time subtracted), the time `INFO commandstats`
//! says its commands took, the commands it executed (scripts' inner ones
//! included) and the client round trips (`MONITOR`). Used by scenario r
//! (solocron beside its peers) and scenario n (fleet size).
//!
//! `MONITOR` costs the server CPU itself (every command is formatted and
//! sent to the monitoring client), so a measurement is two windows of the
//! same traffic, one after the other: first the CPU window, without
//! `MONITOR`, after `CONFIG RESETSTAT`; then the `MONITOR` window for the
//! round trips and for which commands ran inside scripts. `commandstats`
//! counts a script's inner commands twice (in the script's own `usec` and
//! in their own entries), so the time reported is that of the commands the
//! clients sent (top level), a script's inner commands inside it: each
//! command name's `usec` times the share of its calls that `MONITOR` saw at
//! the top level. Windows start and end at half seconds, so every job's
//! every-second occurrence falls once into each whole second of them.
//!
//! Failure model: set-up and Redis errors panic, which the bench shows as
//! "could not run" for the scenario; a missing `INFO` field reads as 0.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::{Value, json};

use crate::common::cluster::sleep_until;
use crate::monitor::{self, CmdStat, MonLine, Monitor};

/// The longest gap between two commands of one pipeline here (they run
/// back to back, a few µs apart).
const PIPELINE_GAP_S: f64 = 2e-3;

/// The longest gap between two jobs' peeks of one batch: they run back to
/// back from one socket read, a few µs apart; separate requests of the
/// same client are at least a loopback round trip apart.
const BATCH_GAP_S: f64 = 100e-6;

/// Whether `line` is a command solocron sends in one pipeline with the
/// same client's `before`: a peek's `PTTL` after its `HMGET`, and the
/// controls read `HGET pauses, HGET drains, LRANGE requests, TIME`
/// (`src/lock/server.rs` `peek`, `src/control/mod.rs` `snapshot`), and
/// the backstop's batched peeks, one job's `HMGET` after another's `PTTL`
/// within [`BATCH_GAP_S`] (`peek_many`, `src/daemon/sweep.rs`). Only
/// these: a client library that happens to write several requests at once
/// still counts one round trip per request, as before.
fn rides_with(before: &MonLine, line: &MonLine) -> bool {
    // A script's first key comes after its SHA and key count.
    let key = |l: &MonLine| {
        let at = if l.cmd == "EVALSHA" { 2 } else { 0 };
        l.args.get(at).cloned().unwrap_or_default()
    };
    let pair = match (before.cmd.as_str(), line.cmd.as_str()) {
        ("HMGET", "PTTL") => key(before).ends_with(":state") && key(line).ends_with(":lock"),
        ("PTTL", "HMGET") => {
            return key(before).ends_with(":lock")
                && key(line).ends_with(":state")
                && line.ts - before.ts < BATCH_GAP_S;
        }
        ("HGET", "HGET") => key(before).ends_with(":pauses") && key(line).ends_with(":drains"),
        ("HGET", "LRANGE") => key(before).ends_with(":drains") && key(line).ends_with(":requests"),
        ("LRANGE", "TIME") => key(before).ends_with(":requests"),
        // The declined occurrences after the requests' `TIME`
        // (`src/control/overflow.rs`), then the beat.
        ("TIME", "LRANGE") => key(line).ends_with(":overflow"),
        ("LRANGE", "EVALSHA") => {
            key(before).ends_with(":overflow") && key(line).ends_with(":alive")
        }
        // The node's beat (`src/registry/alive.rs`) at the end of the
        // controls read, and the drains' version after it.
        ("TIME" | "HGET", "EVALSHA") => key(line).ends_with(":alive"),
        ("EVALSHA", "HGET") => key(before).ends_with(":alive") && key(line).ends_with(":drains"),
        _ => false,
    };
    pair && line.ts - before.ts < PIPELINE_GAP_S
}

/// The figures of one measured stretch of traffic.
#[derive(Debug, Clone, Default)]
pub struct Cost {
    /// Occurrences due in the CPU window (jobs × seconds).
    pub occurrences: usize,
    pub window_s: f64,
    /// `used_cpu_sys + used_cpu_user` over the CPU window, µs.
    pub cpu_raw_us: f64,
    /// The same server's idle CPU, µs per second, measured before the nodes.
    pub idle_us_per_s: f64,
    /// commandstats over the CPU window (the bench's own left out).
    pub commandstats: BTreeMap<String, CmdStat>,
    /// Top-level share per command name (lower case), from `MONITOR`.
    pub top_share: BTreeMap<String, f64>,
    /// Occurrences due in the `MONITOR` window.
    pub monitor_occurrences: usize,
    /// Top-level commands seen in the `MONITOR` window, per name.
    pub top_level: BTreeMap<String, u64>,
    /// Every `MONITOR` line of its window (for callers' own breakdowns).
    pub lines: Vec<MonLine>,
    /// Top-level commands of the `MONITOR` window that rode in one of
    /// solocron's pipelines with the same client's command before them
    /// ([`rides_with`]): sent, but no round trip of their own.
    pub pipelined: u64,
    /// Round trips of the `MONITOR` window on a job's keys (the
    /// occurrences' own traffic) and on the fleet's keys (liveness,
    /// controls, registry: paid per node and second).
    pub job_round_trips: u64,
    pub fleet_round_trips: u64,
    /// Commands of the `MONITOR` window on a job's keys, scripts' inner
    /// ones included.
    pub job_commands: u64,
    /// Length of the `MONITOR` window, s.
    pub monitor_s: f64,
}

impl Cost {
    /// Redis CPU µs per occurrence, its idle cost subtracted.
    pub fn cpu_us(&self) -> f64 {
        let net = self.cpu_raw_us - self.idle_us_per_s * self.window_s;
        net.max(0.0) / self.occurrences.max(1) as f64
    }

    /// Redis CPU µs per occurrence, idle cost included.
    pub fn cpu_raw_per_occ(&self) -> f64 {
        self.cpu_raw_us / self.occurrences.max(1) as f64
    }

    /// µs of the top-level commands per occurrence (commandstats).
    pub fn commandstats_us(&self) -> f64 {
        let total: f64 = self
            .commandstats
            .iter()
            .map(|(name, stat)| stat.usec as f64 * self.share(name))
            .sum();
        total / self.occurrences.max(1) as f64
    }

    /// µs of every commandstats entry summed (inner commands counted twice).
    pub fn commandstats_all_us(&self) -> f64 {
        self.commandstats.values().map(|s| s.usec).sum::<u64>() as f64
            / self.occurrences.max(1) as f64
    }

    /// Commands executed per occurrence, scripts' inner commands included.
    pub fn commands(&self) -> f64 {
        self.commandstats.values().map(|s| s.calls).sum::<u64>() as f64
            / self.occurrences.max(1) as f64
    }

    /// Client round trips per occurrence: the commands the clients sent,
    /// i.e. the CPU window's calls of each command times the share
    /// `MONITOR` saw at the top level, less the commands that rode in a
    /// pipeline with the one before ([`Cost::pipelined`], per occurrence of
    /// the `MONITOR` window).
    pub fn round_trips(&self) -> f64 {
        let sent: f64 = self
            .commandstats
            .iter()
            .map(|(name, stat)| stat.calls as f64 * self.share(name))
            .sum();
        sent / self.occurrences.max(1) as f64 - self.pipelined_per_occ()
    }

    /// The same from the `MONITOR` window alone.
    pub fn round_trips_monitor(&self) -> f64 {
        self.top_level.values().sum::<u64>() as f64 / self.monitor_occurrences.max(1) as f64
            - self.pipelined_per_occ()
    }

    /// Round trips on a job's keys per occurrence (`MONITOR` window): what
    /// the occurrences themselves cost, without any node's background.
    pub fn job_round_trips(&self) -> f64 {
        self.job_round_trips as f64 / self.monitor_occurrences.max(1) as f64
    }

    /// Commands on a job's keys per occurrence (`MONITOR` window, inner
    /// commands of scripts included).
    pub fn job_commands(&self) -> f64 {
        self.job_commands as f64 / self.monitor_occurrences.max(1) as f64
    }

    /// Round trips on the fleet's keys per second (`MONITOR` window).
    pub fn fleet_round_trips_per_s(&self) -> f64 {
        self.fleet_round_trips as f64 / self.monitor_s.max(1e-9)
    }

    fn pipelined_per_occ(&self) -> f64 {
        self.pipelined as f64 / self.monitor_occurrences.max(1) as f64
    }

    fn share(&self, name: &str) -> f64 {
        let base = name.split('|').next().unwrap_or(name);
        self.top_share.get(base).copied().unwrap_or(1.0)
    }

    pub fn json(&self) -> Value {
        json!({
            "occurrences": self.occurrences, "window_s": self.window_s,
            "redis_cpu_us_per_occurrence": self.cpu_us(),
            "redis_cpu_us_per_occurrence_idle_included": self.cpu_raw_per_occ(),
            "redis_idle_cpu_us_per_s": self.idle_us_per_s,
            "commandstats_top_level_us_per_occurrence": self.commandstats_us(),
            "commandstats_all_entries_us_per_occurrence": self.commandstats_all_us(),
            "commands_per_occurrence": self.commands(),
            "round_trips_per_occurrence": self.round_trips(),
            "round_trips_per_occurrence_monitor_window": self.round_trips_monitor(),
            "job_key_round_trips_per_occurrence": self.job_round_trips(),
            "job_key_commands_per_occurrence": self.job_commands(),
            "fleet_key_round_trips_per_s": self.fleet_round_trips_per_s(),
            "monitor_occurrences": self.monitor_occurrences,
            "top_level_commands": self.top_level,
            "top_level_per_occurrence_by_kind": kinds_per_occurrence(self),
            "commandstats": self.commandstats.iter()
                .map(|(k, v)| (k.clone(), json!({"calls": v.calls, "usec": v.usec})))
                .collect::<serde_json::Map<_, _>>(),
        })
    }
}

/// `used_cpu_sys + used_cpu_user` of the server, µs.
pub fn used_cpu_us(conn: &mut redis::Connection) -> f64 {
    let info: String = redis::cmd("INFO").arg("cpu").query(conn).expect("INFO cpu");
    let field = |key: &str| -> f64 {
        info.lines()
            .find_map(|line| line.strip_prefix(key))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (field("used_cpu_sys:") + field("used_cpu_user:")) * 1e6
}

/// The server's CPU with no client but `conn`, µs per second, over `length`.
pub fn idle_rate(conn: &mut redis::Connection, length: Duration) -> f64 {
    let before = used_cpu_us(conn);
    let started = std::time::Instant::now();
    std::thread::sleep(length);
    let after = used_cpu_us(conn);
    (after - before).max(0.0) / started.elapsed().as_secs_f64()
}

/// Waits until the server's CPU a second has settled after nodes started
/// (their start-up reads and registrations done): at least 3 one-second
/// samples, the last within 25 % of the lowest so far, at most 20 s.
/// Returns the samples (µs a second), for the log.
pub fn settle(conn: &mut redis::Connection) -> Vec<f64> {
    let mut samples: Vec<f64> = Vec::new();
    while samples.len() < 20 {
        samples.push(idle_rate(conn, Duration::from_secs(1)));
        let lowest = samples.iter().copied().fold(f64::INFINITY, f64::min);
        if samples.len() >= 3 && samples.last().is_some_and(|last| *last <= lowest * 1.25) {
            break;
        }
    }
    samples
}

/// Measures the CPU window `[from − ½ s, from + cpu_s − ½ s)`, then the
/// `MONITOR` window of `monitor_s` seconds, which starts a second after
/// the session did (so that it sees every line of its window: the traffic
/// of an occurrence spreads over the second after it, a release later). `jobs`: how many
/// every-second jobs the traffic is (occurrences = jobs × seconds).
pub fn measure(
    port: u16,
    conn: &mut redis::Connection,
    idle_us_per_s: f64,
    jobs: usize,
    from: DateTime<Utc>,
    cpu_s: i64,
    monitor_s: i64,
) -> Cost {
    let half = TimeDelta::milliseconds(500);
    let cpu_from = from - half;
    let cpu_to = cpu_from + TimeDelta::seconds(cpu_s);
    let monitor_from = cpu_to + TimeDelta::seconds(1);
    let monitor_to = monitor_from + TimeDelta::seconds(monitor_s);
    sleep_until(cpu_from);
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(conn)
        .expect("CONFIG RESETSTAT");
    let started = std::time::Instant::now();
    let cpu0 = used_cpu_us(conn);
    sleep_until(cpu_to);
    let cpu1 = used_cpu_us(conn);
    let window_s = started.elapsed().as_secs_f64();
    let commandstats = monitor::delta_usec(&BTreeMap::new(), &monitor::commandstats_usec(conn));
    let session = Monitor::start(port);
    sleep_until(monitor_to);
    let lines = session.stop();
    let (lo, hi) = (secs(monitor_from), secs(monitor_to));
    let mut top_level: BTreeMap<String, u64> = BTreeMap::new();
    let mut inner: BTreeMap<String, u64> = BTreeMap::new();
    let window: Vec<MonLine> = lines
        .into_iter()
        .filter(|l| l.ts >= lo && l.ts < hi)
        .filter(|l| !matches!(l.cmd.as_str(), "INFO" | "MONITOR" | "CONFIG"))
        .collect();
    let mut pipelined = 0u64;
    let (mut job_round_trips, mut fleet_round_trips) = (0u64, 0u64);
    let mut last: BTreeMap<&str, &MonLine> = BTreeMap::new();
    let job_commands = window
        .iter()
        .filter(|line| line.job_key().is_some())
        .count() as u64;
    for line in &window {
        let name = line.cmd.to_ascii_lowercase();
        if line.is_lua() {
            *inner.entry(name).or_default() += 1;
        } else {
            *top_level.entry(name).or_default() += 1;
            let previous = last.insert(line.client.as_str(), line);
            if previous.is_some_and(|before| rides_with(before, line)) {
                pipelined += 1;
            } else if line.job_key().is_some() {
                job_round_trips += 1;
            } else {
                fleet_round_trips += 1;
            }
        }
    }
    drop(last);
    let mut top_share = BTreeMap::new();
    for name in top_level.keys().chain(inner.keys()) {
        let top = top_level.get(name).copied().unwrap_or(0) as f64;
        let all = top + inner.get(name).copied().unwrap_or(0) as f64;
        top_share.insert(name.clone(), if all > 0.0 { top / all } else { 1.0 });
    }
    Cost {
        occurrences: jobs * cpu_s as usize,
        window_s,
        cpu_raw_us: (cpu1 - cpu0).max(0.0),
        idle_us_per_s,
        commandstats,
        top_share,
        monitor_occurrences: jobs * monitor_s as usize,
        top_level,
        pipelined,
        lines: window,
        job_round_trips,
        fleet_round_trips,
        job_commands,
        monitor_s: (hi - lo).max(0.0),
    }
}

/// What a top-level command of solocron's is, from its name, keys and
/// first argument (`MONITOR` shows up to 8 arguments): the job scripts by
/// their key count and first argument, the registry and controls by key.
pub fn kind(line: &MonLine) -> String {
    let arg = |n: usize| line.args.get(n).map(String::as_str).unwrap_or("");
    if line.cmd != "EVALSHA" && line.cmd != "EVAL" {
        let key = line
            .args
            .first()
            .map(|k| k.split_once('}').map_or(k.as_str(), |(_, rest)| rest))
            .unwrap_or("");
        let key = if key.starts_with(":node:") {
            ":node:*"
        } else {
            key
        };
        return format!("{} {key}", line.cmd).trim().to_string();
    }
    let keys: usize = arg(1).parse().unwrap_or(0);
    let first_key = arg(2);
    let first_arg = arg(2 + keys);
    let job = line.job_key().is_some();
    if !job {
        let what = first_key
            .split_once('}')
            .map_or(first_key, |(_, rest)| rest.trim_start_matches(':'));
        return format!("script on {what}");
    }
    match (keys, first_arg) {
        (3, "scheduled") => "claim (scheduled)".to_string(),
        (3, "retry") => "claim (retry)".to_string(),
        (3, "manual") => "claim (manual)".to_string(),
        (3, a) if a.contains(' ') => "release".to_string(),
        (1, _) => "renew".to_string(),
        (3, a) if a.chars().all(|c| c.is_ascii_digit()) && !a.is_empty() => {
            "missed record".to_string()
        }
        (3, _) => "abandon check".to_string(),
        (2, a) if a.contains(' ') => "undo".to_string(),
        (2, _) => "gap or paused record".to_string(),
        _ => "other job script".to_string(),
    }
}

/// Top-level commands of the `MONITOR` window per occurrence, by [`kind`].
pub fn kinds_per_occurrence(cost: &Cost) -> BTreeMap<String, f64> {
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for line in cost.lines.iter().filter(|l| !l.is_lua()) {
        *counts.entry(kind(line)).or_default() += 1;
    }
    counts
        .into_iter()
        .map(|(k, n)| (k, n as f64 / cost.monitor_occurrences.max(1) as f64))
        .collect()
}

/// `claim (scheduled) 3.00, release 1.00, …` (largest first).
pub fn describe_kinds(kinds: &BTreeMap<String, f64>) -> String {
    let mut list: Vec<(&String, &f64)> = kinds.iter().collect();
    list.sort_by(|a, b| b.1.total_cmp(a.1).then(a.0.cmp(b.0)));
    list.iter()
        .map(|(k, n)| format!("{k} {n:.2}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn secs(at: DateTime<Utc>) -> f64 {
    at.timestamp_millis() as f64 / 1e3
}

/// The 1-minute load average (`/proc/loadavg`), NaN if unreadable.
pub fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}
