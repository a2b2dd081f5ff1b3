//! Scenario d: sustained cluster throughput. N every-second jobs on 3 nodes
//! and one Redis for a fixed window, stepping N up until a step breaks
//! (a miss, a duplicate, or a start more than 1 s late). Every (job,
//! occurrence) of the window is checked in the jobs' history streams;
//! per-process CPU (redis, each node and its reaped children, the sink)
//! says what saturates.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::json;

use crate::common::cluster::{sleep_until, whole_second_after};
use crate::fleet::{self, Action, Env, Fleet, wait_for};
use crate::procfs::{self, CpuWindow};
use crate::report::{Report, Stats};
use crate::sink::Sink;

/// One step's figures.
struct Step {
    jobs: usize,
    window_s: i64,
    runs: usize,
    expected: usize,
    /// Occurrences run more than once (distinct fences).
    duplicated: usize,
    /// History entries that repeat a run already recorded (same fence).
    double_records: usize,
    missed: usize,
    other_outcomes: BTreeMap<String, usize>,
    lag: Stats,
    cpu: Vec<procfs::CpuUse>,
    sink_hits: Option<usize>,
    /// A few duplicated (job, occurrence) with their history entries.
    duplicate_examples: Vec<serde_json::Value>,
}

impl Step {
    fn broken(&self) -> Option<String> {
        let mut why = Vec::new();
        if self.missed > 0 {
            why.push(format!("{} missed", self.missed));
        }
        if self.duplicated > 0 {
            why.push(format!("{} duplicated", self.duplicated));
        }
        if self.lag.max > 1000.0 {
            why.push(format!("lag max {:.0} ms", self.lag.max));
        }
        (!why.is_empty()).then(|| why.join(", "))
    }

    fn rate(&self) -> f64 {
        self.runs as f64 / self.window_s as f64
    }

    fn json(&self) -> serde_json::Value {
        json!({
            "jobs": self.jobs, "window_s": self.window_s, "runs": self.runs, "expected": self.expected,
            "runs_per_s": self.rate(), "duplicated": self.duplicated, "missed": self.missed, "double_recorded_history_entries": self.double_records,
            "other_outcomes": self.other_outcomes, "start_lag_ms": self.lag.json(),
            "cpu": procfs::json(&self.cpu), "sink_hits": self.sink_hits,
            "duplicate_examples": self.duplicate_examples,
        })
    }
}

pub fn run(env: &Env, report: &mut Report) {
    let argv_steps: &[usize] = if env.quick {
        &[1000, 2000]
    } else {
        &[1000, 1500, 2000, 3000]
    };
    let http_steps: &[usize] = if env.quick {
        &[3000, 6000]
    } else {
        &[3000, 4000, 6000, 9000]
    };
    series(env, report, "argv `/bin/true`", argv_steps, 1000.0, None);
    let sink = Sink::start();
    series(env, report, "HTTP hook", http_steps, 3000.0, Some(&sink));
}

fn series(
    env: &Env,
    report: &mut Report,
    what: &str,
    steps: &[usize],
    target: f64,
    sink: Option<&Sink>,
) {
    let scenario = "d throughput";
    let mut results = Vec::new();
    for &jobs in steps {
        let step = one_step(env, jobs, sink);
        let broken = step.broken();
        report.info(
            scenario,
            &format!("{what}, {jobs} every-second jobs, 3 nodes"),
            format!(
                "{:.0} runs/s ({} of {} occurrences); dup {}, miss {}{}{}; start lag p50 {:.0} / p99 {:.0} / max {:.0} ms; CPU: {}",
                step.rate(),
                step.runs,
                step.expected,
                step.duplicated,
                step.missed,
                if step.double_records > 0 {
                    format!(", history entries recorded twice for one run {}", step.double_records)
                } else {
                    String::new()
                },
                if step.other_outcomes.is_empty() { String::new() } else { format!(", other outcomes {:?}", step.other_outcomes) },
                step.lag.p50,
                step.lag.p99,
                step.lag.max,
                procfs::describe(&step.cpu)
            ),
        );
        results.push(step);
        if broken.is_some() {
            break;
        }
    }
    let best = results
        .iter()
        .filter(|s| s.broken().is_none())
        .map(|s| s.rate())
        .fold(0.0, f64::max);
    let saturation = results
        .iter()
        .find_map(|s| {
            s.broken()
                .map(|why| format!("breaks at {} jobs/s ({why})", s.jobs))
        })
        .unwrap_or_else(|| {
            format!(
                "no break up to {} jobs/s",
                steps.last().copied().unwrap_or(0)
            )
        });
    report.check(
        scenario,
        &format!("sustained {what} runs/s, zero duplicates and misses"),
        &format!("≥ {target:.0}/s"),
        format!("{best:.0}/s clean; {saturation}"),
        best >= target * 0.98,
    );
    report.raw.insert(
        format!("d_throughput {what}"),
        json!(results.iter().map(Step::json).collect::<Vec<_>>()),
    );
}

fn one_step(env: &Env, count: usize, sink: Option<&Sink>) -> Step {
    let action = match sink {
        Some(sink) => Action::Http(sink.url()),
        None => Action::True,
    };
    let jobs = fleet::uniform(count, "* * * * * *", &action);
    let names: Vec<String> = jobs.iter().map(|(n, _, _)| n.clone()).collect();
    let mut fleet = Fleet::new(&fleet::config_text(env, &jobs));
    fleet.start_nodes(3);
    let window = env.secs(5, 12) as i64;
    let from = whole_second_after(3, 1);
    let to = from + TimeDelta::seconds(window);
    let mut procs = fleet.procs();
    if let Some(sink) = sink {
        let _ = sink.dump();
        procs.push(("sink".to_string(), sink.pid()));
    }
    sleep_until(from);
    let cpu_window = CpuWindow::start(&procs);
    sleep_until(to);
    let cpu = cpu_window.finish();
    let expected = count * window as usize;
    let mut conn = fleet.redis.conn();
    let mut entries = Vec::new();
    wait_for(Duration::from_secs(15), || {
        entries = read_history(&mut conn, &names, from, to);
        entries.len() >= expected
    });
    fleet.stop_nodes();
    let sink_hits = sink.map(|s| {
        s.dump()
            .iter()
            .filter(|h| fleet::parse_at(&h.occurrence).is_some_and(|at| at >= from && at < to))
            .count()
    });
    let mut per_occ: BTreeMap<(String, i64), std::collections::BTreeSet<String>> = BTreeMap::new();
    let mut double_records = 0;
    let mut recorded: BTreeMap<(String, i64), usize> = BTreeMap::new();
    let mut other_outcomes = BTreeMap::new();
    let mut lags = Vec::new();
    for entry in &entries {
        let (job, at, outcome, started_ms) =
            (&entry.job, &entry.at, &entry.outcome, &entry.started_ms);
        if outcome == "skipped" || outcome == "missed" {
            *other_outcomes.entry(outcome.clone()).or_insert(0) += 1;
            continue;
        }
        if outcome != "succeeded" {
            *other_outcomes.entry(outcome.clone()).or_insert(0) += 1;
        }
        *recorded.entry((job.clone(), at.timestamp())).or_insert(0) += 1;
        if !per_occ
            .entry((job.clone(), at.timestamp()))
            .or_default()
            .insert(entry.fence.clone())
        {
            double_records += 1;
            continue;
        }
        lags.push((started_ms - at.timestamp_millis()) as f64);
    }
    let duplicate_examples = recorded
        .iter()
        .filter(|(_, n)| **n > 1)
        .take(5)
        .map(|((job, at), _)| {
            json!(entries
                .iter()
                .filter(|e| &e.job == job && e.at.timestamp() == *at)
                .map(|e| json!({"job": e.job, "occurrence": fleet::rfc3339(e.at), "node": e.node, "fence": e.fence, "outcome": e.outcome, "started_at_ms": e.started_ms, "stream_id": e.id}))
                .collect::<Vec<_>>())
        })
        .collect();
    Step {
        duplicate_examples,
        jobs: count,
        window_s: window,
        runs: per_occ.len(),
        expected,
        duplicated: per_occ.values().filter(|fences| fences.len() > 1).count(),
        double_records,
        missed: expected.saturating_sub(per_occ.len()),
        other_outcomes,
        lag: Stats::of(&lags),
        cpu,
        sink_hits,
    }
}

/// One history entry.
struct Entry {
    job: String,
    at: DateTime<Utc>,
    outcome: String,
    started_ms: i64,
    node: String,
    fence: String,
    id: String,
}

/// Every history entry of `jobs` whose occurrence is in `[from, to)`.
fn read_history(
    conn: &mut redis::Connection,
    jobs: &[String],
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Vec<Entry> {
    let mut out = Vec::new();
    for chunk in jobs.chunks(500) {
        let mut pipe = redis::pipe();
        for job in chunk {
            pipe.cmd("XRANGE")
                .arg(format!("{{solocron:{job}}}:history"))
                .arg("-")
                .arg("+");
        }
        let replies: Vec<redis::streams::StreamRangeReply> = match pipe.query(conn) {
            Ok(replies) => replies,
            Err(_) => return out,
        };
        for (job, reply) in chunk.iter().zip(replies) {
            for id in reply.ids {
                let field = |key: &str| {
                    id.map
                        .get(key)
                        .and_then(|v| redis::from_redis_value_ref::<String>(v).ok())
                        .unwrap_or_default()
                };
                let Some(at) = fleet::parse_at(&field("occurrence")) else {
                    continue;
                };
                if at < from || at >= to {
                    continue;
                }
                out.push(Entry {
                    job: job.clone(),
                    at,
                    outcome: field("outcome"),
                    started_ms: field("started_at").parse().unwrap_or(0),
                    node: field("node"),
                    fence: field("fence"),
                    id: id.id.clone(),
                });
            }
        }
    }
    out
}
