//! `[groups.NAME]` (guarantee 11): limits a group's jobs share fleet-wide,
//! with three real daemons, audited from the jobs' own START / END lines
//! and the history.
//!
//! - `pairs`: 8 jobs due together every 6 s, each working 0.6 s,
//!   `max_running = 2`, `when_full = "wait"`: never more than 2 at once,
//!   and every occurrence runs (they queue for a slot), once.
//! - `one`: 3 jobs due together, 2 s each, `max_running = 1`, `when_full =
//!   "skip"`: one runs, the two others are recorded `throttled` at once,
//!   naming the group and the run that held it.
//! - `rate`: `max_starts = "2/4s"`, two jobs due at :x3 and two at :x4
//!   (every 10 s). A fixed 4 s window ([0,4), [4,8)) puts the two pairs in
//!   different windows and lets all four start within about a second;
//!   the sliding log throttles the second pair every time, and no 4 s
//!   window holds more than 2 starts.
//! - `fair` (one Redis only): `max_running = 1`, `when_full = "wait"`: a
//!   3 s run holds the slot; `old` (due 1 s after it) and `new` (due 2 s
//!   after it) wait; when the slot frees, `old` starts first, every
//!   period.
//!
//! On one Redis (with one node's clock 1.5 s ahead: the limits are
//! counted by Redis's clock), on a Redis Cluster (the group's keys live on
//! another shard than the jobs') and on Redlock over 3 masters.
//!
//! What breaks it: a take that does not count the runs in progress (more
//! than 2 at once), a slot never given back (`pairs` stops running), a
//! waiter never admitted or admitted twice, a fixed window, a queue in
//! arrival order instead of occurrence order.

use crate::common;

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use common::audit::{Run, Window, history_exactly_once};
use common::cluster::{JobSpec, rfc3339, whole_second_after};
use common::fleet::Fleet;
use common::ha::{Masters, RedisCluster};
use common::{RedisServer, wait_until};

const GROUPS: &str = r#"
[groups.pairs]
max_running = 2
when_full = "wait"

[groups.one]
max_running = 1
when_full = "skip"

[groups.rate]
max_starts = "2/4s"

[groups.fair]
max_running = 1
when_full = "wait"
"#;

fn in_group(spec: JobSpec, group: &str) -> JobSpec {
    spec.with(&format!("group = \"{group}\""))
        .with("lock_ttl = \"3s\"")
}

fn pairs() -> Vec<JobSpec> {
    (0..8)
        .map(|i| {
            in_group(
                JobSpec::new(&format!("p{i}"), "*/6 * * * * *", 0.6),
                "pairs",
            )
            .with("starting_deadline = \"5s\"")
        })
        .collect()
}

fn ones() -> Vec<JobSpec> {
    (0..3)
        .map(|i| in_group(JobSpec::new(&format!("o{i}"), "*/6 * * * * *", 2.0), "one"))
        .collect()
}

fn rated() -> Vec<JobSpec> {
    let early = "3,13,23,33,43,53 * * * * *";
    let late = "4,14,24,34,44,54 * * * * *";
    vec![
        in_group(JobSpec::new("r-early-a", early, 0.1), "rate"),
        in_group(JobSpec::new("r-early-b", early, 0.1), "rate"),
        in_group(JobSpec::new("r-late-a", late, 0.1), "rate"),
        in_group(JobSpec::new("r-late-b", late, 0.1), "rate"),
    ]
}

fn fair() -> Vec<JobSpec> {
    let deadline = "starting_deadline = \"8s\"";
    vec![
        in_group(
            JobSpec::new("f-hold", "0,12,24,36,48 * * * * *", 3.0),
            "fair",
        )
        .with(deadline),
        in_group(
            JobSpec::new("f-old", "1,13,25,37,49 * * * * *", 0.3),
            "fair",
        )
        .with(deadline),
        in_group(
            JobSpec::new("f-new", "2,14,26,38,50 * * * * *", 0.3),
            "fair",
        )
        .with(deadline),
    ]
}

/// The most runs of `jobs` in progress at once (START to END).
fn peak(runs: &[Run], jobs: &[JobSpec]) -> (usize, String) {
    let mut edges: Vec<(i128, i32, String)> = Vec::new();
    for run in runs
        .iter()
        .filter(|run| jobs.iter().any(|job| job.name == run.job))
    {
        let what = format!("{} {} on {}", run.job, run.occurrence, run.node);
        edges.push((run.start_ns, 1, what.clone()));
        edges.push((run.end_ns.unwrap_or(i128::MAX), -1, what));
    }
    // An END and a START at the same ns: the END first.
    edges.sort_by_key(|(at, step, _)| (*at, *step));
    let (mut now, mut most, mut when) = (0i32, 0i32, String::new());
    let mut open: Vec<String> = Vec::new();
    for (_, step, what) in edges {
        now += step;
        if step > 0 {
            open.push(what);
        } else {
            open.retain(|other| *other != what);
        }
        if now > most {
            most = now;
            when = open.join(", ");
        }
    }
    (usize::try_from(most).unwrap_or(0), when)
}

fn names(jobs: &[JobSpec]) -> Vec<&str> {
    jobs.iter().map(|job| job.name.as_str()).collect()
}

/// Runs the fleet on `redis` (a `[redis]` body) with the groups above
/// for `periods` periods of 6 s and checks them. With `skewed`, the third
/// node's clock is 1.5 s ahead (libfaketime): the limits are counted by
/// Redis's clock, so nothing changes.
fn limits_hold(redis: &str, with_fair: bool, periods: i64, skewed: bool) {
    let (pairs, ones, rated) = (pairs(), ones(), rated());
    let fair = if with_fair { fair() } else { Vec::new() };
    let all: Vec<JobSpec> = [&pairs, &ones, &rated, &fair]
        .into_iter()
        .flatten()
        .cloned()
        .collect();
    let mut fleet = Fleet::new(redis, GROUPS, &all);
    fleet.start_node("n1");
    fleet.start_node("n2");
    if skewed {
        fleet = fleet.with_env(&common::faketime_env("+1.5"));
    }
    fleet.start_node("n3");
    wait_until(Duration::from_secs(30), "a first run", || {
        !fleet.runs().is_empty()
    });
    let from = whole_second_after(2, 12);
    let to = from + TimeDelta::seconds(6 * periods);
    let every: Vec<&str> = names(&all);
    let windows: Vec<Window> = all
        .iter()
        .map(|job| job.window(from, to - TimeDelta::milliseconds(1)))
        .collect();
    wait_until(
        Duration::from_secs(6 * periods as u64 + 30),
        "every occurrence of the window in the history",
        || history_exactly_once(&fleet.decisions(&every), &windows).is_exact(),
    );
    let decisions = fleet.decisions(&every);
    let runs: Vec<Run> = fleet
        .runs()
        .into_iter()
        .filter(|run| run.at().is_some_and(|at| at >= from && at < to))
        .collect();
    let report = common::audit::audit(&runs, &decisions, &windows);
    println!("groups on `{redis}`: {report}");
    assert!(
        report.duplicates.is_empty() && report.overlaps.is_empty(),
        "{report}\n{}",
        fleet.logs()
    );
    let outcome_of = |job: &str, at: DateTime<Utc>| {
        decisions
            .iter()
            .find(|d| d.job == job && d.occurrence == rfc3339(at))
            .map(|d| d.outcome.clone())
            .unwrap_or_default()
    };

    // pairs: at most 2 at once; every occurrence ran.
    let (most, when) = peak(&runs, &pairs);
    assert!(
        most <= 2,
        "group pairs ran {most} at once: {when}\n{}",
        fleet.logs()
    );
    assert_eq!(most, 2, "group pairs never used both slots");
    for job in &pairs {
        for at in job
            .window(from, to - TimeDelta::milliseconds(1))
            .occurrences()
        {
            assert_eq!(
                outcome_of(&job.name, at),
                "succeeded",
                "{} {}: a waiting occurrence must run before its deadline\n{}",
                job.name,
                rfc3339(at),
                fleet.logs()
            );
        }
    }

    // one: one ran, two throttled, each period; the entries name the holder.
    let (most, when) = peak(&runs, &ones);
    assert!(most <= 1, "group one ran {most} at once: {when}");
    let mut at = from;
    while at < to {
        let outcomes: Vec<String> = ones.iter().map(|job| outcome_of(&job.name, at)).collect();
        let ran = outcomes.iter().filter(|o| *o == "succeeded").count();
        let throttled = outcomes.iter().filter(|o| *o == "throttled").count();
        assert_eq!((ran, throttled), (1, 2), "{}: {outcomes:?}", rfc3339(at));
        at += TimeDelta::seconds(6);
    }
    let history = fleet.history(&names(&ones));
    let throttled = history
        .iter()
        .find(|entry| entry["outcome"] == "throttled")
        .expect("a throttled entry");
    let error = throttled["error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with("group `one` at max_running = 1: no room (when_full = skip); held by o"),
        "the entry must say which limit and who held it: {error}"
    );

    // rate: the early pair starts, the late pair a second later is
    // throttled (a fixed window would have let it through), every time;
    // no 4 s window holds more than 2 starts.
    for job in &rated {
        for at in job
            .window(from, to - TimeDelta::milliseconds(1))
            .occurrences()
        {
            let want = if job.name.starts_with("r-early") {
                "succeeded"
            } else {
                "throttled"
            };
            assert_eq!(
                outcome_of(&job.name, at),
                want,
                "{} {}",
                job.name,
                rfc3339(at)
            );
        }
    }
    let mut starts: Vec<i128> = runs
        .iter()
        .filter(|run| rated.iter().any(|job| job.name == run.job))
        .map(|run| run.start_ns)
        .collect();
    starts.sort();
    for (i, start) in starts.iter().enumerate() {
        let within = starts[i..]
            .iter()
            .take_while(|other| **other - start < 4_000_000_000)
            .count();
        assert!(within <= 2, "{within} starts within 4 s of {start}");
    }

    // fair: the older waiting occurrence starts first.
    if with_fair {
        let start_of = |job: &str, at: DateTime<Utc>| {
            runs.iter()
                .find(|run| run.is(job, at))
                .map(|run| run.start_ns)
                .unwrap_or_else(|| panic!("{job} {} did not run\n{}", rfc3339(at), fleet.logs()))
        };
        let hold = &fair[0];
        for at in hold
            .window(from, to - TimeDelta::milliseconds(1))
            .occurrences()
        {
            let old = start_of("f-old", at + TimeDelta::seconds(1));
            let new = start_of("f-new", at + TimeDelta::seconds(2));
            let held_until = runs
                .iter()
                .find(|run| run.is("f-hold", at))
                .and_then(|run| run.end_ns)
                .unwrap_or(0);
            assert!(old >= held_until, "f-old started while f-hold ran");
            assert!(
                old < new,
                "{}: the newer occurrence started first\n{}",
                rfc3339(at),
                fleet.logs()
            );
        }
        let (most, when) = peak(&runs, &fair);
        assert!(most <= 1, "group fair ran {most} at once: {when}");
    }
}

#[test]
fn group_limits_hold_on_one_redis_and_the_oldest_waiter_goes_first() {
    let redis = RedisServer::start();
    limits_hold(&format!("url = \"{}\"", redis.url()), true, 4, true);
}

#[test]
fn group_limits_hold_on_a_redis_cluster() {
    let cluster = RedisCluster::start(3, 0);
    let seeds: Vec<String> = cluster
        .seed_urls()
        .iter()
        .map(|url| format!("\"{url}\""))
        .collect();
    let redis = format!("cluster = [{}]\nwait_replicas = 0", seeds.join(", "));
    limits_hold(&redis, false, 2, false);
}

#[test]
fn group_limits_hold_on_redlock() {
    let masters = Masters::start(3);
    let urls: Vec<String> = masters
        .urls()
        .iter()
        .map(|url| format!("\"{url}\""))
        .collect();
    limits_hold(&format!("redlock = [{}]", urls.join(", ")), false, 2, false);
}
