//! What a stale Sentinel master may still take, and what it must not count
//! (`lock/server.rs`, `coordinator/sentinel.rs`), with real servers:
//!
//! - renewals and releases sent to the old master through a graceful
//!   `SENTINEL FAILOVER` (while its other replica still acknowledges them,
//!   then drops them): each one that counted is on the new master;
//! - a sentinel that names another master at an older configuration epoch
//!   (one that has not heard of the failover yet) is not followed;
//! - a claim won, then undone because its `WAIT` came back short only after
//!   the next occurrence was decided (skipped behind its lock), still ends
//!   in exactly one history record (`missed`), also when its node retries
//!   it (superseded) and gives it up.

use crate::common;

use std::time::{Duration, Instant};

use common::RedisServer;
use common::ha::SentinelGroup;
use redis::Commands as _;
use solocron::config::{RedisConfig, RedisMode};
use solocron::lock::{Claim, Lease, LockError, Locker, Target, new_token};

fn scheduled(at_ms: i64) -> Target {
    Target::Scheduled {
        at: chrono::DateTime::from_timestamp_millis(at_ms).expect("an instant"),
        deadline_ms: i64::MAX,
    }
}

fn url_config(url: &str, wait_replicas: u32, wait_timeout: Duration) -> RedisConfig {
    let mut config = RedisConfig {
        url: String::new(),
        mode: RedisMode::Single,
        wait_replicas: 0,
        wait_timeout,
        username: None,
        password: None,
        key_prefix: "solocron".to_string(),
        tls: Default::default(),
    };
    config.use_url(url);
    config.wait_replicas = wait_replicas;
    config
}

fn locker(runtime: &tokio::runtime::Runtime, config: &RedisConfig, node: &str) -> Locker {
    runtime.block_on(async {
        Locker::new(
            solocron::daemon::connect(config).expect("connect"),
            "solocron",
            node,
            100,
        )
    })
}

fn entry(lease: &Lease, node: &str) -> solocron::history::Entry {
    let now = chrono::Utc::now();
    solocron::history::Entry::from_report(
        "occ-1",
        node,
        lease.fence,
        &solocron::exec::Report {
            outcome: solocron::exec::Outcome::Succeeded,
            exit_code: Some(0),
            http_status: None,
            error: None,
            started_at: now,
            finished_at: now,
            duration: Duration::from_millis(1),
            output_tail: None,
        },
    )
}

fn history_len(conn: &mut redis::Connection, job: &str) -> usize {
    conn.xlen(format!("{{solocron:{job}}}:history"))
        .expect("XLEN")
}

/// A node pinned to the old master (a `url` with `wait_replicas = 1`, as a
/// node whose follower has not looked again yet) renews one lease and
/// releases another every 10 ms through a graceful failover. Every renewal
/// that counted (`Ok(true)`) must be on the new master (its lock there has
/// the renewal's TTL), every release that counted must have deleted the
/// lock there and recorded its entry there. Without the replica check on
/// renewals and releases, those the old master took in the second after
/// the promotion (acknowledged by its other replica, then dropped) counted.
#[test]
fn renewals_and_releases_a_stale_master_took_do_not_count() {
    let group = SentinelGroup::start("solocron");
    let old = group.master_port();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let config = url_config(
        &format!("redis://127.0.0.1:{old}/"),
        1,
        Duration::from_millis(100),
    );
    let node = "stale";
    let locker = locker(&runtime, &config, node);
    const LEASES: usize = 500;
    let claim_ttl = Duration::from_secs(90);
    let renewed_ttl = Duration::from_secs(900);
    let claim = |job: &str| match runtime.block_on(locker.claim(
        job,
        &scheduled(1),
        &new_token(),
        claim_ttl,
    )) {
        Ok(Claim::Won(lease)) => lease,
        other => panic!("claim of {job} before the failover: {other:?}"),
    };
    let renewals: Vec<Lease> = (0..LEASES).map(|i| claim(&format!("ext-{i}"))).collect();
    let releases: Vec<Lease> = (0..LEASES).map(|i| claim(&format!("rel-{i}"))).collect();
    let mut renewed = Vec::new();
    let mut released = Vec::new();
    let mut refused = 0;
    let sent = std::sync::atomic::AtomicUsize::new(0);
    let new = std::thread::scope(|scope| {
        let failover = scope.spawn(|| {
            common::wait_until(
                Duration::from_secs(5),
                "renewals and releases go on before the failover",
                || sent.load(std::sync::atomic::Ordering::SeqCst) >= 20,
            );
            group.failover()
        });
        let until = Instant::now() + Duration::from_secs(5);
        for (renewal, release) in renewals.iter().zip(&releases) {
            if Instant::now() >= until {
                break;
            }
            let mut longer = renewal.clone();
            longer.ttl = renewed_ttl;
            match runtime.block_on(locker.extend(&longer)) {
                Ok(true) => renewed.push(renewal.job.clone()),
                Ok(false) => panic!("{}: the old master lost the lock", renewal.job),
                Err(
                    LockError::Unacknowledged { .. }
                    | LockError::ReplicaLost { .. }
                    | LockError::Redis { .. },
                ) => refused += 1,
                Err(other) => panic!("unexpected answer to a renewal: {other}"),
            }
            match runtime.block_on(locker.release(release, &entry(release, node))) {
                Ok(_) => released.push(release.job.clone()),
                Err(
                    LockError::Unacknowledged { .. }
                    | LockError::ReplicaLost { .. }
                    | LockError::Redis { .. },
                ) => refused += 1,
                Err(other) => panic!("unexpected answer to a release: {other}"),
            }
            sent.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            // Paced, so that the 500 pairs span the whole failover.
            std::thread::sleep(Duration::from_millis(10));
        }
        let switch = failover.join().expect("failover");
        assert_eq!(switch.from, old);
        switch.to
    });
    group.wait_settled();
    let mut promoted = group.conn(new);
    let renewals_lost: Vec<&String> = renewed
        .iter()
        .filter(|job| {
            let ttl: i64 = promoted
                .pttl(format!("{{solocron:{job}}}:lock"))
                .expect("PTTL on the new master");
            ttl <= i64::try_from(claim_ttl.as_millis()).unwrap_or(i64::MAX)
        })
        .collect();
    let releases_lost: Vec<&String> = released
        .iter()
        .filter(|job| {
            let lock: bool = promoted
                .exists(format!("{{solocron:{job}}}:lock"))
                .expect("EXISTS on the new master");
            lock || history_len(&mut promoted, job) != 1
        })
        .collect();
    println!(
        "through the failover: {} renewals and {} releases counted, {refused} refused; \
         lost on the new master: {} renewals, {} releases",
        renewed.len(),
        released.len(),
        renewals_lost.len(),
        releases_lost.len()
    );
    assert!(
        renewals_lost.is_empty() && releases_lost.is_empty(),
        "counted but unknown to the new master: renewals {renewals_lost:?}, releases {releases_lost:?}"
    );
    assert!(
        !renewed.is_empty() && !released.is_empty(),
        "some counted before the failover"
    );
    assert!(refused >= 5, "the stale master refused {refused}");
}

/// After a failover (configuration epoch 1), the first sentinel of the
/// list is made to monitor another master that takes writes and has a
/// replica of its own (epoch 0): as a sentinel that has not heard of a
/// failover names the old master. A follower must take the master the
/// other sentinels name at the newer epoch; before, it took the first
/// sentinel's answer whose `ROLE` said master.
#[test]
fn a_master_named_at_an_older_epoch_is_not_followed() {
    let group = SentinelGroup::start("solocron");
    let switch = group.failover();
    let current = switch.to;
    let decoy = RedisServer::start();
    let decoy_port = decoy
        .url()
        .trim_end_matches('/')
        .rsplit(':')
        .next()
        .map(str::to_string);
    let decoy_port = decoy_port.expect("decoy port");
    let decoy_replica = RedisServer::start_with_args(&["--replicaof", "127.0.0.1", &decoy_port]);
    common::wait_until(
        Duration::from_secs(10),
        "the decoy's replica is online",
        || {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut decoy.conn())
                .unwrap_or_default();
            info.contains("connected_slaves:1") && info.contains("state=online")
        },
    );
    let mut first = group.sentinel_conn(0);
    let removed: String = redis::cmd("SENTINEL")
        .arg("REMOVE")
        .arg("solocron")
        .query(&mut first)
        .expect("SENTINEL REMOVE");
    assert_eq!(removed, "OK");
    let monitored: String = redis::cmd("SENTINEL")
        .arg("MONITOR")
        .arg("solocron")
        .arg("127.0.0.1")
        .arg(&decoy_port)
        .arg(2)
        .query(&mut first)
        .expect("SENTINEL MONITOR");
    assert_eq!(monitored, "OK");
    let epoch = |index: usize| {
        group
            .sentinel_master(index)
            .and_then(|fields| fields.get("config-epoch").cloned())
    };
    println!(
        "sentinel 0 names {:?} at epoch {:?}; sentinel 1 names {:?} at epoch {:?}",
        group.sentinel_view(0),
        epoch(0),
        group.sentinel_view(1),
        epoch(1)
    );
    assert_eq!(group.sentinel_view(1), Some(current));
    let mut config = url_config("redis://unused/", 1, Duration::from_millis(500));
    config.mode = RedisMode::Sentinel {
        master: "solocron".to_string(),
        urls: group.sentinel_urls(),
        password: None,
    };
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let locker = locker(&runtime, &config, "n1");
    let lock = "{solocron:decoyed}:lock";
    // The group's master has a replica back only once the old master is
    // converted: until then `WAIT 1` may come back short (retried).
    let deadline = Instant::now() + Duration::from_secs(30);
    let token = new_token();
    loop {
        match runtime.block_on(locker.claim(
            "decoyed",
            &scheduled(1),
            &token,
            Duration::from_secs(60),
        )) {
            Ok(Claim::Won(_)) => break,
            Ok(other) => panic!("unexpected answer: {other:?}"),
            Err(err) => {
                assert!(Instant::now() < deadline, "no claim won in 30 s: {err}");
                // Each attempt may wait out `WAIT`: try again a little later.
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    let on_decoy: bool = decoy.conn().exists(lock).expect("EXISTS on the decoy");
    let on_current: bool = group
        .conn(current)
        .exists(lock)
        .expect("EXISTS on the group's master");
    assert!(
        on_current && !on_decoy,
        "the claim went to the decoy (named at an older epoch): on the group's master {on_current}, on the decoy {on_decoy}"
    );
    drop(decoy_replica);
}

/// A node's claim of an occurrence wins, but its `WAIT` comes back short
/// (no replica answers within `wait_timeout`), and meanwhile another node
/// decided the next occurrence: skipped, behind the won claim's lock. The
/// undo then cannot put the occurrence back (a newer one is decided), and
/// nobody else records it (the other nodes were told it was claimed; the
/// skip names it as the occurrence decided before, so no gap). It must be
/// recorded `missed` once; the node's retry of it (superseded) and its
/// miss record after giving up add nothing. Before, it was in no record.
#[test]
fn a_claim_undone_after_the_next_occurrence_was_decided_ends_in_one_record() {
    // No replica: `WAIT 1` waits its whole timeout (below the client's
    // response timeout) and answers 0.
    let redis = RedisServer::start();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let waiting = url_config(&redis.url(), 1, Duration::from_millis(300));
    let a = locker(&runtime, &waiting, "a");
    let a_again = locker(&runtime, &url_config(&redis.url(), 0, Duration::ZERO), "a");
    let b = locker(&runtime, &url_config(&redis.url(), 0, Duration::ZERO), "b");
    for each in [&a, &a_again, &b] {
        runtime.block_on(each.load_scripts()).expect("SCRIPT LOAD");
    }
    let mut conn = redis.conn();
    // The next occurrence is claimed the moment the lock shows, well
    // within the 300 ms the WAIT waits; should the machine stall longer
    // than that, the undo came first and this round proves nothing: again.
    for round in 0..5 {
        let job = format!("undone-{round}");
        let token = new_token();
        let claim = {
            let (a, job, token) = (a.clone(), job.clone(), token.clone());
            runtime.spawn(async move {
                a.claim(&job, &scheduled(1_000), &token, Duration::from_secs(30))
                    .await
            })
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        while !conn
            .exists::<_, bool>(format!("{{solocron:{job}}}:lock"))
            .unwrap_or(false)
        {
            if claim.is_finished() || Instant::now() >= deadline {
                panic!(
                    "a's claim never held the lock while its WAIT waited: {:?}",
                    runtime.block_on(claim)
                );
            }
            // Finer than POLL: the lock lives only while a's `WAIT` waits.
            std::thread::sleep(Duration::from_millis(1));
        }
        let next = runtime
            .block_on(b.claim(
                &job,
                &scheduled(2_000),
                &new_token(),
                Duration::from_secs(30),
            ))
            .expect("b's claim of the next occurrence");
        let undone = runtime.block_on(claim).expect("join");
        assert!(
            matches!(undone, Err(LockError::Unacknowledged { .. })),
            "{undone:?}"
        );
        if !matches!(next, Claim::Busy { .. }) {
            println!("round {round}: the undo came before the next claim ({next:?}); again");
            continue;
        }
        let retried = runtime
            .block_on(a_again.claim(&job, &scheduled(1_000), &token, Duration::from_secs(30)))
            .expect("a's retry");
        assert!(matches!(retried, Claim::Superseded { .. }), "{retried:?}");
        let missed = runtime
            .block_on(a_again.record_missed(&job, common::instant(1_000), "gave up", &token))
            .expect("a's miss record");
        assert!(!missed.recorded, "{missed:?}");
        let history = common::history_via(&mut conn, &job);
        let of = |occurrence: &str| -> Vec<String> {
            history
                .iter()
                .filter(|entry| entry.get("occurrence").map(String::as_str) == Some(occurrence))
                .map(|entry| entry.get("outcome").cloned().unwrap_or_default())
                .collect()
        };
        assert_eq!(of("1970-01-01T00:00:01Z"), ["missed"], "{history:?}");
        assert_eq!(of("1970-01-01T00:00:02Z"), ["skipped"], "{history:?}");
        let lock: bool = conn
            .exists(format!("{{solocron:{job}}}:lock"))
            .expect("EXISTS");
        assert!(!lock, "the undone claim's lock is gone");
        return;
    }
    panic!("in 5 rounds the next occurrence was never claimed within the 300 ms of a's WAIT");
}
