//! Scenario s, issue #12 item 6: what `splay` does to a burst. 1,000 probe
//! jobs on `*/30 * * * * *`, 3 nodes, one occurrence measured, first
//! without splay and then with `splay = "30s"`, side by side: the spread of
//! the start times from the occurrence instant, the lag of each run from its
//! own splayed instant (instant + `splay_offset(name)`), the most starts in
//! one second, and the peak of runs in progress at once (from the history
//! entries' `started_at` / `finished_at`, ms, as the daemons recorded them).
//!
//! Failure model: a fleet that cannot start panics (the scenario could not
//! run); runs that do not come within the deadline are counted as misses.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::json;

use crate::common::cluster::{sleep_until, whole_second_after};
use crate::fleet::{self, Action, Env, Fleet};
use crate::report::{Report, Stats};

const JOBS: usize = 1000;
const SPLAY_S: u64 = 30;
const LAG_P99_MS: f64 = 10.0;

/// What one burst showed.
#[derive(Default)]
struct Burst {
    /// Probe start minus the occurrence instant, ms.
    from_instant: Stats,
    /// Probe start minus the job's own splayed instant, ms.
    from_own: Stats,
    early: usize,
    ran: usize,
    duplicated: usize,
    missed: usize,
    peak_per_second: usize,
    peak_running: usize,
    histories: usize,
}

impl Burst {
    fn json(&self) -> serde_json::Value {
        json!({
            "from_instant_ms": self.from_instant.json(), "from_own_instant_ms": self.from_own.json(),
            "early": self.early, "ran": self.ran, "duplicated": self.duplicated, "missed": self.missed,
            "peak_starts_per_second": self.peak_per_second, "peak_running": self.peak_running,
            "history_entries": self.histories,
        })
    }
}

pub fn run(env: &Env, report: &mut Report) {
    let scenario = "s splay";
    let plain = burst(env, Duration::ZERO);
    let splayed = burst(env, Duration::from_secs(SPLAY_S));
    let describe = |b: &Burst| {
        format!(
            "starts {:.0} ms … {:.0} ms after the instant; most starts in one second {}; peak runs in progress {}",
            b.from_instant.min, b.from_instant.max, b.peak_per_second, b.peak_running
        )
    };
    report.info(
        scenario,
        "1,000 jobs on one instant, no splay: spread, busiest second, peak concurrent runs",
        describe(&plain),
    );
    let spread_s = (splayed.from_instant.max - splayed.from_instant.min) / 1e3;
    report.check(
        scenario,
        "issue #12 item 6: the same with `splay = \"30s\"`: start-time spread",
        "spread over the 30 s (≥ 29 s, all within 30 s + lag)",
        describe(&splayed),
        spread_s >= (SPLAY_S - 1) as f64
            && splayed.from_instant.max < SPLAY_S as f64 * 1e3 + 1e3
            && splayed.ran > 0,
    );
    report.check(
        scenario,
        "splay 30 s: peak runs in progress, against no splay",
        "≤ 1/10 of no splay's",
        format!(
            "{} against {} ({} and {} history entries)",
            splayed.peak_running, plain.peak_running, splayed.histories, plain.histories
        ),
        splayed.histories > 0 && splayed.peak_running * 10 <= plain.peak_running,
    );
    report.check(
        scenario,
        "splay 30 s: lag of each run from its own splayed instant, p50 / p99 / max",
        &format!("p99 ≤ {LAG_P99_MS} ms"),
        format!(
            "{:.2} / {:.2} / {:.2} ms (no splay, from the instant: {:.1} / {:.1} / {:.1} ms)",
            splayed.from_own.p50,
            splayed.from_own.p99,
            splayed.from_own.max,
            plain.from_own.p50,
            plain.from_own.p99,
            plain.from_own.max
        ),
        splayed.from_own.count > 0 && splayed.from_own.p99 <= LAG_P99_MS,
    );
    report.check(
        scenario,
        "splay 30 s: runs started before their own splayed instant; duplicates / misses (both bursts)",
        "0; 0 / 0",
        format!(
            "{}; {} / {} with splay, {} / {} without",
            splayed.early, splayed.duplicated, splayed.missed, plain.duplicated, plain.missed
        ),
        splayed.early == 0
            && splayed.duplicated + splayed.missed + plain.duplicated + plain.missed == 0,
    );
    report.raw(
        "s_splay",
        json!({"jobs": JOBS, "splay_s": SPLAY_S, "no_splay": plain.json(), "splay": splayed.json()}),
    );
}

/// One occurrence of 1,000 jobs with `splay` (zero: none).
fn burst(env: &Env, splay: Duration) -> Burst {
    let schedule = "*/30 * * * * *";
    let jobs = fleet::uniform(JOBS, schedule, &Action::Probe);
    let mut text = fleet::config_text(env, &jobs);
    if !splay.is_zero() {
        text = text.replace(
            &format!("schedule = \"{schedule}\"\n"),
            &format!(
                "schedule = \"{schedule}\"\nsplay = \"{}s\"\n",
                splay.as_secs()
            ),
        );
    }
    let mut fleet = Fleet::new(&text);
    fleet.start_nodes(3);
    let at = whole_second_after(4, 30);
    let names: Vec<String> = (0..JOBS).map(|i| format!("j{i}")).collect();
    sleep_until(at + TimeDelta::from_std(splay).unwrap_or_default());
    let to = at + TimeDelta::seconds(1);
    fleet.wait_probe_runs(at, to, JOBS, Duration::from_secs(30));
    let runs: Vec<_> = fleet
        .probe_runs()
        .into_iter()
        .filter(|run| run.at == Some(at))
        .collect();
    let at_ns = fleet::at_ns(at);
    let mut first: BTreeMap<&str, i128> = BTreeMap::new();
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for run in &runs {
        let start = first.entry(run.job.as_str()).or_insert(run.start_ns);
        *start = (*start).min(run.start_ns);
        *counts.entry(run.job.as_str()).or_default() += 1;
    }
    let from_instant: Vec<f64> = first.values().map(|ns| (ns - at_ns) as f64 / 1e6).collect();
    let from_own: Vec<f64> = first
        .iter()
        .map(|(job, ns)| {
            let offset = solocron::config::splay_offset(job, splay);
            (ns - at_ns - offset.as_nanos() as i128) as f64 / 1e6
        })
        .collect();
    let mut per_second: BTreeMap<i128, usize> = BTreeMap::new();
    for ns in first.values() {
        *per_second.entry(ns.div_euclid(1_000_000_000)).or_default() += 1;
    }
    let (peak_running, histories) = peak_running(&fleet, &names, at);
    fleet.stop_nodes();
    Burst {
        from_instant: Stats::of(&from_instant),
        early: from_own.iter().filter(|lag| **lag < 0.0).count(),
        from_own: Stats::of(&from_own),
        ran: first.len(),
        duplicated: counts.values().filter(|n| **n > 1).count(),
        missed: names
            .iter()
            .filter(|name| !first.contains_key(name.as_str()))
            .count(),
        peak_per_second: per_second.values().copied().max().unwrap_or(0),
        peak_running,
        histories,
    }
}

/// The most runs of occurrence `at` in progress at once, from the history
/// entries (each run `[started_at, max(finished_at, started_at + 1 ms))`),
/// and how many entries were found. Waits (up to 20 s) for every job's entry.
fn peak_running(fleet: &Fleet, names: &[String], at: DateTime<Utc>) -> (usize, usize) {
    let occurrence = fleet::rfc3339(at);
    let mut conn = fleet.redis.conn();
    let mut intervals: BTreeMap<&str, (i64, i64)> = BTreeMap::new();
    fleet::wait_for(Duration::from_secs(20), || {
        for name in names {
            if intervals.contains_key(name.as_str()) {
                continue;
            }
            let entries = crate::common::history_via(&mut conn, name);
            let found = entries.iter().find_map(|entry| {
                let ms = |key: &str| entry.get(key).and_then(|v| v.parse::<i64>().ok());
                (entry.get("occurrence") == Some(&occurrence))
                    .then(|| Some((ms("started_at")?, ms("finished_at")?)))
                    .flatten()
            });
            if let Some(interval) = found {
                intervals.insert(name.as_str(), interval);
            }
        }
        intervals.len() == names.len()
    });
    let mut events: Vec<(i64, i32)> = Vec::with_capacity(intervals.len() * 2);
    for (start, end) in intervals.values() {
        events.push((*start, 1));
        events.push(((*end).max(start + 1), -1));
    }
    // Ends before starts at the same millisecond: the intervals are half-open.
    events.sort_unstable();
    let (mut now, mut peak) = (0i32, 0i32);
    for (_, change) in events {
        now += change;
        peak = peak.max(now);
    }
    (usize::try_from(peak).unwrap_or(0), intervals.len())
}
