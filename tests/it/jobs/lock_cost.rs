//! What the claim and release scripts make Redis do, counted by `INFO
//! commandstats` on a real redis-server with no other client: a losing
//! claim only reads (no `TIME`, no write), a won claim writes the job's
//! state once, a release reads and writes it once. These are the Redis
//! cost of every occurrence on every node (`docs/performance.md`, scenario
//! r), so a change that adds reads or writes to them shows here.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{RedisServer, command_calls, entry, locker, reset_stats, scheduled};
use solocron::lock::{Claim, Lease, new_token};

const TTL: Duration = Duration::from_secs(5);

/// `locker`'s claim of occurrence `at_ms` of `report`, which must win.
async fn won(locker: &solocron::lock::Locker, at_ms: i64) -> Lease {
    match locker
        .claim("report", &scheduled(at_ms), &new_token(), TTL)
        .await
        .expect("claim")
    {
        Claim::Won(lease) => lease,
        other => panic!("the claim of {at_ms} should win, got {other:?}"),
    }
}

fn counts(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|(n, c)| (n.to_string(), *c)).collect()
}

#[tokio::test]
async fn a_losing_claim_only_reads_the_lock_and_the_state() {
    let redis = RedisServer::start();
    let (n1, n2, n3) = (
        locker(&redis, "n1").await,
        locker(&redis, "n2").await,
        locker(&redis, "n3").await,
    );
    for locker in [&n1, &n2, &n3] {
        locker.load_scripts().await.expect("load the scripts");
    }
    let lease = won(&n1, 1_000).await;

    // While the winner holds the lock: the lock, the state and the PTTL
    // of the lock for the answer; no clock, no write.
    reset_stats(&redis);
    match n2
        .claim("report", &scheduled(1_000), &new_token(), TTL)
        .await
        .expect("claim")
    {
        Claim::Taken {
            by,
            fence,
            decision,
        } => {
            assert_eq!(
                (by.as_str(), fence, decision.as_str()),
                ("n1", lease.fence, "claimed")
            );
        }
        other => panic!("n2 should be told n1 took it, got {other:?}"),
    }
    assert_eq!(
        command_calls(&redis),
        counts(&[("evalsha", 1), ("get", 1), ("hmget", 1), ("pttl", 1)]),
        "a claim lost while the lock is held"
    );

    // After the release: the lock and the state only.
    n1.release(&lease, &entry("n1", &lease, "occ-1000"))
        .await
        .expect("release");
    reset_stats(&redis);
    match n3
        .claim("report", &scheduled(1_000), &new_token(), TTL)
        .await
        .expect("claim")
    {
        Claim::Taken { by, fence, .. } => assert_eq!((by.as_str(), fence), ("n1", lease.fence)),
        other => panic!("n3 should be told n1 took it, got {other:?}"),
    }
    assert_eq!(
        command_calls(&redis),
        counts(&[("evalsha", 1), ("get", 1), ("hmget", 1)]),
        "a claim lost after the release"
    );
}

#[tokio::test]
async fn a_won_claim_and_its_release_write_the_state_once_each() {
    let redis = RedisServer::start();
    let n1 = locker(&redis, "n1").await;
    n1.load_scripts().await.expect("load the scripts");
    // A first occurrence, so that the measured ones find a state to read.
    let first = won(&n1, 1_000).await;
    n1.release(&first, &entry("n1", &first, "occ-1000"))
        .await
        .expect("release");

    reset_stats(&redis);
    let lease = won(&n1, 2_000).await;
    assert!(lease.fence > first.fence, "fences grow");
    assert_eq!(
        command_calls(&redis),
        counts(&[
            ("evalsha", 1),
            ("get", 1),
            ("hmget", 1),
            ("time", 1),
            ("set", 1),
            ("hset", 1)
        ]),
        "a won claim"
    );

    reset_stats(&redis);
    let released = n1
        .release(&lease, &entry("n1", &lease, "occ-2000"))
        .await
        .expect("release");
    assert!(released.lock_was_ours);
    assert_eq!(
        command_calls(&redis),
        counts(&[
            ("evalsha", 1),
            ("get", 1),
            ("del", 1),
            ("hmget", 1),
            ("set", 1),
            ("xadd", 1),
            ("hset", 1)
        ]),
        "a release with its history entry"
    );
    // The token is remembered in a small key of its own with a TTL, not in
    // a list in the state that every release would rewrite.
    let ttl: i64 = redis::cmd("PTTL")
        .arg(format!("{{test:report}}:recorded:{}", lease.token))
        .query(&mut redis.conn())
        .expect("PTTL");
    assert!((1..=30_000).contains(&ttl), "recorded key TTL {ttl}");
    let list: Option<String> = redis::cmd("HGET")
        .arg("{test:report}:state")
        .arg("recorded")
        .query(&mut redis.conn())
        .expect("HGET");
    assert_eq!(list, None, "no recorded list in the state");

    // The same release again (its reply was lost): nothing written.
    reset_stats(&redis);
    let again = n1
        .release(&lease, &entry("n1", &lease, "occ-2000"))
        .await
        .expect("release");
    assert!(!again.lock_was_ours);
    assert_eq!(
        command_calls(&redis),
        counts(&[("evalsha", 1), ("get", 1), ("hmget", 1), ("set", 1)]),
        "a retried release"
    );
    let recorded: u64 = redis::cmd("XLEN")
        .arg("{test:report}:history")
        .query(&mut redis.conn())
        .expect("XLEN");
    assert_eq!(recorded, 2, "both runs recorded once");
}

#[tokio::test]
async fn a_peek_reads_the_state_and_the_lock_without_a_script_and_answers_as_the_losing_claim() {
    let redis = RedisServer::start();
    let (n1, n2) = (locker(&redis, "n1").await, locker(&redis, "n2").await);
    for locker in [&n1, &n2] {
        locker.load_scripts().await.expect("load the scripts");
    }
    // Nothing decided yet: only the claim can say.
    reset_stats(&redis);
    let undecided = n2.peek("report", &scheduled(1_000)).await.expect("peek");
    assert_eq!(undecided, None, "an undecided occurrence must be claimed");
    assert_eq!(command_calls(&redis), counts(&[("hmget", 1), ("pttl", 1)]));

    let lease = won(&n1, 1_000).await;
    reset_stats(&redis);
    let peeked = n2
        .peek("report", &scheduled(1_000))
        .await
        .expect("peek")
        .expect("decided");
    assert_eq!(
        peeked.claim,
        Claim::Taken {
            by: "n1".to_string(),
            fence: lease.fence,
            decision: "claimed".to_string()
        }
    );
    assert!(
        peeked.lock_ttl_left.is_some(),
        "the lock is held: {peeked:?}"
    );
    assert_eq!(
        command_calls(&redis),
        counts(&[("hmget", 1), ("pttl", 1)]),
        "a peek runs no script"
    );
    // A newer occurrence decided: the older one is superseded.
    n1.release(&lease, &entry("n1", &lease, "occ-1000"))
        .await
        .expect("release");
    won(&n1, 2_000).await;
    let old = n2.peek("report", &scheduled(1_000)).await.expect("peek");
    assert_eq!(
        old.map(|reply| reply.claim),
        Some(Claim::Superseded { last_ms: 2_000 })
    );
}
