//! The claim, extend and release scripts against a real redis-server.

use crate::common;

use std::time::Duration;

use chrono::Utc;
use common::{RedisServer, entry, locker, scheduled};
use redis::Commands as _;
use solocron::lock::{AbandonCheck, Abandoned, Claim, Lease, Target, new_token};

const TTL: Duration = Duration::from_secs(5);

/// How long the early node's job runs before it releases.
const JOB_RUNS: Duration = Duration::from_millis(5);

/// How late the late node's clock makes it claim.
const SKEW: Duration = Duration::from_millis(300);

fn won(claim: Claim) -> Lease {
    match claim {
        Claim::Won(lease) => lease,
        other => panic!("expected a won claim, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_concurrent_claimers_one_winner_nine_told_who_won() {
    let redis = RedisServer::start();
    let mut handles = Vec::new();
    for i in 0..10 {
        let node = format!("node-{i}");
        let locker = locker(&redis, &node).await;
        handles.push(tokio::spawn(async move {
            let claim = locker
                .claim("report", &scheduled(1_000), &new_token(), TTL)
                .await
                .expect("claim");
            (node, claim)
        }));
    }
    let mut winners = Vec::new();
    let mut told = Vec::new();
    for handle in handles {
        let (node, claim) = handle.await.expect("join");
        match claim {
            Claim::Won(lease) => winners.push((node, lease.fence)),
            Claim::Taken { by, fence, .. } => told.push((by, fence)),
            Claim::Busy { .. }
            | Claim::TooLate
            | Claim::TooEarly { .. }
            | Claim::Superseded { .. } => {
                panic!("a claimer of the same occurrence must be told it was taken")
            }
        }
    }
    assert_eq!(winners.len(), 1, "exactly one winner: {winners:?}");
    assert_eq!(told.len(), 9);
    let (winner, fence) = &winners[0];
    for (by, told_fence) in &told {
        assert_eq!(by, winner);
        assert_eq!(told_fence, fence);
    }
}

#[tokio::test]
async fn late_claimer_is_refused_after_release() {
    // The 5 ms job and 300 ms clock skew case: the winner has already
    // released when the late node arrives; the occurrence record refuses it.
    let redis = RedisServer::start();
    let early = locker(&redis, "early").await;
    let late = locker(&redis, "late").await;
    let lease = won(early
        .claim("tick", &scheduled(5_000), &new_token(), TTL)
        .await
        .unwrap());
    tokio::time::sleep(JOB_RUNS).await;
    assert!(
        early
            .release(&lease, &entry("early", &lease, "1970-01-01T00:00:05Z"))
            .await
            .unwrap()
            .lock_was_ours
    );
    tokio::time::sleep(SKEW).await;
    let claim = late
        .claim("tick", &scheduled(5_000), &new_token(), TTL)
        .await
        .unwrap();
    assert_eq!(
        claim,
        Claim::Taken {
            by: "early".into(),
            fence: lease.fence,
            decision: "claimed".into()
        }
    );
    // An older occurrence is refused too; the next one is free.
    let older = late
        .claim("tick", &scheduled(4_000), &new_token(), TTL)
        .await
        .unwrap();
    assert_eq!(older, Claim::Superseded { last_ms: 5_000 });
    won(late
        .claim("tick", &scheduled(6_000), &new_token(), TTL)
        .await
        .unwrap());
}

#[tokio::test]
async fn retried_claim_with_same_token_gets_the_same_fence() {
    let redis = RedisServer::start();
    let node = locker(&redis, "a").await;
    let other = locker(&redis, "b").await;
    let token = new_token();
    let first = won(node
        .claim("job", &scheduled(1_000), &token, TTL)
        .await
        .unwrap());
    // The reply was "lost": the same node retries with the same token.
    let again = won(node
        .claim("job", &scheduled(1_000), &token, TTL)
        .await
        .unwrap());
    assert_eq!(first.fence, again.fence);
    // Someone else with another token is refused.
    assert!(matches!(
        other
            .claim("job", &scheduled(1_000), &new_token(), TTL)
            .await
            .unwrap(),
        Claim::Taken { .. }
    ));
    // Manual runs are idempotent the same way.
    let manual = Target::Manual {
        started: chrono::Utc::now(),
    };
    let redis_conn = &mut redis.conn();
    let _: () = redis_conn.del("{test:job}:lock").unwrap();
    let token = new_token();
    let m1 = won(node.claim("job", &manual, &token, TTL).await.unwrap());
    let m2 = won(node.claim("job", &manual, &token, TTL).await.unwrap());
    assert_eq!(m1.fence, m2.fence);
}

#[tokio::test]
async fn fences_strictly_increase_also_after_data_loss() {
    let redis = RedisServer::start();
    let node = locker(&redis, "a").await;
    let mut fences = Vec::new();
    for i in 1..=20 {
        let lease = won(node
            .claim("job", &scheduled(i * 1000), &new_token(), TTL)
            .await
            .unwrap());
        node.release(&lease, &entry("a", &lease, "x"))
            .await
            .unwrap();
        fences.push(lease.fence);
    }
    // Simulated data loss: the state (fence and occurrence record) is gone.
    let mut conn = redis.conn();
    let _: () = conn.del("{test:job}:state").unwrap();
    let after_loss = won(node
        .claim("job", &scheduled(1000), &new_token(), TTL)
        .await
        .unwrap());
    fences.push(after_loss.fence);
    // And a full FLUSHALL.
    node.release(&after_loss, &entry("a", &after_loss, "x"))
        .await
        .unwrap();
    let _: () = redis::cmd("FLUSHALL").query(&mut conn).unwrap();
    let after_flush = won(node
        .claim("job", &scheduled(1000), &new_token(), TTL)
        .await
        .unwrap());
    fences.push(after_flush.fence);
    for pair in fences.windows(2) {
        assert!(
            pair[1] > pair[0],
            "fences must strictly increase: {fences:?}"
        );
    }
    // A plain INCR would restart at 1; ours is anchored to Redis TIME in µs.
    assert!(
        after_loss.fence > 1_000_000_000_000_000,
        "{}",
        after_loss.fence
    );
}

#[tokio::test]
async fn release_with_a_stale_token_deletes_nothing() {
    let redis = RedisServer::start();
    let a = locker(&redis, "a").await;
    let b = locker(&redis, "b").await;
    let short = Duration::from_millis(200);
    let stale = won(a
        .claim("job", &scheduled(1_000), &new_token(), short)
        .await
        .unwrap());
    // a's lock expires, b takes the next occurrence.
    wait_expired(&redis, "job").await;
    let current = won(b
        .claim("job", &scheduled(2_000), &new_token(), TTL)
        .await
        .unwrap());
    assert!(current.fence > stale.fence);
    assert!(
        !a.extend(&stale).await.unwrap(),
        "a stale lease must not extend"
    );
    assert!(
        !a.release(&stale, &entry("a", &stale, "1970-01-01T00:00:01Z"))
            .await
            .unwrap()
            .lock_was_ours
    );
    let value: String = redis.conn().get("{test:job}:lock").unwrap();
    assert!(
        value.ends_with(" b"),
        "b's lock must survive a stale release: {value}"
    );
    assert!(b.extend(&current).await.unwrap());
}

#[tokio::test]
async fn busy_lock_skips_the_occurrence_once_and_manual_runs_consume_nothing() {
    let redis = RedisServer::start();
    let a = locker(&redis, "a").await;
    let b = locker(&redis, "b").await;
    let c = locker(&redis, "c").await;
    let running = won(a
        .claim("job", &scheduled(1_000), &new_token(), TTL)
        .await
        .unwrap());
    let busy = b
        .claim("job", &scheduled(2_000), &new_token(), TTL)
        .await
        .unwrap();
    assert_eq!(
        busy,
        Claim::Busy {
            holder: "a".into(),
            fence: running.fence
        }
    );
    // The skip is a decision: recorded once, and later claimers are told.
    let later = c
        .claim("job", &scheduled(2_000), &new_token(), TTL)
        .await
        .unwrap();
    assert!(
        matches!(&later, Claim::Taken { decision, .. } if decision == "skipped"),
        "{later:?}"
    );
    let mut conn = redis.conn();
    let skipped: Vec<redis::Value> = redis::cmd("XRANGE")
        .arg("{test:job}:history")
        .arg("-")
        .arg("+")
        .query(&mut conn)
        .unwrap();
    assert_eq!(skipped.len(), 1, "one skip entry");
    a.release(&running, &entry("a", &running, "1970-01-01T00:00:01Z"))
        .await
        .unwrap();
    let len: usize = conn.xlen("{test:job}:history").unwrap();
    assert_eq!(len, 2, "skip + finished run");
    // A manual run takes the lock with a new fence but leaves the schedule alone.
    let manual = won(c
        .claim(
            "job",
            &Target::Manual {
                started: chrono::Utc::now(),
            },
            &new_token(),
            TTL,
        )
        .await
        .unwrap());
    assert!(manual.fence > running.fence);
    c.release(&manual, &entry("c", &manual, "manual-now"))
        .await
        .unwrap();
    let next = won(b
        .claim("job", &scheduled(3_000), &new_token(), TTL)
        .await
        .unwrap());
    assert!(next.fence > manual.fence);
}

/// A claim answered "busy" (the skip recorded with its token) whose reply
/// was lost is retried with the same token after the holder released: the
/// retry must be told the occurrence was skipped, not win it with the
/// holder's fence (seen in the soak: the occurrence skipped and run, two
/// runs with one fence).
#[tokio::test]
async fn a_retried_claim_that_was_answered_busy_does_not_win_after_the_release() {
    let redis = RedisServer::start();
    let a = locker(&redis, "a").await;
    let b = locker(&redis, "b").await;
    let running = won(a
        .claim("job", &scheduled(1_000), &new_token(), TTL)
        .await
        .unwrap());
    let token = new_token();
    let busy = b
        .claim("job", &scheduled(2_000), &token, TTL)
        .await
        .unwrap();
    assert!(matches!(busy, Claim::Busy { .. }), "{busy:?}");
    a.release(&running, &entry("a", &running, "1970-01-01T00:00:01Z"))
        .await
        .unwrap();
    // The "busy" reply was lost: b retries with the same token.
    let again = b
        .claim("job", &scheduled(2_000), &token, TTL)
        .await
        .unwrap();
    assert!(
        matches!(&again, Claim::Taken { decision, .. } if decision == "skipped"),
        "{again:?}"
    );
    let mut conn = redis.conn();
    let lock: Option<String> = conn.get("{test:job}:lock").unwrap();
    assert_eq!(lock, None, "the retry took no lock");
    let next = won(b
        .claim("job", &scheduled(3_000), &new_token(), TTL)
        .await
        .unwrap());
    assert!(next.fence > running.fence);
}

#[tokio::test]
async fn a_claim_reaching_redis_after_the_deadline_takes_nothing() {
    let redis = RedisServer::start();
    let node = locker(&redis, "a").await;
    let now_ms = Utc::now().timestamp_millis();
    let late = Target::Scheduled {
        at: chrono::DateTime::from_timestamp_millis(now_ms - 10_000).expect("an instant"),
        deadline_ms: now_ms - 5_000,
    };
    assert_eq!(
        node.claim("job", &late, &new_token(), TTL).await.unwrap(),
        Claim::TooLate
    );
    let mut conn = redis.conn();
    let lock: Option<String> = conn.get("{test:job}:lock").unwrap();
    assert_eq!(lock, None);
    let state: std::collections::HashMap<String, String> =
        conn.hgetall("{test:job}:state").unwrap();
    assert!(
        !state.contains_key("last_occ"),
        "nothing recorded: {state:?}"
    );
    // The miss is recorded once; a second record is refused.
    assert!(
        node.record_missed("job", common::instant(now_ms - 10_000), "test", "")
            .await
            .unwrap()
            .recorded
    );
    assert!(
        !node
            .record_missed("job", common::instant(now_ms - 10_000), "test", "")
            .await
            .unwrap()
            .recorded
    );
    let len: usize = conn.xlen("{test:job}:history").unwrap();
    assert_eq!(len, 1);
}

#[tokio::test]
async fn a_late_win_of_a_node_that_gave_up_is_undone_by_its_miss_record() {
    // The claim sat in a paused Redis's socket and won after its node had
    // given up: the node's record of the miss, with the same token, deletes
    // the lock no run holds and turns the decision into `missed`.
    let redis = RedisServer::start();
    let gave_up = locker(&redis, "a").await;
    let other = locker(&redis, "b").await;
    let token = new_token();
    won(gave_up
        .claim("job", &scheduled(1_000), &token, TTL)
        .await
        .unwrap());
    // Another node's token cannot undo it.
    assert!(
        !other
            .record_missed("job", common::instant(1_000), "test", &new_token())
            .await
            .unwrap()
            .recorded
    );
    assert!(
        gave_up
            .record_missed("job", common::instant(1_000), "test", &token)
            .await
            .unwrap()
            .recorded
    );
    let mut conn = redis.conn();
    let lock: Option<String> = conn.get("{test:job}:lock").unwrap();
    assert_eq!(lock, None, "the orphaned lock is gone");
    let decision: String = conn.hget("{test:job}:state", "last_decision").unwrap();
    assert_eq!(decision, "missed");
    // The next occurrence is free at once, not skipped for an empty lock.
    won(other
        .claim("job", &scheduled(2_000), &new_token(), TTL)
        .await
        .unwrap());
}

/// A release whose reply was lost is retried; if its first attempt did
/// reach Redis, the retry must not record the run again, even when later
/// runs of the job released in between.
#[tokio::test]
async fn a_retried_release_records_the_run_once_even_after_later_runs() {
    let redis = RedisServer::start();
    let node = locker(&redis, "a").await;
    let first = won(node
        .claim("tick", &scheduled(1_000), &new_token(), TTL)
        .await
        .unwrap());
    let first_entry = entry("a", &first, "1970-01-01T00:00:01Z");
    assert!(
        node.release(&first, &first_entry)
            .await
            .unwrap()
            .lock_was_ours
    );
    for at_ms in [2_000, 3_000] {
        let later = won(node
            .claim("tick", &scheduled(at_ms), &new_token(), TTL)
            .await
            .unwrap());
        let name =
            solocron::schedule::rfc3339(chrono::DateTime::from_timestamp_millis(at_ms).unwrap());
        assert!(
            node.release(&later, &entry("a", &later, &name))
                .await
                .unwrap()
                .lock_was_ours
        );
    }
    // The retry of the first release: nothing to delete, nothing to record.
    assert!(
        !node
            .release(&first, &first_entry)
            .await
            .unwrap()
            .lock_was_ours
    );
    let reply: redis::streams::StreamRangeReply =
        redis.conn().xrange_all("{test:tick}:history").unwrap();
    let occurrences: Vec<String> = reply
        .ids
        .iter()
        .filter_map(|id| id.get::<String>("occurrence"))
        .collect();
    assert_eq!(
        occurrences,
        [
            "1970-01-01T00:00:01Z",
            "1970-01-01T00:00:02Z",
            "1970-01-01T00:00:03Z"
        ]
    );
}

/// Waits (up to 5 s) until `job`'s lock has expired in Redis.
async fn wait_expired(redis: &RedisServer, job: &str) {
    let lock = format!("{{test:{job}}}:lock");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let left: i64 = redis.conn().pttl(&lock).expect("PTTL");
        if left == -2 {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the lock of `{job}` did not expire (PTTL {left})"
        );
        tokio::time::sleep(common::POLL).await;
    }
}

/// The last history entry of `job`.
fn last_entry(redis: &RedisServer, job: &str) -> std::collections::HashMap<String, String> {
    let reply: redis::streams::StreamRangeReply = redis
        .conn()
        .xrange_all(format!("{{test:{job}}}:history"))
        .expect("XRANGE");
    let id = reply.ids.last().expect("an entry");
    id.map
        .keys()
        .filter_map(|key| Some((key.clone(), id.get::<String>(key)?)))
        .collect()
}

/// Attempt 1 of occurrence 1000 fails on `a` and marks its retry pending;
/// `b` claims attempt 2 for `ttl` and never releases it (it "dies").
async fn retry_left_running(redis: &RedisServer, job: &str, ttl: Duration) -> Lease {
    let a = locker(redis, "a").await;
    let b = locker(redis, "b").await;
    let first = won(a
        .claim(job, &scheduled(1_000), &new_token(), TTL)
        .await
        .unwrap());
    let mut failed = entry("a", &first, "1970-01-01T00:00:01Z");
    failed.outcome = "failed".to_string();
    failed.attempt = Some(1);
    failed.retry_at = Some(Utc::now());
    a.release(&first, &failed).await.unwrap();
    let retry = Target::Retry {
        at: chrono::DateTime::from_timestamp_millis(1_000).expect("an instant"),
        attempt: 2,
        deadline_ms: i64::MAX,
    };
    won(b.claim(job, &retry, &new_token(), ttl).await.unwrap())
}

/// A retry whose node died is recorded `abandoned` as the attempt it was
/// (2), by the abandon check and by the next claim alike; a first attempt
/// as 1. The attempt comes from state fields every version writes
/// (`retry_token`, `retry_attempt`), so a state an older daemon wrote
/// reads the same.
#[tokio::test]
async fn an_abandoned_run_is_recorded_with_the_attempt_it_was() {
    let redis = RedisServer::start();
    let c = locker(&redis, "c").await;
    let short = Duration::from_millis(200);

    // Found by the abandon check.
    let second = retry_left_running(&redis, "checked", short).await;
    wait_expired(&redis, "checked").await;
    let found = c.check_abandoned("checked").await.unwrap();
    assert_eq!(
        found,
        AbandonCheck::Abandoned(Abandoned {
            node: "b".to_string(),
            fence: second.fence,
            occurrence: "1970-01-01T00:00:01Z".to_string(),
            attempt: 2,
        })
    );
    let recorded = last_entry(&redis, "checked");
    assert_eq!(recorded["outcome"], "abandoned");
    assert_eq!(recorded.get("attempt").map(String::as_str), Some("2"));

    // Found by the claim of the next occurrence.
    let second = retry_left_running(&redis, "claimed", short).await;
    wait_expired(&redis, "claimed").await;
    let reply = c
        .claim_detailed("claimed", &scheduled(2_000), &new_token(), short)
        .await
        .unwrap();
    let abandoned = reply.abandoned.expect("the dead retry recorded");
    assert_eq!((abandoned.fence, abandoned.attempt), (second.fence, 2));
    let entries: redis::streams::StreamRangeReply =
        redis.conn().xrange_all("{test:claimed}:history").unwrap();
    let attempts: Vec<(String, String)> = entries
        .ids
        .iter()
        .map(|id| {
            (
                id.get::<String>("outcome").unwrap_or_default(),
                id.get::<String>("attempt").unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        attempts,
        [
            ("failed".to_string(), "1".to_string()),
            ("abandoned".to_string(), "2".to_string())
        ]
    );

    // The run of occurrence 2000, a first attempt, dies too.
    let third = won(reply.claim);
    wait_expired(&redis, "claimed").await;
    let found = c.check_abandoned("claimed").await.unwrap();
    assert_eq!(
        found,
        AbandonCheck::Abandoned(Abandoned {
            node: "c".to_string(),
            fence: third.fence,
            occurrence: "1970-01-01T00:00:02Z".to_string(),
            attempt: 1,
        })
    );
    let recorded = last_entry(&redis, "claimed");
    assert_eq!(recorded.get("attempt").map(String::as_str), Some("1"));
}
