//! Clock skew (guarantee 1, docs/guarantees.md): three nodes whose wall clocks disagree (one
//! right, one ahead, one behind, by libfaketime with the monotonic clock
//! left alone) run every occurrence exactly once — a 5 ms job and a job
//! that works 75 % of its period — audited occurrence by occurrence.
//!
//! Why these figures. `long` is due every 2 s and works 1.5 s. The node that
//! is ahead fires first, wins, and its run ends 1.5 s after it fired; its
//! own next claim comes 2 s after the previous one, so the lock is free
//! again whatever the skew: no overlap skip is expected. The node that is
//! behind arrives 2×skew after the winner fired: at ±0.9 s (0.45 × the
//! period) that is 1.8 s, after the run ended and released the lock, so only
//! the occurrence record stops it from running the occurrence again; at
//! ±0.3 s the lock refuses it too, and the record answers first.
//! A skip *is* legal (guarantee 3) if another node won the previous
//! occurrence: the ahead node stalled, or was not in line for it and did
//! not look (guarantee 12); that run then ends after the ahead node's next
//! claim. The test accepts a skip only in that case.
//!
//! With `clock = "redis"` (the default; the tests above use `local` to
//! keep the skew) the same skewed nodes fire at Redis's instant: every run
//! starts after its occurrence (never before) and soon after it, and the
//! skewed nodes do not win every claim.
//!
//! What breaks it: a claim that only checks the lock (duplicates from the
//! behind node), occurrences named by a node's own "now" (misses and
//! duplicates), a lock not released at the end of a run (skips).

use crate::common;

use std::time::Duration;

use chrono::TimeDelta;
use common::cluster::{Cluster, JobSpec, rfc3339, whole_second_after, window_secs};
use common::proxy::{Mode, Proxy, SLOW};
use common::{RedisServer, faketime_env, faketime_file_env, logged_clock_offset};

#[test]
fn clocks_300_ms_apart_run_every_occurrence_once() {
    skewed_cluster_runs_every_occurrence_once("0.3", 300);
}

#[test]
fn clocks_0_45_periods_apart_run_every_occurrence_once() {
    skewed_cluster_runs_every_occurrence_once("0.9", 900);
}

fn skewed_cluster_runs_every_occurrence_once(skew: &str, skew_ms: i64) {
    let quick = JobSpec::new("quick", "* * * * * *", 0.005).with("lock_ttl = \"2s\"");
    let long = JobSpec::new("long", "*/2 * * * * *", 1.5).with("lock_ttl = \"2s\"");
    let mut cluster = Cluster::new(
        RedisServer::start(),
        // By each node's own clock: what is under test is the record, not
        // the firing instant (see the test below for `clock = "redis"`).
        "shutdown_grace = \"1s\"\nclock = \"local\"",
        &[quick.clone(), long.clone()],
    );
    cluster.start_node("right", &[]);
    cluster.start_node("ahead", &faketime_env(&format!("+{skew}")));
    cluster.start_node("behind", &faketime_env(&format!("-{skew}")));
    // The faking took effect: each node measured its offset against Redis.
    for (id, sign) in [("ahead", 1), ("behind", -1)] {
        let node = cluster.node(id);
        common::wait_until(Duration::from_secs(10), "the clock check", || {
            logged_clock_offset(&node.log()).is_some()
        });
        let offset = logged_clock_offset(&node.log()).expect("offset");
        assert!(
            (offset - sign * skew_ms).abs() <= 100,
            "{id} must really be {skew_ms} ms off: {offset}"
        );
    }
    let from = whole_second_after(3, 2);
    let to = from + TimeDelta::seconds(window_secs(12, 120));
    // Everything about the window's last occurrences is decided: every node
    // logged them and the long run's END is there, or it was skipped (the
    // ahead node, 0.9 s early, finds the previous run still going when it
    // did not run that one itself).
    let name = rfc3339(to);
    common::wait_until(
        Duration::from_secs(window_secs(12, 120) as u64 + 20),
        "the window's last long occurrence ended or was skipped",
        || {
            cluster
                .runs()
                .iter()
                .any(|run| run.is("long", to) && run.end_ns.is_some())
                || cluster
                    .decisions(&["long"])
                    .iter()
                    .any(|d| d.occurrence == name && d.outcome == "skipped")
        },
    );
    for job in ["quick", "long"] {
        cluster.wait_decided(Duration::from_secs(5), job, to);
    }
    let report = cluster.audit(&[quick.window(from, to), long.window(from, to)]);
    println!("skew ±{skew} s: {report}");
    assert!(report.is_clean(), "{report}\n{}", cluster.logs());
    assert_eq!(report.expected, report.runs + report.skipped.len());
    let runs = cluster.runs();
    for skip in &report.skipped {
        assert_eq!(skip.job, "long", "a 5 ms job cannot overlap: {report}");
        let at = chrono::DateTime::parse_from_rfc3339(&skip.occurrence).expect("rfc3339");
        let previous = at.to_utc() - TimeDelta::seconds(2);
        let winner = runs
            .iter()
            .find(|run| run.is("long", previous))
            .map(|run| run.node.clone());
        assert_ne!(
            winner.as_deref(),
            Some("ahead"),
            "a skip is explained only by the ahead node having lost the previous occurrence: {report}"
        );
    }
    // The behind node was refused by the record, occurrence after occurrence
    // of those it looked at (it leaves about a third to the two nodes in
    // line without a look, guarantee 12).
    let behind = cluster.node("behind").log();
    // (With ±0.9 s the two clocks are 1.8 s apart, more than the quick
    // job's 1 s period: the behind node then finds the NEXT occurrence
    // already decided and says so, instead of naming a winner.)
    let looked: Vec<String> = (0..=window_secs(12, 120))
        .map(|s| {
            format!(
                "job=quick occurrence={}",
                rfc3339(from + TimeDelta::seconds(s))
            )
        })
        .filter(|needle| {
            !behind.lines().any(|line| {
                line.contains(needle.as_str()) && line.contains("left to the nodes in line")
            })
        })
        .collect();
    assert!(
        looked.len() >= 3,
        "the behind node looked at {} occurrences:\n{behind}",
        looked.len()
    );
    let refused = looked
        .iter()
        .filter(|needle| {
            behind.lines().any(|line| {
                line.contains(needle.as_str())
                    && (line.contains("claim lost")
                        || line.contains("a newer occurrence was decided"))
            })
        })
        .count();
    assert!(
        refused * 2 >= looked.len(),
        "the behind node must have been refused, not raced ({refused} refusals of {} looks):\n{behind}",
        looked.len()
    );
}

#[test]
fn with_clock_redis_nodes_450_ms_off_fire_at_the_true_instant_and_share_the_runs() {
    let quick = JobSpec::new("quick", "* * * * * *", 0.005).with("lock_ttl = \"2s\"");
    let mut cluster = Cluster::new(
        RedisServer::start(),
        "shutdown_grace = \"1s\"",
        std::slice::from_ref(&quick),
    );
    cluster.start_node("right", &[]);
    cluster.start_node("ahead", &faketime_env("+0.45"));
    cluster.start_node("behind", &faketime_env("-0.45"));
    for id in ["ahead", "behind"] {
        let node = cluster.node(id);
        node.wait_for_log(
            Duration::from_secs(10),
            "firing occurrences by redis's clock",
        );
    }
    let from = whole_second_after(2, 1);
    let to = from + TimeDelta::seconds(window_secs(20, 120));
    every_occurrence_once(
        &cluster,
        &quick,
        from,
        to,
        Duration::from_secs(window_secs(20, 120) as u64 + 15),
    );
    let runs: Vec<_> = cluster
        .runs()
        .into_iter()
        .filter(|run| run.at().is_some_and(|at| at >= from && at <= to))
        .collect();
    let mut lags_ms: Vec<f64> = Vec::new();
    let mut wins = std::collections::BTreeMap::<String, usize>::new();
    for run in &runs {
        let at = run.at().expect("scheduled");
        let at_ns = i128::from(at.timestamp()) * 1_000_000_000;
        let lag_ms = (run.start_ns - at_ns) as f64 / 1e6;
        assert!(
            lag_ms >= 0.0,
            "a run started before its occurrence: {run:?} ({lag_ms} ms)"
        );
        lags_ms.push(lag_ms);
        *wins.entry(run.node.clone()).or_default() += 1;
    }
    lags_ms.sort_by(f64::total_cmp);
    let median = lags_ms[lags_ms.len() / 2];
    println!(
        "clock = redis, ±0.45 s: wins {wins:?}, lag median {median:.1} ms, max {:.1} ms",
        lags_ms[lags_ms.len() - 1]
    );
    // A loose bound: on this shared machine, loaded by other builds, the
    // median was 12–120 ms (a node 450 ms off without the correction starts
    // 450 ms early or late); the p99 target belongs to the bench.
    assert!(
        median < 400.0,
        "runs start soon after their occurrence: median {median} ms"
    );
    let ahead = wins.get("ahead").copied().unwrap_or(0);
    assert!(
        ahead * 10 < runs.len() * 9,
        "the node 450 ms ahead must not win nearly every claim: {wins:?}"
    );
}

/// A node's wall clock stepped while it runs (2 s ahead, then 3 s back,
/// by rewriting libfaketime's offset file; the monotonic clock is left
/// alone) changes nothing with `clock = "redis"`: Redis's instant is
/// carried by the monotonic clock between measurements, so no run starts
/// early after the forward step nor late after the backward one, every
/// occurrence runs once, and the node says within seconds that its clock
/// moved and measures the offset again. Firing by the wall clock corrected
/// by the offset measured every minute would start runs 2 s early, then
/// 1 s late, until the next measurement.
#[test]
fn a_stepped_wall_clock_is_noticed_within_seconds_and_moves_no_run() {
    let quick = JobSpec::new("quick", "* * * * * *", 0.005).with("lock_ttl = \"2s\"");
    let mut cluster = Cluster::new(
        RedisServer::start(),
        "shutdown_grace = \"1s\"",
        std::slice::from_ref(&quick),
    );
    let offset_file = cluster.work.path("faketime-offset");
    std::fs::write(&offset_file, "+0\n").expect("write the offset file");
    cluster.start_node("stepped", &faketime_file_env(&offset_file));
    let node = cluster.node("stepped");
    node.wait_for_log(
        Duration::from_secs(10),
        "firing occurrences by redis's clock",
    );
    let from = whole_second_after(2, 1);
    let forward = from + TimeDelta::milliseconds(4_950);
    let backward = from + TimeDelta::milliseconds(10_950);
    let to = from + TimeDelta::seconds(16);
    common::cluster::sleep_until(forward);
    std::fs::write(&offset_file, "+2\n").expect("step the clock forward");
    node.wait_for_log(Duration::from_secs(5), "wall clock moved against redis's");
    node.wait_for_log(Duration::from_secs(5), "clock offset against redis changed");
    common::cluster::sleep_until(backward);
    std::fs::write(&offset_file, "-1\n").expect("step the clock back");
    every_occurrence_once(&cluster, &quick, from, to, Duration::from_secs(30));
    let log = cluster.node("stepped").log();
    let moves: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("wall clock moved against redis's"))
        .collect();
    assert_eq!(moves.len(), 2, "one notice per step:\n{log}");
    for (line, about_ms) in moves.iter().zip([2000_i64, -3000]) {
        let moved: i64 = line
            .split("moved_ms=")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|value| value.parse().ok())
            .unwrap_or_else(|| panic!("no moved_ms in {line}"));
        assert!(
            (moved - about_ms).abs() < 300,
            "moved_ms {moved}, stepped {about_ms} ms: {line}"
        );
    }
    let mut late_after_back = Vec::new();
    for run in cluster.runs() {
        let Some(at) = run.at().filter(|at| *at >= from && *at <= to) else {
            continue;
        };
        let lag_ms = (run.start_ns - i128::from(at.timestamp()) * 1_000_000_000) / 1_000_000;
        assert!(
            lag_ms >= 0,
            "a run started {} ms before its occurrence after the clock was stepped: {run:?}\n{log}",
            -lag_ms
        );
        if at > backward {
            late_after_back.push(lag_ms);
        }
    }
    late_after_back.sort_unstable();
    let median = late_after_back[late_after_back.len() / 2];
    println!(
        "stepped clock: lag after the backward step, median {median} ms, all {late_after_back:?}"
    );
    // Firing by the stepped wall clock would start these a second late.
    assert!(
        median < 500,
        "runs after the backward step start on time, not a second late: {late_after_back:?}"
    );
}

/// `splay`: each occurrence of the job fires its fixed offset (a hash of
/// the name, in `[0, splay)`) after its instant, while its name (what the
/// run sees in `SOLOCRON_OCCURRENCE`, and the history) stays the instant.
#[test]
fn a_splayed_job_fires_its_own_offset_after_each_occurrence_named_by_the_instant() {
    let splay = Duration::from_secs(3);
    // A name whose offset is well inside (0, splay): the check below then
    // tells a splayed run from an unsplayed one.
    let name = common::name_with_offset("splayed", splay, 800..=2200);
    let offset = solocron::config::splay_offset(&name, splay);
    let job = JobSpec::new(&name, "*/4 * * * * *", 0.005)
        .with("lock_ttl = \"2s\"")
        .with("splay = \"3s\"");
    let mut cluster = Cluster::new(RedisServer::start(), "", std::slice::from_ref(&job));
    cluster.start_node("n1", &[]);
    cluster.start_node("n2", &[]);
    let first = whole_second_after(1, 4);
    let last = first + TimeDelta::seconds(8);
    cluster.wait_for_run(Duration::from_secs(20), "the third splayed run", |run| {
        run.is(&name, last) && run.end_ns.is_some()
    });
    for k in 0..3 {
        let at = first + TimeDelta::seconds(4 * k);
        let runs: Vec<_> = cluster
            .runs()
            .into_iter()
            .filter(|run| run.is(&name, at))
            .collect();
        assert_eq!(runs.len(), 1, "{at}: {runs:?}");
        let lag_ms = (runs[0].start_ns - i128::from(at.timestamp()) * 1_000_000_000) / 1_000_000;
        let offset_ms = offset.as_millis() as i128;
        assert!(
            lag_ms >= offset_ms && lag_ms < offset_ms + 500,
            "{at}: started {lag_ms} ms after the instant, the offset is {offset_ms} ms"
        );
    }
}

/// A splay longer than the job's period (`splay = "30s"` in `[defaults]`
/// reaches every-second jobs too): at any moment the occurrences of the
/// last offset's worth of instants have passed but not fired yet. A node
/// that starts, or reloads a changed job, must go on from the first of
/// them; it went on from the first instant after "now" and so skipped
/// every occurrence in between, at every start and every reload (they
/// were recorded `missed` once the next claim came: up to 30 an
/// every-second job with a 30 s splay).
#[test]
fn a_splay_longer_than_the_period_loses_no_occurrence_at_start_or_reload() {
    let splay = Duration::from_secs(4);
    // Two to three periods of offset: without the fix, two or three
    // occurrences after each start and reload would have no run.
    let name = common::name_with_offset("long-splay", splay, 2200..=3500);
    let offset =
        TimeDelta::from_std(solocron::config::splay_offset(&name, splay)).expect("a small offset");
    let job = JobSpec::new(&name, "* * * * * *", 0.005)
        .with("lock_ttl = \"2s\"")
        .with("splay = \"4s\"");
    let mut cluster = Cluster::new(RedisServer::start(), "", std::slice::from_ref(&job));
    cluster.start_node("n1", &[]);
    let first = cluster
        .wait_for_run(Duration::from_secs(20), "the first run", |run| {
            run.job == name
        })
        .at()
        .expect("a run names its occurrence");
    every_occurrence_once(
        &cluster,
        &job,
        first,
        first + TimeDelta::seconds(4),
        Duration::from_secs(20),
    );
    // A change to the job, so the reload schedules it anew.
    let changed = job.clone().with("timeout = \"10m\"");
    cluster.write_jobs(std::slice::from_ref(&changed));
    cluster.node("n1").signal("HUP");
    cluster
        .node("n1")
        .wait_for_log(Duration::from_secs(10), "config reloaded");
    // The occurrence that fires ~4 s after the reload, and all before it.
    let reloaded = chrono::Utc::now();
    let to = chrono::DateTime::from_timestamp((reloaded - offset).timestamp() + 4, 0)
        .expect("a valid instant");
    every_occurrence_once(&cluster, &job, first, to, Duration::from_secs(20));
    let missed: Vec<_> = cluster
        .decisions(&[&name])
        .into_iter()
        .filter(|decision| decision.outcome == "missed")
        .collect();
    assert!(missed.is_empty(), "{missed:?}\n{}", cluster.logs());
}

/// A node's first measurement of Redis's instant is often its slowest (the
/// node busy starting 1,000 jobs, a slow link), and a node that fired by it
/// until its next measurement a minute later started every run up to that
/// round trip late. Here the node reaches Redis through a proxy that holds
/// every answer 150 ms (Redis reads its clock 150 ms before the node hears
/// it) until the node has measured once, then forwards at once: within seconds the node measures
/// again and fires by the quickest round trip of the last 30 s, so runs
/// start within milliseconds of their instant, and never before it.
#[test]
fn a_slow_first_measurement_stops_counting_once_a_quicker_one_comes() {
    let quick = JobSpec::new("quick", "* * * * * *", 0.005).with("lock_ttl = \"2s\"");
    let mut cluster = Cluster::new(
        RedisServer::start(),
        "shutdown_grace = \"1s\"",
        std::slice::from_ref(&quick),
    );
    let proxy = Proxy::start(cluster.redis.port);
    proxy.set(Mode::Slow);
    cluster.start_node_with_url("n1", &proxy.url(), &[]);
    cluster.node("n1").wait_for_log(
        Duration::from_secs(15),
        "firing occurrences by redis's clock",
    );
    proxy.set(Mode::Pass);
    // The window starts once the node has measured through the quick
    // proxy (its published offset leaves the slow one's ~SLOW): on a busy
    // machine the quick checks after the first can all still come in slow.
    let mut conn = cluster.redis.conn();
    common::wait_until(
        Duration::from_secs(40),
        "the node publishes an offset measured through the quick proxy",
        || {
            let offset: Option<i64> = redis::cmd("HGET")
                .arg("{solocron}:node:n1")
                .arg("clock_offset_ms")
                .query(&mut conn)
                .ok()
                .flatten();
            offset.is_some_and(|offset| offset.unsigned_abs() < SLOW.as_millis() as u64 / 4)
        },
    );
    let from = whole_second_after(1, 1);
    let to = from + TimeDelta::seconds(8);
    every_occurrence_once(&cluster, &quick, from, to, Duration::from_secs(30));
    let mut lags_ms: Vec<f64> = cluster
        .runs()
        .iter()
        .filter_map(|run| {
            let at = run.at().filter(|at| *at >= from && *at <= to)?;
            Some((run.start_ns - i128::from(at.timestamp()) * 1_000_000_000) as f64 / 1e6)
        })
        .collect();
    lags_ms.sort_by(f64::total_cmp);
    assert!(
        lags_ms.first().is_some_and(|lag| *lag >= 0.0),
        "a run started before its occurrence: {lags_ms:?}"
    );
    let median = lags_ms[lags_ms.len() / 2];
    println!("after a slow first measurement: lags {lags_ms:?} ms");
    // Firing by the first measurement alone starts them ~SLOW late.
    assert!(
        median < SLOW.as_millis() as f64 / 2.0,
        "runs start soon after their instant once a quick round trip came, not a slow one's {} ms late: median {median:.1} ms of {lags_ms:?}",
        SLOW.as_millis()
    );
}

/// Waits until the last run of `job`'s window `[from, to]` ended and its
/// occurrence was decided (`limit` for the run), then asserts that the
/// audit (`tests/it/common/audit.rs`) is clean: every occurrence of the
/// window ran once.
fn every_occurrence_once(
    cluster: &Cluster,
    job: &JobSpec,
    from: chrono::DateTime<chrono::Utc>,
    to: chrono::DateTime<chrono::Utc>,
    limit: Duration,
) {
    cluster.wait_for_run(limit, "the window's last run ended", |run| {
        run.is(&job.name, to) && run.end_ns.is_some()
    });
    cluster.wait_decided(Duration::from_secs(5), &job.name, to);
    let report = cluster.audit(&[job.window(from, to)]);
    assert!(report.is_clean(), "{report}\n{}", cluster.logs());
}

/// A node with `clock = "local"` whose clock is an hour ahead (a wrong
/// clock beyond the job's period, outside what guarantee 1 covers): Redis
/// refuses its claims of occurrences still in Redis's future by more than
/// their window, and the node says so. Before, it decided those future
/// occurrences: every occurrence up to an hour ahead was recorded `missed`
/// and looked decided to the nodes with the right time, which ran nothing
/// until real time caught up, also after the fast node was stopped.
#[test]
fn a_node_an_hour_ahead_with_a_local_clock_decides_no_future_occurrence() {
    let quick = JobSpec::new("quick", "* * * * * *", 0.005).with("lock_ttl = \"2s\"");
    let mut cluster = Cluster::new(
        RedisServer::start(),
        "shutdown_grace = \"1s\"\nclock = \"local\"",
        std::slice::from_ref(&quick),
    );
    cluster.start_node("right", &[]);
    cluster.start_node("ahead", &faketime_env("+3600"));
    cluster.node("ahead").wait_for_log(
        Duration::from_secs(15),
        "occurrence not claimed: it is still",
    );
    let from = whole_second_after(2, 1);
    let to = from + TimeDelta::seconds(window_secs(6, 60));
    cluster.wait_for_run(
        Duration::from_secs(window_secs(6, 60) as u64 + 20),
        "the window's last run",
        |run| run.is("quick", to) && run.end_ns.is_some(),
    );
    // Stopped, the fast node leaves nothing behind: the next occurrences
    // run as before.
    let ahead = cluster.node_mut("ahead");
    ahead.signal("TERM");
    assert!(ahead.wait_exit(Duration::from_secs(20)).success());
    let after = whole_second_after(1, 1);
    cluster.wait_for_run(
        Duration::from_secs(15),
        "runs after the fast node stopped",
        |run| run.is("quick", after + TimeDelta::seconds(2)) && run.end_ns.is_some(),
    );
    let report = cluster.audit(&[quick.window(from, after + TimeDelta::seconds(2))]);
    assert!(report.is_clean(), "{report}\n{}", cluster.logs());
    assert!(
        cluster.runs().iter().all(|run| run.node == "right"),
        "the fast node ran nothing: {:?}",
        cluster.runs()
    );
    let future = chrono::Utc::now() + TimeDelta::seconds(60);
    let decided_ahead: Vec<_> = cluster
        .decisions(&["quick"])
        .into_iter()
        .filter(|d| chrono::DateTime::parse_from_rfc3339(&d.occurrence).is_ok_and(|at| at > future))
        .collect();
    assert!(decided_ahead.is_empty(), "{decided_ahead:?}");
}
