//! A network cut between one node and Redis (a TCP proxy in the test), while
//! that node runs a long job (guarantees 2 and 4, docs/guarantees.md): its run is gone before its
//! lock could expire in Redis, the other nodes carry on (the next
//! occurrences run on them, nothing is missed), nothing overlaps, and once
//! the link is back the cut node claims and runs again.
//!
//! The cut node's clock is 300 ms ahead (libfaketime), so it fires first and
//! wins: that makes "the node running the long job" the one behind the
//! proxy without waiting for luck.
//!
//! What breaks it: a watchdog that waits for a reply past the lease
//! deadline (stall: the run outlives the lock and overlaps the next
//! holder), claims without an answer (runs during the cut), a node that
//! does not reconnect (no run after the restore).

use crate::common;

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use common::cluster::{Cluster, JobSpec, wait_gone, whole_second_after, window_secs};
use common::proxy::{Mode, Proxy};
use common::{RedisServer, faketime_env};

#[test]
fn a_stalled_link_stops_the_cut_nodes_run_by_the_lease_deadline_and_the_others_carry_on() {
    cut_the_runner_off(Mode::Stall);
}

#[test]
fn dropped_connections_stop_the_cut_nodes_run_by_the_lease_deadline_and_the_others_carry_on() {
    cut_the_runner_off(Mode::Drop);
}

fn cut_the_runner_off(mode: Mode) {
    let long = JobSpec::new("long", "*/4 * * * * *", 3.0).with("lock_ttl = \"2s\"");
    let quick = JobSpec::new("quick", "* * * * * *", 0.005)
        .with("lock_ttl = \"2s\"")
        .with("starting_deadline = \"2s\"");
    // By each node's own clock: the cut node's +0.3 s makes it the one
    // that wins the runs to cut off (with `clock = "redis"` it would not).
    let mut cluster = Cluster::new(
        RedisServer::start(),
        "clock = \"local\"",
        &[long.clone(), quick.clone()],
    );
    let proxy = Proxy::start(cluster.redis.port);
    cluster.start_node("n1", &[]);
    cluster.start_node("n2", &[]);
    cluster.start_node_with_url("cut", &proxy.url(), &faketime_env("+0.3"));
    let from = whole_second_after(4, 4);
    let victim = cluster.wait_for_run(
        Duration::from_secs(20),
        "a long run of the cut node",
        |run| run.job == "long" && run.node == "cut" && run.at().is_some_and(|at| at >= from),
    );
    // Cut right after a renewal: the lock then lives `left` ms more in Redis.
    let expires_at = cluster
        .redis
        .right_after_a_renewal("{solocron:long}:lock", 2000, || proxy.set(mode));
    let cut_began = Instant::now();
    let gone = wait_gone(victim.pid, Duration::from_secs(3));
    let dead = Instant::now();
    assert!(
        dead < expires_at,
        "the cut node's run must be gone before its lock could expire in redis ({:?} too late)",
        dead - expires_at
    );
    // The fault: the link stays cut for 2 × lock_ttl, and until the other
    // nodes ran the next long occurrence.
    std::thread::sleep(Duration::from_secs(4).saturating_sub(cut_began.elapsed()));
    let victim_at = victim.at().expect("scheduled");
    let elsewhere = cluster.wait_for_run(
        Duration::from_secs(10),
        "the next long run elsewhere",
        |run| run.job == "long" && run.at().is_some_and(|at| at > victim_at),
    );
    assert_ne!(
        elsewhere.node, "cut",
        "the cut node cannot run without redis"
    );
    assert!(elsewhere.start_ns > gone, "{elsewhere}");
    proxy.set(Mode::Pass);
    let restored = Utc::now();
    let recovered =
        cluster.wait_for_run(Duration::from_secs(15), "the cut node runs again", |run| {
            run.node == "cut" && run.start_ns > to_ns(restored)
        });
    let to = DateTime::from_timestamp(
        recovered.at().expect("scheduled").timestamp() + window_secs(4, 60),
        0,
    )
    .expect("valid instant");
    cluster.wait_for_run(
        Duration::from_secs(window_secs(4, 60) as u64 + 15),
        "the window's last long run ended",
        |run| run.job == "long" && run.at().is_some_and(|at| at >= to) && run.end_ns.is_some(),
    );
    cluster.wait_decided(Duration::from_secs(5), "quick", to);
    let mut runs = cluster.runs();
    for run in runs
        .iter_mut()
        .filter(|run| run.pid == victim.pid && run.is("long", victim.at().expect("at")))
    {
        run.ended_at(gone);
    }
    let decisions = cluster.decisions(&["long", "quick"]);
    let report = common::audit::audit(
        &runs,
        &decisions,
        &[long.window(from, to), quick.window(from, to)],
    );
    println!("network cut ({mode:?}): {report}");
    assert!(report.is_clean(), "{report}\n{}", cluster.logs());
    let listing: String = runs.iter().map(|run| format!("  {run}\n")).collect();
    // A skip is legal only as the lock of a run the cut node finished just
    // before the cut and could not release (it expires by itself).
    for skip in &report.skipped {
        let holder = runs
            .iter()
            .find(|run| run.job == skip.job && run.fence == skip.fence);
        assert!(
            holder.is_some_and(
                |run| run.node == "cut" && run.start_ns < victim.start_ns + 1_000_000_000
            ),
            "unexplained skip {skip}: {report}\n{listing}\n{}",
            cluster.logs()
        );
    }
    // Nothing ran on the cut node while it was cut off.
    let during: Vec<_> = runs
        .iter()
        .filter(|run| run.start_ns > gone && run.start_ns < to_ns(restored))
        .collect();
    assert!(
        during.iter().all(|run| run.node != "cut"),
        "the cut node cannot run without redis: {during:?}"
    );
    common::wait_until(Duration::from_secs(10), "the lock_lost entry", || {
        cluster.decisions(&["long"]).iter().any(|d| {
            d.occurrence == victim.occurrence && d.node == "cut" && d.outcome == "lock_lost"
        })
    });
}

fn to_ns(at: DateTime<Utc>) -> i128 {
    i128::from(at.timestamp_nanos_opt().expect("in range"))
}
